//! Hand-computed statements (table-driven): periods of 10 h from 0,
//! carry-over 0.5, `org` (budget 10) with `org/a` (budget 4, raised to 6
//! at 15 h) and `org/b` (no budget); GPU types `a100` (weight 1) and
//! `h100` (weight 2).
//!
//! * `org/a` holds 1 a100 over [0, 3 h) (3 NGH in period 0) and [20 h, 21 h)
//!   (1 NGH in period 2);
//! * `org/b` holds 2 h100 over [8 h, 12 h): 8 NGH in period 0, 8 in
//!   period 1 (an interval spanning a boundary).
//!
//! Carried into `org/a`: period 0 nothing (first use), period 1
//! `min(0.5·6, 6 − 3) = 3` (the budget at the period's end, 6, for both
//! periods), period 2 `min(3, 6 − 0) = 3`; into `org`: period 1
//! `max(0, 10 − 11) = 0`, period 2 `min(5, 10 − 8) = 2`.

use super::*;
use crate::account::AccountSpec;
use crate::ledger::Ledger;

const H: Time = 3600;

fn tree() -> AccountTree {
    let spec = |path: &str, budget: Option<f64>| AccountSpec {
        path: path.into(),
        budget_gpu_hours: budget,
        ..AccountSpec::default()
    };
    AccountTree::build(&[spec("org", Some(10.0)), spec("org/a", Some(4.0)), spec("org/b", None)]).unwrap()
}

fn types() -> Vec<GpuType> {
    vec![GpuType { name: "a100".into(), weight: 1.0 }, GpuType { name: "h100".into(), weight: 2.0 }]
}

fn periods() -> Periods {
    Periods { length: 10 * H, calendar: Calendar::Fixed { anchor: 0 } }
}

fn id(t: &AccountTree, p: &str) -> AccountId {
    t.get(p).unwrap()
}

fn usage(t: &AccountTree) -> Vec<UsageInterval> {
    let u = |a, start, end, gpus, gpu| UsageInterval { account: id(t, a), start, end, gpus, gpu: GpuTypeId(gpu) };
    vec![u("org/a", 0, 3 * H, 1, 0), u("org/b", 8 * H, 12 * H, 2, 1), u("org/a", 20 * H, 21 * H, 1, 0)]
}

fn workloads(t: &AccountTree) -> Vec<WorkloadTimes> {
    let w = |a, submit, first_start, end, gpus, weight| WorkloadTimes {
        account: id(t, a),
        submit,
        first_start,
        end,
        gpus,
        weight,
    };
    vec![
        w("org/a", 0, Some(0), Some(3 * H), 1, 1.0),
        w("org/b", 7 * H, Some(8 * H), Some(12 * H), 2, 2.0),
        w("org/a", 9 * H, None, None, 1, 1.0),
        w("org/a", 19 * H, Some(20 * H), Some(21 * H), 1, 1.0),
    ]
}

fn compute(ks: RangeInclusive<i64>) -> Statement {
    let t = tree();
    let changes = [BudgetChange { t: 15 * H, account: id(&t, "org/a"), budget_gpu_hours: Some(6.0) }];
    let (types, usage, workloads) = (types(), usage(&t), workloads(&t));
    let input = StatementInput {
        tree: &t,
        periods: periods(),
        carry_over: 0.5,
        gpu_types: &types,
        budget_changes: &changes,
        usage: &usage,
        workloads: &workloads,
        now: 25 * H,
    };
    statement(&input, ks)
}

fn line<'s>(s: &'s Statement, k: usize, account: &str) -> &'s AccountLine {
    s.periods[k].accounts.iter().find(|a| a.account == account).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// (case, period, account, budget, carried, used, over, attainment)
type Case = (&'static str, usize, &'static str, Option<f64>, f64, f64, f64, Option<f64>);

#[test]
fn hand_computed_periods() {
    let s = compute(0..=2);
    assert_eq!(
        s.periods.iter().map(|p| (p.start, p.end)).collect::<Vec<_>>(),
        [(0, Some(36_000)), (36_000, Some(72_000)), (72_000, Some(108_000))]
    );
    let cases: [Case; 9] = [
        ("first period: nothing carried", 0, "org/a", Some(4.0), 0.0, 3.0, 0.0, Some(0.75)),
        ("parent over its budget", 0, "org", Some(10.0), 0.0, 11.0, 1.0, Some(1.0)),
        ("no budget: no carry, no attainment", 0, "org/b", None, 0.0, 8.0, 0.0, None),
        ("raised budget carries its unused part", 1, "org/a", Some(6.0), 3.0, 0.0, 0.0, Some(0.0)),
        ("overspent period carries nothing", 1, "org", Some(10.0), 0.0, 8.0, 0.0, Some(0.8)),
        ("second half of the spanning interval", 1, "org/b", None, 0.0, 8.0, 0.0, None),
        ("carry capped at the fraction", 2, "org/a", Some(6.0), 3.0, 1.0, 0.0, Some(1.0 / 6.0)),
        ("parent carries what was left", 2, "org", Some(10.0), 2.0, 1.0, 0.0, Some(1.0 / 6.0)),
        ("idle account", 2, "org/b", None, 0.0, 0.0, 0.0, None),
    ];
    for (case, k, account, budget, carried, used, over, attainment) in cases {
        let l = line(&s, k, account);
        assert_eq!(l.budget_gpu_hours, budget, "{case}: budget");
        assert!(close(l.carried_gpu_hours, carried), "{case}: carried {}", l.carried_gpu_hours);
        assert!(close(l.used_gpu_hours, used), "{case}: used {}", l.used_gpu_hours);
        assert!(close(l.over_budget_gpu_hours, over), "{case}: over {}", l.over_budget_gpu_hours);
        match (l.attainment, attainment) {
            (Some(x), Some(y)) => assert!(close(x, y), "{case}: attainment {x}"),
            (x, y) => assert_eq!(x, y, "{case}: attainment"),
        }
    }
}

#[test]
fn raw_hours_by_type_and_demand() {
    let s = compute(0..=2);
    // (period, account, a100 h, h100 h, demand NGH)
    for (k, account, a100, h100, demand) in [
        (0, "org/b", 0.0, 4.0, 12.0),
        (1, "org/b", 0.0, 4.0, 8.0),
        (0, "org/a", 3.0, 0.0, 4.0),
        (1, "org/a", 0.0, 0.0, 11.0),
        (2, "org/a", 1.0, 0.0, 6.0),
        (0, "org", 3.0, 4.0, 16.0),
    ] {
        let l = line(&s, k, account);
        assert!(close(l.raw_gpu_hours["a100"], a100), "{k} {account} a100");
        assert!(close(l.raw_gpu_hours["h100"], h100), "{k} {account} h100");
        assert!(close(l.demand_gpu_hours, demand), "{k} {account} demand {}", l.demand_gpu_hours);
    }
}

#[test]
fn queue_times_by_first_start() {
    let s = compute(0..=2);
    // (period, account, started, p50, p95, never started)
    for (k, account, started, p50, p95, never) in [
        (0, "org", 2, Some(0), Some(3600), 1),
        (0, "org/a", 1, Some(0), Some(0), 1),
        (0, "org/b", 1, Some(3600), Some(3600), 0),
        (1, "org/a", 0, None, None, 0),
        (2, "org/a", 1, Some(3600), Some(3600), 0),
    ] {
        let l = line(&s, k, account);
        assert_eq!(
            (l.started, l.queue_p50_s, l.queue_p95_s, l.never_started),
            (started, p50, p95, never),
            "{k} {account}"
        );
    }
}

#[test]
fn one_period_alone_equals_its_row_in_a_range() {
    let all = compute(0..=2);
    for k in 0..=2 {
        let one = compute(k..=k);
        assert_eq!(one.periods[0], all.periods[k as usize], "period {k}");
    }
}

#[test]
fn carry_and_use_agree_with_the_ledger() {
    // Without budget changes (the ledger knows only the budget of now),
    // charge the same intervals and compare the current period at 25 h.
    let t = {
        let spec =
            |path: &str, budget| AccountSpec { path: path.into(), budget_gpu_hours: budget, ..AccountSpec::default() };
        AccountTree::build(&[spec("org", Some(10.0)), spec("org/a", Some(6.0)), spec("org/b", None)]).unwrap()
    };
    let (types, usage) = (types(), usage(&t));
    let mut ledger = Ledger::new(&t, periods(), 0.5, 0);
    let mut steps: Vec<(Time, i64, &UsageInterval)> =
        usage.iter().flat_map(|u| [(u.start, i64::from(u.gpus), u), (u.end, -i64::from(u.gpus), u)]).collect();
    steps.sort_by_key(|(time, d, _)| (*time, *d));
    for (time, d, u) in steps {
        ledger.change(&t, u.account, time, d, types[u.gpu.0 as usize].weight);
    }
    let input = StatementInput {
        tree: &t,
        periods: periods(),
        carry_over: 0.5,
        gpu_types: &types,
        budget_changes: &[],
        usage: &usage,
        workloads: &[],
        now: 25 * H,
    };
    let s = statement(&input, 2..=2);
    for a in t.ids() {
        let p = ledger.projection(&t, a, 25 * H);
        let l = &s.periods[0].accounts[a.0 as usize - 1];
        assert_eq!(l.account, t.account(a).path);
        assert!(close(l.used_gpu_hours, p.used_ngh), "{}: used", l.account);
        assert!(
            close(l.carried_gpu_hours, p.carried_ngh),
            "{}: carried {} vs {}",
            l.account,
            l.carried_gpu_hours,
            p.carried_ngh
        );
    }
}

#[test]
fn running_work_counts_up_to_now() {
    let t = tree();
    let types = types();
    let usage = [UsageInterval { account: id(&t, "org/a"), start: 9 * H, end: Time::MAX, gpus: 1, gpu: GpuTypeId(0) }];
    let input = StatementInput {
        tree: &t,
        periods: periods(),
        carry_over: 0.0,
        gpu_types: &types,
        budget_changes: &[],
        usage: &usage,
        workloads: &[],
        now: 12 * H,
    };
    let s = statement(&input, 0..=1);
    assert!(close(line(&s, 0, "org/a").used_gpu_hours, 1.0));
    assert!(close(line(&s, 1, "org/a").used_gpu_hours, 2.0));
}

#[test]
fn periods_by_name_and_start_date() {
    let months = Periods { length: 0, calendar: Calendar::Months { utc_offset: 7200 } };
    let now = crate::calendar::parse_instant("2026-11-15T12:00:00Z").unwrap();
    let nov = months.index(now);
    assert_eq!(period_index(&months, now, "current"), Ok(nov));
    assert_eq!(period_index(&months, now, "previous"), Ok(nov - 1));
    assert_eq!(period_index(&months, now, "2026-11-01"), Ok(nov), "a local date in the calendar's offset");
    assert_eq!(period_index(&months, now, "2026-10-01"), Ok(nov - 1));
    let err = period_index(&months, now, "2026-11-02").unwrap_err();
    assert!(err.contains("no budget period starts on 2026-11-02") && err.contains("2026-10-31T22:00:00Z"), "{err}");
    assert!(period_index(&months, now, "last").unwrap_err().contains("invalid period \"last\""));
    let weeks = Periods { length: 7 * 86_400, calendar: Calendar::Fixed { anchor: 1_767_571_200 } };
    assert_eq!(period_index(&weeks, now, "2026-01-12"), Ok(1));
    assert!(period_index(&weeks, now, "2026-01-13").is_err());
    let single = Periods { length: 0, calendar: Calendar::Fixed { anchor: 0 } };
    assert!(period_index(&single, now, "previous").is_err());
}

#[test]
fn csv_and_markdown() {
    let s = compute(0..=0);
    let csv = super::super::to_csv(&s);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(lines[0].ends_with("never_started,a100_gpu_hours,h100_gpu_hours"), "{}", lines[0]);
    assert_eq!(
        lines[1],
        "1970-01-01T00:00:00Z,1970-01-01T10:00:00Z,org,10,0.000,11.000,1.000,16.000,1.000,2,0,3600,1,3.000,4.000"
    );
    let md = super::super::to_markdown(&s);
    assert!(md.contains("| org/a | 4 | 0 | 3 | 0 | 75 % | a100 3 | 1 | 0 s / 0 s | 1 |"), "{md}");
}
