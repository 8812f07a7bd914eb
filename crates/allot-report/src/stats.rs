//! Repeated runs (one per generator seed): the mean and the 95% confidence
//! interval of every measure, with Student's t.
//!
//! For `n` values with mean `m` and sample standard deviation `s`, the
//! interval is `m ± t(0.975, n − 1) · s / √n`; with a single value there is
//! no interval (`half_width` is `None`). A measure that is undefined
//! (`null`) in some runs is averaged over the runs where it is defined.

use serde_json::{Map, Value};

use allot_sim::report::Report;

/// Two-sided 95% quantiles `t(0.975, df)` of Student's t for df = 1..=30.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// `t(0.975, df)`: the table up to 30 degrees of freedom, then the
/// Cornish–Fisher expansion around the normal quantile (error < 1e-3).
pub fn t975(df: u64) -> f64 {
    if df == 0 {
        return f64::NAN;
    }
    if let Some(t) = T975.get(df as usize - 1) {
        return *t;
    }
    let z: f64 = 1.959_964;
    let n = df as f64;
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * n)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * n * n)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * n * n * n)
}

/// The mean of a sample and the half-width of its 95% confidence interval.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MeanCi {
    pub n: u64,
    pub mean: f64,
    /// `None` for fewer than two values.
    pub half_width: Option<f64>,
}

/// Mean and 95% interval of `values`; `None` when there are none.
pub fn mean_ci(values: &[f64]) -> Option<MeanCi> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let half_width = (values.len() > 1).then(|| {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        t975(values.len() as u64 - 1) * (var / n).sqrt()
    });
    Some(MeanCi { n: values.len() as u64, mean, half_width })
}

/// The reports of one policy over several seeds, summarised as one object
/// of the report's shape: every number replaced by its mean over the seeds,
/// plus `"seeds"` (the number of runs) and `"ci95"` (the same shape again,
/// holding the half-widths of the 95% intervals; `null` where undefined).
pub fn summarise(reports: &[Report]) -> Value {
    let values: Vec<Value> = reports.iter().map(|r| serde_json::to_value(r).expect("a report serialises")).collect();
    let (mean, ci) = combine(&values.iter().collect::<Vec<_>>());
    let mut out = match mean {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    out.insert("seeds".into(), Value::from(reports.len() as u64));
    out.insert("ci95".into(), ci);
    Value::Object(out)
}

/// Combines values of the same shape: numbers to (mean, half-width), objects
/// key by key (keys of any value, in order), anything else from the first.
fn combine(values: &[&Value]) -> (Value, Value) {
    let Some(first) = values.iter().find(|v| !v.is_null()) else {
        return (Value::Null, Value::Null);
    };
    match first {
        Value::Number(_) => {
            let xs: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
            match mean_ci(&xs) {
                Some(m) => (number(m.mean), m.half_width.map_or(Value::Null, number)),
                None => (Value::Null, Value::Null),
            }
        }
        Value::Object(_) => {
            let mut keys: Vec<&String> = Vec::new();
            for v in values {
                if let Value::Object(m) = v {
                    for k in m.keys() {
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                    }
                }
            }
            let (mut mean, mut ci) = (Map::new(), Map::new());
            for k in keys {
                let column: Vec<&Value> = values.iter().map(|v| v.get(k).unwrap_or(&Value::Null)).collect();
                let (m, c) = combine(&column);
                mean.insert(k.clone(), m);
                ci.insert(k.clone(), c);
            }
            (Value::Object(mean), Value::Object(ci))
        }
        other => ((*other).clone(), Value::Null),
    }
}

fn number(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_table_and_the_normal_limit() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(30), 2.042);
        // Published values: t(0.975, 40) = 2.021, 60 = 2.000, 120 = 1.980.
        for (df, want) in [(40, 2.021), (60, 2.000), (120, 1.980), (100_000, 1.960)] {
            assert!((t975(df) - want).abs() < 1.5e-3, "df {df}: {}", t975(df));
        }
        assert!(t975(0).is_nan());
    }

    #[test]
    fn mean_and_interval_by_hand() {
        // 2, 4, 6: mean 4, s = 2, half-width = 4.303 · 2 / √3.
        let m = mean_ci(&[2.0, 4.0, 6.0]).unwrap();
        assert_eq!((m.n, m.mean), (3, 4.0));
        assert!((m.half_width.unwrap() - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-12);
        let one = mean_ci(&[5.0]).unwrap();
        assert_eq!((one.mean, one.half_width), (5.0, None));
        assert_eq!(mean_ci(&[]), None);
        let same = mean_ci(&[1.5, 1.5]).unwrap();
        assert_eq!(same.half_width, Some(0.0));
    }

    #[test]
    fn combine_walks_objects_and_skips_nulls() {
        let a = serde_json::json!({"p": "x", "m": {"a": 1.0, "b": null}, "k": 2});
        let b = serde_json::json!({"p": "x", "m": {"a": 3.0, "b": 4.0}, "k": 4});
        let (mean, ci) = combine(&[&a, &b]);
        assert_eq!(mean, serde_json::json!({"p": "x", "m": {"a": 2.0, "b": 4.0}, "k": 3.0}));
        assert_eq!(ci["m"]["b"], Value::Null, "one defined value has no interval");
        let hw = ci["m"]["a"].as_f64().unwrap();
        assert!((hw - 12.706 * 2f64.sqrt() / 2f64.sqrt()).abs() < 1e-9, "{hw}");
    }
}
