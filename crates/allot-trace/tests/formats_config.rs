//! Config file: defaults, partial tables and errors that name file, line and key.

use std::path::Path;

use allot_core::calendar::Calendar;
use allot_core::{Contract, IdleReclaim, PerClass, PoolId};
use allot_trace::config::{load_config, parse_config};

/// The smallest valid config: one pool, one account.
const MINIMAL: &str = r#"[cluster]
[[cluster.pools]]
name = "h100"
gpu = "H100"
nodes = 4
gpus_per_node = 8

[[accounts]]
path = "org/team/proj"
"#;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats").join(name)
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let cfg = parse_config(MINIMAL, "min.toml").unwrap();
    assert_eq!(cfg.cluster.name, "cluster");
    assert_eq!(cfg.contract, Contract::default());
    let pool = &cfg.cluster.pools[0];
    assert_eq!((pool.rack_size, pool.shared), (4, false), "rack_size defaults to the node count, shared to false");
    assert_eq!(cfg.cluster.racks, 1);
    assert_eq!(cfg.cluster.gpu_types.len(), 1);
    assert_eq!((cfg.cluster.gpu_types[0].name.as_str(), cfg.cluster.gpu_types[0].weight), ("H100", 1.0));
    assert_eq!(cfg.cluster.nodes[3].name, "h100-3");
    for path in ["org", "org/team", "org/team/proj"] {
        assert!(cfg.accounts.get(path).is_some(), "account {path} declared or implied");
    }
    assert_eq!((cfg.path.as_str(), cfg.text.as_str()), ("min.toml", MINIMAL));
}

#[test]
fn fixture_loads_with_weights_racks_and_legacy_pools() {
    let cfg = load_config(&fixture("small.toml")).unwrap();
    let c = &cfg.cluster;
    assert_eq!(c.name, "small");
    assert_eq!(c.total_gpus(), 48);
    assert_eq!(c.racks, 2 + 1, "h100: 4 nodes in racks of 2; b200: one rack");
    let h100 = c.gpu_type_by_name("H100").unwrap();
    let b200 = c.gpu_type_by_name("B200").unwrap();
    assert_eq!((c.weight(h100), c.weight(b200)), (1.0, 2.0), "unlisted H100 gets weight 1");
    let b = cfg.accounts.account(cfg.accounts.get("org/b").unwrap());
    assert_eq!(b.legacy_pools, Some(vec![PoolId(1)]));
    let p1 = cfg.accounts.account(cfg.accounts.get("org/a/p1").unwrap());
    assert_eq!(p1.budget_gpu_hours, Some(100.0));
}

#[test]
fn contract_keys_override_defaults_one_by_one() {
    let d = Contract::default();
    let cases: [(&str, &str, Contract); 20] = [
        (
            "alert thresholds",
            "budget_alerts = [1.0, 0.5, 0.9]",
            Contract { budget_alerts: allot_core::alerts::Thresholds::new(&[0.5, 0.9, 1.0]).unwrap(), ..d },
        ),
        (
            "weeks from an anchor",
            "budget_period = \"7d\"\nbudget_period_start = \"2026-01-05T00:00:00Z\"",
            Contract { budget_calendar: Calendar::Fixed { anchor: 1_767_571_200 }, ..d },
        ),
        (
            "months in UTC",
            "budget_period = \"month\"",
            Contract { budget_period: 30 * 86_400, budget_calendar: Calendar::Months { utc_offset: 0 }, ..d },
        ),
        (
            "months at an offset",
            "budget_period = \"month\"\nbudget_timezone = \"-05:00\"",
            Contract { budget_period: 30 * 86_400, budget_calendar: Calendar::Months { utc_offset: -18_000 }, ..d },
        ),
        ("carry-over", "budget_carry_over = 0.25", Contract { budget_carry_over: 0.25, ..d }),
        ("grace only", "grace = \"30s\"", Contract { grace: 30, ..d }),
        (
            "time limits per class",
            "time_limit = { interactive = \"8h\", batch = \"1-00:00:00\" }\nmax_time_limit = { batch = \"7d\" }",
            Contract {
                time_limit: PerClass { batch: Some(86_400), interactive: Some(28_800), service: None },
                max_time_limit: PerClass { batch: Some(604_800), interactive: None, service: None },
                ..d
            },
        ),
        ("integer seconds", "scheduling_interval = 5", Contract { scheduling_interval: 5, ..d }),
        ("compound duration", "budget_period = \"1d12h\"", Contract { budget_period: 129_600, ..d }),
        (
            "min_slice batch only",
            "min_slice = { batch = \"1h\" }",
            Contract { min_slice: PerClass { batch: 3600, ..d.min_slice }, ..d },
        ),
        (
            "min_slice interactive and service",
            "min_slice = { interactive = \"5m\", service = 60 }",
            Contract { min_slice: PerClass { batch: d.min_slice.batch, interactive: 300, service: 60 }, ..d },
        ),
        (
            "interactive lane",
            "interactive_max_gpus = 2\ninteractive_max_duration = \"1h\"",
            Contract { interactive_max_gpus: 2, interactive_max_duration: 3600, ..d },
        ),
        ("impact weighting on (IMP-3)", "impact_weighting = \"on\"", Contract { impact_weighting: true, ..d }),
        ("impact weighting off", "impact_weighting = \"off\"", Contract { impact_weighting: false, ..d }),
        ("kept claims on (CON-10)", "keep_claims = \"on\"", Contract { keep_claims: true, ..d }),
        ("kept claims off", "keep_claims = \"off\"", Contract { keep_claims: false, ..d }),
        ("checkpoint wait (CON-12)", "checkpoint_wait = \"30m\"", Contract { checkpoint_wait: 1800, ..d }),
        ("checkpoint wait off", "checkpoint_wait = 0", Contract { checkpoint_wait: 0, ..d }),
        (
            "idle reclaim on for batch, off for interactive (CON-9)",
            "idle_threshold = { batch = 0.02, interactive = 0 }\nidle_after = { batch = \"4h\" }",
            Contract {
                idle_reclaim: PerClass {
                    batch: Some(IdleReclaim { threshold: 0.02, after: 14_400, warning: 1800 }),
                    interactive: None,
                    service: None,
                },
                ..d
            },
        ),
        (
            "idle times of the interactive default",
            "idle_after = { interactive = \"30m\" }\nidle_warning = { interactive = \"5m\" }",
            Contract {
                idle_reclaim: PerClass {
                    interactive: Some(IdleReclaim { threshold: 0.05, after: 1800, warning: 300 }),
                    ..d.idle_reclaim
                },
                ..d
            },
        ),
    ];
    for (name, body, want) in cases {
        let text = format!("{MINIMAL}\n[contract]\n{body}\n");
        let cfg = parse_config(&text, "c.toml").unwrap_or_else(|e| panic!("case {name}: {e}"));
        assert_eq!(cfg.contract, want, "case {name}");
    }
}

#[test]
fn optional_keys_are_read() {
    let text = r#"[cluster]
name = "x"
[[cluster.pools]]
name = "p.1"
gpu = "B200"
nodes = 6
gpus_per_node = 4
rack_size = 4
shared = true
[gpu_types]
B200 = 2.5
H100 = 1.0
[[accounts]]
path = "org/serve"
share = 2
impact = 3
max_service_gpus = 16
legacy_pools = []
"#;
    let cfg = parse_config(text, "x.toml").unwrap();
    let p = &cfg.cluster.pools[0];
    assert_eq!((p.rack_size, p.shared), (4, true));
    assert_eq!(cfg.cluster.racks, 2);
    assert_eq!(cfg.cluster.weight(p.gpu), 2.5);
    let a = cfg.accounts.account(cfg.accounts.get("org/serve").unwrap());
    assert_eq!((a.share, a.impact, a.max_service_gpus), (2.0, 3.0, Some(16)));
    assert_eq!(a.legacy_pools, Some(vec![]));
}

#[test]
fn pool_placement_is_pack_unless_spread() {
    use allot_core::cluster::PoolPlacement;
    let placement = |line: &str| {
        let text = MINIMAL.replace("gpus_per_node = 8\n", &format!("gpus_per_node = 8\n{line}\n"));
        parse_config(&text, "p.toml").map(|c| c.cluster.pools[0].placement)
    };
    assert_eq!(placement("").unwrap(), PoolPlacement::Pack, "the default");
    assert_eq!(placement("placement = \"pack\"").unwrap(), PoolPlacement::Pack);
    assert_eq!(placement("placement = \"spread\"").unwrap(), PoolPlacement::Spread);
    let err = placement("placement = \"random\"").unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(7), Some("cluster.pools[0].placement")), "{err}");
    assert!(err.message.contains("unknown placement \"random\" (use pack or spread)"), "{err}");
}

/// Appends `extra` to [`MINIMAL`], or replaces the pool when `extra` starts with `!`.
fn config_with(extra: &str) -> String {
    match extra.strip_prefix('!') {
        Some(whole) => whole.to_string(),
        None => format!("{MINIMAL}{extra}"),
    }
}

#[test]
fn bad_configs_name_file_line_and_key() {
    // (case, text, line, key, message fragment); MINIMAL has 9 lines.
    let cases: &[(&str, &str, Option<u64>, &str, &str)] = &[
        ("unknown contract key", "[contract]\nbogus = 1\n", Some(11), "contract.bogus", "unknown key `bogus`"),
        ("unknown top-level table", "[extra]\nx = 1\n", Some(10), "extra", "unknown key `extra`"),
        (
            "unknown min_slice class",
            "[contract]\nmin_slice = { batch = \"1h\", gpu = \"1h\" }\n",
            Some(11),
            "contract.min_slice.gpu",
            "unknown key `gpu`",
        ),
        (
            "bad duration",
            "[contract]\ngrace = \"10q\"\n",
            Some(11),
            "contract.grace",
            "invalid duration \"10q\" (use e.g. 30s, 10m, 2h, 1.5h, 7d, HH:MM:SS or D-HH:MM:SS)",
        ),
        ("negative duration", "[contract]\ngrace = -1\n", Some(11), "contract.grace", "must not be negative"),
        (
            "time limit not a duration",
            "[contract]\ntime_limit = { interactive = \"soon\" }\n",
            Some(11),
            "contract.time_limit.interactive",
            "invalid duration \"soon\"",
        ),
        (
            "zero time limit",
            "[contract]\nmax_time_limit = { batch = 0 }\n",
            Some(11),
            "contract.max_time_limit.batch",
            "must be at least 1, got 0",
        ),
        (
            "default time limit above the maximum",
            "[contract]\nmax_time_limit = { batch = \"2h\" }\ntime_limit = { batch = \"8h\" }\n",
            Some(12),
            "contract.time_limit.batch",
            "the default time limit 28800 s is above the maximum 7200 s (contract.max_time_limit.batch)",
        ),
        (
            "negative idle threshold",
            "[contract]\nidle_threshold = { interactive = -0.1 }\n",
            Some(11),
            "contract.idle_threshold.interactive",
            "a utilisation from 0 to 1 (0 turns idle reclaim off), got -0.1",
        ),
        (
            "idle time for a class with reclaim off",
            "[contract]\nidle_after = { batch = \"1h\" }\n",
            None,
            "contract.idle_after.batch",
            "idle reclaim is off for batch work: give contract.idle_threshold.batch first",
        ),
        (
            "zero budget period",
            "[contract]\nbudget_period = \"0s\"\n",
            Some(11),
            "contract.budget_period",
            "must be at least 1, got 0",
        ),
        (
            "impact_weighting neither off nor on",
            "[contract]\ngrace = \"1m\"\nimpact_weighting = \"maybe\"\n",
            Some(12),
            "contract.impact_weighting",
            "unknown impact_weighting \"maybe\" (use off or on)",
        ),
        (
            "keep_claims neither off nor on",
            "[contract]\nkeep_claims = \"yes\"\n",
            Some(11),
            "contract.keep_claims",
            "unknown keep_claims \"yes\" (use off or on)",
        ),
        (
            "checkpoint_wait not a duration",
            "[contract]\ncheckpoint_wait = \"soon\"\n",
            Some(11),
            "contract.checkpoint_wait",
            "invalid duration \"soon\"",
        ),
        (
            "impact_weighting not a string",
            "[contract]\nimpact_weighting = true\n",
            Some(11),
            "contract.impact_weighting",
            "expected a string",
        ),
        (
            "invalid period start",
            "[contract]\nbudget_period_start = \"2026-02-30T00:00:00Z\"\n",
            Some(11),
            "contract.budget_period_start",
            "invalid instant \"2026-02-30T00:00:00Z\": day out of range for the month",
        ),
        (
            "period start with months",
            "[contract]\nbudget_period = \"month\"\nbudget_period_start = \"2026-01-01T00:00:00Z\"\n",
            Some(12),
            "contract.budget_period_start",
            "applies to fixed periods",
        ),
        (
            "unknown time zone",
            "[contract]\nbudget_period = \"month\"\nbudget_timezone = \"Europe/Paris\"\n",
            Some(12),
            "contract.budget_timezone",
            "invalid UTC offset \"Europe/Paris\"",
        ),
        (
            "time zone with fixed periods",
            "[contract]\nbudget_timezone = \"UTC\"\n",
            Some(11),
            "contract.budget_timezone",
            "applies to budget_period = \"month\"",
        ),
        (
            "carry-over above 1",
            "[contract]\nbudget_carry_over = 1.5\n",
            Some(11),
            "contract.budget_carry_over",
            "budget_carry_over must be a number between 0 and 1, got 1.5",
        ),
        (
            "zero alert threshold",
            "[contract]\nbudget_alerts = [0.8, 0]\n",
            Some(11),
            "contract.budget_alerts",
            "each threshold must be a fraction of the budget above 0 and at most 10, got 0",
        ),
        (
            "negative carry-over",
            "[contract]\nbudget_carry_over = -0.1\n",
            Some(11),
            "contract.budget_carry_over",
            "between 0 and 1",
        ),
        (
            "zero scheduling interval",
            "[contract]\nscheduling_interval = 0\n",
            Some(11),
            "contract.scheduling_interval",
            "must be at least 1, got 0",
        ),
        (
            "legacy pool unknown",
            "\n[[accounts]]\npath = \"org/b\"\nlegacy_pools = [\"h100\", \"a100\"]\n",
            Some(13),
            "accounts[1].legacy_pools",
            "unknown pool \"a100\"",
        ),
        (
            "duplicate account",
            "\n[[accounts]]\npath = \"org/team/proj\"\n",
            Some(12),
            "accounts[1].path",
            "declared twice (first on line 9)",
        ),
        (
            "bad account path",
            "\n[[accounts]]\npath = \"org//x\"\n",
            Some(12),
            "accounts[1].path",
            "invalid account path",
        ),
        (
            "negative share",
            "\n[[accounts]]\npath = \"b\"\nshare = -2\n",
            Some(13),
            "accounts[1].share",
            "share must be",
        ),
        ("zero gpu weight", "\n[gpu_types]\nH100 = 0\n", Some(12), "gpu_types.H100", "weight must be"),
        (
            "pool name with a dash",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"h100-a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 8\n\
             [[accounts]]\npath = \"o\"\n",
            Some(4),
            "cluster.pools[0].name",
            "'-' is not allowed because nodes are named <pool>-<index>",
        ),
        (
            "duplicate pool",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 8\n\
             [[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 8\n[[accounts]]\npath = \"o\"\n",
            Some(9),
            "cluster.pools[1].name",
            "declared twice",
        ),
        (
            "zero nodes",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 0\ngpus_per_node = 8\n[[accounts]]\npath = \"o\"\n",
            Some(6),
            "cluster.pools[0].nodes",
            "must be at least 1, got 0",
        ),
        (
            "too many gpus per node",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 65\n[[accounts]]\npath = \"o\"\n",
            Some(7),
            "cluster.pools[0].gpus_per_node",
            "between 1 and 64",
        ),
        (
            "zero rack size",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 8\nrack_size = 0\n\
             [[accounts]]\npath = \"o\"\n",
            Some(8),
            "cluster.pools[0].rack_size",
            "at least 1",
        ),
        (
            "negative node count",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = -3\ngpus_per_node = 8\n[[accounts]]\npath = \"o\"\n",
            Some(6),
            "cluster.pools[0].nodes",
            "-3",
        ),
        (
            "missing pool key",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\nnodes = 1\ngpus_per_node = 8\n[[accounts]]\npath = \"o\"\n",
            Some(3),
            "cluster.pools[0].gpu",
            "missing key `gpu`",
        ),
        (
            "no accounts",
            "!\n[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H\"\nnodes = 1\ngpus_per_node = 8\n",
            None,
            "accounts",
            "missing key `accounts`",
        ),
        (
            "no pools",
            "!\n[cluster]\npools = []\n[[accounts]]\npath = \"o\"\n",
            None,
            "cluster.pools",
            "at least one pool",
        ),
    ];
    for &(name, extra, line, key, fragment) in cases {
        let err =
            parse_config(&config_with(extra), "cluster.toml").err().unwrap_or_else(|| panic!("case {name}: accepted"));
        assert_eq!(err.file, "cluster.toml", "case {name}");
        assert_eq!(err.line, line, "case {name}: {err}");
        assert_eq!(err.field.as_deref(), Some(key), "case {name}: {err}");
        let shown = err.to_string();
        let prefix = match line {
            Some(l) => format!("cluster.toml:{l}: key `{key}`: "),
            None => format!("cluster.toml: key `{key}`: "),
        };
        assert!(shown.starts_with(&prefix), "case {name}: {shown}");
        assert!(shown.contains(fragment), "case {name}: {shown}");
    }
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let err = load_config(Path::new("/nonexistent/cluster.toml")).unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/cluster.toml: cannot read the file");
    assert!(std::error::Error::source(&err).is_some());
}
