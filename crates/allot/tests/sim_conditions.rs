//! Dependencies (DEP-1, DEP-2) and arrays (ARR-1) carried by a trace and
//! replayed: the same semantics as the live server's (one engine), from the
//! trace's `after`, `array`, `array_index` and `array_limit` columns.

use allot_core::{Phase, PolicyKind, Rule, State, Time};
use allot_sim::{Request, RequestKind, SimOptions, simulate_requests};
use allot_trace::config::{Config, parse_config};
use allot_trace::trace::parse_trace_csv;

/// Four nodes of 8 GPUs, one project.
fn config() -> Config {
    let text = "[cluster]\n[[cluster.pools]]\nname = \"p\"\ngpu = \"H100\"\nnodes = 4\ngpus_per_node = 8\n\
                [[accounts]]\npath = \"lab/a\"\n";
    parse_config(text, "c.toml").unwrap()
}

fn replay(csv: &str, requests: Vec<Request>, kind: PolicyKind) -> State {
    let cfg = config();
    let specs = parse_trace_csv(csv.as_bytes(), "t.csv", &cfg).unwrap();
    let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
    let mut policy = kind.build();
    let opts = SimOptions { until: None, check_invariants: true, keep_log: false, ..Default::default() };
    simulate_requests(state, specs, Vec::new(), requests, policy.as_mut(), &opts).0
}

fn by_id<'a>(state: &'a State, id: &str) -> &'a allot_core::Run {
    let i = state.specs.iter().position(|s| s.id == id).unwrap_or_else(|| panic!("no {id}"));
    &state.runs[i]
}

#[test]
fn an_array_with_a_limit_never_runs_more_than_its_limit() {
    // Six one-node elements of 1,000 s on four free nodes, at most 2 at once:
    // they run two by two, lowest index first.
    let mut csv = String::from("id,submit_s,account,gpus,nodes,work_s,array,array_index,array_limit\n");
    for i in 0..6 {
        csv.push_str(&format!("a_{i},0,lab/a,8,1,1000,a,{i},2\n"));
    }
    for kind in [PolicyKind::Fifo, PolicyKind::FifoBackfill, PolicyKind::Allot] {
        let state = replay(&csv, Vec::new(), kind);
        let starts: Vec<Time> = (0..6).map(|i| by_id(&state, &format!("a_{i}")).first_start.unwrap()).collect();
        assert_eq!(starts, [0, 0, 1000, 1000, 2000, 2000], "{kind:?}");
        assert!(state.specs.iter().all(|s| s.array.is_some_and(|a| a.count == 6 && a.limit == Some(2))));
    }
}

#[test]
fn a_dependency_chain_with_a_failed_parent() {
    // prep ← train (afterok) ← eval (afterok); cleanup runs only if prep fails
    // (afternotok); report runs after prep whatever (afterany).
    let csv = "id,submit_s,account,gpus,work_s,after\n\
               prep,0,lab/a,8,100,\n\
               train,0,lab/a,8,500,afterok:prep\n\
               eval,10,lab/a,8,50,afterok:train\n\
               cleanup,10,lab/a,8,50,afternotok:prep\n\
               report,20,lab/a,8,50,afterany:prep\n";
    // As planned: prep finishes at 100.
    let ok = replay(csv, Vec::new(), PolicyKind::Allot);
    assert_eq!(by_id(&ok, "train").first_start, Some(100));
    assert_eq!(by_id(&ok, "eval").first_start, Some(600));
    assert_eq!(by_id(&ok, "report").first_start, Some(100));
    let cleanup = by_id(&ok, "cleanup");
    assert_eq!((cleanup.phase, cleanup.end), (Phase::Cancelled, Some(100)));
    assert_eq!(cleanup.last_reason.as_ref().unwrap().rule, Rule::DepNever);
    // prep fails at 50: train and eval are cancelled, cleanup and report run.
    let fail = vec![Request { t: 50, workload: "prep".into(), kind: RequestKind::Exit { code: 1 } }];
    let failed = replay(csv, fail, PolicyKind::Allot);
    assert_eq!(by_id(&failed, "prep").phase, Phase::Failed);
    for id in ["train", "eval"] {
        let r = by_id(&failed, id);
        assert_eq!((r.phase, r.first_start), (Phase::Cancelled, None), "{id}");
        assert_eq!(r.last_reason.as_ref().unwrap().rule, Rule::DepNever, "{id}");
    }
    assert_eq!(by_id(&failed, "cleanup").first_start, Some(50));
    assert_eq!(by_id(&failed, "report").first_start, Some(50));
    // Queue time counts from when the dependency was met, not the submission.
    assert_eq!(by_id(&ok, "eval").queued, Some(600));
}

#[test]
fn a_dependency_on_an_array_waits_for_every_element_and_rows_may_come_in_any_order() {
    // The array's rows after the dependent's in the file is an error; an
    // array named as a dependency means all its elements so far.
    let csv = "id,submit_s,account,gpus,nodes,work_s,array,array_index,array_limit,after\n\
               s_0,0,lab/a,8,1,100,s,0,,\n\
               s_1,0,lab/a,8,1,300,s,1,,\n\
               merge,0,lab/a,8,1,10,,,,afterok:s\n";
    let state = replay(csv, Vec::new(), PolicyKind::FifoBackfill);
    assert_eq!(by_id(&state, "merge").first_start, Some(300));
    // Rows whose submit times are out of file order are replayed sorted;
    // their dependencies follow them.
    let csv = "id,submit_s,account,gpus,work_s,after\n\
               late,500,lab/a,8,10,\n\
               early,0,lab/a,32,100,\n\
               next,505,lab/a,8,10,afterok:late\n";
    let state = replay(csv, Vec::new(), PolicyKind::FifoBackfill);
    assert_eq!(by_id(&state, "next").first_start, Some(510));
}

#[test]
fn bad_conditions_in_a_trace_name_the_line_and_the_fix() {
    let cfg = config();
    for (csv, says) in [
        (
            "id,submit_s,account,gpus,work_s,after\nb,0,lab/a,8,10,afterok:a\n",
            "t.csv:2: field `after`: \"a\" names no earlier row or array of this trace",
        ),
        (
            "id,submit_s,account,gpus,work_s,after\na,10,lab/a,8,10,\nb,0,lab/a,8,10,afterok:a\n",
            "t.csv:3: field `after`: \"a\" is submitted at 10 s, after this row (0 s)",
        ),
        (
            "id,submit_s,account,gpus,work_s,after\na,0,lab/a,8,10,afterfoo:a\n",
            "t.csv:2: field `after`: unknown dependency type \"afterfoo\" in \"afterfoo:a\" (use afterok, afterany or afternotok)",
        ),
        (
            "id,submit_s,account,gpus,work_s,array,array_index,array_limit\na,0,lab/a,8,10,s,0,2\nb,0,lab/a,8,10,s,0,2\n",
            "t.csv:3: field `array_index`: array \"s\" has element 0 twice",
        ),
        (
            "id,submit_s,account,gpus,work_s,array,array_index,array_limit\na,0,lab/a,8,10,s,0,2\nb,0,lab/a,8,10,s,1,3\n",
            "t.csv:3: field `array_limit`: array \"s\" was given the limit Some(2) on an earlier row",
        ),
        (
            "id,submit_s,account,gpus,work_s,array_index\na,0,lab/a,8,10,4\n",
            "t.csv:2: field `array_index`: given without an array (the array column names it)",
        ),
    ] {
        let e = parse_trace_csv(csv.as_bytes(), "t.csv", &cfg).unwrap_err().to_string();
        assert!(e.contains(says), "{e}\n  should say: {says}");
    }
}

/// An exit asked for a workload at the instant it arrives is stale (it has
/// no attempt yet; an instant's exits come before its arrivals): it runs
/// as planned. Before the exit was checked against the arrivals, the
/// engine was handed an exit for a workload it did not have yet.
#[test]
fn an_exit_at_the_arrival_instant_is_stale() {
    let csv = "id,submit_s,account,gpus,work_s\nx,10,lab/a,8,100\n";
    let exit = vec![Request { t: 10, workload: "x".into(), kind: RequestKind::Exit { code: 1 } }];
    for kind in [PolicyKind::Fifo, PolicyKind::Allot] {
        let state = replay(csv, exit.clone(), kind);
        let x = by_id(&state, "x");
        assert_eq!((x.phase, x.first_start, x.end), (Phase::Finished, Some(10), Some(110)), "{kind:?}");
    }
}
