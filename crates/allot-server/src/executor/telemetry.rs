//! GPU telemetry: what the GPUs of each running attempt do, read through
//! `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total
//! --format=csv,noheader,nounits` and reported to the scheduler as
//! [`ExecEvent::Telemetry`] (docs/server.md, "GPU telemetry").
//!
//! * `nvidia-smi` rather than an NVML crate: no link-time (or `dlopen`)
//!   dependency on `libnvidia-ml`, the program the inventory already runs
//!   (`ALLOT_NVIDIA_SMI` names another one, e.g. a fake in tests, or the
//!   path on a Slurm node), and a host without GPUs or driver simply
//!   reports none (the program is missing: nothing is measured).
//! * The local executor asks once per sample for every GPU of the host and
//!   splits the answer by the GPU indices each attempt holds
//!   ([`sample_local`]); the Slurm executor asks from inside each job
//!   (`executor/slurm/telemetry.rs`).
//! * Sampling runs in a task of its own and never blocks the scheduler; a
//!   failed sample is logged (at most once per [`LOG_EVERY`] per attempt,
//!   [`Throttle`]) and skipped: it never fails the attempt.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{AttemptKey, ExecEvent, NodeGpus};

/// The `nvidia-smi` arguments of one sample: one line per GPU, numbers only.
pub const QUERY: [&str; 2] =
    ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"];

/// How often a failing attempt's sample failures are logged, at most.
pub const LOG_EVERY: Duration = Duration::from_secs(300);

/// One GPU of an attempt at one sample.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSample {
    /// Allot's name of the node.
    pub node: String,
    /// The GPU's index as `nvidia-smi` on that node numbers it.
    pub index: u32,
    /// Utilization, 0 to 1 (the driver's percentage over its last period).
    pub util: f64,
    pub mem_used_mib: u64,
    pub mem_total_mib: u64,
}

/// One GPU as `nvidia-smi` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuUsage {
    pub index: u32,
    /// 0 to 1.
    pub util: f64,
    pub mem_used_mib: u64,
    pub mem_total_mib: u64,
}

impl GpuUsage {
    fn on(&self, node: &str) -> GpuSample {
        GpuSample {
            node: node.to_string(),
            index: self.index,
            util: self.util,
            mem_used_mib: self.mem_used_mib,
            mem_total_mib: self.mem_total_mib,
        }
    }
}

/// Why a sample could not be taken (read after "failed to sample the GPUs: ").
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} exited with {status}: {stderr}")]
    Exit { program: String, status: String, stderr: String },
    #[error("{program} did not answer within {} s", .after.as_secs_f64())]
    Timeout { program: String, after: Duration },
    #[error(
        "nvidia-smi output line {line}: expected `index, utilization.gpu, memory.used, memory.total` as whole \
         numbers (utilization 0 to 100), got {text:?}"
    )]
    Malformed { line: usize, text: String },
    #[error("nvidia-smi on node {node} reports no GPU {index}, which the attempt holds{detail}")]
    Missing { node: String, index: u32, detail: String },
    #[error("the telemetry step on node {node} printed {text:?}, not nvidia-smi's answer")]
    Step { node: String, text: String },
}

impl SampleError {
    /// The program is not there (no driver on the host or node): nothing
    /// to measure, which is not a failure worth a warning.
    pub fn no_program(&self) -> bool {
        matches!(self, SampleError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Parses `index, utilization.gpu, memory.used, memory.total` lines: the
/// GPUs read, and an error naming each line that could not be (skipped).
pub fn parse_usage(text: &str) -> (Vec<GpuUsage>, Vec<SampleError>) {
    let (mut gpus, mut bad) = (Vec::new(), Vec::new());
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match parse_line(line) {
            Some(g) => gpus.push(g),
            None => bad.push(SampleError::Malformed { line: n + 1, text: line.to_string() }),
        }
    }
    (gpus, bad)
}

fn parse_line(line: &str) -> Option<GpuUsage> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [index, util, used, total] = fields.as_slice() else { return None };
    let util: u32 = util.parse().ok().filter(|u| *u <= 100)?;
    Some(GpuUsage {
        index: index.parse().ok()?,
        util: f64::from(util) / 100.0,
        mem_used_mib: used.parse().ok()?,
        mem_total_mib: total.parse().ok()?,
    })
}

/// The GPUs `indices` of `node` in `usage`; a missing one is an error that
/// also names the lines that could not be read (`bad`).
pub fn select(
    node: &str,
    indices: &[u32],
    usage: &[GpuUsage],
    bad: &[SampleError],
) -> Result<Vec<GpuSample>, SampleError> {
    indices
        .iter()
        .map(|&i| {
            usage.iter().find(|g| g.index == i).map(|g| g.on(node)).ok_or_else(|| {
                let detail: Vec<String> = bad.iter().map(ToString::to_string).collect();
                let detail = if detail.is_empty() { String::new() } else { format!(" ({})", detail.join("; ")) };
                SampleError::Missing { node: node.to_string(), index: i, detail }
            })
        })
        .collect()
}

/// How long one query may take: the interval, within 1 to 10 s.
pub fn query_timeout(every: Duration) -> Duration {
    every.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Runs `program` with [`QUERY`] on this host: the GPUs it reports and
/// the lines it could not read.
pub async fn query_host(program: &str, timeout: Duration) -> Result<(Vec<GpuUsage>, Vec<SampleError>), SampleError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(QUERY).stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => return Err(SampleError::Timeout { program: program.to_string(), after: timeout }),
        Ok(Err(source)) => return Err(SampleError::Spawn { program: program.to_string(), source }),
        Ok(Ok(o)) => o,
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(SampleError::Exit { program: program.to_string(), status: out.status.to_string(), stderr });
    }
    Ok(parse_usage(&String::from_utf8_lossy(&out.stdout)))
}

/// Logs failed samples at most once per [`LOG_EVERY`] per attempt, with the
/// number left unlogged since.
#[derive(Default)]
pub struct Throttle {
    /// When each attempt's failure was last logged, and failures since.
    last: HashMap<AttemptKey, (Instant, u32)>,
}

impl Throttle {
    /// Logs `error` for the attempt unless one was logged less than
    /// [`LOG_EVERY`] ago.
    pub fn warn(&mut self, key: AttemptKey, workload: &str, node: Option<&str>, error: &SampleError) {
        if let Some(suppressed) = self.admit(key, Instant::now()) {
            tracing::warn!(workload, attempt = key.attempt, node, suppressed,
                error = %super::with_sources(error), "failed to sample the attempt's GPUs; sample skipped");
        }
    }

    /// `Some(failures not logged since the last one)` when this one is to be
    /// logged.
    pub fn admit(&mut self, key: AttemptKey, now: Instant) -> Option<u32> {
        match self.last.get_mut(&key) {
            Some((at, skipped)) if now.duration_since(*at) < LOG_EVERY => {
                *skipped += 1;
                None
            }
            Some((at, skipped)) => {
                let n = std::mem::take(skipped);
                *at = now;
                Some(n)
            }
            None => {
                self.last.insert(key, (now, 0));
                Some(0)
            }
        }
    }

    /// Forgets the attempts `live` no longer holds.
    pub fn retain(&mut self, live: impl Fn(&AttemptKey) -> bool) {
        self.last.retain(|k, _| live(k));
    }
}

/// An attempt being measured: its key, its workload's id and its GPUs.
#[derive(Clone, Debug)]
pub struct Held {
    pub key: AttemptKey,
    pub workload: String,
    pub gpus: Vec<NodeGpus>,
}

/// The local executor's sampler: every `every`, one query for the host's
/// GPUs, split by the GPU indices each attempt `held` lists holds (its
/// nodes all run on this host). Ends when the scheduler is gone.
pub async fn sample_local(
    every: Duration,
    held: impl Fn() -> Vec<Held> + Send + 'static,
    events: mpsc::UnboundedSender<ExecEvent>,
) {
    let program = super::inventory::program();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut throttle = Throttle::default();
    let mut said_none = false;
    loop {
        tick.tick().await;
        if events.is_closed() {
            return;
        }
        let attempts: Vec<Held> = held().into_iter().filter(|a| a.gpus.iter().any(|n| !n.indices.is_empty())).collect();
        throttle.retain(|k| attempts.iter().any(|a| a.key == *k));
        if attempts.is_empty() {
            continue;
        }
        let (usage, bad) = match query_host(&program, query_timeout(every)).await {
            Ok(u) => u,
            Err(e) if e.no_program() => {
                if !said_none {
                    tracing::info!(program, "no nvidia-smi on this host: running attempts are not measured");
                    said_none = true;
                }
                continue;
            }
            Err(e) => {
                attempts.iter().for_each(|a| throttle.warn(a.key, &a.workload, None, &e));
                continue;
            }
        };
        let t = crate::clock::now();
        for a in attempts {
            let parts: Result<Vec<Vec<GpuSample>>, SampleError> =
                a.gpus.iter().map(|n| select(&n.node, &n.indices, &usage, &bad)).collect();
            match parts {
                Ok(parts) => {
                    let _ = events.send(ExecEvent::Telemetry { key: a.key, t, gpus: parts.concat() });
                }
                Err(e) => throttle.warn(a.key, &a.workload, None, &e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_usage_and_names_each_bad_line() {
        let text = "0, 87, 40500, 81559\n1, 3, 512, 81559\n\n2, [N/A], 0, 81559\nbogus\n3, 101, 1, 2\n4, 50, 1\n";
        let (gpus, bad) = parse_usage(text);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0], GpuUsage { index: 0, util: 0.87, mem_used_mib: 40500, mem_total_mib: 81559 });
        assert_eq!(gpus[1].util, 0.03);
        let lines: Vec<String> = bad.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 4, "{lines:?}");
        for (msg, (line, text)) in lines.iter().zip([(4, "[N/A]"), (5, "bogus"), (6, "101"), (7, "4, 50, 1")]) {
            assert!(msg.contains(&format!("line {line}:")) && msg.contains(text), "{msg}");
        }
    }

    #[test]
    fn selects_an_attempts_gpus_and_names_what_is_missing() {
        let (usage, bad) = parse_usage("0, 10, 1, 8\n1, 20, 2, 8\n2, 30, 3, 8\njunk\n");
        let got = select("gpu-1", &[2, 0], &usage, &bad).unwrap();
        let picked: Vec<(&str, u32, f64, u64)> =
            got.iter().map(|g| (g.node.as_str(), g.index, g.util, g.mem_used_mib)).collect();
        assert_eq!(picked, [("gpu-1", 2, 0.3, 3), ("gpu-1", 0, 0.1, 1)]);
        let err = select("gpu-1", &[1, 3], &usage, &bad).unwrap_err().to_string();
        assert!(err.contains("node gpu-1 reports no GPU 3") && err.contains("line 4") && err.contains("junk"), "{err}");
        assert!(select("gpu-1", &[], &usage, &[]).unwrap().is_empty());
    }

    #[test]
    fn the_throttle_logs_once_per_period_per_attempt() {
        let (a, b) = (AttemptKey { seq: 1, attempt: 1 }, AttemptKey { seq: 2, attempt: 1 });
        let mut t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.admit(a, t0), Some(0), "the first failure is logged");
        assert_eq!(t.admit(a, t0 + Duration::from_secs(1)), None);
        assert_eq!(t.admit(b, t0 + Duration::from_secs(1)), Some(0), "each attempt has its own");
        assert_eq!(t.admit(a, t0 + Duration::from_secs(2)), None);
        assert_eq!(t.admit(a, t0 + LOG_EVERY), Some(2), "then once a period, with the count skipped");
        t.retain(|k| *k == b);
        assert_eq!(t.admit(a, t0 + LOG_EVERY), Some(0), "a forgotten attempt starts again");
    }

    #[tokio::test]
    async fn a_missing_or_failing_program_is_an_error_naming_it() {
        let err = query_host("/nonexistent/nvidia-smi", Duration::from_secs(1)).await.unwrap_err();
        assert!(err.no_program(), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/nvidia-smi"), "{err}");
        let err = query_host("false", Duration::from_secs(1)).await.unwrap_err();
        assert!(!err.no_program() && err.to_string().starts_with("false exited with"), "{err}");
    }
}
