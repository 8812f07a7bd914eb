//! The server's clock: Unix seconds. The policy core never reads a clock;
//! the server reads it here and passes `now` in.

use allot_core::Time;

/// Seconds since the Unix epoch.
pub fn now() -> Time {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How long until the Unix second `t` begins (at least a few milliseconds).
pub fn until(t: Time) -> std::time::Duration {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
    at.duration_since(std::time::SystemTime::now()).unwrap_or_default().max(std::time::Duration::from_millis(5))
}
