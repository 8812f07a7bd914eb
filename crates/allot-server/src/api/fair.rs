//! Rule API-1: each principal's fair share of the API (issue 30, point
//! 18). One researcher's loop must not slow everyone else's requests, so
//! every principal but an admin has
//!
//! * a rate: `[api] requests_per_second`, with bursts of `[api] burst`
//!   (a keyed GCRA limiter, `governor`), and
//! * a number of requests in progress at once: `[api] max_in_flight`.
//!
//! A request over either is answered at once, before any work is done for
//! it: 429 with `Retry-After` (whole seconds) and a JSON error that says
//! which limit, whose, and when to come back. The key is the principal's
//! name (a token's, or a person's whatever session they use), so that one
//! person's several tokens or sessions share one share. Admins are not
//! limited: they are few, they are the ones who repair things, and the
//! server's benchmarks run as one. Requests with no valid principal are
//! left to the handlers (401); the dashboard's pages (a session cookie)
//! are bounded by the server-wide in-flight limit only.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use allot_trace::config::ApiConfig;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::{ApiError, App, ErrorKind, bearer};
use crate::auth::{Principal, Role};

/// The limits of every principal (API-1).
pub struct Fair {
    /// Replaced whole by a config reload (CFG-1): the rates start afresh.
    rate: RwLock<Arc<Rate>>,
    in_flight: Arc<Mutex<HashMap<String, u32>>>,
}

struct Rate {
    config: ApiConfig,
    limiter: DefaultKeyedRateLimiter<String>,
}

impl Rate {
    fn new(config: ApiConfig) -> Rate {
        let nz = |v: u32| NonZeroU32::new(v).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(nz(config.requests_per_second)).allow_burst(nz(config.burst));
        Rate { config, limiter: RateLimiter::keyed(quota) }
    }
}

impl std::fmt::Debug for Fair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fair").field("config", &self.config()).finish_non_exhaustive()
    }
}

/// Why a request was turned away, and after how long to come back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub message: String,
    pub retry_after_s: u64,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut r = ApiError::new(ErrorKind::TooManyRequests, self.message).into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after_s));
        r
    }
}

/// A request in progress of one principal; its place is given back when
/// it is dropped (the answer sent, or the request abandoned).
pub struct Slot {
    who: String,
    in_flight: Arc<Mutex<HashMap<String, u32>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.in_flight.lock().expect("in-flight counts");
        if let Some(n) = m.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.who);
            }
        }
    }
}

impl Fair {
    pub fn new(config: ApiConfig) -> Fair {
        Fair { rate: RwLock::new(Arc::new(Rate::new(config))), in_flight: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// The `[api]` limits in force.
    pub fn config(&self) -> ApiConfig {
        self.rate.read().expect("the API limits").config
    }

    /// New `[api]` limits (a config reload, CFG-1); requests in progress
    /// keep their places.
    pub fn reconfigure(&self, config: ApiConfig) {
        *self.rate.write().expect("the API limits") = Arc::new(Rate::new(config));
    }

    /// A place for one request of `who`, or why not. The in-flight count
    /// is checked first, so that a refused request spends none of the rate.
    pub fn admit(&self, who: &str) -> Result<Slot, Refused> {
        let rate = self.rate.read().expect("the API limits").clone();
        let max = rate.config.max_in_flight;
        {
            let mut m = self.in_flight.lock().expect("in-flight counts");
            let n = m.entry(who.to_string()).or_insert(0);
            if *n >= max {
                return Err(Refused {
                    message: format!(
                        "{who} has {max} requests in progress, the most one principal may have at once \
                         ([api] max_in_flight, API-1); wait for an answer, or retry after 1 s"
                    ),
                    retry_after_s: 1,
                });
            }
            *n += 1;
        }
        let slot = Slot { who: who.to_string(), in_flight: self.in_flight.clone() };
        if let Err(not_until) = rate.limiter.check_key(&who.to_string()) {
            let wait = not_until.wait_time_from(rate.limiter.clock().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0 || wait == Duration::ZERO);
            return Err(Refused {
                message: format!(
                    "too many requests from {who}: each principal may send {} a second, in bursts of up to {} \
                     ([api] requests_per_second and burst, API-1), so that no one slows the others; retry after \
                     {secs} s",
                    rate.config.requests_per_second, rate.config.burst
                ),
                retry_after_s: secs,
            });
        }
        Ok(slot)
    }
}

/// The middleware of API-1: finds the caller's principal (the
/// authenticator's cache; the handler's `Auth` reuses it), admits the
/// request or answers 429 at once. Admins and requests without a valid
/// principal pass.
pub async fn fair_share(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let who: Option<Principal> = match bearer(req.headers()) {
        Ok(token) => app.auth.principal(token).await.ok().flatten(),
        Err(_) => None,
    };
    let Some(who) = who else { return next.run(req).await };
    if who.role == Role::Admin {
        req.extensions_mut().insert(who);
        return next.run(req).await;
    }
    let slot = match app.limits.fair.admit(&who.name) {
        Ok(s) => s,
        Err(refused) => {
            tracing::debug!(principal = %who.name, "API-1: {}", refused.message);
            return refused.into_response();
        }
    };
    req.extensions_mut().insert(who);
    let resp = next.run(req).await;
    drop(slot);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate and the in-flight count are per principal: one at its
    /// limit leaves the others theirs; a place is given back on drop.
    #[test]
    fn limits_are_per_principal() {
        let fair = Fair::new(ApiConfig { requests_per_second: 1, burst: 3, max_in_flight: 2 });
        let a1 = fair.admit("alice").expect("first");
        let a2 = fair.admit("alice").expect("second");
        let e = fair.admit("alice").err().expect("a third at once is refused");
        assert_eq!(e.retry_after_s, 1);
        assert!(e.message.contains("alice has 2 requests in progress"), "{}", e.message);
        assert!(fair.admit("bob").is_ok(), "bob is not alice");
        drop((a1, a2));
        let _a3 = fair.admit("alice").expect("a place given back; the third of the burst");
        let e = fair.admit("alice").err().expect("the burst of 3 is spent");
        assert!(e.message.contains("too many requests from alice"), "{}", e.message);
        assert!((1..=2).contains(&e.retry_after_s), "{e:?}");
        assert!(fair.admit("carol").is_ok());
    }
}
