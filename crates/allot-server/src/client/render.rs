//! Plain-text tables for the CLI (the `--json` output is the API's JSON).

use std::fmt::Write;

use super::columns::{Col, HISTORY, QUEUE, cut, display_id};
use crate::views::{AccountView, AttemptTelemetry, NodeView, WorkloadDetail, WorkloadView};

/// The CLUSTER column's cell: the cluster, or `-` (a workload not placed
/// yet); `None` when no row has one (the server gives clusters only in a
/// fleet of several, so a fleet of one has no such column).
fn cluster_cells<'a>(cells: impl Iterator<Item = Option<&'a str>> + Clone) -> Option<Vec<String>> {
    cells.clone().any(|c| c.is_some()).then(|| cells.map(|c| format!("{:<12} ", cut(c.unwrap_or("-"), 12))).collect())
}

/// An squeue-like table: id (`12_3` for an array's element), name,
/// account, user, class, gpus, state, cluster (in a fleet of several),
/// nodes, elapsed and time left of the running attempt, age, reason.
/// `long`: reasons in full, else cut to the line.
pub fn queue(ws: &[WorkloadView], now: i64, long: bool) -> String {
    let fleet = ws.iter().any(|w| w.cluster.is_some());
    let cols: Vec<Col> = QUEUE.iter().copied().filter(|c| fleet || *c != Col::Cluster).collect();
    super::columns::table(ws, now, &cols, long)
}

/// An sacct-like table of ended workloads: id, name, account, state,
/// submitted, waited (first start − submit), ran (end − first start),
/// attempts, GPU-hours held, measured GPU utilization, why it ended.
pub fn history(ws: &[WorkloadView], now: i64, long: bool) -> String {
    super::columns::table(ws, now, HISTORY, long)
}

/// `allot show`: the workload, its attempts and why.
pub fn show(d: &WorkloadDetail) -> String {
    let w = &d.workload;
    let mut out = String::new();
    let _ = writeln!(out, "workload {}{}", w.id, w.name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default());
    let _ = writeln!(out, "  state      {}", w.state);
    let _ = writeln!(out, "  account    {}  user {}  class {}", w.account, w.user, w.class);
    let shape = if w.nodes > 0 {
        format!("{} on {}", w.gpus, allot_core::words::count(w.nodes, "node"))
    } else {
        w.gpus.to_string()
    };
    let _ = writeln!(out, "  gpus       {shape}{}", w.gpu_type.as_ref().map(|t| format!(" × {t}")).unwrap_or_default());
    if !w.clusters.is_empty() {
        let _ = writeln!(out, "  may run on {}", w.clusters.join(", "));
    }
    if let Some(c) = &w.cluster {
        let _ = writeln!(out, "  cluster    {c}");
    }
    let _ = writeln!(out, "  command    {}", w.command.join(" "));
    let _ = writeln!(out, "  workdir    {}", w.workdir.as_deref().unwrap_or("(the server's working directory)"));
    let _ = writeln!(
        out,
        "  expected   {} s, checkpoint every {} s, retries {} (failures {})",
        w.expected_duration_s, w.checkpoint_interval_s, w.retries, w.failures
    );
    if let Some(limit) = w.time_limit_s {
        let _ = writeln!(out, "  time limit {limit} s per attempt (CON-6)");
    }
    if w.checkpoint_on_signal {
        let _ = writeln!(out, "  checkpoints when signalled (CON-8)");
    }
    if let Some(a) = &w.array {
        let limit = a.limit.map(|l| format!(", at most {l} at once (ARR-1)")).unwrap_or_default();
        let _ = writeln!(out, "  array      {}: element {} of {}{limit}", a.id, a.index, a.count);
    }
    if let Some(d) = &w.dependency {
        let _ = writeln!(out, "  after      {d} (DEP-1)");
    }
    if w.held {
        let _ = writeln!(out, "  held       until released: allot release {} (HOLD-1)", display_id(w));
    }
    if let Some(why) = &d.why {
        let _ = writeln!(out, "  why        {why}");
    }
    if let Some(u) = w.measured_util {
        let _ = writeln!(out, "  gpu util   {} measured (GPU-time weighted over its attempts)", percent(u));
    }
    if d.attempts.is_empty() {
        let _ = writeln!(out, "  no attempts yet");
    }
    for a in &d.attempts {
        let gpus: Vec<String> = a
            .allocation
            .iter()
            .map(|n| format!("{}[{}]", n.node, n.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")))
            .collect();
        let end = a
            .end_t
            .map(|e| format!("{}s", e - a.start_t))
            .unwrap_or_else(|| crate::states::AttemptState::Running.as_str().into());
        let _ = writeln!(
            out,
            "  attempt {}  {} on {}{}  {}  outcome {}{}",
            a.attempt,
            a.state,
            a.cluster.as_ref().map(|c| format!("cluster {c}: ")).unwrap_or_default(),
            gpus.join(" "),
            end,
            a.outcome.as_deref().unwrap_or("-"),
            a.exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default()
        );
        let _ = writeln!(out, "    started: {}", a.start_reason);
        let _ = writeln!(out, "    gpu: {}", telemetry(a.telemetry.as_ref()));
        if a.checkpoints > 0 {
            let _ = writeln!(
                out,
                "    checkpoints: {} reported, the last at t={} saved {} s of progress (CON-7)",
                a.checkpoints,
                a.checkpoint_t.unwrap_or_default(),
                a.checkpoint_saved_s.unwrap_or_default()
            );
        }
        if let (Some(warned), Some(at)) = (a.idle_warning_t, a.idle_reclaim_t) {
            let _ = writeln!(out, "    idle: warned at t={warned} that its idle GPUs are reclaimed at t={at} (CON-9)");
        }
        if let Some(r) = &a.signal_reason {
            let _ = writeln!(out, "    stopped: {r}");
        }
        let _ = writeln!(out, "    log: {}", a.log_path);
    }
    out
}

/// A fraction as a whole percentage: `0.62` → `62%`.
fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

/// An attempt's GPU telemetry in one line, or "not measured".
fn telemetry(t: Option<&AttemptTelemetry>) -> String {
    match t {
        None => "not measured".to_string(),
        Some(t) => format!(
            "measured mean util {} over {} samples ({} s), idle {} s, memory max {} MiB",
            percent(t.util_mean),
            t.samples,
            t.measured_s,
            t.idle_s,
            t.mem_max_mib
        ),
    }
}

fn bar(used: f64, budget: f64, width: usize) -> String {
    if budget <= 0.0 {
        return " ".repeat(width + 2);
    }
    let f = (used / budget).clamp(0.0, 1.0);
    let n = (f * width as f64).round() as usize;
    let over = used > budget;
    format!("[{}{}]", if over { "!".repeat(n) } else { "#".repeat(n) }, ".".repeat(width - n))
}

/// `allot accounts`: the tree with budget bars and, for budgets that run out
/// before the period renews at this period's burn, when (UTC).
pub fn accounts(list: &[AccountView]) -> String {
    let mut out = format!(
        "{:<32} {:>7} {:>10} {:>10} {:>10} {:<22} {:>6} {:>8} {:>6} {:>5} {:>5}  {}\n",
        "ACCOUNT",
        "SHARE",
        "BUDGET",
        "USED",
        "REMAINING",
        "",
        "USING",
        "ENTITLED",
        "GPUS",
        "PEND",
        "RUN",
        "RUNS OUT (UTC)"
    );
    let min_depth = list.iter().map(|a| a.depth).min().unwrap_or(1);
    for a in list {
        let indent = "  ".repeat((a.depth - min_depth) as usize);
        let leaf = a.path.rsplit('/').next().unwrap_or(&a.path);
        let name = if a.depth == min_depth { a.path.clone() } else { format!("{indent}{leaf}") };
        let num = |v: Option<f64>| v.map(ngh).unwrap_or_else(|| "-".into());
        let budget = a.budget_gpu_hours.map(|b| b + a.carried_gpu_hours);
        let _ = writeln!(
            out,
            "{:<32} {:>7.2} {:>10} {:>10} {:>10} {:<22} {:>6} {:>8} {:>6} {:>5} {:>5}  {}",
            cut(&name, 32),
            a.share,
            num(budget),
            ngh(a.used_gpu_hours),
            num(a.remaining_gpu_hours),
            budget.map(|b| bar(a.used_gpu_hours, b, 20)).unwrap_or_default(),
            // FS-1 in one notion: the part of the GPUs its use stands for
            // beside what it is entitled to now (issue 30, point 3).
            pct(a.using_share.filter(|_| a.entitled_now.is_some_and(|e| e > 0.0))),
            pct(a.entitled_now),
            a.allocated_gpus,
            a.pending,
            a.running,
            runs_out(a)
        );
    }
    out
}

/// A fraction as a whole percentage, `-` when absent.
fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// NGH with significant digits, and a signed remainder once over.
fn ngh(x: f64) -> String {
    let s = allot_core::ledger::format_ngh(x.abs());
    if x < 0.0 { format!("-{s}") } else { s }
}

/// "Thu 01-08 14:00" when the budget runs out before the period renews at
/// this period's rate; "out" once exhausted; "-" otherwise.
fn runs_out(a: &AccountView) -> String {
    if a.remaining_gpu_hours.is_some_and(|r| r <= 0.0) {
        return "out".into();
    }
    match a.projected_exhaustion_t.filter(|t| *t < a.period_end_t) {
        Some(t) => {
            let days = t.div_euclid(86_400);
            let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
            let iso = allot_core::calendar::format_instant(t.max(0) as u64);
            format!("{weekday} {} {}", &iso[5..10], &iso[11..16])
        }
        None => "-".into(),
    }
}

/// `allot nodes`; with CLUSTER in a fleet.
pub fn nodes(list: &[NodeView]) -> String {
    let clusters = cluster_cells(list.iter().map(|n| n.cluster.as_deref()));
    let reasons = list.iter().any(|n| n.reason.is_some());
    let mut head: Vec<&str> = Vec::new();
    if clusters.is_some() {
        head.push("CLUSTER");
    }
    head.extend(["NODE", "POOL", "GPU", "GPUS", "FREE", "HEALTH", "WORKLOADS"]);
    if reasons {
        head.push("REASON");
    }
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for (i, n) in list.iter().enumerate() {
        let mut row = Vec::new();
        if let Some(c) = &clusters {
            row.push(c[i].clone());
        }
        let workloads = if n.workloads.is_empty() { "-".to_string() } else { n.workloads.join(",") };
        row.extend([
            n.name.clone(),
            n.pool.clone(),
            n.gpu_type.clone(),
            n.gpus.to_string(),
            n.free_gpus.to_string(),
            n.health.clone(),
            workloads,
        ]);
        if reasons {
            row.push(n.reason.clone().unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    let numeric: Vec<bool> = head.iter().map(|h| matches!(*h, "GPUS" | "FREE")).collect();
    aligned(&rows, &numeric)
}

/// Rows as columns as wide as their widest cell (two spaces between),
/// numbers (`right`) aligned right; the last column is not padded.
pub fn aligned(rows: &[Vec<String>], right: &[bool]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = width[c].saturating_sub(cell.chars().count());
            let last = c + 1 == r.len();
            if right.get(c).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if !last {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::columns::age;
    use crate::views::AttemptView;

    fn node(name: &str, cluster: Option<&str>) -> NodeView {
        NodeView {
            name: name.into(),
            cluster: cluster.map(String::from),
            pool: "h".into(),
            rack: 0,
            gpu_type: "H100".into(),
            gpus: 2,
            free_gpus: 2,
            health: "up".into(),
            reason: None,
            workloads: vec![],
            workload_accounts: vec![],
            held: vec![],
        }
    }

    /// The CLUSTER column is there exactly when the server names clusters
    /// (a fleet of several); a workload not placed yet shows `-`.
    #[test]
    fn a_cluster_column_only_in_a_fleet() {
        let one = nodes(&[node("h-0", None), node("h-1", None)]);
        assert!(!one.contains("CLUSTER"), "{one}");
        let fleet = nodes(&[node("c1/h-0", Some("c1")), node("c2/h-0", Some("c2"))]);
        let lines: Vec<&str> = fleet.lines().collect();
        assert!(lines[0].starts_with("CLUSTER") && lines[2].starts_with("c2 "), "{fleet}");
        let w = view;
        assert!(!queue(&[w("1", None)], 0, false).contains("CLUSTER"));
        let q = queue(&[w("1", Some("c2")), w("2", None)], 0, false);
        let rows: Vec<Vec<&str>> = q.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!((rows[0][7], rows[1][7], rows[2][7]), ("CLUSTER", "c2", "-"), "{q}");
    }

    /// Issue 30 #1, #2: an ended workload is shown in its ended state even
    /// if it was held; RAN is the time its attempts held GPUs and WAITED
    /// the rest of its life, the wait after a requeue included (as
    /// `sacct`'s Elapsed and wait are read).
    #[test]
    fn history_counts_running_and_waiting_over_every_attempt() {
        // Submitted at 0; ran 10..70 and, requeued, 130..191 on 2 GPUs.
        let requeued = WorkloadView {
            gpus: 2,
            state: "finished".into(),
            submit_t: 0,
            first_start_t: Some(10),
            started_t: Some(130),
            end_t: Some(191),
            attempts: 2,
            gpu_hours: 2.0 * 121.0 / 3600.0,
            ..view("7", None)
        };
        let cancelled_held = WorkloadView { state: "cancelled".into(), held: true, end_t: Some(40), ..view("8", None) };
        let h = history(&[requeued, cancelled_held], 1000, false);
        let rows: Vec<Vec<&str>> = h.lines().map(|l| l.split_whitespace().collect()).collect();
        let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap_or_else(|| panic!("{name} in {h}"));
        assert_eq!(rows[1][col("RAN")], "00:02:01", "{h}");
        assert_eq!(rows[1][col("WAITED")], "00:01:10", "{h}");
        assert_eq!(rows[2][col("STATE")], "cancelled", "{h}");
        assert_eq!((rows[2][col("RAN")], rows[2][col("WAITED")]), ("-", "00:00:40"), "{h}");
        // Running: its current attempt counts as it runs.
        let running =
            WorkloadView { state: "running".into(), first_start_t: Some(10), started_t: Some(10), ..view("9", None) };
        let q = crate::client::columns::table(&[running], 100, &[Col::Ran, Col::Waited], false);
        assert!(q.lines().nth(1).unwrap().split_whitespace().eq(["00:01:30", "00:00:10"]), "{q}");
    }

    /// A pending batch workload of one GPU.
    fn view(id: &str, cluster: Option<&str>) -> WorkloadView {
        WorkloadView {
            id: id.into(),
            name: None,
            account: "org/a".into(),
            user: "ann".into(),
            class: "batch".into(),
            gpus: 1,
            nodes: 0,
            gpu_type: None,
            clusters: vec![],
            command: vec!["work".into()],
            env: Default::default(),
            expected_duration_s: 1,
            checkpoint_interval_s: 0,
            time_limit_s: None,
            workdir: None,
            checkpoint_on_signal: false,
            retries: 0,
            failures: 0,
            state: "pending".into(),
            reason: None,
            submit_t: 0,
            end_t: None,
            cancel_requested: false,
            cluster: cluster.map(String::from),
            measured_util: None,
            on_nodes: Vec::new(),
            started_t: None,
            array: None,
            dependency: None,
            held: false,
            attempts: 0,
            gpu_hours: 0.0,
            first_start_t: None,
        }
    }

    #[test]
    fn show_says_what_was_measured_and_what_was_not() {
        let attempt = |n: i64, telemetry: Option<AttemptTelemetry>| AttemptView {
            attempt: n,
            state: "ended".into(),
            allocation: vec![],
            cluster: None,
            start_t: 0,
            start_reason: "FS-1".into(),
            signal_t: None,
            signal_reason: None,
            end_t: Some(60),
            outcome: Some("preempted".into()),
            exit_code: None,
            kept_s: None,
            pid: None,
            log_path: "/log".into(),
            checkpoints: 0,
            checkpoint_t: None,
            checkpoint_saved_s: None,
            idle_warning_t: None,
            idle_reclaim_t: None,
            telemetry,
        };
        let measured = AttemptTelemetry {
            samples: 12,
            util_mean: 0.624,
            measured_s: 60,
            idle_s: 5,
            mem_max_mib: 4096,
            last_sample_t: 60,
        };
        let d = WorkloadDetail {
            workload: WorkloadView { measured_util: Some(0.624), ..view("1", None) },
            attempts: vec![attempt(1, None), attempt(2, Some(measured))],
            why: None,
        };
        let text = show(&d);
        assert!(text.contains("gpu util   62% measured"), "{text}");
        assert!(text.contains("    gpu: not measured\n"), "{text}");
        let want = "gpu: measured mean util 62% over 12 samples (60 s), idle 5 s, memory max 4096 MiB";
        assert!(text.contains(want), "{text}");
        assert!(
            !show(&WorkloadDetail { workload: view("1", None), attempts: vec![], why: None }).contains("gpu util"),
            "never measured: no line"
        );
    }

    #[test]
    fn bars_and_ages() {
        let cases = [
            ("empty", bar(0.0, 10.0, 4), "[....]"),
            ("half", bar(5.0, 10.0, 4), "[##..]"),
            ("over", bar(20.0, 10.0, 4), "[!!!!]"),
            ("age s", age(100, 90), "10s"),
            ("age h", age(10_000, 0), "2h"),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "case {name}");
        }
    }
}
