//! Scale check of one `allot` pass: 1,024 GPUs, 10,000 waiting workloads.
//! Ignored by default; run with
//! `cargo test --release -p allot-core --test allot_scale -- --ignored --nocapture`
//! to print the pass and explanation times (no timed assertion).

mod allot_support;

use std::time::Instant;

use allot_core::policy::AllotPolicy;
use allot_core::{Action, Class, Policy, State};
use allot_support::{apply, sub_wl};
use allot_testkit::{StateBuilder, Wl};

fn big_state() -> State {
    let mut b = StateBuilder::new().pool("h", "H100", 96, 8).racks_of(8).pool("b", "B200", 32, 8).racks_of(8);
    b = b.gpu_weight("B200", 2.0);
    for org in 0..3 {
        for p in 0..10 {
            let path = format!("org{org}/team{}/p{p}", p % 3);
            b = b.account_with(&path, |a| a.share = Some(1.0 + f64::from(p % 3)));
        }
    }
    b.build()
}

fn workload(i: u64, submit: u64, small: bool) -> Wl {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7;
    let path = format!("org{}/team{}/p{}", x % 3, (x / 3 % 10) % 3, x / 3 % 10);
    let gpus = if small { [1, 1, 2][(x / 31 % 3) as usize] } else { [1, 2, 4, 8, 8, 16, 32][(x / 31 % 7) as usize] };
    let mut w = Wl::new(format!("w{i}"))
        .account(&path)
        .user(&format!("u{}", x / 7 % 5))
        .gpus(gpus)
        .submit(submit)
        .work(3600 + x % 40_000)
        .checkpoint(1800);
    if x.is_multiple_of(11) && gpus <= 8 {
        w = w.class(Class::Interactive).work(1800);
    }
    if x.is_multiple_of(13) {
        w = w.gpu_type("B200");
    }
    w
}

#[test]
#[ignore = "scale check; run in release"]
fn one_pass_with_10000_waiting_on_1024_gpus() {
    // Running work in big gangs, then in 1–2 GPU workloads (~700 running).
    for small in [false, true] {
        scale(small);
    }
}

fn scale(small: bool) {
    let mut state = big_state();
    let mut p = AllotPolicy::new();
    // Fill the cluster at t = 0, then queue 10,000 more.
    for i in 0..2000 {
        sub_wl(&mut state, workload(i, 0, small));
    }
    let d = p.schedule(&state, 0);
    apply(&mut state, &d, 0);
    let pending_before = state.pending.len();
    for i in 2000..(2000 + 10_000 - pending_before as u64) {
        sub_wl(&mut state, workload(i, 100 + i, false));
    }
    println!("running {}, pending {}", state.running.len(), state.pending.len());
    for now in [200, 9000] {
        let t = Instant::now();
        let d = p.schedule(&state, now);
        let pass = t.elapsed();
        let pre = d.iter().filter(|d| matches!(d.action, Action::Preempt { .. })).count();
        println!("t={now}: pass {:?}: {} decisions ({pre} preemptions)", pass, d.len());
        for x in d.iter().take(3) {
            if let Action::Preempt { workload, .. } = x.action {
                println!("  {:?} {}: {}", state.spec(workload).class, state.spec(workload).id, x.reason);
            }
        }
        let t = Instant::now();
        let ids: Vec<_> = state.pending.iter().map(|(_, w)| *w).collect();
        for w in &ids {
            let _ = p.explain(&state, *w, now);
        }
        println!("t={now}: explaining all {} waiting: {:?}", ids.len(), t.elapsed());
        apply(&mut state, &d, now);
        state.sanity_check(now).unwrap();
    }
}
