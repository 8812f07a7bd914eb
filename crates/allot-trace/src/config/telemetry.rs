//! `[telemetry]` (docs/config.md): how often `allot serve` samples the GPUs
//! of running attempts, and the utilization below which a GPU counts as
//! idle in the per-attempt summaries (docs/server.md, "GPU telemetry").

use serde::Deserialize;
use toml::Spanned;

use super::{Ctx, KeywordOrSecs, Secs};
use crate::bounds;
use crate::error::FormatError;

/// `[telemetry]` as read: every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    interval: Option<Spanned<Interval>>,
    idle_threshold: Option<Spanned<f64>>,
}

/// `[telemetry]` of `allot serve`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// Seconds between two samples of every running attempt's GPUs;
    /// `None`: `interval = "off"`, nothing is sampled.
    pub interval_s: Option<u64>,
    /// A sample whose mean utilization (0..1) is below this counts its
    /// time as idle.
    pub idle_threshold: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { interval_s: Some(30), idle_threshold: 0.05 }
    }
}

/// `interval`: `"off"`, or a duration.
#[derive(Copy, Clone)]
enum Interval {
    Off,
    Every(Secs),
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = KeywordOrSecs {
            keyword: "off",
            expecting: "\"off\", a duration such as \"30s\", or an integer number of seconds",
        };
        Ok(d.deserialize_any(v)?.map_or(Interval::Off, Interval::Every))
    }
}

/// `[telemetry]`: the interval within [`bounds::TELEMETRY_INTERVAL_S`] (or
/// `"off"`), the threshold within [`bounds::IDLE_THRESHOLD`]; errors name
/// the key and its line.
pub(super) fn build_telemetry(ctx: &Ctx<'_>, raw: Option<&RawTelemetry>) -> Result<TelemetryConfig, FormatError> {
    let mut t = TelemetryConfig::default();
    let Some(raw) = raw else { return Ok(t) };
    if let Some(i) = &raw.interval {
        t.interval_s = match *i.get_ref() {
            Interval::Off => None,
            Interval::Every(Secs(s)) => Some(
                bounds::TELEMETRY_INTERVAL_S
                    .check(s)
                    .map_err(|m| ctx.err("telemetry.interval", Some(i.span()), format!("sampling interval {m}")))?,
            ),
        };
    }
    if let Some(v) = &raw.idle_threshold {
        t.idle_threshold = ctx.float("telemetry.idle_threshold".into(), "idle_threshold", v, bounds::IDLE_THRESHOLD)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    const BASE: &str = "[cluster]\nname = \"c\"\n[[cluster.pools]]\nname = \"p\"\ngpu = \"H100\"\nnodes = 1\n\
                        gpus_per_node = 2\n[[accounts]]\npath = \"org/a\"\n";

    #[test]
    fn telemetry_is_read_with_defaults_and_off() {
        let cfg = parse_config(BASE, "c.toml").unwrap();
        assert_eq!(cfg.telemetry, TelemetryConfig { interval_s: Some(30), idle_threshold: 0.05 }, "the defaults");
        let cases = [
            ("interval = \"1s\"\nidle_threshold = 0.2", Some(1), 0.2),
            ("interval = 90", Some(90), 0.05),
            ("interval = \"off\"", None, 0.05),
            ("idle_threshold = 0", Some(30), 0.0),
        ];
        for (body, interval, threshold) in cases {
            let cfg = parse_config(&format!("{BASE}[telemetry]\n{body}\n"), "c.toml").unwrap();
            assert_eq!(cfg.telemetry, TelemetryConfig { interval_s: interval, idle_threshold: threshold }, "{body}");
        }
    }

    #[test]
    fn bad_telemetry_names_the_key_and_line() {
        let line = BASE.lines().count() as u64 + 2;
        let cases = [
            ("interval = \"0s\"", "telemetry.interval", "sampling interval must be at least 1"),
            ("interval = \"2h\"", "telemetry.interval", "must be at most 3600"),
            ("interval = \"never\"", "telemetry.interval", "invalid duration \"never\""),
            ("interval = -5", "telemetry.interval", "must not be negative"),
            ("idle_threshold = 1.5", "telemetry.idle_threshold", "idle_threshold must be a number between 0 and 1"),
            ("idle_threshold = -0.1", "telemetry.idle_threshold", "between 0 and 1"),
            ("idle_threshold = nan", "telemetry.idle_threshold", "between 0 and 1"),
            ("sample_every = \"1s\"", "telemetry.sample_every", "unknown key"),
        ];
        for (body, key, msg) in cases {
            let e = parse_config(&format!("{BASE}[telemetry]\n{body}\n"), "c.toml").unwrap_err();
            assert_eq!((e.field.as_deref(), e.line), (Some(key), Some(line)), "{body}: {e}");
            assert!(e.to_string().contains(msg), "{body}: {e}");
        }
    }
}
