//! `allot` ranking: hierarchical fair share (FS-1), users (FS-2) and budgets
//! first (BUD-1), one pass at a time.

mod allot_support;

use allot_core::policy::AllotPolicy;
use allot_core::{Policy, PolicyKind, Rule};
use allot_support::{charge, charge_as, held, pass, sub, sub_wl};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn kind_parses_and_builds() {
    let k = PolicyKind::parse("allot").unwrap();
    assert_eq!(k.as_str(), "allot");
    assert_eq!(k.build().name(), "allot");
    assert!(PolicyKind::ALL.contains(&k));
}

#[test]
fn one_pass_splits_by_share_among_siblings_with_demand() {
    struct Case {
        name: &'static str,
        /// (account, share, waiting 1-GPU jobs)
        accounts: &'static [(&'static str, f64, u32)],
        want: &'static [(&'static str, u32)],
    }
    let cases = [
        Case {
            name: "3:1 siblings",
            accounts: &[("org/a", 3.0, 16), ("org/b", 1.0, 16)],
            want: &[("org/a", 12), ("org/b", 4)],
        },
        Case {
            name: "hierarchy: X1 : X2 : Y1 = 1 : 1 : 2",
            accounts: &[("x/x1", 1.0, 16), ("x/x2", 1.0, 16), ("y/y1", 1.0, 16)],
            want: &[("x/x1", 4), ("x/x2", 4), ("y/y1", 8)],
        },
        Case {
            name: "a sibling without demand leaves its part to the others",
            accounts: &[("x/x1", 1.0, 16), ("x/x2", 1.0, 0), ("y/y1", 1.0, 16)],
            want: &[("x/x1", 8), ("x/x2", 0), ("y/y1", 8)],
        },
        Case {
            name: "work conserving: a small backlog leaves the rest to the big one",
            accounts: &[("org/a", 3.0, 2), ("org/b", 1.0, 16)],
            want: &[("org/a", 2), ("org/b", 14)],
        },
    ];
    for c in cases {
        let mut b = StateBuilder::new().pool("p", "H100", 2, 8);
        for &(path, share, _) in c.accounts {
            b = b.account_with(path, |a| a.share = Some(share));
        }
        let mut state = b.build();
        for &(path, _, n) in c.accounts {
            for i in 0..n {
                sub(&mut state, &format!("{path}-{i}"), path, 1, 0);
            }
        }
        let mut p = AllotPolicy::new();
        let d = pass(&mut p, &mut state, 0);
        assert!(d.iter().all(|d| d.reason.rule == Rule::FairShare), "{}", c.name);
        for &(path, n) in c.want {
            assert_eq!(held(&state, path), n, "{}: {path}", c.name);
        }
    }
}

#[test]
fn more_users_do_not_raise_a_projects_total() {
    for users in [1, 2, 3] {
        let mut state =
            StateBuilder::new().pool("p", "H100", 2, 8).account("x/x1").account("x/x2").account("y/y1").build();
        for i in 0..16 {
            let u = format!("u{}", i % users);
            sub_wl(&mut state, Wl::new(format!("x1-{i}")).account("x/x1").user(&u).work(100_000));
            sub(&mut state, &format!("x2-{i}"), "x/x2", 1, 0);
            sub(&mut state, &format!("y1-{i}"), "y/y1", 1, 0);
        }
        pass(&mut AllotPolicy::new(), &mut state, 0);
        assert_eq!(held(&state, "x/x1"), 4, "{users} users");
    }
}

#[test]
fn users_of_a_project_alternate_then_fifo() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/p").build();
    // u1 submits 8 jobs before u2 submits its 8: FS-2 still gives each 4.
    for i in 0..8 {
        sub_wl(&mut state, Wl::new(format!("u1-{i}")).account("org/p").user("u1").submit(i).work(100_000));
    }
    for i in 0..8 {
        sub_wl(&mut state, Wl::new(format!("u2-{i}")).account("org/p").user("u2").submit(100 + i).work(100_000));
    }
    let d = pass(&mut AllotPolicy::new(), &mut state, 200);
    let s = allot_support::started(&state, &d);
    assert_eq!(s.iter().filter(|x| x.starts_with("u1")).count(), 4);
    // FIFO within a user: the oldest four of each.
    for i in 0..4 {
        assert!(s.contains(&format!("u1-{i}")) && s.contains(&format!("u2-{i}")), "{s:?}");
    }
    assert!(d.iter().all(|d| d.reason.detail.contains("user")));
}

#[test]
fn decayed_usage_puts_the_heavier_user_behind() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/a").account("org/b").build();
    charge(&mut state, "org/a", 8, 0, 800.0);
    let a = sub(&mut state, "a", "org/a", 8, 400_000);
    let b = sub(&mut state, "b", "org/b", 8, 400_001);
    let p = AllotPolicy::new();
    assert_eq!(p.ranking(&state, 400_010), [b, a]);
    assert!(p.fair_share_value(&state, "org/a", 400_010).unwrap() > 0.0);
    assert_eq!(p.fair_share_value(&state, "org/b", 400_010), Some(0.0));
}

#[test]
fn decayed_usage_puts_the_heavier_user_of_a_project_behind() {
    // FS-2 ranks users by the same measure as FS-1: neither user holds GPUs
    // now, but u1 used 800 GPU-hours in the project recently.
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/p").build();
    charge_as(&mut state, "org/p", "u1", 8, 0, 800.0);
    let a = sub_wl(&mut state, Wl::new("a").account("org/p").user("u1").gpus(8).submit(400_000));
    let b = sub_wl(&mut state, Wl::new("b").account("org/p").user("u2").gpus(8).submit(400_001));
    let p = AllotPolicy::new();
    assert_eq!(p.ranking(&state, 400_010), [b, a], "the older submission of the heavier user waits");
    // Without history (half-life 0) only what is held counts: FIFO between equals.
    let mut state =
        StateBuilder::new().pool("p", "H100", 1, 8).account("org/p").contract(|c| c.usage_half_life = 0).build();
    charge_as(&mut state, "org/p", "u1", 8, 0, 800.0);
    let a = sub_wl(&mut state, Wl::new("a").account("org/p").user("u1").gpus(8).submit(400_000));
    let b = sub_wl(&mut state, Wl::new("b").account("org/p").user("u2").gpus(8).submit(400_001));
    assert_eq!(p.ranking(&state, 400_010), [a, b]);
}

#[test]
fn budgets_rank_in_budget_work_first() {
    struct Case {
        name: &'static str,
        /// account with a budget of 10 NGH that used 12
        budget_on: &'static str,
        over: &'static [&'static str],
        in_budget: &'static [&'static str],
    }
    let cases = [
        Case { name: "own budget", budget_on: "org/a", over: &["org/a"], in_budget: &["org/b", "lab/c"] },
        Case {
            name: "a parent's budget covers its subtree",
            budget_on: "org",
            over: &["org/a", "org/b"],
            in_budget: &["lab/c"],
        },
    ];
    for c in cases {
        let mut b = StateBuilder::new().pool("p", "H100", 1, 8);
        for path in ["org", "org/a", "org/b", "lab/c"] {
            b = b.account_with(path, |a| a.budget_gpu_hours = (path == c.budget_on).then_some(10.0));
        }
        let mut state = b.build();
        charge(&mut state, "org/a", 8, 0, 12.0);
        let p = AllotPolicy::new();
        for path in c.over {
            assert_eq!(p.over_budget(&state, path, 10_000), Some(true), "{}: {path}", c.name);
        }
        for path in c.in_budget {
            assert_eq!(p.over_budget(&state, path, 10_000), Some(false), "{}: {path}", c.name);
        }
        // In-budget work ranks ahead even when it was submitted later.
        let over = sub(&mut state, "over", c.over[0], 8, 10_000);
        let inb = sub(&mut state, "in", c.in_budget[0], 8, 10_001);
        assert_eq!(p.ranking(&state, 10_002), [inb, over], "{}", c.name);
    }
}

#[test]
fn over_budget_work_uses_idle_capacity() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .account("org/b")
        .build();
    charge(&mut state, "org/a", 8, 0, 12.0);
    sub(&mut state, "a1", "org/a", 8, 10_000);
    sub(&mut state, "a2", "org/a", 8, 10_000);
    sub(&mut state, "b1", "org/b", 8, 10_001);
    let d = pass(&mut AllotPolicy::new(), &mut state, 10_002);
    // b1 first (in budget), then a1 on the capacity left; a2 waits.
    assert_eq!(allot_support::started(&state, &d), ["b1", "a1"]);
    assert_eq!(d[0].reason.rule, Rule::FairShare);
    assert_eq!(d[1].reason.rule, Rule::BudgetOver);
    assert!(d[1].reason.detail.contains("account org/a over budget 12/10 NGH"), "{}", d[1].reason);
}

#[test]
fn a_budget_period_rollover_restores_rank() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .contract(|c| c.budget_period = 86_400)
        .build();
    charge(&mut state, "org/a", 8, 0, 12.0);
    let p = AllotPolicy::new();
    assert_eq!(p.over_budget(&state, "org/a", 86_399), Some(true));
    assert_eq!(p.over_budget(&state, "org/a", 86_400), Some(false));
    sub(&mut state, "a", "org/a", 8, 80_000);
    assert_eq!(p.next_wakeup(&state, 80_000), Some(86_400));
}

#[test]
fn own_work_of_an_internal_account_is_an_implicit_child() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/t").account("org/t/p").build();
    for i in 0..8 {
        sub(&mut state, &format!("t{i}"), "org/t", 1, 0);
        sub(&mut state, &format!("p{i}"), "org/t/p", 1, 0);
    }
    let d = pass(&mut AllotPolicy::new(), &mut state, 0);
    assert_eq!(held(&state, "org/t/p"), 4);
    assert_eq!(held(&state, "org/t"), 8);
    assert!(d.iter().any(|d| d.reason.detail.contains("org/t (own work)")));
}

#[test]
fn gpu_types_are_normalised() {
    // B200 weighs 2: 8 B200 count as 16 normalised GPUs, 8 H100 as 8.
    let mut state = StateBuilder::new()
        .gpu_weight("B200", 2.0)
        .pool("h", "H100", 1, 8)
        .pool("b", "B200", 1, 8)
        .account("org/a")
        .account("org/b")
        .build();
    for i in 0..8 {
        sub_wl(&mut state, Wl::new(format!("a{i}")).account("org/a").gpu_type("B200").work(100_000));
        sub_wl(&mut state, Wl::new(format!("b{i}")).account("org/b").gpu_type("H100").work(100_000));
    }
    pass(&mut AllotPolicy::new(), &mut state, 0);
    let p = AllotPolicy::new();
    let (va, vb) = (p.fair_share_value(&state, "org/a", 0).unwrap(), p.fair_share_value(&state, "org/b", 0).unwrap());
    assert!((va - 2.0 * vb).abs() < 1e-9, "{va} vs {vb}");
}
