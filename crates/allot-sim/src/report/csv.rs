//! The per-workload CSV: one row per workload of a run's final state.

use std::io::{self, Write};

use allot_core::{Phase, State, Time};

/// Column names, in order.
pub const WORKLOADS_CSV_HEADER: &str =
    "id,account,class,gpus,submit_s,first_start_s,end_s,queue_s,jct_s,preemptions,lost_gpu_s,status,last_reason";

/// A field quoted as RFC 4180 asks: when it holds a comma, quote or line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { quoted(s) } else { s.to_string() }
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn opt(v: Option<Time>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Writes one row per workload, in workload order:
/// `id,account,class,gpus,submit_s,first_start_s,end_s,queue_s,jct_s,preemptions,lost_gpu_s,status,last_reason`.
///
/// Cells that do not apply are empty: `first_start_s`/`queue_s` for a
/// workload that never started, `end_s` for one that has not ended, `jct_s`
/// (end − submit) for one that did not finish. Times after `horizon_end`
/// are outside the measured horizon and left empty too. `status` is the
/// phase name; `last_reason` is the reason's display form, always quoted.
pub fn write_workloads_csv(mut w: impl Write, state: &State, horizon_end: Time) -> io::Result<()> {
    writeln!(w, "{WORKLOADS_CSV_HEADER}")?;
    for (spec, run) in state.specs.iter().zip(&state.runs) {
        let first_start = run.first_start.filter(|t| *t <= horizon_end);
        let end = run.end.filter(|t| *t <= horizon_end);
        let queue = first_start.map(|t| t.saturating_sub(run.queued.unwrap_or(spec.submit)));
        let jct = end.filter(|_| run.phase == Phase::Finished).map(|t| t.saturating_sub(spec.submit));
        let reason = run.last_reason.as_ref().map_or_else(String::new, |r| quoted(&r.to_string()));
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            field(&spec.id),
            field(&state.accounts.account(spec.account).path),
            spec.class.as_str(),
            spec.gpus,
            spec.submit,
            opt(first_start),
            opt(end),
            opt(queue),
            opt(jct),
            run.preemptions,
            run.lost_gpu_s,
            run.phase.as_str(),
            reason,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(field("w-1"), "w-1");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quoted("FS-1: x"), "\"FS-1: x\"");
    }
}
