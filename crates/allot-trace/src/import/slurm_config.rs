//! `--slurm-config`: the `slurm` policy's knobs from a site's saved
//! `scontrol show config` (SLURM-1 … SLURM-5): the `PriorityWeight*`
//! weights, `PriorityMaxAge`, `PriorityDecayHalfLife`,
//! `PriorityFavorSmall`, `PriorityCalcPeriod`, the `GRES/gpu` weight of
//! `PriorityWeightTRES`, `PreemptType` and the backfill parameters of
//! `SchedulerParameters` (`bf_interval` in seconds, `bf_window` in minutes,
//! `bf_max_job_test`). What the model does not have (other TRES weights,
//! other scheduler types, other preemption) is noted in the import
//! summary, not silently dropped.

use std::path::Path;

use allot_core::Time;
use allot_core::policy::{SlurmParams, SlurmPreempt};

use super::error::ImportError;

/// The knobs read, over Slurm's defaults, and notes on what the model does
/// not follow.
pub(crate) fn read_slurm_config(path: &Path) -> Result<(SlurmParams, Vec<String>), ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(path, e))?;
    parse(path, &text)
}

fn parse(path: &Path, text: &str) -> Result<(SlurmParams, Vec<String>), ImportError> {
    let mut p = SlurmParams::default();
    let mut notes = Vec::new();
    let mut seen = 0;
    for (i, line) in text.lines().enumerate() {
        let Some((key, value)) = line.split_once('=') else { continue };
        let (key, value) = (key.trim(), value.trim());
        let at = |m: String| ImportError::at(path, i + 1, key, m);
        let weight = |v: &str| v.parse::<u32>().map_err(|_| at(format!("{v:?} is not a weight (0 to 4294967295)")));
        match key {
            "PriorityWeightAge" => p.weight_age = weight(value)?,
            "PriorityWeightFairShare" => p.weight_fairshare = weight(value)?,
            "PriorityWeightJobSize" => p.weight_job_size = weight(value)?,
            "PriorityWeightPartition" => p.weight_partition = weight(value)?,
            "PriorityWeightQOS" => p.weight_qos = weight(value)?,
            "PriorityMaxAge" => p.max_age = span(value).map_err(at)?,
            "PriorityCalcPeriod" => p.calc_period = span(value).map_err(at)?.max(1),
            "PriorityDecayHalfLife" => p.decay_half_life = span(value).map_err(at)?,
            "PriorityFavorSmall" => p.favor_small = value.eq_ignore_ascii_case("yes"),
            "PriorityType" if value != "priority/multifactor" => {
                notes.push(format!("PriorityType is {value}: the slurm model is priority/multifactor"));
            }
            "SchedulerType" if value != "sched/backfill" => {
                notes.push(format!("SchedulerType is {value}: the slurm model always backfills (sched/backfill)"));
            }
            "PreemptType" => {
                p.preempt = match value {
                    "preempt/none" => SlurmPreempt::Off,
                    "preempt/qos" => SlurmPreempt::Qos,
                    other => {
                        notes.push(format!("PreemptType is {other}: not modelled, replayed without preemption"));
                        SlurmPreempt::Off
                    }
                };
            }
            "PriorityWeightTRES" if !value.is_empty() && value != "(null)" => {
                p.weight_tres_gpu = tres_weights(value, &mut notes).map_err(at)?;
            }
            "SchedulerParameters" => scheduler_parameters(value, &mut p).map_err(at)?,
            _ => continue,
        }
        seen += 1;
    }
    if seen == 0 {
        return Err(ImportError::bad_file(
            path,
            "no Priority*, SchedulerParameters or PreemptType line: save `scontrol show config` into this file",
        ));
    }
    Ok((p, notes))
}

/// The GPU weight of `PriorityWeightTRES` (`CPU=1000,GRES/gpu=100`); the
/// weights of other TRES are noted as not modelled.
fn tres_weights(value: &str, notes: &mut Vec<String>) -> Result<u32, String> {
    let mut gpu = 0;
    let mut others = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else { return Err(format!("{item:?} is not TRES=weight")) };
        let w = v.trim().parse::<u32>().map_err(|_| format!("{item:?}: {v:?} is not a weight (0 to 4294967295)"))?;
        if k.trim().eq_ignore_ascii_case("gres/gpu") {
            gpu = w;
        } else {
            others.push(item);
        }
    }
    if !others.is_empty() {
        notes.push(format!("PriorityWeightTRES {}: only the GRES/gpu weight is modelled", others.join(",")));
    }
    Ok(gpu)
}

/// The backfill parameters of `SchedulerParameters` (others are ignored).
fn scheduler_parameters(value: &str, p: &mut SlurmParams) -> Result<(), String> {
    for item in value.split(',') {
        let Some((k, v)) = item.split_once('=') else { continue };
        let n = || v.parse::<u64>().map_err(|_| format!("{k}={v}: not a whole number"));
        match k.trim() {
            "bf_interval" => p.bf_interval = n()?.max(1),
            "bf_window" => p.bf_window = n()?.max(1) * 60,
            "bf_max_job_test" => p.bf_max_job_test = u32::try_from(n()?.max(1)).unwrap_or(u32::MAX),
            _ => {}
        }
    }
    Ok(())
}

/// A Slurm time span: `[D-]HH:MM:SS`, `MM:SS` or minutes.
fn span(v: &str) -> Result<Time, String> {
    let bad = || format!("{v:?} is not a time span ([D-]HH:MM:SS)");
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (0, v),
    };
    let parts: Vec<u64> = rest.split(':').map(|x| x.parse::<u64>().map_err(|_| bad())).collect::<Result<_, _>>()?;
    let secs = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] => m * 60 + s,
        [m] => m * 60,
        _ => return Err(bad()),
    };
    Ok(days * 86_400 + secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_private_clusters_real_config_gives_its_weights_and_backfill() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm-real/scontrol-show-config.txt");
        let (p, notes) = read_slurm_config(&path).unwrap();
        assert_eq!((p.weight_age, p.weight_fairshare, p.weight_job_size, p.weight_qos), (1000, 10_000, 0, 5000));
        assert_eq!((p.max_age, p.decay_half_life, p.favor_small), (300, 600, false));
        assert_eq!((p.bf_interval, p.preempt), (1, SlurmPreempt::Off));
        assert_eq!((p.weight_tres_gpu, p.calc_period), (100, 60));
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn spans_and_bad_values_name_their_line_and_key() {
        assert_eq!(span("7-00:00:00"), Ok(7 * 86_400));
        assert_eq!(span("00:10:00"), Ok(600));
        assert_eq!(span("5"), Ok(300));
        let text = "PriorityWeightAge = 10\nPriorityMaxAge = soon\n";
        let e = parse(Path::new("c.txt"), text).unwrap_err().to_string();
        assert_eq!(e, "c.txt:2: column \"PriorityMaxAge\": \"soon\" is not a time span ([D-]HH:MM:SS)");
        let text = "SchedulerParameters = bf_window=2880,bf_max_job_test=50,defer\n";
        let (p, _) = parse(Path::new("c.txt"), text).unwrap();
        assert_eq!((p.bf_window, p.bf_max_job_test), (2880 * 60, 50));
        assert!(parse(Path::new("c.txt"), "nothing here\n").is_err());
    }
}
