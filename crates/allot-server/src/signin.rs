//! Signing in, whatever the way (the dashboard's API token or single
//! sign-on, munge, the login socket): the limit on attempts per source, the audit entry of
//! every attempt, and the bound on one principal's sessions
//! (docs/server.md, "Sign-in").
//!
//! * **Limit.** Each source address has a token bucket of [`BURST`]
//!   attempts, refilled one per [`REFILL`]. An attempt takes one before
//!   anything is checked (so a thousand at once get no further than ten);
//!   an attempt that signs in gives it back, so only refused attempts use
//!   the bucket up and someone signing in often is never locked out. With
//!   the bucket empty the answer is 429 with `Retry-After`. The source is
//!   the client's address as the listener saw it ([`Source`]); IPv6
//!   addresses count by their /64, which one host usually holds whole.
//!   Behind a reverse proxy every client is the proxy: limit there too.
//!   At most [`MAX_SOURCES`] sources are kept; a new one first removes
//!   those whose bucket is full again (they are as if never seen), then the
//!   one seen the longest ago.
//! * **Audit.** [`audit`] writes one entry per attempt to the audit log
//!   (`GET /v1/audit`): action `signin`, the principal's name or
//!   `unknown`, the source as the target, and `{how, from, refused}`. Of the
//!   attempts refused because the bucket is empty, only the first in a row
//!   is written ([`Limited::first`]): a flood cannot fill the log.
//! * **Sessions.** One principal holds at most [`MAX_SESSIONS`] live
//!   sessions; opening one more ends its oldest. Expired sessions are
//!   removed when one is opened and, at most every [`SWEEP_EVERY_S`], when
//!   one is looked up ([`Guard::sweep_due`]), so they also go while nobody
//!   signs in.
//!
//! The module knows no HTTP framework beyond reading the source address;
//! callers answer in their own way.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::store::Store;

/// Attempts a source may make at once.
pub const BURST: u32 = 10;
/// How long until a source has one more attempt.
pub const REFILL: Duration = Duration::from_secs(6);
/// Sources whose buckets are kept at most.
pub const MAX_SOURCES: usize = 4096;
/// Live dashboard sessions one principal may hold.
pub const MAX_SESSIONS: usize = 16;
/// How often a session lookup may remove the expired sessions.
pub const SWEEP_EVERY_S: i64 = 300;
/// Why an attempt refused by the limit was refused (its audit entry's).
pub const TOO_MANY: &str = "too many attempts";

/// How someone signs in (the audit entry's `how`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum How {
    /// An API token pasted at the dashboard's `/login`.
    Token,
    /// A munge credential.
    Munge,
    /// The login socket's peer credentials (`SO_PEERCRED`).
    PeerCred,
    /// An OpenID Connect identity provider.
    Oidc,
    /// A command-line session made from a person's dashboard session.
    Dashboard,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Token => "token",
            How::Munge => "munge",
            How::PeerCred => "peercred",
            How::Oidc => "oidc",
            How::Dashboard => "dashboard",
        }
    }
}

/// The client's address as the listener saw it (the peer of the TCP
/// connection); `None` when the request did not come through the listener.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Source(pub Option<IpAddr>);

impl Source {
    /// The bucket it counts in: an IPv4 address, or an IPv6 address's /64
    /// (an IPv4-mapped IPv6 address is its IPv4 address).
    fn key(self) -> Option<IpAddr> {
        self.0.map(|ip| match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            },
            v4 => v4,
        })
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("unknown"),
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Source {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Source, Self::Rejection> {
        let peer = parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>();
        Ok(Source(peer.map(|c| c.0.ip())))
    }
}

/// An attempt the limit let through; give it back with
/// [`Guard::signed_in`] when it signs in.
#[must_use = "an attempt that signs in gives its token back"]
#[derive(Debug)]
pub struct Admitted {
    key: Option<IpAddr>,
}

/// An attempt refused by the limit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    /// Whole seconds until the source has an attempt again (at least 1).
    pub retry_after_s: u64,
    /// The first refused in a row from this source (the one audited).
    pub first: bool,
}

/// One source's bucket. Credit is kept in milliseconds of refill: an
/// attempt costs [`REFILL`], the bucket holds [`BURST`] of them.
#[derive(Clone, Debug)]
struct Bucket {
    credit_ms: u64,
    at_ms: u64,
    limited: bool,
}

const COST_MS: u64 = REFILL.as_millis() as u64;
const FULL_MS: u64 = COST_MS * BURST as u64;

impl Bucket {
    /// The credit at `now_ms`.
    fn credit(&self, now_ms: u64) -> u64 {
        self.credit_ms.saturating_add(now_ms.saturating_sub(self.at_ms)).min(FULL_MS)
    }
}

/// The buckets of the sources seen, at most [`MAX_SOURCES`]; times are
/// milliseconds on a clock the caller keeps.
#[derive(Debug, Default)]
struct Limiter {
    buckets: HashMap<Option<IpAddr>, Bucket>,
}

impl Limiter {
    /// Takes one attempt of `key` at `now_ms`.
    fn take(&mut self, key: Option<IpAddr>, now_ms: u64) -> Result<(), Limited> {
        if !self.buckets.contains_key(&key) {
            self.make_room(now_ms);
        }
        let b = self.buckets.entry(key).or_insert(Bucket { credit_ms: FULL_MS, at_ms: now_ms, limited: false });
        let credit = b.credit(now_ms);
        b.at_ms = now_ms;
        if credit >= COST_MS {
            b.credit_ms = credit - COST_MS;
            b.limited = false;
            return Ok(());
        }
        b.credit_ms = credit;
        let first = !b.limited;
        b.limited = true;
        Err(Limited { retry_after_s: (COST_MS - credit).div_ceil(1000).max(1), first })
    }

    /// Gives back the attempt `key` took (it signed in).
    fn give_back(&mut self, key: Option<IpAddr>, now_ms: u64) {
        if let Some(b) = self.buckets.get_mut(&key) {
            b.credit_ms = (b.credit(now_ms) + COST_MS).min(FULL_MS);
            b.at_ms = now_ms;
        }
    }

    /// Below [`MAX_SOURCES`]: the full buckets go (they hold nothing), then
    /// the one seen the longest ago.
    fn make_room(&mut self, now_ms: u64) {
        if self.buckets.len() < MAX_SOURCES {
            return;
        }
        self.buckets.retain(|_, b| b.credit(now_ms) < FULL_MS);
        while self.buckets.len() >= MAX_SOURCES {
            let Some(oldest) = self.buckets.iter().min_by_key(|(k, b)| (b.at_ms, **k)).map(|(k, _)| *k) else {
                break;
            };
            self.buckets.remove(&oldest);
        }
    }
}

/// The sign-in state a server keeps: the limiter and when expired sessions
/// were last swept.
#[derive(Debug)]
pub struct Guard {
    limiter: Mutex<Limiter>,
    epoch: Instant,
    last_sweep: AtomicI64,
}

impl Default for Guard {
    fn default() -> Guard {
        Guard { limiter: Mutex::default(), epoch: Instant::now(), last_sweep: AtomicI64::new(0) }
    }
}

impl Guard {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Takes one attempt of `source`, or refuses it (429).
    pub fn admit(&self, source: Source) -> Result<Admitted, Limited> {
        let key = source.key();
        self.limiter.lock().expect("sign-in limiter").take(key, self.now_ms())?;
        Ok(Admitted { key })
    }

    /// The attempt signed in: its source gets it back.
    pub fn signed_in(&self, a: Admitted) {
        self.limiter.lock().expect("sign-in limiter").give_back(a.key, self.now_ms());
    }

    /// An attempt of `source` begun in an earlier request (a single
    /// sign-on's start, before the provider) signed in: it gets it back.
    pub fn begun_attempt_signed_in(&self, source: Source) {
        self.limiter.lock().expect("sign-in limiter").give_back(source.key(), self.now_ms());
    }

    /// Whether expired sessions are to be swept now (Unix seconds): true at
    /// most once every [`SWEEP_EVERY_S`].
    pub fn sweep_due(&self, now: i64) -> bool {
        let last = self.last_sweep.load(Ordering::Relaxed);
        now - last >= SWEEP_EVERY_S
            && self.last_sweep.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// One sign-in attempt, for the audit log.
#[derive(Copy, Clone, Debug)]
pub struct Attempt<'a> {
    /// The principal's name when the credential named one.
    pub who: Option<&'a str>,
    pub how: How,
    pub source: Source,
    /// Why it was refused; `None`: signed in.
    pub refused: Option<&'a str>,
}

/// Writes `a` to the audit log at `t` (Unix seconds). A store that cannot
/// be written is logged, not the caller's answer: sign-in goes on.
pub async fn audit(store: &Store, t: i64, a: &Attempt<'_>) {
    let who = a.who.unwrap_or("unknown");
    let from = a.source.to_string();
    let after = serde_json::json!({"how": a.how.as_str(), "from": from, "refused": a.refused});
    match a.refused {
        None => tracing::info!(principal = %who, how = a.how.as_str(), source = %from, "signed in"),
        Some(why) => {
            tracing::warn!(principal = %who, how = a.how.as_str(), source = %from, why, "sign-in refused")
        }
    }
    if let Err(e) = store.insert_audit(t, who, "signin", &from, &after).await {
        tracing::warn!(error = %e, principal = %who, source = %from, "cannot audit a sign-in attempt");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Source(Some(s.parse().unwrap())).key()
    }

    #[test]
    fn a_source_has_ten_attempts_then_one_every_six_seconds() {
        let mut l = Limiter::default();
        let a = ip("192.0.2.1");
        for i in 0..BURST {
            assert!(l.take(a, 0).is_ok(), "attempt {i}");
        }
        assert_eq!(l.take(a, 0), Err(Limited { retry_after_s: 6, first: true }));
        assert_eq!(l.take(a, 1_500), Err(Limited { retry_after_s: 5, first: false }), "only the first is audited");
        assert!(l.take(ip("192.0.2.2"), 1_500).is_ok(), "another source is not limited");
        assert!(l.take(a, 6_000).is_ok(), "one more after 6 s");
        assert_eq!(l.take(a, 6_000).map_err(|e| e.first), Err(true), "limited again: a new row");
        // Signing in gives the attempt back: only refusals use it up.
        let b = ip("192.0.2.3");
        for _ in 0..3 * BURST {
            l.take(b, 10_000).unwrap();
            l.give_back(b, 10_000);
        }
        assert!(l.take(b, 10_000).is_ok());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:bbbb::2"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(Source(None).to_string(), "unknown");
    }

    #[test]
    fn memory_is_bounded() {
        let mut l = Limiter::default();
        let nth = |i: usize| Some(IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]));
        // A limited source, then more sources than are kept.
        let limited = ip("192.0.2.1");
        for _ in 0..=BURST {
            let _ = l.take(limited, 0);
        }
        for i in 0..MAX_SOURCES * 2 {
            let _ = l.take(nth(i), 1);
        }
        assert!(l.buckets.len() <= MAX_SOURCES, "{}", l.buckets.len());
        // Once their buckets are full again, sources are forgotten first.
        let later = FULL_MS * 2;
        l.take(ip("192.0.2.9"), later).unwrap();
        assert!(l.buckets.len() <= 2, "only what holds something is kept: {}", l.buckets.len());
    }

    #[test]
    fn sweeps_at_most_every_five_minutes() {
        let g = Guard::default();
        assert!(g.sweep_due(1_000_000));
        assert!(!g.sweep_due(1_000_000 + SWEEP_EVERY_S - 1));
        assert!(g.sweep_due(1_000_000 + SWEEP_EVERY_S));
    }
}
