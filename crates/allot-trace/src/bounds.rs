//! Bounds of every numeric input: one constant per rule, used by the config
//! and trace loaders and by the server's API, so a value one of them accepts
//! the others accept too (`docs/config.md` lists them).
//!
//! The bounds keep arithmetic finite and exact where it matters: times and
//! durations fit an `i64` with room for sums (`submit + work`), shares and
//! budgets keep every entitlement above zero and every sum of siblings
//! finite, so fair-share values never become `0`, `inf` or `NaN`.

use std::fmt;

/// An inclusive range of whole numbers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IntBound {
    pub min: u64,
    pub max: u64,
}

/// An inclusive range of finite numbers.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FloatBound {
    pub min: f64,
    pub max: f64,
}

/// Ten years in seconds: the longest duration anywhere.
pub const MAX_DURATION_S: u64 = 10 * 365 * 86_400;

/// A workload's run time if never interrupted (`work_s`, `expected_duration_s`).
pub const WORK_S: IntBound = IntBound { min: 1, max: MAX_DURATION_S };
/// A workload's checkpoint interval (`checkpoint_s`, `checkpoint_interval_s`); 0 = never.
pub const CHECKPOINT_S: IntBound = IntBound { min: 0, max: MAX_DURATION_S };
/// A trace's submit time, seconds from its start (a hundred years).
pub const SUBMIT_S: IntBound = IntBound { min: 0, max: 10 * MAX_DURATION_S };
/// GPUs of one workload (the cluster's largest pool bounds it further).
pub const GPUS: IntBound = IntBound { min: 1, max: 1 << 20 };
/// A workload's billing per second it runs (Slurm's `billing` TRES,
/// SLURM-2); 0 = charges the `slurm` policy's fair share nothing.
pub const BILLING: IntBound = IntBound { min: 0, max: 1 << 40 };
/// Nodes of one workload; 0 = any packing.
pub const NODES: IntBound = IntBound { min: 0, max: POOL_NODES.max };
/// Nodes of one pool (and its rack size).
pub const POOL_NODES: IntBound = IntBound { min: 1, max: 100_000 };
/// `[contract]` durations that must be positive (`budget_period`,
/// `usage_half_life`, `scheduling_interval`).
pub const CONTRACT_PERIOD_S: IntBound = IntBound { min: 1, max: MAX_DURATION_S };
/// `[contract]` durations that may be zero (`min_slice.*`, `grace`,
/// `interactive_max_duration`).
pub const CONTRACT_WAIT_S: IntBound = IntBound { min: 0, max: MAX_DURATION_S };
/// `[alerts] webhook_timeout`: how long one delivery may take.
pub const WEBHOOK_TIMEOUT_S: IntBound = IntBound { min: 1, max: 300 };
/// `[telemetry] interval`: seconds between two GPU samples of an attempt.
pub const TELEMETRY_INTERVAL_S: IntBound = IntBound { min: 1, max: 3600 };

/// An account's share among its siblings.
pub const SHARE: FloatBound = FloatBound { min: 1e-3, max: 1e6 };
/// An account's budget, NGH per budget period (it is also the default share).
pub const BUDGET_GPU_HOURS: FloatBound = FloatBound { min: 1e-3, max: 1e9 };
/// An account's impact score.
pub const IMPACT: FloatBound = FloatBound { min: 1e-3, max: 1e6 };
/// A GPU type's normalisation weight.
pub const GPU_WEIGHT: FloatBound = FloatBound { min: 1e-3, max: 1e3 };
/// `[contract] budget_carry_over`: the fraction of a period's budget that
/// unused budget may add to it (BUD-5).
pub const CARRY_OVER: FloatBound = FloatBound { min: 0.0, max: 1.0 };
/// `[contract] swap_margin` (CON-11): below 1, so that a swap stays possible.
pub const SWAP_MARGIN: FloatBound = FloatBound { min: 0.0, max: 0.9 };
/// A workload's mean GPU utilisation.
pub const UTIL: FloatBound = FloatBound { min: 0.0, max: 1.0 };
/// `[api] requests_per_second`: one principal's sustained rate (API-1).
pub const API_RATE: IntBound = IntBound { min: 1, max: 100_000 };
/// `[api] burst`: one principal's requests above the rate at once (API-1).
pub const API_BURST: IntBound = IntBound { min: 1, max: 100_000 };
/// `[api] max_in_flight`: one principal's requests in progress (API-1).
pub const API_IN_FLIGHT: IntBound = IntBound { min: 1, max: 10_000 };
/// `[telemetry] idle_threshold`: a GPU utilization (0..1).
pub const IDLE_THRESHOLD: FloatBound = FloatBound { min: 0.0, max: 1.0 };

/// A value past its bound, with the bound.
#[derive(Copy, Clone, Debug, PartialEq, thiserror::Error)]
pub enum BoundError {
    #[error("must be at least {min}, got {got}")]
    BelowMin { min: u64, got: u64 },
    #[error("must be at most {max}, got {got}")]
    AboveMax { max: u64, got: u64 },
    #[error("must be a number between {} and {}, got {}", Num(*min), Num(*max), Num(*got))]
    OutOfRange { min: f64, max: f64, got: f64 },
}

/// The message, where a caller keeps messages as text.
impl From<BoundError> for String {
    fn from(e: BoundError) -> String {
        e.to_string()
    }
}

impl IntBound {
    /// The value, or what is wrong with it.
    pub fn check(self, v: u64) -> Result<u64, BoundError> {
        if v < self.min {
            Err(BoundError::BelowMin { min: self.min, got: v })
        } else if v > self.max {
            Err(BoundError::AboveMax { max: self.max, got: v })
        } else {
            Ok(v)
        }
    }
}

impl FloatBound {
    /// The value, or what is wrong with it.
    pub fn check(self, v: f64) -> Result<f64, BoundError> {
        if v.is_finite() && (self.min..=self.max).contains(&v) {
            Ok(v)
        } else {
            Err(BoundError::OutOfRange { min: self.min, max: self.max, got: v })
        }
    }
}

/// A number as a person writes it: `0.001`, `1000000`, `1.7e308`.
struct Num(f64);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0.abs();
        if a.is_finite() && a != 0.0 && !(1e-4..1e7).contains(&a) {
            write!(f, "{:e}", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_bound() {
        let cases = [
            ("duration zero", WORK_S.check(0), Err("must be at least 1, got 0".to_string())),
            (
                "duration 2^63",
                WORK_S.check(1 << 63),
                Err(format!("must be at most {MAX_DURATION_S}, got {}", 1u64 << 63)),
            ),
            ("duration ok", WORK_S.check(3600), Ok(3600)),
            ("checkpoint zero", CHECKPOINT_S.check(0), Ok(0)),
        ];
        for (name, got, want) in cases {
            assert_eq!(got.map_err(|e| e.to_string()), want, "case {name}");
        }
        let floats = [
            ("huge share", SHARE.check(1.7e308), Err("must be a number between 0.001 and 1000000, got 1.7e308")),
            ("tiny share", SHARE.check(1e-300), Err("must be a number between 0.001 and 1000000, got 1e-300")),
            ("nan", SHARE.check(f64::NAN), Err("must be a number between 0.001 and 1000000, got NaN")),
            (
                "inf budget",
                BUDGET_GPU_HOURS.check(f64::INFINITY),
                Err("must be a number between 0.001 and 1e9, got inf"),
            ),
            ("negative util", UTIL.check(-0.5), Err("must be a number between 0 and 1, got -0.5")),
            ("share ok", SHARE.check(3.0), Ok(3.0)),
            ("util ends", UTIL.check(1.0), Ok(1.0)),
        ];
        for (name, got, want) in floats {
            assert_eq!(got.map_err(|e| e.to_string()), want.map_err(str::to_string), "case {name}");
        }
    }

    const CONFIG: &str = "[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H100\"\nnodes = 2\ngpus_per_node = 4\n\
                          [[accounts]]\npath = \"org/x\"\n";

    #[test]
    fn the_config_loader_locates_values_past_their_bounds() {
        let cases = [
            ("huge share", "share = 1.7e308", "accounts[0].share", "share must be a number between 0.001 and 1000000"),
            ("tiny budget", "budget_gpu_hours = 1e-300", "accounts[0].budget_gpu_hours", "between 0.001 and 1e9"),
            ("huge impact", "impact = 1e30", "accounts[0].impact", "impact must be"),
            ("long grace", "[contract]\ngrace = \"3650d1s\"", "contract.grace", "at most 315360000"),
            ("long slice", "[contract]\nmin_slice = { batch = \"3651d\" }", "contract.min_slice.batch", "at most"),
        ];
        for (name, extra, key, fragment) in cases {
            let text = format!("{CONFIG}{extra}\n");
            let e =
                crate::config::parse_config(&text, "c.toml").err().unwrap_or_else(|| panic!("case {name}: accepted"));
            let line = 9 + extra.lines().count() as u64 - 1;
            assert_eq!((e.field.as_deref(), e.line), (Some(key), Some(line)), "case {name}: {e}");
            assert!(e.message.contains(fragment), "case {name}: {e}");
        }
    }

    #[test]
    fn the_trace_loader_holds_the_same_bounds() {
        let cfg = crate::config::parse_config(CONFIG, "c.toml").unwrap();
        let head = "id,submit_s,account,gpus,work_s,checkpoint_s,util\n";
        let cases = [
            ("2^63 work", "w,0,org/x,1,9223372036854775808,0,1", "work_s", "at most 315360000"),
            ("2^63 checkpoint", "w,0,org/x,1,60,9223372036854775808,1", "checkpoint_s", "at most 315360000"),
            ("late submit", "w,99999999999,org/x,1,60,0,1", "submit_s", "at most 3153600000"),
            ("gpus past the bound", "w,0,org/x,4294967295,60,0,1", "gpus", "at most 1048576"),
            ("util", "w,0,org/x,1,60,0,2", "util", "between 0 and 1"),
        ];
        for (name, row, field, fragment) in cases {
            let text = format!("{head}{row}\n");
            let e = crate::trace::parse_trace_csv(text.as_bytes(), "t.csv", &cfg).expect_err(name);
            assert_eq!((e.field.as_deref(), e.line), (Some(field), Some(2)), "case {name}: {e}");
            assert!(e.message.contains(fragment), "case {name}: {e}");
        }
        let ok = format!("{head}w,0,org/x,1,{},{},1\n", WORK_S.max, CHECKPOINT_S.max);
        assert!(crate::trace::parse_trace_csv(ok.as_bytes(), "t.csv", &cfg).is_ok(), "the bounds themselves are fine");
    }

    #[test]
    fn sums_stay_finite_and_entitlements_positive() {
        // A million siblings at the largest share or budget still sum finitely,
        // and the smallest over that sum is far from underflow.
        for b in [SHARE, BUDGET_GPU_HOURS] {
            let sum = b.max * 1e6;
            assert!(sum.is_finite() && (b.min / sum) > 1e-300);
        }
        assert!(SUBMIT_S.max.checked_add(WORK_S.max).is_some_and(|t| t < i64::MAX as u64));
    }
}
