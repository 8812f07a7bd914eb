//! Budget periods as a calendar (BUD-4), carry-over (BUD-5) and the
//! projection of an account's budget, against hand-computed numbers.

mod allot_support;

use allot_core::calendar::{Calendar, Periods, days_from_civil, parse_instant};
use allot_core::policy::AllotPolicy;
use allot_core::{AccountSpec, AccountTree, Ledger, Policy, Time};
use allot_support::{charge, sub};
use allot_testkit::StateBuilder;

const H: Time = 3600;

fn tree(budget: f64) -> AccountTree {
    AccountTree::build(&[AccountSpec { path: "org/a".into(), budget_gpu_hours: Some(budget), ..Default::default() }])
        .unwrap()
}

/// Periods of 10 h from instant 0.
fn ten_hours() -> Periods {
    Periods { length: 10 * H, calendar: Calendar::Fixed { anchor: 0 } }
}

#[test]
fn carry_over_across_period_boundaries() {
    struct Case {
        name: &'static str,
        carry_over: f64,
        budget: f64,
        /// (start, end) in hours of 1-GPU holds.
        holds: &'static [(Time, Time)],
        /// The instant read, in hours.
        at: Time,
        /// NGH carried into the period containing `at`.
        carried: f64,
    }
    let cases = [
        Case { name: "none by default", carry_over: 0.0, budget: 10.0, holds: &[(0, 2)], at: 15, carried: 0.0 },
        Case { name: "capped by the fraction", carry_over: 0.5, budget: 10.0, holds: &[(0, 2)], at: 15, carried: 5.0 },
        Case { name: "what was left", carry_over: 0.5, budget: 10.0, holds: &[(0, 7)], at: 15, carried: 3.0 },
        Case { name: "nothing once over", carry_over: 0.5, budget: 5.0, holds: &[(0, 7)], at: 15, carried: 0.0 },
        Case { name: "all of an idle period", carry_over: 1.0, budget: 10.0, holds: &[(0, 0)], at: 15, carried: 10.0 },
        Case {
            name: "from an idle period after one",
            carry_over: 1.0,
            budget: 10.0,
            holds: &[(0, 9)],
            at: 25,
            carried: 10.0,
        },
        Case {
            name: "a hold across the boundary",
            carry_over: 0.25,
            budget: 20.0,
            holds: &[(2, 14)],
            at: 15,
            carried: 5.0,
        },
        Case {
            name: "a hold over a whole period",
            carry_over: 1.0,
            budget: 20.0,
            holds: &[(2, 25)],
            at: 25,
            carried: 10.0,
        },
        Case {
            name: "not into the ledger's first period",
            carry_over: 1.0,
            budget: 10.0,
            holds: &[(12, 13)],
            at: 15,
            carried: 0.0,
        },
    ];
    for c in &cases {
        let t = tree(c.budget);
        let a = t.get("org/a").unwrap();
        let mut l = Ledger::new(&t, ten_hours(), c.carry_over, 7 * 24 * H);
        let mut lazy = l.clone();
        for &(s, e) in c.holds {
            for l in [&mut l, &mut lazy] {
                l.change(&t, a, s * H, 1, 1.0);
            }
            for l in [&mut l, &mut lazy] {
                l.change(&t, a, e * H, -1, 1.0);
            }
        }
        let now = c.at * H;
        let p = l.projection(&t, a, now);
        assert!((p.carried_ngh - c.carried).abs() < 1e-9, "{}: carried {} want {}", c.name, p.carried_ngh, c.carried);
        // Materialising at a later instant of the same period changes nothing.
        l.change(&t, a, now, 1, 1.0);
        l.change(&t, a, now, -1, 1.0);
        assert_eq!(
            l.carry_ngs(a, c.budget * 3600.0, now + 1),
            lazy.carry_ngs(a, c.budget * 3600.0, now + 1),
            "{}",
            c.name
        );
    }
}

#[test]
fn calendar_months_in_utc_and_fixed_offsets() {
    let utc = Periods { length: 0, calendar: Calendar::Months { utc_offset: 0 } };
    let at = |s: &str| parse_instant(s).unwrap();
    let cases = [
        ("mid-January", "2026-01-17T08:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
        ("last second of January", "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
        ("first second of February", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
        ("leap February", "2024-02-29T12:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"),
        ("December into the new year", "2025-12-31T23:00:00Z", "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"),
    ];
    for (name, t, start, end) in cases {
        assert_eq!(utc.bounds(at(t)), (at(start), at(end)), "{name}");
    }
    let leap = utc.bounds(at("2024-02-10T00:00:00Z"));
    assert_eq!(leap.1 - leap.0, 29 * 24 * H, "February 2024 has 29 days");
    let plain = utc.bounds(at("2025-02-10T00:00:00Z"));
    assert_eq!(plain.1 - plain.0, 28 * 24 * H, "February 2025 has 28");
    assert_eq!(utc.index(at("2026-02-01T00:00:00Z")), utc.index(at("2026-01-31T23:59:59Z")) + 1);
    // At +02:00 the month starts at 22:00 UTC the day before.
    let east = Periods { length: 0, calendar: Calendar::Months { utc_offset: 7200 } };
    assert_eq!(east.bounds(at("2026-01-31T22:30:00Z")).0, at("2026-01-31T22:00:00Z"));
    assert_eq!(east.bounds(at("2026-01-31T21:30:00Z")).0, at("2025-12-31T22:00:00Z"));
    assert_eq!(days_from_civil(2026, 1, 5) * 86_400, at("2026-01-05T00:00:00Z") as i64);
}

#[test]
fn fixed_periods_start_at_the_anchor_both_ways() {
    let at = |s: &str| parse_instant(s).unwrap();
    let weeks = Periods { length: 7 * 24 * H, calendar: Calendar::Fixed { anchor: at("2026-01-05T00:00:00Z") } };
    assert_eq!(weeks.bounds(at("2026-01-05T00:00:00Z")), (at("2026-01-05T00:00:00Z"), at("2026-01-12T00:00:00Z")));
    assert_eq!(weeks.bounds(at("2026-01-04T23:59:59Z")), (at("2025-12-29T00:00:00Z"), at("2026-01-05T00:00:00Z")));
    assert_eq!(weeks.bounds(at("2026-01-20T10:00:00Z")).0, at("2026-01-19T00:00:00Z"));
}

#[test]
fn projection_against_a_hand_computed_burn() {
    let t = tree(10.0);
    let a = t.get("org/a").unwrap();
    let mut l = Ledger::new(&t, ten_hours(), 0.0, 7 * 24 * H);
    // One GPU of weight 2 from t = 0: 2 NGH per hour.
    l.change(&t, a, 0, 1, 2.0);
    let p = l.projection(&t, a, 2 * H);
    assert!((p.used_ngh - 4.0).abs() < 1e-9);
    assert!((p.burn_ngh_per_hour - 2.0).abs() < 1e-9);
    assert_eq!(p.remaining_ngh, Some(6.0));
    assert_eq!(p.exhaustion, Some(5 * H), "6 NGH left at 2 NGH/h: 3 h after 2 h");
    assert_eq!((p.period_start, p.period_end), (0, 10 * H));
    assert_eq!(p.used_fraction(), Some(0.4));
    // Released at 4 h: the period's average falls to 1 NGH/h at 8 h, 2 NGH left.
    l.change(&t, a, 4 * H, -1, 2.0);
    let p = l.projection(&t, a, 8 * H);
    assert_eq!(p.exhaustion, Some(10 * H));
    // Over budget: no exhaustion ahead, remaining negative.
    l.change(&t, a, 8 * H, 1, 2.0);
    let p = l.projection(&t, a, 9 * H + 1800);
    assert!(p.remaining_ngh.unwrap() < 0.0);
    assert_eq!(p.exhaustion, None);
    // No budget: use and rate, nothing to run out of.
    let free = AccountTree::build(&[AccountSpec { path: "org/a".into(), ..Default::default() }]).unwrap();
    let p = Ledger::new(&free, ten_hours(), 0.0, H).projection(&free, a, H);
    assert_eq!((p.budget_ngh, p.remaining_ngh, p.exhaustion), (None, None, None));
}

#[test]
fn the_policy_wakes_at_a_month_boundary_and_counts_carry_over() {
    let jan = parse_instant("2026-01-01T00:00:00Z").unwrap();
    let feb = parse_instant("2026-02-01T00:00:00Z").unwrap();
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .contract(|c| {
            c.budget_calendar = Calendar::Months { utc_offset: 0 };
            c.budget_carry_over = 0.5;
        })
        .build();
    // 4 NGH in January: 6 left, 5 carried into February.
    charge(&mut state, "org/a", 8, jan + H, 4.0);
    sub(&mut state, "w", "org/a", 8, feb - 10 * H);
    let p = AllotPolicy::new();
    assert_eq!(p.next_wakeup(&state, feb - 10 * H), Some(feb));
    // In February 12 NGH are over 10 but under 10 + 5 carried.
    charge(&mut state, "org/a", 8, feb, 12.0);
    assert_eq!(p.over_budget(&state, "org/a", feb + 2 * H), Some(false));
    charge(&mut state, "org/a", 8, feb + 2 * H, 3.0);
    assert_eq!(p.over_budget(&state, "org/a", feb + 3 * H), Some(true));
}

#[test]
fn waiting_in_budget_work_says_when_its_budget_runs_out() {
    // 8 GPUs of org/a from t = 0 against 100 NGH per 24 h: 8 NGH/h, out at 12.5 h.
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(100.0))
        .account("org/b")
        .contract(|c| c.budget_period = 24 * H)
        .build();
    let mut p = AllotPolicy::new();
    sub(&mut state, "run", "org/a", 8, 0);
    allot_support::pass(&mut p, &mut state, 0);
    let t = 5 * H;
    let w = sub(&mut state, "next", "org/a", 8, t);
    allot_support::pass(&mut p, &mut state, t);
    let why = p.explain(&state, w, t);
    assert!(
        why.detail.contains(
            "BUD-1: account org/a runs out of budget at 1970-01-01T12:30:00Z at this period's rate (40/100 NGH used)"
        ),
        "{why}"
    );
    // Work of an account without a budget says nothing of it.
    let other = sub(&mut state, "b", "org/b", 8, t);
    allot_support::pass(&mut p, &mut state, t);
    assert!(!p.explain(&state, other, t).detail.contains("runs out"));
}
