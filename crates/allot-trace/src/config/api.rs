//! `[api]` (docs/config.md): each principal's fair share of `allot serve`'s
//! API (rule API-1, docs/server.md): a rate with bursts, and a number of
//! requests in progress at once.

use serde::Deserialize;
use toml::Spanned;

use super::Ctx;
use crate::bounds;
use crate::error::FormatError;

/// `[api]` as read: every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    requests_per_second: Option<Spanned<u32>>,
    burst: Option<Spanned<u32>>,
    max_in_flight: Option<Spanned<u32>>,
}

/// `[api]` of `allot serve`: what one principal (a token's name, a person)
/// may ask of the API; admins are not limited (API-1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Requests a second, sustained, per principal.
    pub requests_per_second: u32,
    /// Requests a principal may send at once above that rate (a burst),
    /// refilled at `requests_per_second`.
    pub burst: u32,
    /// Requests of one principal in progress at once.
    pub max_in_flight: u32,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig { requests_per_second: 20, burst: 100, max_in_flight: 8 }
    }
}

/// `[api]`: each key within its bound ([`bounds::API_RATE`],
/// [`bounds::API_BURST`], [`bounds::API_IN_FLIGHT`]); errors name the key
/// and its line.
pub(super) fn build_api(ctx: &Ctx<'_>, raw: Option<&RawApi>) -> Result<ApiConfig, FormatError> {
    let mut a = ApiConfig::default();
    let Some(raw) = raw else { return Ok(a) };
    if let Some(v) = &raw.requests_per_second {
        a.requests_per_second = ctx.int("api.requests_per_second".into(), v, bounds::API_RATE)?;
    }
    if let Some(v) = &raw.burst {
        a.burst = ctx.int("api.burst".into(), v, bounds::API_BURST)?;
    }
    if let Some(v) = &raw.max_in_flight {
        a.max_in_flight = ctx.int("api.max_in_flight".into(), v, bounds::API_IN_FLIGHT)?;
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    const BASE: &str = "[cluster]\nname = \"c\"\n[[cluster.pools]]\nname = \"p\"\ngpu = \"H100\"\nnodes = 1\n\
                        gpus_per_node = 2\n[[accounts]]\npath = \"org/a\"\n";

    #[test]
    fn api_is_read_with_defaults() {
        let cfg = parse_config(BASE, "c.toml").unwrap();
        assert_eq!(cfg.api, ApiConfig { requests_per_second: 20, burst: 100, max_in_flight: 8 }, "the defaults");
        let body = "requests_per_second = 5\nburst = 10\nmax_in_flight = 2";
        let cfg = parse_config(&format!("{BASE}[api]\n{body}\n"), "c.toml").unwrap();
        assert_eq!(cfg.api, ApiConfig { requests_per_second: 5, burst: 10, max_in_flight: 2 });
    }

    #[test]
    fn bad_api_names_the_key_and_line() {
        let line = BASE.lines().count() as u64 + 2;
        let cases = [
            ("requests_per_second = 0", "api.requests_per_second", "must be at least 1"),
            ("burst = 0", "api.burst", "must be at least 1"),
            ("max_in_flight = 0", "api.max_in_flight", "must be at least 1"),
            ("max_in_flight = 100000", "api.max_in_flight", "must be at most 10000"),
            ("rate = 3", "api.rate", "unknown key"),
        ];
        for (body, key, msg) in cases {
            let e = parse_config(&format!("{BASE}[api]\n{body}\n"), "c.toml").unwrap_err();
            assert_eq!((e.field.as_deref(), e.line), (Some(key), Some(line)), "{body}: {e}");
            assert!(e.to_string().contains(msg), "{body}: {e}");
        }
    }
}
