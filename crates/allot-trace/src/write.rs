//! Writing traces and configurations back out (docs/design.md §4).
//!
//! [`write_trace_csv`] writes the trace CSV the simulator reads: a header, one
//! row per workload, in the order given (importers and generators sort by
//! `submit_s` first). [`write_config_toml`] writes the cluster + accounts +
//! contract TOML in the exact layout of docs/design.md §4 (`[cluster]`,
//! `[[cluster.pools]]`, `[gpu_types]`, `[[accounts]]`, `[contract]`); optional
//! account fields that are `None` are left out so the parser's documented
//! defaults apply.

use std::collections::BTreeMap;
use std::io::{self, Write};

use allot_core::contract::PerClass;
use allot_core::{Class, Contract, Priority, Time};

use crate::duration::format_duration;

/// The trace columns, in order.
pub const TRACE_HEADER: [&str; 13] = [
    "id",
    "submit_s",
    "account",
    "user",
    "class",
    "gpus",
    "nodes",
    "gpu_type",
    "work_s",
    "checkpoint_s",
    "util",
    "priority",
    "preemptible",
];

/// One workload as written to a trace file. Accounts and GPU types are kept
/// as strings: the trace names them, the config declares them.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow {
    pub id: String,
    /// Seconds from the start of the trace.
    pub submit_s: Time,
    /// Path of the project the workload is charged to.
    pub account: String,
    pub user: String,
    pub class: Class,
    /// Total GPUs (gang).
    pub gpus: u32,
    /// 0: any packing; k > 0: exactly k nodes of `gpus / k`.
    pub nodes: u32,
    /// Required GPU type; empty: any.
    pub gpu_type: String,
    /// Run time if never interrupted, >= 1.
    pub work_s: Time,
    /// Checkpoint interval; 0: never checkpoints.
    pub checkpoint_s: Time,
    /// Mean GPU utilisation while running, 0..=1.
    pub util: f64,
    pub priority: Priority,
    pub preemptible: bool,
    /// Clusters it may run on, comma-separated; empty: any (FLEET-1).
    pub clusters: String,
    /// CON-6: running time allowed per attempt; `None`: the class default.
    pub time_limit_s: Option<Time>,
    /// CON-8: it saves its progress when signalled.
    pub checkpoint_on_signal: bool,
    /// DEP-1: `afterok:ID[:ID…]`, joined by commas; empty: none.
    pub after: String,
    /// ARR-1: the array it is an element of; empty: none.
    pub array: String,
    pub array_index: Option<u32>,
    pub array_limit: Option<u32>,
    /// SLURM-2: billing per second it runs (Slurm's `billing` TRES);
    /// `None`: not given.
    pub billing: Option<u64>,
}

impl TraceRow {
    /// GPU-seconds this workload asks for.
    pub fn gpu_seconds(&self) -> u64 {
        u64::from(self.gpus) * self.work_s
    }
}

/// A utilisation as the trace file keeps it: within 0..=1, three decimals.
pub fn round_util(util: f64) -> f64 {
    (util.clamp(0.0, 1.0) * 1000.0).round() / 1000.0
}

/// Formats a utilisation with at most three decimals (`0.46`, `1`, `0`).
pub fn format_util(util: f64) -> String {
    format!("{}", round_util(util))
}

/// Writes `rows` as a trace CSV with header; the `clusters` column is
/// written only when some row names clusters, the `time_limit_s` column
/// only when some row has a limit (CON-6), `checkpoint_on_signal` only
/// when some row checkpoints on the signal (CON-8), `after` only when some
/// row has dependencies (DEP-1), `array`, `array_index` and `array_limit`
/// only when some row is an array's element (ARR-1), `billing` only when
/// some row has one (SLURM-2; empty for a row without).
pub fn write_trace_csv<W: Write>(w: W, rows: &[TraceRow]) -> io::Result<()> {
    let mut out = csv::WriterBuilder::new().has_headers(false).from_writer(w);
    let clusters = rows.iter().any(|r| !r.clusters.is_empty());
    let limits = rows.iter().any(|r| r.time_limit_s.is_some());
    let on_signal = rows.iter().any(|r| r.checkpoint_on_signal);
    let after = rows.iter().any(|r| !r.after.is_empty());
    let arrays = rows.iter().any(|r| !r.array.is_empty());
    let billing = rows.iter().any(|r| r.billing.is_some());
    let mut header: Vec<&str> = TRACE_HEADER.to_vec();
    if clusters {
        header.push("clusters");
    }
    if limits {
        header.push("time_limit_s");
    }
    if on_signal {
        header.push("checkpoint_on_signal");
    }
    if after {
        header.push("after");
    }
    if arrays {
        header.extend(["array", "array_index", "array_limit"]);
    }
    if billing {
        header.push("billing");
    }
    out.write_record(&header).map_err(io::Error::other)?;
    let mut nums: [String; 6] = Default::default();
    for r in rows {
        nums[0] = r.submit_s.to_string();
        nums[1] = r.gpus.to_string();
        nums[2] = r.nodes.to_string();
        nums[3] = r.work_s.to_string();
        nums[4] = r.checkpoint_s.to_string();
        nums[5] = format_util(r.util);
        let rec: [&str; 13] = [
            &r.id,
            &nums[0],
            &r.account,
            &r.user,
            r.class.as_str(),
            &nums[1],
            &nums[2],
            &r.gpu_type,
            &nums[3],
            &nums[4],
            &nums[5],
            r.priority.as_str(),
            if r.preemptible { "true" } else { "false" },
        ];
        let limit = r.time_limit_s.map(|l| l.to_string()).unwrap_or_default();
        let signal = if r.checkpoint_on_signal { "true" } else { "false" };
        let index = r.array_index.map(|l| l.to_string()).unwrap_or_default();
        let alimit = r.array_limit.map(|l| l.to_string()).unwrap_or_default();
        let billed = r.billing.map(|b| b.to_string()).unwrap_or_default();
        let extra = [
            clusters.then_some(r.clusters.as_str()),
            limits.then_some(limit.as_str()),
            on_signal.then_some(signal),
            after.then_some(r.after.as_str()),
            arrays.then_some(r.array.as_str()),
            arrays.then_some(index.as_str()),
            arrays.then_some(alimit.as_str()),
            billing.then_some(billed.as_str()),
        ];
        out.write_record(rec.iter().copied().chain(extra.into_iter().flatten())).map_err(io::Error::other)?;
    }
    out.flush()
}

/// A pool as written to `[[cluster.pools]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolOut {
    /// The cluster of a fleet the pool is in; empty: a single `[cluster]`.
    pub cluster: String,
    pub name: String,
    pub gpu: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub rack_size: u32,
    /// Legacy policy only: usable by every team.
    pub shared: bool,
}

impl PoolOut {
    pub fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// Whether a workload of `gpus` on `nodes` nodes (0: any packing) with an
    /// optional GPU type (empty: any) fits this pool when it is empty.
    pub fn fits(&self, gpus: u32, nodes: u32, gpu_type: &str) -> bool {
        if !gpu_type.is_empty() && gpu_type != self.gpu {
            return false;
        }
        if nodes == 0 {
            u64::from(gpus) <= self.gpus()
        } else {
            nodes <= self.nodes && gpus.is_multiple_of(nodes) && gpus / nodes <= self.gpus_per_node
        }
    }
}

/// An account as written to `[[accounts]]`; `None` fields are omitted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccountOut {
    pub path: String,
    pub share: Option<f64>,
    /// Normalised GPU-hours per budget period.
    pub budget_gpu_hours: Option<f64>,
    pub impact: Option<f64>,
    pub legacy_pools: Option<Vec<String>>,
    pub max_service_gpus: Option<u32>,
    /// User shares of the account's own work (FS-2); empty: not written.
    pub users: BTreeMap<String, f64>,
    /// User budgets, NGH per budget period (BUD-6); empty: not written.
    pub user_budgets: BTreeMap<String, f64>,
}

/// A whole configuration file.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigOut {
    /// Comment lines written at the top (without the leading `#`).
    pub comments: Vec<String>,
    pub cluster_name: String,
    pub pools: Vec<PoolOut>,
    /// GPU type name and normalisation weight, in the order written.
    pub gpu_types: Vec<(String, f64)>,
    pub accounts: Vec<AccountOut>,
    pub contract: Contract,
    /// What the writer assumed where its source says nothing (an importer:
    /// checkpoints, utilisation; budgets from the same trace), one line
    /// each, written as `[provenance] assumed` for reports to list.
    pub assumed: Vec<String>,
}

impl ConfigOut {
    /// The GPU type names of a configuration made in memory, in the order
    /// of their ids once built: `[gpu_types]` by name, then the pools'
    /// others in pool order (as the config reader lays them out).
    pub(crate) fn gpu_type_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.gpu_types.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        names.dedup();
        for p in &self.pools {
            if !names.contains(&p.gpu) {
                names.push(p.gpu.clone());
            }
        }
        names
    }

    pub fn total_gpus(&self) -> u64 {
        self.pools.iter().map(PoolOut::gpus).sum()
    }

    /// Normalisation weight of a GPU type (1 if undeclared).
    pub fn weight(&self, gpu: &str) -> f64 {
        self.gpu_types.iter().find(|(n, _)| n == gpu).map_or(1.0, |(_, w)| *w)
    }

    /// Normalised GPU-hours the whole cluster provides in `seconds`.
    pub fn capacity_ngh(&self, seconds: Time) -> f64 {
        let h = seconds as f64 / 3600.0;
        self.pools.iter().map(|p| p.gpus() as f64 * self.weight(&p.gpu) * h).sum()
    }

    /// The clusters of a fleet with their pools, in order of first
    /// appearance; empty when no pool names a cluster (a single `[cluster]`).
    pub fn fleet(&self) -> Vec<(&str, Vec<&PoolOut>)> {
        let mut out: Vec<(&str, Vec<&PoolOut>)> = Vec::new();
        for p in self.pools.iter().filter(|p| !p.cluster.is_empty()) {
            match out.iter_mut().find(|(c, _)| *c == p.cluster) {
                Some((_, pools)) => pools.push(p),
                None => out.push((&p.cluster, vec![p])),
            }
        }
        out
    }

    /// Whether some pool can hold the workload.
    pub fn fits_anywhere(&self, gpus: u32, nodes: u32, gpu_type: &str) -> bool {
        self.pools.iter().any(|p| p.fits(gpus, nodes, gpu_type))
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => q.push_str(&format!("\\u{:04X}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A TOML key: bare when possible, quoted otherwise.
fn key(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        s.to_string()
    } else {
        quote(s)
    }
}

/// A TOML float that always reads back as a float (`1.0`, `2.5`).
fn float(v: f64) -> String {
    format!("{v:?}")
}

/// Writes `cfg` as TOML in the docs/design.md §4 layout.
pub fn write_config_toml<W: Write>(mut w: W, cfg: &ConfigOut) -> io::Result<()> {
    for c in &cfg.comments {
        writeln!(w, "# {c}")?;
    }
    let fleet = cfg.fleet();
    if fleet.is_empty() {
        writeln!(w, "[cluster]\nname = {}", quote(&cfg.cluster_name))?;
        write_pools(&mut w, "cluster.pools", cfg.pools.iter())?;
    } else {
        writeln!(w, "name = {}", quote(&cfg.cluster_name))?;
        for (name, pools) in fleet {
            writeln!(w, "\n[[clusters]]\nname = {}", quote(name))?;
            write_pools(&mut w, "clusters.pools", pools.into_iter())?;
        }
    }
    writeln!(w, "\n[gpu_types]")?;
    for (name, weight) in &cfg.gpu_types {
        writeln!(w, "{} = {}", key(name), float(*weight))?;
    }
    for a in &cfg.accounts {
        write_account(&mut w, a)?;
    }
    write_contract(&mut w, &cfg.contract)?;
    write_slurm(&mut w, cfg)?;
    write_provenance(&mut w, &cfg.assumed)?;
    w.flush()
}

/// `[provenance]`: what the writer assumed, one quoted line each.
fn write_provenance<W: Write>(w: &mut W, assumed: &[String]) -> io::Result<()> {
    if assumed.is_empty() {
        return Ok(());
    }
    writeln!(w, "\n[provenance]\nassumed = [")?;
    for a in assumed {
        writeln!(w, "  {},", quote(a))?;
    }
    writeln!(w, "]")
}

fn write_pools<'a, W: Write>(w: &mut W, table: &str, pools: impl Iterator<Item = &'a PoolOut>) -> io::Result<()> {
    for p in pools {
        writeln!(w, "\n[[{table}]]")?;
        writeln!(w, "name = {}", quote(&p.name))?;
        writeln!(w, "gpu = {}", quote(&p.gpu))?;
        writeln!(w, "nodes = {}", p.nodes)?;
        writeln!(w, "gpus_per_node = {}", p.gpus_per_node)?;
        writeln!(w, "rack_size = {}", p.rack_size)?;
        writeln!(w, "shared = {}", p.shared)?;
    }
    Ok(())
}

fn write_account<W: Write>(w: &mut W, a: &AccountOut) -> io::Result<()> {
    writeln!(w, "\n[[accounts]]\npath = {}", quote(&a.path))?;
    if let Some(v) = a.share {
        writeln!(w, "share = {}", float(v))?;
    }
    if let Some(v) = a.budget_gpu_hours {
        writeln!(w, "budget_gpu_hours = {}", float(v))?;
    }
    if let Some(v) = a.impact {
        writeln!(w, "impact = {}", float(v))?;
    }
    if let Some(pools) = &a.legacy_pools {
        let names: Vec<String> = pools.iter().map(|p| quote(p)).collect();
        writeln!(w, "legacy_pools = [{}]", names.join(", "))?;
    }
    if let Some(v) = a.max_service_gpus {
        writeln!(w, "max_service_gpus = {v}")?;
    }
    for (name, table) in [("users", &a.users), ("user_budgets", &a.user_budgets)] {
        if !table.is_empty() {
            let entries: Vec<String> = table.iter().map(|(u, v)| format!("{} = {}", key(u), float(*v))).collect();
            writeln!(w, "{name} = {{ {} }}", entries.join(", "))?;
        }
    }
    Ok(())
}

/// `[slurm]`, written only when a knob differs from its default, so
/// configs without it are unchanged (SLURM-1 … SLURM-5).
fn write_slurm<W: Write>(w: &mut W, cfg: &ConfigOut) -> io::Result<()> {
    let (p, def) = (cfg.contract.slurm, allot_core::policy::SlurmParams::default());
    if p == def {
        return Ok(());
    }
    let d = |s: Time| quote(&format_duration(s));
    writeln!(w, "\n[slurm]")?;
    writeln!(w, "weight_age = {}\nweight_fairshare = {}", p.weight_age, p.weight_fairshare)?;
    writeln!(w, "weight_job_size = {}\nweight_partition = {}", p.weight_job_size, p.weight_partition)?;
    writeln!(w, "weight_qos = {}\nweight_tres_gpu = {}", p.weight_qos, p.weight_tres_gpu)?;
    writeln!(w, "calc_period = {}", d(p.calc_period))?;
    writeln!(w, "max_age = {}\ndecay_half_life = {}", d(p.max_age), d(p.decay_half_life))?;
    writeln!(w, "favor_small = {}", p.favor_small)?;
    let q: Vec<String> = Priority::ALL.iter().map(|&l| format!("{} = {}", l.as_str(), p.qos(l))).collect();
    writeln!(w, "qos_priority = {{ {} }}", q.join(", "))?;
    if let Some(m) = p.qos_priority_max {
        writeln!(w, "qos_priority_max = {m}")?;
    }
    let parts: Vec<String> = cfg
        .gpu_type_names()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < p.partition_priority.len() && p.partition_priority[*i] != def.partition_priority[*i])
        .map(|(i, n)| format!("{} = {}", key(n), p.partition_priority[i]))
        .collect();
    if !parts.is_empty() {
        writeln!(w, "partition_priority = {{ {} }}", parts.join(", "))?;
    }
    writeln!(w, "bf_interval = {}\nbf_window = {}", d(p.bf_interval), d(p.bf_window))?;
    writeln!(w, "bf_max_job_test = {}", p.bf_max_job_test)?;
    if let Some(l) = p.default_time_limit {
        writeln!(w, "default_time_limit = {}", d(l))?;
    }
    writeln!(w, "preempt = {}", quote(p.preempt.as_str()))
}

fn write_contract<W: Write>(w: &mut W, c: &Contract) -> io::Result<()> {
    let d = |s: Time| quote(&format_duration(s));
    let PerClass { batch, interactive, service } = c.min_slice;
    writeln!(w, "\n[contract]")?;
    match c.budget_calendar {
        allot_core::calendar::Calendar::Months { utc_offset } => {
            writeln!(w, "budget_period = \"month\"")?;
            writeln!(w, "budget_timezone = {}", quote(&allot_core::calendar::format_utc_offset(utc_offset)))?;
        }
        allot_core::calendar::Calendar::Fixed { anchor } => {
            writeln!(w, "budget_period = {}", d(c.budget_period))?;
            if anchor != 0 {
                writeln!(w, "budget_period_start = {}", quote(&allot_core::calendar::format_instant(anchor)))?;
            }
        }
    }
    if c.budget_carry_over > 0.0 {
        writeln!(w, "budget_carry_over = {}", c.budget_carry_over)?;
    }
    if c.budget_alerts != allot_core::alerts::Thresholds::default() {
        let levels: Vec<String> = c.budget_alerts.as_slice().iter().map(f64::to_string).collect();
        writeln!(w, "budget_alerts = [{}]", levels.join(", "))?;
    }
    writeln!(w, "usage_half_life = {}", d(c.usage_half_life))?;
    writeln!(w, "min_slice = {{ batch = {}, interactive = {}, service = {} }}", d(batch), d(interactive), d(service))?;
    writeln!(w, "grace = {}", d(c.grace))?;
    writeln!(w, "interactive_max_gpus = {}", c.interactive_max_gpus)?;
    writeln!(w, "interactive_max_duration = {}", d(c.interactive_max_duration))?;
    writeln!(w, "scheduling_interval = {}", d(c.scheduling_interval))?;
    // Written only when on, so configs without it are unchanged (IMP-3).
    if c.impact_weighting {
        writeln!(w, "impact_weighting = \"on\"")?;
    }
    // Written only when set, so configs without it are unchanged (CON-11).
    if c.swap_margin > 0.0 {
        writeln!(w, "swap_margin = {}", c.swap_margin)?;
    }
    // Written only when set, so configs without it are unchanged (CON-12).
    if c.checkpoint_wait > 0 {
        writeln!(w, "checkpoint_wait = {}", d(c.checkpoint_wait))?;
    }
    // Written only when on, so configs without it are unchanged (CON-10).
    if c.keep_claims {
        writeln!(w, "keep_claims = \"on\"")?;
    }
    // Written only when not the default, so configs without it are
    // unchanged (CON-9); a threshold of 0 is off.
    if c.idle_reclaim != Contract::default().idle_reclaim {
        let r = c.idle_reclaim;
        let t = |i: Option<allot_core::IdleReclaim>| i.map_or(0.0, |i| i.threshold);
        writeln!(
            w,
            "idle_threshold = {{ batch = {}, interactive = {}, service = {} }}",
            t(r.batch),
            t(r.interactive),
            t(r.service)
        )?;
        for (key, f) in
            [("idle_after", (|i: allot_core::IdleReclaim| i.after) as fn(_) -> Time), ("idle_warning", |i| i.warning)]
        {
            let on: Vec<String> = allot_core::Class::ALL
                .iter()
                .filter_map(|&class| r.get(class).map(|i| format!("{} = {}", class.as_str(), d(f(i)))))
                .collect();
            if !on.is_empty() {
                writeln!(w, "{key} = {{ {} }}", on.join(", "))?;
            }
        }
    }
    Ok(())
}

/// Rounds a budget to one decimal (what the writer keeps).
pub fn round_budget(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> TraceRow {
        TraceRow {
            id: "a,1".into(),
            submit_s: 5,
            account: "org/t/jobs".into(),
            user: "u".into(),
            class: Class::Batch,
            gpus: 16,
            nodes: 2,
            gpu_type: String::new(),
            work_s: 60,
            checkpoint_s: 0,
            util: 0.4567,
            priority: Priority::High,
            preemptible: true,
            clusters: String::new(),
            time_limit_s: None,
            checkpoint_on_signal: false,
            after: String::new(),
            array: String::new(),
            array_index: None,
            array_limit: None,
            billing: None,
        }
    }

    #[test]
    fn billing_is_written_only_when_some_row_has_it() {
        let mut out = Vec::new();
        let billed = TraceRow { id: "b".into(), billing: Some(3), ..row() };
        write_trace_csv(&mut out, &[row(), billed]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible,billing\n\
             \"a,1\",5,org/t/jobs,u,batch,16,2,,60,0,0.457,high,true,\n\
             b,5,org/t/jobs,u,batch,16,2,,60,0,0.457,high,true,3\n"
        );
    }

    #[test]
    fn trace_csv_quotes_and_rounds() {
        let mut out = Vec::new();
        write_trace_csv(&mut out, &[row()]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n\
             \"a,1\",5,org/t/jobs,u,batch,16,2,,60,0,0.457,high,true\n"
        );
    }

    #[test]
    fn user_shares_and_budgets_round_trip_through_the_writer() {
        let pool = PoolOut {
            cluster: String::new(),
            name: "p".into(),
            gpu: "H100".into(),
            nodes: 1,
            gpus_per_node: 8,
            rack_size: 1,
            shared: false,
        };
        let mut a = AccountOut { path: "org/a".into(), budget_gpu_hours: Some(100.0), ..Default::default() };
        a.users = BTreeMap::from([("alice".to_string(), 2.0), ("bob.b".to_string(), 0.5)]);
        a.user_budgets = BTreeMap::from([("alice".to_string(), 50.0), ("carol-1".to_string(), 12.5)]);
        let cfg = ConfigOut {
            comments: Vec::new(),
            cluster_name: "c".into(),
            pools: vec![pool],
            gpu_types: vec![("H100".into(), 1.0)],
            accounts: vec![a, AccountOut { path: "org/b".into(), ..Default::default() }],
            contract: Contract::default(),
            assumed: vec!["budgets: from the same trace".into()],
        };
        let mut out = Vec::new();
        write_config_toml(&mut out, &cfg).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("users = { alice = 2.0, \"bob.b\" = 0.5 }\n"), "{text}");
        assert!(text.contains("user_budgets = { alice = 50.0, carol-1 = 12.5 }\n"), "{text}");
        let parsed = crate::config::parse_config(&text, "c.toml").unwrap();
        let acc = parsed.accounts.account(parsed.accounts.get("org/a").unwrap());
        assert_eq!(acc.users, cfg.accounts[0].users);
        assert_eq!(acc.user_budgets, cfg.accounts[0].user_budgets);
        let b = parsed.accounts.account(parsed.accounts.get("org/b").unwrap());
        assert!(b.users.is_empty() && b.user_budgets.is_empty());
        // In memory too (`config_from` reads the same fields).
        let again = crate::config::config_from(&cfg, "mem").unwrap();
        // `[provenance] assumed` reads back from the file and in memory.
        assert_eq!(parsed.assumed, cfg.assumed);
        assert_eq!(again.assumed, cfg.assumed);
        assert_eq!(again.accounts.account(again.accounts.get("org/a").unwrap()).user_budgets, acc.user_budgets);
    }

    #[test]
    fn config_round_trips_through_toml() {
        let cfg = ConfigOut {
            comments: vec!["test".into()],
            cluster_name: "c\"x".into(),
            pools: vec![PoolOut {
                cluster: String::new(),
                name: "a-h100".into(),
                gpu: "H100".into(),
                nodes: 4,
                gpus_per_node: 8,
                rack_size: 4,
                shared: false,
            }],
            gpu_types: vec![("H100".into(), 1.0), ("V100 M".into(), 0.5)],
            accounts: vec![
                AccountOut {
                    path: "org/a".into(),
                    budget_gpu_hours: Some(100.0),
                    legacy_pools: Some(vec!["a-h100".into()]),
                    ..Default::default()
                },
                AccountOut { path: "org/a/p".into(), ..Default::default() },
            ],
            contract: Contract { checkpoint_wait: 1800, ..Contract::default() },
            assumed: vec!["every batch job checkpoints \"hourly\"".into()],
        };
        let mut out = Vec::new();
        write_config_toml(&mut out, &cfg).unwrap();
        let v: toml::Value = toml::from_str(std::str::from_utf8(&out).unwrap()).unwrap();
        assert_eq!(v["cluster"]["name"].as_str(), Some("c\"x"));
        assert_eq!(v["cluster"]["pools"][0]["nodes"].as_integer(), Some(4));
        assert_eq!(v["gpu_types"]["V100 M"].as_float(), Some(0.5));
        assert_eq!(v["accounts"][0]["budget_gpu_hours"].as_float(), Some(100.0));
        assert!(v["accounts"][1].get("legacy_pools").is_none());
        assert_eq!(v["contract"]["min_slice"]["batch"].as_str(), Some("2h"));
        assert_eq!(v["contract"]["budget_period"].as_str(), Some("7d"));
        assert_eq!(v["contract"]["checkpoint_wait"].as_str(), Some("30m"));
        assert!(v["contract"].get("swap_margin").is_none(), "written only when set");
        assert_eq!(v["provenance"]["assumed"][0].as_str(), Some("every batch job checkpoints \"hourly\""));
    }
}
