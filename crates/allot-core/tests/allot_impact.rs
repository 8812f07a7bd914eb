//! `allot` and impact (rules IMP-1 … IMP-4, `docs/impact.md`): the order of
//! over-budget work on idle capacity, the victim tie-break, impact-weighted
//! entitlement, and budgets first.

mod allot_support;

use allot_core::policy::AllotPolicy;
use allot_core::{Rule, State, Time};
use allot_support::{advance, charge, held, pass, preempted, started, sub};
use allot_testkit::StateBuilder;

/// An account of a test: path, impact, budget (NGH), usage charged (NGH).
type Acc = (&'static str, f64, Option<f64>, f64);

fn state_of(nodes: u32, accounts: &[Acc], weighting: bool) -> State {
    let mut b = StateBuilder::new().pool("p", "H100", nodes, 8).contract(|c| c.impact_weighting = weighting);
    for &(path, impact, budget, _) in accounts {
        b = b.account_with(path, |a| {
            a.impact = Some(impact);
            a.budget_gpu_hours = budget;
        });
    }
    let mut state = b.build();
    for &(path, _, _, used) in accounts {
        if used > 0.0 {
            charge(&mut state, path, 8, 0, used);
        }
    }
    state
}

#[test]
fn over_budget_work_gets_idle_capacity_by_impact_then_fair_share() {
    struct Case {
        name: &'static str,
        accounts: &'static [Acc],
        /// The one 8-GPU node goes to the first of these (each waits with one 8-GPU job).
        want: &'static str,
        rule: Rule,
        /// Whether the start reason cites IMP-1.
        cites: bool,
    }
    let cases = [
        Case {
            name: "equal impact: fair share decides (b used less)",
            accounts: &[("org/a", 1.0, Some(10.0), 20.0), ("org/b", 1.0, Some(10.0), 12.0)],
            want: "org/b",
            rule: Rule::BudgetOver,
            cites: false,
        },
        Case {
            name: "higher impact first although it used more",
            accounts: &[("org/a", 3.0, Some(10.0), 20.0), ("org/b", 1.0, Some(10.0), 12.0)],
            want: "org/a",
            rule: Rule::BudgetOver,
            cites: true,
        },
        Case {
            name: "lower impact second whatever its fair share",
            accounts: &[("org/a", 1.0, Some(10.0), 20.0), ("org/b", 2.0, Some(10.0), 12.0)],
            want: "org/b",
            rule: Rule::BudgetOver,
            cites: true,
        },
        Case {
            name: "IMP-4: in-budget work of impact 1 before over-budget work of impact 50",
            accounts: &[("org/a", 50.0, Some(10.0), 12.0), ("org/b", 1.0, None, 20.0)],
            want: "org/b",
            rule: Rule::FairShare,
            cites: false,
        },
        Case {
            name: "level by level: the top level's impact first (inherited)",
            accounts: &[
                ("x", 1.0, None, 0.0),
                ("y", 4.0, None, 0.0),
                ("x/a", 1.0, Some(10.0), 12.0),
                ("y/b", 1.0, Some(10.0), 20.0),
            ],
            want: "y/b",
            rule: Rule::BudgetOver,
            cites: true,
        },
    ];
    for c in cases {
        let mut state = state_of(1, c.accounts, false);
        for &(path, ..) in c.accounts {
            if !matches!(path, "x" | "y") {
                sub(&mut state, &format!("{path}-job"), path, 8, 10_000);
            }
        }
        let d = pass(&mut AllotPolicy::new(), &mut state, 10_001);
        assert_eq!(started(&state, &d), [format!("{}-job", c.want)], "{}", c.name);
        assert_eq!(d[0].reason.rule, c.rule, "{}: {}", c.name, d[0].reason);
        let cites = d[0].reason.detail.contains("IMP-1: over-budget work is served highest impact first");
        assert_eq!(cites, c.cites, "{}: {}", c.name, d[0].reason);
        assert_eq!(held(&state, c.want), 8, "{}", c.name);
    }
}

#[test]
fn impact_does_not_order_in_budget_work_without_weighting() {
    // Switch off, both in budget: FS-1 alone, so the impact-1 account that
    // used less goes first, as before impact.
    let accounts: &[Acc] = &[("org/a", 9.0, None, 20.0), ("org/b", 1.0, None, 12.0)];
    let mut state = state_of(1, accounts, false);
    sub(&mut state, "a", "org/a", 8, 10_000);
    sub(&mut state, "b", "org/b", 8, 10_000);
    let d = pass(&mut AllotPolicy::new(), &mut state, 10_001);
    assert_eq!(started(&state, &d), ["b"]);
    assert!(!d[0].reason.detail.contains("IMP"), "{}", d[0].reason);
}

#[test]
fn lower_impact_yields_first_among_victims_of_equal_standing() {
    struct Case {
        name: &'static str,
        /// (account, impact) of two over-budget accounts holding 4 GPUs each.
        victims: [(&'static str, f64); 2],
        want: &'static str,
    }
    let cases = [
        Case { name: "lower impact yields", victims: [("org/a", 5.0), ("org/b", 2.0)], want: "org/b" },
        Case { name: "the other way round", victims: [("org/a", 2.0), ("org/b", 5.0)], want: "org/a" },
        Case {
            name: "equal impact: as before (least loss, then id)",
            victims: [("org/a", 1.0), ("org/b", 1.0)],
            want: "org/a",
        },
    ];
    for c in cases {
        let accounts: Vec<Acc> =
            c.victims.iter().map(|&(p, i)| (p, i, Some(10.0), 12.0)).chain([("lab/c", 1.0, None, 0.0)]).collect();
        let mut state = state_of(1, &accounts, false);
        let mut p = AllotPolicy::new();
        for &(path, _) in &c.victims {
            sub(&mut state, &format!("{path}-v"), path, 4, 10_000);
        }
        let d = pass(&mut p, &mut state, 10_000);
        assert_eq!(started(&state, &d).len(), 2, "{}", c.name);
        // In-budget lab/c needs 4 GPUs: one over-budget victim yields (BUD-2).
        sub(&mut state, "c", "lab/c", 4, 10_100);
        let d = pass(&mut p, &mut state, 10_100);
        assert_eq!(preempted(&state, &d), [(format!("{}-v", c.want), "c".into(), Rule::BudgetOver)], "{}", c.name);
    }
}

#[test]
fn weighting_splits_one_pass_by_share_times_impact() {
    struct Case {
        name: &'static str,
        weighting: bool,
        /// (account, share, impact)
        accounts: &'static [(&'static str, f64, f64)],
        want: &'static [(&'static str, u32)],
        ent: &'static [(&'static str, f64)],
    }
    let cases = [
        Case {
            name: "off: impact ignored",
            weighting: false,
            accounts: &[("org/a", 1.0, 3.0), ("org/b", 1.0, 1.0)],
            want: &[("org/a", 8), ("org/b", 8)],
            ent: &[("org/a", 0.5), ("org/b", 0.5)],
        },
        Case {
            name: "on: 1x3 : 1x1",
            weighting: true,
            accounts: &[("org/a", 1.0, 3.0), ("org/b", 1.0, 1.0)],
            want: &[("org/a", 12), ("org/b", 4)],
            ent: &[("org/a", 0.75), ("org/b", 0.25)],
        },
        Case {
            name: "on: share and impact multiply (1x3 : 3x1 is level)",
            weighting: true,
            accounts: &[("org/a", 1.0, 3.0), ("org/b", 3.0, 1.0)],
            want: &[("org/a", 8), ("org/b", 8)],
            ent: &[("org/a", 0.5), ("org/b", 0.5)],
        },
        Case {
            name: "on: equal impacts change nothing",
            weighting: true,
            accounts: &[("org/a", 3.0, 2.0), ("org/b", 1.0, 2.0)],
            want: &[("org/a", 12), ("org/b", 4)],
            ent: &[("org/a", 0.75), ("org/b", 0.25)],
        },
    ];
    for c in cases {
        let mut b = StateBuilder::new().pool("p", "H100", 2, 8).contract(|k| k.impact_weighting = c.weighting);
        for &(path, share, impact) in c.accounts {
            b = b.account_with(path, |a| {
                a.share = Some(share);
                a.impact = Some(impact);
            });
        }
        let mut state = b.build();
        for &(path, ..) in c.accounts {
            for i in 0..16 {
                sub(&mut state, &format!("{path}-{i}"), path, 1, 0);
            }
        }
        let p = AllotPolicy::new();
        for &(path, e) in c.ent {
            let got = p.entitlement(&state, path, 0).unwrap();
            assert!((got - e).abs() < 1e-9, "{}: {path} entitlement {got} want {e}", c.name);
        }
        let d = pass(&mut AllotPolicy::new(), &mut state, 0);
        for &(path, n) in c.want {
            assert_eq!(held(&state, path), n, "{}: {path}", c.name);
        }
        assert_eq!(d.iter().any(|d| d.reason.detail.contains("IMP-3")), c.weighting, "{}", c.name);
    }
}

/// Under saturation with weighting on, the time-average GPUs of two
/// accounts converge to share × impact weights (within 5%).
#[test]
fn weighted_shares_converge_under_saturation() {
    for (impact_a, impact_b) in [(3.0, 1.0), (1.0, 4.0), (2.0, 2.0)] {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 2, 8)
            .account_with("org/a", |a| a.impact = Some(impact_a))
            .account_with("org/b", |a| a.impact = Some(impact_b))
            .contract(|c| {
                c.impact_weighting = true;
                c.usage_half_life = 86_400;
            })
            .build();
        let mut p = AllotPolicy::new();
        let (step, end): (Time, Time) = (600, 5 * 86_400);
        let mut n = 0;
        let (mut gpu_s_a, mut gpu_s_b) = (0.0, 0.0);
        let mut t = 0;
        while t < end {
            advance(&mut state, t);
            // Keep a backlog of 1-GPU, 1-hour jobs for both (saturation).
            for path in ["org/a", "org/b"] {
                let waiting = state
                    .pending
                    .iter()
                    .filter(|(_, w)| state.spec(*w).account == state.accounts.get(path).unwrap())
                    .count();
                for _ in waiting..16 {
                    let s = allot_testkit::Wl::new(format!("{path}-{n}"))
                        .account(path)
                        .gpus(1)
                        .submit(t)
                        .work(3600)
                        .build(&state);
                    state.submit(s);
                    n += 1;
                }
            }
            pass(&mut p, &mut state, t);
            if t >= 86_400 {
                gpu_s_a += f64::from(held(&state, "org/a"));
                gpu_s_b += f64::from(held(&state, "org/b"));
            }
            t += step;
        }
        let got = gpu_s_a / (gpu_s_a + gpu_s_b);
        let want = impact_a / (impact_a + impact_b);
        assert!(
            (got - want).abs() <= 0.05 * want,
            "impacts {impact_a}:{impact_b}: org/a got {got:.3} of the GPUs, want {want:.3}"
        );
    }
}

#[test]
fn over_budget_swaps_follow_the_impact_order() {
    // Two over-budget accounts on one 8-GPU node: the victim runs 8 GPUs
    // past its slice, the preemptor waits for 8. Among over-budget work the
    // rank is IMP-1's (impact first, then fair share), so CON-4 swaps by it:
    // before, a lower-impact account that had used less preempted the
    // higher-impact one, whose own waiting work then took the GPUs it freed.
    // Two over-budget accounts org/v and org/w and an in-budget org/x on
    // two 8-GPU nodes: x holds one node (out of over-budget w's reach), the
    // victim v the other, past its slice; w waits for 8 GPUs. The heavy
    // user used 3,000 NGH of 16 GPUs over the last week, enough to outweigh
    // the 8 GPUs held now.
    struct Case {
        name: &'static str,
        /// (impact, heavy user) of the victim's account org/v and the
        /// preemptor's org/w; both have a budget of 1 NGH.
        v: (f64, bool),
        w: (f64, bool),
        preempts: bool,
        /// Whether the reason cites IMP-1.
        cites: bool,
    }
    let cases = [
        Case {
            name: "equal impact: fair share decides",
            v: (1.0, true),
            w: (1.0, false),
            preempts: true,
            cites: false,
        },
        Case {
            name: "lower impact never preempts, though it used less",
            v: (3.0, true),
            w: (1.0, false),
            preempts: false,
            cites: false,
        },
        Case {
            name: "higher impact ranks first, though it used more",
            v: (1.0, false),
            w: (3.0, true),
            preempts: true,
            cites: true,
        },
        Case {
            name: "equal impact, used more: no swap",
            v: (2.0, false),
            w: (2.0, true),
            preempts: false,
            cites: false,
        },
    ];
    const SLICE: Time = 7200;
    for c in cases {
        let mut b = StateBuilder::new().pool("p", "H100", 2, 8).contract(|k| k.budget_period = 30 * 86_400);
        for (path, (impact, _)) in [("org/v", c.v), ("org/w", c.w)] {
            b = b.account_with(path, |a| {
                a.impact = Some(impact);
                a.budget_gpu_hours = Some(1.0);
            });
        }
        let mut state = b.account("org/x").build();
        let (heavy, light) = if c.v.1 { ("org/v", "org/w") } else { ("org/w", "org/v") };
        charge(&mut state, light, 16, 0, 2.0);
        charge(&mut state, heavy, 16, 450, 3000.0);
        let t0: Time = 700_000;
        let mut p = AllotPolicy::new();
        sub(&mut state, "x", "org/x", 8, t0);
        sub(&mut state, "v", "org/v", 8, t0);
        let d = pass(&mut p, &mut state, t0);
        assert_eq!(started(&state, &d), ["x", "v"], "{}", c.name);
        sub(&mut state, "w", "org/w", 8, t0 + 100);
        assert!(pass(&mut p, &mut state, t0 + 100).is_empty(), "{}: inside the slice", c.name);
        let d = pass(&mut p, &mut state, t0 + SLICE);
        let want: Vec<(String, String, Rule)> =
            if c.preempts { vec![("v".into(), "w".into(), Rule::NoPingPong)] } else { vec![] };
        assert_eq!(preempted(&state, &d), want, "{}", c.name);
        if c.preempts {
            let cites = d[0].reason.detail.contains("by impact first (IMP-1): org/w impact");
            assert_eq!(cites, c.cites, "{}: {}", c.name, d[0].reason);
        }
    }
}
