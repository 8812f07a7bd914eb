//! The `ai2` and `ai2-fleet` scenario generators.
//!
//! Order of generation (one seeded ChaCha8 stream, so a seed gives the same
//! bytes): cluster and team pools, users, inference services, interactive
//! sessions and squatting placeholders, then batch jobs filling the rest of
//! the demand target `load x GPUs x horizon` team by team and kind by kind.
//! `ai2-fleet` lays the same capacity out as the clusters of [`FLEET`] and
//! pins [`FLEET_PIN_FRACTION`] of every team's workloads to its home
//! cluster (one more draw per workload, after its labels).

use allot_core::{Class, Priority, Time, WorkloadSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::params::{Ai2Params, GenerateError};
use super::sample::{
    Arrivals, INTERACTIVE_WEEKEND, interactive_hour, is_weekend, lognormal_s, poisson, uniform, weighted,
};
use super::scenario::{
    BATCH_KINDS, FLEET, FLEET_MIN_GPUS, FLEET_PIN_FRACTION, FLEET_REFERENCE_GPUS, Kind, KindSpec, TEAM_HOMES, TEAMS,
    TeamSpec, kind_spec,
};
use super::stats::GenStats;
use crate::config::{Config, config_from};
use crate::error::FormatError;
use crate::import::{NodeGroup, Shape, TeamNeed, apportion, size_cluster};
use crate::trace::check_trace_rows;
use crate::write::{AccountOut, ConfigOut, PoolOut, TraceRow, round_budget};

/// Root of the generated account paths.
pub const ROOT: &str = "ai2";

/// A generated trace with its config and summary.
#[derive(Clone, Debug)]
pub struct Generated {
    pub rows: Vec<TraceRow>,
    pub config: ConfigOut,
    pub stats: GenStats,
}

impl Generated {
    /// The config and workloads as the simulator takes them, checked by the
    /// same code as a config file and a trace file (the values are those
    /// `allot trace gen` writes); `name` names them in errors (`{name}
    /// config`, `{name} trace`).
    pub fn inputs(&self, name: &str) -> Result<(Config, Vec<WorkloadSpec>), FormatError> {
        let config = config_from(&self.config, &format!("{name} config"))?;
        let trace = check_trace_rows(&self.rows, &format!("{name} trace"), &config)?;
        Ok((config, trace))
    }
}

struct User {
    name: String,
    team: usize,
    home: &'static str,
    interactive: bool,
    session_gpus: u32,
}

struct Team {
    /// Nodes of the team's largest pool (in a fleet: of its home cluster;
    /// caps its gangs) and that pool's GPU type.
    max_nodes: u32,
    main_type: String,
    /// In a fleet: the team's home cluster, where its pinned work goes.
    home: Option<&'static str>,
    /// Indices into the user list, with submission weights.
    users: Vec<(usize, f64)>,
}

struct Gen<'a> {
    p: &'a Ai2Params,
    rng: ChaCha8Rng,
    /// Draws which batch workloads checkpoint on the signal (CON-8): a
    /// stream of its own, so the rest of a seed's trace is the same
    /// whatever the fraction.
    on_signal: ChaCha8Rng,
    horizon: Time,
    teams: Vec<Team>,
    users: Vec<User>,
    rows: Vec<TraceRow>,
    counters: [u32; Kind::ALL.len()],
    /// Batch jobs that fail early: count and GPU-seconds.
    failed: (usize, f64),
}

/// Generates the `ai2` scenario.
pub fn generate_ai2(p: &Ai2Params) -> Result<Generated, GenerateError> {
    p.validate(TEAMS.len())?;
    generate_lab(p, cluster_config(p))
}

/// Generates the `ai2-fleet` scenario: `p.gpus` over the clusters of
/// [`FLEET`] in proportion to their reference sizes, each at least
/// [`FLEET_MIN_GPUS`].
pub fn generate_ai2_fleet(p: &Ai2Params) -> Result<Generated, GenerateError> {
    p.validate(TEAMS.len())?;
    let min = FLEET_MIN_GPUS * FLEET.len() as u32;
    if p.gpus_per_node != 8 || p.gpus < min {
        return Err(GenerateError(format!(
            "ai2-fleet needs 8 GPUs per node and --gpus of at least {min} ({} clusters of at least {FLEET_MIN_GPUS}), got {}",
            FLEET.len(),
            p.gpus
        )));
    }
    generate_lab(p, fleet_config(p))
}

fn generate_lab(p: &Ai2Params, config: ConfigOut) -> Result<Generated, GenerateError> {
    let mut g = Gen {
        p,
        rng: ChaCha8Rng::seed_from_u64(p.seed),
        on_signal: ChaCha8Rng::seed_from_u64(p.seed ^ 0x5349_474e_414c),
        horizon: Time::from(p.days) * 86_400,
        teams: Vec::new(),
        users: Vec::new(),
        rows: Vec::new(),
        counters: [0; Kind::ALL.len()],
        failed: (0, 0.0),
    };
    g.teams = teams(&config);
    g.make_users();
    g.services();
    g.interactive();
    let target = p.load * f64::from(p.gpus) * g.horizon as f64;
    let so_far: f64 = g.rows.iter().map(|r| r.gpu_seconds() as f64).sum();
    g.batch((target - so_far).max(0.0));
    let failed = g.failed;
    let mut rows = g.rows;
    rows.sort_by(|a, b| a.submit_s.cmp(&b.submit_s).then_with(|| a.id.cmp(&b.id)));
    let stats = GenStats::of(&rows, p, failed);
    Ok(Generated { rows, config, stats })
}

/// Each team's claim on a cluster's nodes: its budget share, at least one node.
fn team_needs(gpus_per_node: u32) -> Vec<TeamNeed> {
    TEAMS
        .iter()
        .map(|t| TeamNeed {
            name: t.name.to_string(),
            weight: t.budget_share,
            reserve: vec![(Shape { gpus: gpus_per_node, nodes: 1 }, None)],
            fixed_gpus: None,
        })
        .collect()
}

/// `nodes` split over GPU models by their node shares (largest
/// remainder); models without a node are left out.
fn node_groups(nodes: u32, mix: &[(&str, f64)], gpus_per_node: u32) -> Vec<NodeGroup> {
    let shares: Vec<f64> = mix.iter().map(|m| m.1).collect();
    let per_model = apportion(nodes, &shares, &vec![0; shares.len()]);
    mix.iter()
        .zip(per_model)
        .filter(|(_, n)| *n > 0)
        .map(|((model, _), n)| NodeGroup { model: model.to_string(), gpus_per_node, nodes: n })
        .collect()
}

/// Pools: the GPU models' node shares, each team's exclusive slice in
/// proportion to its budget share; budgets = share x capacity per 7 days.
fn cluster_config(p: &Ai2Params) -> ConfigOut {
    let mix: Vec<(&str, f64)> = p.gpu_mix.iter().map(|m| (m.model.as_str(), m.node_share)).collect();
    let groups = node_groups(p.gpus / p.gpus_per_node, &mix, p.gpus_per_node);
    let needs = team_needs(p.gpus_per_node);
    let sized = size_cluster(Some(groups), "", p.gpus_per_node, &needs, 0.0, p.rack_size);
    let mut config = ConfigOut {
        comments: vec![
            format!(
                "written by `allot trace gen --scenario ai2 --gpus {} --days {} --seed {} --load {}`",
                p.gpus, p.days, p.seed, p.load
            ),
            "legacy pools: each team's slice of the nodes in proportion to its budget share".to_string(),
            "budgets: each team's budget share x the cluster's normalised GPU-hours per 7 days".to_string(),
        ],
        cluster_name: ROOT.to_string(),
        pools: sized.pools,
        gpu_types: p.gpu_mix.iter().map(|m| (m.model.clone(), m.weight)).collect(),
        accounts: Vec::new(),
        contract: allot_core::Contract::default(),
        assumed: assumed(p),
    };
    push_accounts(&mut config, |ti| sized.team_pools.get(TEAMS[ti].name).cloned().unwrap_or_default());
    config
}

/// The `ai2-fleet` layout: `p.gpus` split over the clusters of [`FLEET`]
/// in proportion to their reference sizes (whole nodes, each cluster at
/// least [`FLEET_MIN_GPUS`]); in each cluster its GPU models' node shares
/// and each team's exclusive slice in proportion to its budget share (the
/// legacy model on a fleet: team pools per cluster, `<cluster>/<pool>`);
/// budgets = share x the fleet's normalised GPU-hours per 7 days.
fn fleet_config(p: &Ai2Params) -> ConfigOut {
    let gpn = p.gpus_per_node;
    let weights: Vec<f64> = FLEET.iter().map(|c| f64::from(c.gpus)).collect();
    let mins = vec![FLEET_MIN_GPUS / gpn; FLEET.len()];
    let cluster_nodes = apportion(p.gpus / gpn, &weights, &mins);
    let needs = team_needs(gpn);
    let mut pools = Vec::new();
    let mut team_pools: Vec<Vec<String>> = vec![Vec::new(); TEAMS.len()];
    for (plan, nodes) in FLEET.iter().zip(cluster_nodes) {
        let groups = node_groups(nodes, plan.mix, gpn);
        let sized = size_cluster(Some(groups), "", gpn, &needs, 0.0, p.rack_size);
        for (ti, t) in TEAMS.iter().enumerate() {
            let mine = sized.team_pools.get(t.name).cloned().unwrap_or_default();
            team_pools[ti].extend(mine.into_iter().map(|n| format!("{}/{n}", plan.name)));
        }
        pools.extend(sized.pools.into_iter().map(|pool| PoolOut { cluster: plan.name.to_string(), ..pool }));
    }
    let scale = f64::from(p.gpus) / f64::from(FLEET_REFERENCE_GPUS);
    let mut config = ConfigOut {
        comments: vec![
            format!(
                "written by `allot trace gen --scenario ai2-fleet --gpus {} --days {} --seed {} --load {}`",
                p.gpus, p.days, p.seed, p.load
            ),
            format!("clusters: the ai2-fleet reference sizes x {scale:.3}, each at least {FLEET_MIN_GPUS} GPUs"),
            "legacy pools: in every cluster, each team's slice of its nodes in proportion to its budget share"
                .to_string(),
            "budgets: each team's budget share x the fleet's normalised GPU-hours per 7 days".to_string(),
        ],
        cluster_name: ROOT.to_string(),
        pools,
        gpu_types: p.gpu_mix.iter().map(|m| (m.model.clone(), m.weight)).collect(),
        accounts: Vec::new(),
        contract: allot_core::Contract::default(),
        assumed: assumed(p),
    };
    push_accounts(&mut config, |ti| team_pools[ti].clone());
    config
}

/// What a generated scenario assumes that favours one policy: the load.
fn assumed(p: &Ai2Params) -> Vec<String> {
    vec![format!(
        "load: the workloads ask for {} x the GPU-time of the cluster; so far above capacity any sharing of idle \
         GPUs beats static team partitions (favours allot, fifo and fifo-backfill over priority)",
        p.load
    )]
}

/// Every team's account (budget share x capacity per 7 days, its legacy
/// pools) and its projects.
fn push_accounts(config: &mut ConfigOut, legacy: impl Fn(usize) -> Vec<String>) {
    let capacity = config.capacity_ngh(config.contract.budget_period);
    for (ti, t) in TEAMS.iter().enumerate() {
        config.accounts.push(AccountOut {
            path: format!("{ROOT}/{}", t.name),
            budget_gpu_hours: Some(round_budget(capacity * t.budget_share)),
            legacy_pools: Some(legacy(ti)),
            ..Default::default()
        });
        for (project, _) in t.projects {
            config.accounts.push(AccountOut { path: format!("{ROOT}/{}/{project}", t.name), ..Default::default() });
        }
    }
}

/// The teams' gang caps and GPU types: from their largest legacy pool, in a
/// fleet the largest of their home cluster (legacy pools there are named
/// `<cluster>/<pool>`).
fn teams(config: &ConfigOut) -> Vec<Team> {
    let fleet = !config.fleet().is_empty();
    TEAMS
        .iter()
        .enumerate()
        .map(|(ti, spec): (usize, &TeamSpec)| {
            let account = config.accounts.iter().find(|a| a.path == format!("{ROOT}/{}", spec.name));
            let names = account.and_then(|a| a.legacy_pools.clone()).unwrap_or_default();
            let home = fleet.then(|| FLEET[TEAM_HOMES[ti]].name);
            let largest = config
                .pools
                .iter()
                .filter(|p| match home {
                    Some(h) => p.cluster == h && names.contains(&format!("{}/{}", p.cluster, p.name)),
                    None => names.contains(&p.name),
                })
                .max_by(|a, b| a.nodes.cmp(&b.nodes).then(b.name.cmp(&a.name)));
            Team {
                max_nodes: largest.map_or(1, |p| p.nodes),
                main_type: largest.map_or_else(String::new, |p| p.gpu.clone()),
                home,
                users: Vec::new(),
            }
        })
        .collect()
}

impl Gen<'_> {
    fn make_users(&mut self) {
        let weights: Vec<f64> = TEAMS.iter().map(|t| t.users).collect();
        let counts = apportion(self.p.users, &weights, &vec![1; TEAMS.len()]);
        let sessions = kind_spec(Kind::Interactive).gpus;
        for (ti, n) in counts.into_iter().enumerate() {
            let spec = &TEAMS[ti];
            let homes: Vec<&'static str> = spec
                .projects
                .iter()
                .filter(|(_, k)| k.iter().any(|k| BATCH_KINDS.contains(k)))
                .map(|(n, _)| *n)
                .collect();
            for i in 0..n {
                let home = homes[self.rng.gen_range(0..homes.len())];
                let interactive = self.rng.gen_bool(self.p.interactive_users);
                let session_gpus = sessions[weighted(&mut self.rng, sessions)].0;
                // A few heavy submitters, a long tail (weight ~ rank^-0.8).
                self.teams[ti].users.push((self.users.len(), 1.0 / f64::from(i + 1).powf(0.8)));
                self.users.push(User {
                    name: format!("{}-u{:02}", spec.name, i + 1),
                    team: ti,
                    home,
                    interactive,
                    session_gpus,
                });
            }
        }
    }

    fn next_id(&mut self, kind: Kind, team: usize) -> String {
        let n = &mut self.counters[Kind::ALL.iter().position(|k| *k == kind).expect("listed")];
        *n += 1;
        format!("{}-{}-{:05}", kind.as_str(), TEAMS[team].name, n)
    }

    /// Legacy priority and preemptibility (see [`super::Behaviour`]).
    fn label(&mut self, kind: Kind, submit: Time) -> (Priority, bool) {
        let b = &self.p.behaviour;
        if kind == Kind::Service {
            return (Priority::High, false);
        }
        let t = (submit as f64 / self.horizon as f64).clamp(0.0, 1.0);
        let high = b.high_share_start + (b.high_share - b.high_share_start) * t;
        let u: f64 = self.rng.gen_range(0.0..1.0);
        let low_kind = matches!(kind, Kind::Eval | Kind::RlSim);
        let priority = if u < b.urgent_share {
            Priority::Urgent
        } else if u < b.urgent_share + high {
            Priority::High
        } else if low_kind && self.rng.gen_bool(b.low_share) {
            Priority::Low
        } else {
            Priority::Normal
        };
        let batch = kind_spec_class(kind) == Class::Batch;
        let preemptible = batch && priority <= Priority::Normal && self.rng.gen_bool(b.preemptible_fraction);
        (priority, preemptible)
    }

    #[expect(clippy::too_many_arguments, reason = "one row's fields, named at the call sites")]
    fn push(&mut self, kind: Kind, user: usize, project: &str, submit: Time, gpus: u32, work_s: Time, util: f64) {
        let team = self.users[user].team;
        let id = self.next_id(kind, team);
        let (priority, preemptible) = self.label(kind, submit);
        let gpn = self.p.gpus_per_node;
        let nodes = if gpus <= gpn { 1 } else { gpus / gpn };
        let gpu_type = if kind == Kind::Pretrain { self.teams[team].main_type.clone() } else { String::new() };
        let checkpoint_s = if kind == Kind::Squat { 0 } else { kind_spec(kind_base(kind)).checkpoint_s };
        let clusters = match self.teams[team].home {
            Some(home) if self.rng.gen_bool(FLEET_PIN_FRACTION) => home.to_string(),
            _ => String::new(),
        };
        self.rows.push(TraceRow {
            id,
            submit_s: submit,
            account: format!("{ROOT}/{}/{project}", TEAMS[team].name),
            user: self.users[user].name.clone(),
            class: kind_spec_class(kind),
            gpus,
            nodes,
            gpu_type,
            work_s: work_s.max(1),
            checkpoint_s,
            util: (util * 1000.0).round() / 1000.0,
            priority,
            preemptible,
            clusters,
            time_limit_s: None,
            checkpoint_on_signal: kind_spec_class(kind) == allot_core::Class::Batch
                && self.p.behaviour.on_signal_fraction > 0.0
                && self.on_signal.gen_bool(self.p.behaviour.on_signal_fraction),
            after: String::new(),
            array: String::new(),
            array_index: None,
            array_limit: None,
            billing: None,
        });
    }

    fn pick_user(&mut self, team: usize) -> usize {
        let users = &self.teams[team].users;
        let i = weighted(&mut self.rng, users);
        users[i].0
    }

    fn project_for(&mut self, team: usize, kind: Kind) -> &'static str {
        let projects: Vec<&'static str> =
            TEAMS[team].projects.iter().filter(|(_, ks)| ks.contains(&kind)).map(|(n, _)| *n).collect();
        if projects.is_empty() { TEAMS[team].projects[0].0 } else { projects[self.rng.gen_range(0..projects.len())] }
    }

    /// GPUs of a job of `spec` for a team, capped to its largest pool.
    fn size(&mut self, spec: &KindSpec, team: usize) -> u32 {
        let gpus = spec.gpus[weighted(&mut self.rng, spec.gpus)].0;
        let gpn = self.p.gpus_per_node;
        if gpus <= gpn { gpus } else { (gpus / gpn).min(self.teams[team].max_nodes) * gpn }
    }

    /// Inference services: 70% already deployed at the start and running
    /// to the end of the horizon, the rest deployed during it.
    fn services(&mut self) {
        let spec = kind_spec(Kind::Service);
        let batch_arrivals = Arrivals::batch(self.p.days);
        for (ti, team) in TEAMS.iter().enumerate() {
            let n = team.services;
            if n == 0 {
                continue;
            }
            let n = ((f64::from(n) * f64::from(self.p.gpus) / 1024.0).round() as u32).max(1);
            for _ in 0..n {
                let user = self.pick_user(ti);
                let project = self.project_for(ti, Kind::Service);
                let gpus = self.size(spec, ti);
                let util = uniform(&mut self.rng, spec.util.0, spec.util.1);
                let (submit, work) = if self.rng.gen_bool(0.7) {
                    let s = self.rng.gen_range(0..3600);
                    (s, self.horizon - s)
                } else {
                    let s = batch_arrivals.sample(&mut self.rng);
                    let life = lognormal_s(
                        &mut self.rng,
                        spec.work_median_s,
                        spec.work_sigma,
                        spec.work_min_s,
                        spec.work_max_s,
                    );
                    (s, life.min(self.horizon - s))
                };
                self.push(Kind::Service, user, project, submit, gpus, work, util);
            }
        }
    }

    /// Debugging sessions in bursts during working hours, and the idle
    /// placeholders some users hold on the days they debug.
    fn interactive(&mut self) {
        let spec = kind_spec(Kind::Interactive);
        const MEAN_BURST: f64 = 2.0;
        for u in 0..self.users.len() {
            if !self.users[u].interactive {
                continue;
            }
            let home = self.users[u].home;
            for day in 0..u64::from(self.p.days) {
                let f = if is_weekend(day) { INTERACTIVE_WEEKEND } else { 1.0 };
                let bursts = poisson(&mut self.rng, self.p.sessions_per_day * f / MEAN_BURST);
                let mut first: Option<Time> = None;
                for _ in 0..bursts {
                    let mut t = day * 86_400 + interactive_hour(&mut self.rng) * 3600 + self.rng.gen_range(0..3600);
                    first = Some(first.map_or(t, |f| f.min(t)));
                    let mut sessions = 1;
                    while sessions < 6 && self.rng.gen_bool(1.0 - 1.0 / MEAN_BURST) {
                        sessions += 1;
                    }
                    for _ in 0..sessions {
                        if t >= self.horizon {
                            break;
                        }
                        let gpus = if self.rng.gen_bool(0.8) {
                            self.users[u].session_gpus
                        } else {
                            spec.gpus[weighted(&mut self.rng, spec.gpus)].0
                        };
                        let work = lognormal_s(
                            &mut self.rng,
                            spec.work_median_s,
                            spec.work_sigma,
                            spec.work_min_s,
                            spec.work_max_s,
                        );
                        let util = uniform(&mut self.rng, spec.util.0, spec.util.1);
                        self.push(Kind::Interactive, u, home, t, gpus, work, util);
                        t += work + self.rng.gen_range(120..1200);
                    }
                }
                if let Some(start) = first
                    && self.rng.gen_bool(self.p.behaviour.squat_fraction)
                {
                    self.squat(u, day, start);
                }
            }
        }
    }

    fn squat(&mut self, u: usize, day: u64, first_session: Time) {
        let b = &self.p.behaviour;
        let (h, util) = (b.squat_hours, b.squat_util);
        let submit = first_session.saturating_sub(self.rng.gen_range(0..1800)).max(day * 86_400);
        let work = (uniform(&mut self.rng, h.0, h.1) * 3600.0).round() as Time;
        let util = uniform(&mut self.rng, util.0, util.1);
        let (gpus, home) = (self.users[u].session_gpus, self.users[u].home);
        self.push(Kind::Squat, u, home, submit, gpus, work, util);
    }

    /// Batch jobs: each team's demand share of `target` GPU-seconds, split
    /// by its mix; a cell stops before the job that would overshoot it by
    /// more than half that job.
    fn batch(&mut self, target: f64) {
        let arrivals = Arrivals::batch(self.p.days);
        for (ti, spec) in TEAMS.iter().enumerate() {
            let mix_sum: f64 = spec.mix.iter().sum();
            for (k, kind) in BATCH_KINDS.into_iter().enumerate() {
                let cell = target * spec.demand_share * spec.mix[k] / mix_sum;
                let ks = kind_spec(kind);
                let mut done = 0.0;
                while done < cell {
                    let gpus = self.size(ks, ti);
                    let mut work =
                        lognormal_s(&mut self.rng, ks.work_median_s, ks.work_sigma, ks.work_min_s, ks.work_max_s);
                    let fails = ks.can_fail && self.rng.gen_bool(self.p.fail_fraction);
                    if fails {
                        let (median, sigma) = (self.p.fail_median_s as f64, self.p.fail_sigma);
                        work = lognormal_s(&mut self.rng, median, sigma, 10.min(work), work);
                    }
                    let g = f64::from(gpus) * work as f64;
                    if done + g / 2.0 > cell && done > 0.0 {
                        break;
                    }
                    done += g;
                    if fails {
                        self.failed.0 += 1;
                        self.failed.1 += g;
                    }
                    let submit = arrivals.sample(&mut self.rng);
                    let user = self.pick_user(ti);
                    let project = self.project_for(ti, kind);
                    let util = uniform(&mut self.rng, ks.util.0, ks.util.1);
                    self.push(kind, user, project, submit, gpus, work, util);
                }
            }
        }
    }
}

/// Squats are interactive workloads with their own parameters.
fn kind_base(kind: Kind) -> Kind {
    if kind == Kind::Squat { Kind::Interactive } else { kind }
}

fn kind_spec_class(kind: Kind) -> Class {
    kind_spec(kind_base(kind)).class
}
