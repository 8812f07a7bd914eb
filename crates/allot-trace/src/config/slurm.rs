//! `[slurm]` (docs/config.md): the slurm.conf knobs of the `slurm` policy
//! (rules SLURM-1 … SLURM-5), read into [`allot_core::Contract::slurm`] so
//! that the simulator and the server hand them to the policy alike.

use std::collections::BTreeMap;

use allot_core::policy::{MAX_PARTITIONS, SlurmParams, SlurmPreempt};
use allot_core::{Cluster, Priority};
use serde::Deserialize;
use toml::Spanned;

use super::{Ctx, Secs};
use crate::bounds::{self, IntBound};
use crate::error::FormatError;
use crate::write::ConfigOut;

/// `[slurm]` as read: every key optional.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlurm {
    weight_age: Option<Spanned<u32>>,
    weight_fairshare: Option<Spanned<u32>>,
    weight_job_size: Option<Spanned<u32>>,
    weight_partition: Option<Spanned<u32>>,
    weight_qos: Option<Spanned<u32>>,
    weight_tres_gpu: Option<Spanned<u32>>,
    calc_period: Option<Spanned<Secs>>,
    max_age: Option<Spanned<Secs>>,
    decay_half_life: Option<Spanned<Secs>>,
    favor_small: Option<bool>,
    /// QOS priority per priority label: `{ low = 0, high = 100 }`.
    qos_priority: Option<RawQos>,
    /// The site's largest QOS priority (default: the largest of `qos_priority`).
    qos_priority_max: Option<Spanned<u32>>,
    /// Partition `PriorityJobFactor` per GPU type: `{ H100 = 10 }`.
    #[serde(default)]
    partition_priority: BTreeMap<String, Spanned<u32>>,
    bf_interval: Option<Spanned<Secs>>,
    bf_window: Option<Spanned<Secs>>,
    bf_max_job_test: Option<Spanned<u32>>,
    default_time_limit: Option<Spanned<Secs>>,
    /// `off` (default) or `qos`.
    preempt: Option<Spanned<String>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQos {
    low: Option<Spanned<u32>>,
    normal: Option<Spanned<u32>>,
    high: Option<Spanned<u32>>,
    urgent: Option<Spanned<u32>>,
}

/// `bf_max_job_test`: Slurm takes 1 up to 1,000,000.
const BF_MAX_JOB_TEST: IntBound = IntBound { min: 1, max: 1_000_000 };

/// `[slurm]` checked: durations within their bounds (`max_age`,
/// `decay_half_life`, `bf_interval`, `bf_window` at least 1 s), GPU types
/// of `partition_priority` known; errors name the key and its line.
pub(super) fn build_slurm(
    ctx: &Ctx<'_>,
    raw: Option<&RawSlurm>,
    cluster: &Cluster,
) -> Result<SlurmParams, FormatError> {
    let mut p = SlurmParams::default();
    let Some(raw) = raw else { return Ok(p) };
    let secs = |key: &str, v: &Option<Spanned<Secs>>, b: IntBound, default: u64| -> Result<u64, FormatError> {
        match v {
            None => Ok(default),
            Some(s) => b.check(s.get_ref().0).map_err(|m| ctx.err(format!("slurm.{key}"), Some(s.span()), m)),
        }
    };
    let int = |v: &Option<Spanned<u32>>, default: u32| v.as_ref().map_or(default, |v| *v.get_ref());
    p.weight_age = int(&raw.weight_age, p.weight_age);
    p.weight_fairshare = int(&raw.weight_fairshare, p.weight_fairshare);
    p.weight_job_size = int(&raw.weight_job_size, p.weight_job_size);
    p.weight_partition = int(&raw.weight_partition, p.weight_partition);
    p.weight_qos = int(&raw.weight_qos, p.weight_qos);
    p.weight_tres_gpu = int(&raw.weight_tres_gpu, p.weight_tres_gpu);
    let period = bounds::CONTRACT_PERIOD_S;
    p.max_age = secs("max_age", &raw.max_age, period, p.max_age)?;
    p.calc_period = secs("calc_period", &raw.calc_period, period, p.calc_period)?;
    p.decay_half_life = secs("decay_half_life", &raw.decay_half_life, period, p.decay_half_life)?;
    p.bf_interval = secs("bf_interval", &raw.bf_interval, period, p.bf_interval)?;
    p.bf_window = secs("bf_window", &raw.bf_window, period, p.bf_window)?;
    if raw.default_time_limit.is_some() {
        p.default_time_limit = Some(secs("default_time_limit", &raw.default_time_limit, bounds::WORK_S, 0)?);
    }
    p.favor_small = raw.favor_small.unwrap_or(p.favor_small);
    if let Some(v) = &raw.bf_max_job_test {
        p.bf_max_job_test = ctx.int("slurm.bf_max_job_test".into(), v, BF_MAX_JOB_TEST)?;
    }
    if let Some(q) = &raw.qos_priority {
        for (label, v) in [
            (Priority::Low, &q.low),
            (Priority::Normal, &q.normal),
            (Priority::High, &q.high),
            (Priority::Urgent, &q.urgent),
        ] {
            p.qos_priority[label as usize] = int(v, p.qos_priority[label as usize]);
        }
    }
    if let Some(v) = &raw.qos_priority_max {
        let (max, labels) = (*v.get_ref(), p.qos_priority.iter().copied().max().unwrap_or(0));
        if max < labels {
            let msg = format!("{max} is below the largest qos_priority ({labels})");
            return Err(ctx.err("slurm.qos_priority_max", Some(v.span()), msg));
        }
        p.qos_priority_max = Some(max);
    }
    for (name, v) in &raw.partition_priority {
        let key = format!("slurm.partition_priority.{name}");
        let Some(g) = cluster.gpu_type_by_name(name) else {
            let known: Vec<&str> = cluster.gpu_types.iter().map(|t| t.name.as_str()).collect();
            let msg = format!("unknown gpu type {name:?} (known: {})", known.join(", "));
            return Err(ctx.err(key, Some(v.span()), msg));
        };
        if g.0 as usize >= MAX_PARTITIONS {
            let msg = format!("only the first {MAX_PARTITIONS} gpu types may have a partition priority");
            return Err(ctx.err(key, Some(v.span()), msg));
        }
        p.partition_priority[g.0 as usize] = *v.get_ref();
    }
    if let Some(v) = &raw.preempt {
        p.preempt = SlurmPreempt::parse(v.get_ref()).ok_or_else(|| {
            ctx.err("slurm.preempt", Some(v.span()), format!("unknown preempt {:?} (use off or qos)", v.get_ref()))
        })?;
    }
    Ok(p)
}

/// `[slurm]` of a configuration made in memory, as the TOML reader would
/// give it; `None` when every knob has its default.
pub(super) fn raw_of(out: &ConfigOut) -> Option<RawSlurm> {
    let p = out.contract.slurm;
    let d = SlurmParams::default();
    if p == d {
        return None;
    }
    let at = |v: u32| Some(Spanned::new(0..0, v));
    let secs = |v: u64| Some(Spanned::new(0..0, Secs(v)));
    let partition_priority = out
        .gpu_type_names()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i < MAX_PARTITIONS && p.partition_priority[*i] != d.partition_priority[*i])
        .map(|(i, n)| (n, Spanned::new(0..0, p.partition_priority[i])))
        .collect();
    let q = p.qos_priority;
    Some(RawSlurm {
        weight_age: at(p.weight_age),
        weight_fairshare: at(p.weight_fairshare),
        weight_job_size: at(p.weight_job_size),
        weight_partition: at(p.weight_partition),
        weight_qos: at(p.weight_qos),
        weight_tres_gpu: at(p.weight_tres_gpu),
        calc_period: secs(p.calc_period),
        max_age: secs(p.max_age),
        decay_half_life: secs(p.decay_half_life),
        favor_small: Some(p.favor_small),
        qos_priority: Some(RawQos { low: at(q[0]), normal: at(q[1]), high: at(q[2]), urgent: at(q[3]) }),
        qos_priority_max: p.qos_priority_max.and_then(at),
        partition_priority,
        bf_interval: secs(p.bf_interval),
        bf_window: secs(p.bf_window),
        bf_max_job_test: at(p.bf_max_job_test),
        default_time_limit: p.default_time_limit.and_then(secs),
        preempt: Some(Spanned::new(0..0, p.preempt.as_str().to_string())),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse_config;

    const BASE: &str = "[cluster]\nname = \"c\"\n[[cluster.pools]]\nname = \"h\"\ngpu = \"H100\"\nnodes = 2\ngpus_per_node = 8\n\
                        [[cluster.pools]]\nname = \"a\"\ngpu = \"A100\"\nnodes = 1\ngpus_per_node = 8\n\
                        [[accounts]]\npath = \"org/x\"\n";

    /// The five weights.
    fn weights(p: &allot_core::policy::SlurmParams) -> (u32, u32, u32, u32, u32) {
        (p.weight_age, p.weight_fairshare, p.weight_job_size, p.weight_partition, p.weight_qos)
    }

    /// `max_age`, `decay_half_life`, `bf_interval`, `bf_window`, `bf_max_job_test`.
    fn times(p: &allot_core::policy::SlurmParams) -> (u64, u64, u64, u64, u32) {
        (p.max_age, p.decay_half_life, p.bf_interval, p.bf_window, p.bf_max_job_test)
    }

    #[test]
    fn defaults_are_slurms() {
        let cfg = parse_config(BASE, "c.toml").unwrap();
        let p = cfg.contract.slurm;
        assert_eq!(weights(&p), (0, 0, 0, 0, 0));
        assert_eq!(times(&p), (604_800, 604_800, 30, 86_400, 500));
        assert_eq!(p.default_time_limit, None);
        assert!(!p.favor_small);
        assert_eq!(p.preempt, allot_core::policy::SlurmPreempt::Off);
    }

    #[test]
    fn every_knob_is_read() {
        let text = format!(
            "{BASE}[slurm]\nweight_age = 1000\nweight_fairshare = 10000\nweight_job_size = 5\nweight_partition = 7\n\
             weight_qos = 2000\nmax_age = \"14d\"\ndecay_half_life = \"2d\"\nfavor_small = true\n\
             qos_priority = {{ low = 0, normal = 10, urgent = 100 }}\npartition_priority = {{ H100 = 10, A100 = 3 }}\n\
             bf_interval = \"1m\"\nbf_window = \"2d\"\nbf_max_job_test = 100\ndefault_time_limit = \"4h\"\npreempt = \"qos\"\n"
        );
        let cfg = parse_config(&text, "c.toml").unwrap();
        let p = cfg.contract.slurm;
        assert_eq!(weights(&p), (1000, 10_000, 5, 7, 2000));
        assert_eq!(times(&p), (14 * 86_400, 2 * 86_400, 60, 2 * 86_400, 100));
        assert_eq!(p.qos_priority, [0, 10, 0, 100]);
        let (h, a) = (cfg.cluster.gpu_type_by_name("H100").unwrap(), cfg.cluster.gpu_type_by_name("A100").unwrap());
        assert_eq!((p.partition(h), p.partition(a)), (10, 3));
        assert_eq!(p.default_time_limit, Some(4 * 3600));
        assert!(p.favor_small);
        assert_eq!(p.preempt, allot_core::policy::SlurmPreempt::Qos);
        // The ledger's priority decay follows decay_half_life.
        let state = allot_core::State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        assert_eq!(state.ledger.priority_half_life, 2 * 86_400);
    }

    #[test]
    fn bad_knobs_name_their_key_and_line() {
        for (name, body, key, says) in [
            (
                "unknown gpu type",
                "partition_priority = { B200 = 1 }",
                "slurm.partition_priority.B200",
                "unknown gpu type \"B200\"",
            ),
            ("unknown preempt", "preempt = \"suspend\"", "slurm.preempt", "use off or qos"),
            ("zero interval", "bf_interval = 0", "slurm.bf_interval", ""),
            ("zero max age", "max_age = \"0s\"", "slurm.max_age", ""),
            ("zero job test", "bf_max_job_test = 0", "slurm.bf_max_job_test", ""),
            ("unknown label", "qos_priority = { top = 1 }", "slurm.qos_priority", "unknown key"),
            ("unknown knob", "bf_continue = true", "slurm", "unknown key"),
            ("negative weight", "weight_age = -1", "slurm.weight_age", ""),
        ] {
            let text = format!("{BASE}[slurm]\n{body}\n");
            let e = parse_config(&text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{name}: {e}");
            assert!(e.contains(says), "{name}: {e}");
            assert!(e.contains("c.toml:16:"), "{name}: {e}");
        }
    }

    #[test]
    fn a_config_made_in_memory_keeps_its_knobs() {
        use crate::write::{AccountOut, ConfigOut, PoolOut, write_config_toml};
        let pool = |name: &str, gpu: &str| PoolOut {
            cluster: String::new(),
            name: name.into(),
            gpu: gpu.into(),
            nodes: 1,
            gpus_per_node: 8,
            rack_size: 1,
            shared: false,
        };
        let mut contract = allot_core::Contract::default();
        let p = &mut contract.slurm;
        (p.weight_age, p.weight_fairshare, p.weight_qos, p.bf_interval) = (100, 1000, 10, 60);
        p.qos_priority = [0, 1, 5, 9];
        p.default_time_limit = Some(7200);
        p.preempt = allot_core::policy::SlurmPreempt::Qos;
        // Ids: [gpu_types] by name (A100, H100), then the pools' others (L4).
        p.partition_priority[1] = 10;
        p.partition_priority[2] = 4;
        let cfg = ConfigOut {
            comments: Vec::new(),
            cluster_name: "c".into(),
            pools: vec![pool("h", "H100"), pool("a", "A100"), pool("l", "L4")],
            gpu_types: vec![("H100".into(), 1.0), ("A100".into(), 0.5)],
            accounts: vec![AccountOut { path: "org/a".into(), ..Default::default() }],
            contract,
            assumed: Vec::new(),
        };
        let mut out = Vec::new();
        write_config_toml(&mut out, &cfg).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("partition_priority = { H100 = 10, L4 = 4 }\n"), "{text}");
        let parsed = parse_config(&text, "c.toml").unwrap();
        assert_eq!(parsed.contract.slurm, cfg.contract.slurm);
        assert_eq!(crate::config::config_from(&cfg, "mem").unwrap().contract.slurm, cfg.contract.slurm);
    }
}
