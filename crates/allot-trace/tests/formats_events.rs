//! Node event files: node names resolve, events sort stably by time, and bad
//! rows name the file, the line and the field.

use std::path::Path;

use allot_core::{NodeAdded, NodeEvent, NodeEventKind, NodeId};
use allot_trace::config::{Config, load_config};
use allot_trace::events::{load_events, parse_events_csv, parse_events_jsonl};

/// h100: 4 nodes (h100-0..h100-3), b200: 2 nodes (b200-0, b200-1).
fn config() -> Config {
    load_config(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/small.toml")).unwrap()
}

#[test]
fn events_resolve_nodes_and_sort_stably_by_time() {
    let cfg = config();
    let node = |n: &str| cfg.cluster.node_by_name(n).unwrap();
    let text = "t_s,node,event\n50,b200-1,repair\n10,h100-3,drain\n0,b200-1,FAIL\n10,h100-0,undrain\n";
    let got = parse_events_csv(text.as_bytes(), "e.csv", &cfg).unwrap().changes;
    let want = vec![
        NodeEvent { t: 0, node: node("b200-1"), kind: NodeEventKind::Fail },
        NodeEvent { t: 10, node: node("h100-3"), kind: NodeEventKind::Drain },
        NodeEvent { t: 10, node: node("h100-0"), kind: NodeEventKind::Undrain },
        NodeEvent { t: 50, node: node("b200-1"), kind: NodeEventKind::Repair },
    ];
    assert_eq!(got, want, "same-time events keep file order");
    let jsonl = "{\"t_s\":50,\"node\":\"b200-1\",\"event\":\"repair\"}\n{\"t_s\":10,\"node\":\"h100-3\",\"event\":\"drain\"}\n\
                 {\"t_s\":0,\"node\":\"b200-1\",\"event\":\"fail\"}\n{\"node\":\"h100-0\",\"event\":\"undrain\",\"t_s\":10}\n";
    assert_eq!(parse_events_jsonl(jsonl.as_bytes(), "e.jsonl", &cfg).unwrap().changes, want);
}

#[test]
fn bad_events_name_file_line_and_field() {
    let cfg = config();
    let cases = [
        ("node index out of range", "5,h100-4,fail", Some("node"), "pool h100 has nodes h100-0 to h100-3"),
        ("unknown pool", "5,a100-0,fail", Some("node"), "unknown node \"a100-0\""),
        ("no index", "5,h100,fail", Some("node"), "unknown node \"h100\""),
        ("unknown event kind", "5,h100-1,reboot", Some("event"), "unknown event \"reboot\""),
        ("negative time", "-5,h100-1,fail", Some("t_s"), "expected a non-negative integer, got \"-5\""),
        ("missing node", "5,,fail", Some("node"), "missing value"),
        ("short row", "5,h100-1", None, "found 2"),
    ];
    for (name, row, field, fragment) in cases {
        let text = format!("t_s,node,event\n0,h100-0,drain\n{row}\n");
        let err = parse_events_csv(text.as_bytes(), "ev.csv", &cfg).expect_err(name);
        assert_eq!((err.line, err.field.as_deref()), (Some(3), field), "case {name}: {err}");
        assert!(err.to_string().starts_with("ev.csv:3: "), "case {name}: {err}");
        assert!(err.to_string().contains(fragment), "case {name}: {err}");
    }
    let err = parse_events_csv("t_s,node\n".as_bytes(), "ev.csv", &cfg).unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(1), Some("event")), "{err}");
    let err = parse_events_csv("t_s,node,event,why\n".as_bytes(), "ev.csv", &cfg).unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(1), Some("why")), "{err}");
    let err =
        parse_events_jsonl("{\"t_s\":1,\"node\":\"h100-0\",\"event\":\"fail\",\"x\":1}\n".as_bytes(), "e.jsonl", &cfg)
            .unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(1), Some("x")), "{err}");
    let err = load_events(Path::new("events.tsv"), &cfg).unwrap_err();
    assert!(err.to_string().contains("`.tsv`"), "{err}");
}

#[test]
fn add_events_append_nodes_in_time_order_and_later_events_name_them() {
    let cfg = config();
    let pool = |p: &str| cfg.cluster.pool_by_name(p).unwrap();
    let n = cfg.cluster.nodes.len() as u32;
    // File order is not time order: ids follow time order (stable).
    let text = "t_s,node,event\n30,h100-4,fail\n20,h100-4,ADD\n5,b200-7,add\n20,h100-4,drain\n40,b200-7,fail\n";
    let got = parse_events_csv(text.as_bytes(), "e.csv", &cfg).unwrap();
    let added = vec![
        NodeAdded { t: 5, pool: pool("b200"), name: "b200-7".into(), node: NodeId(n) },
        NodeAdded { t: 20, pool: pool("h100"), name: "h100-4".into(), node: NodeId(n + 1) },
    ];
    assert_eq!(got.added, added);
    let changes = vec![
        NodeEvent { t: 20, node: NodeId(n + 1), kind: NodeEventKind::Drain },
        NodeEvent { t: 30, node: NodeId(n + 1), kind: NodeEventKind::Fail },
        NodeEvent { t: 40, node: NodeId(n), kind: NodeEventKind::Fail },
    ];
    assert_eq!(got.changes, changes);
    assert_eq!(got.len(), 5);
    let jsonl = "{\"t_s\":30,\"node\":\"h100-4\",\"event\":\"fail\"}\n{\"t_s\":20,\"node\":\"h100-4\",\"event\":\"add\"}\n\
                 {\"t_s\":5,\"node\":\"b200-7\",\"event\":\"add\"}\n{\"t_s\":20,\"node\":\"h100-4\",\"event\":\"drain\"}\n\
                 {\"t_s\":40,\"node\":\"b200-7\",\"event\":\"fail\"}\n";
    assert_eq!(parse_events_jsonl(jsonl.as_bytes(), "e.jsonl", &cfg).unwrap(), got);
    // The fleet the replay ends with: the nodes at the ids given.
    let fleet = allot_trace::events::fleet_after(&cfg.cluster, &got).unwrap();
    assert_eq!(fleet.node_by_name("h100-4"), Some(NodeId(n + 1)));
    assert_eq!(fleet.pool(pool("h100")).nodes, 5);
}

#[test]
fn bad_add_events_name_file_line_and_field() {
    let cfg = config();
    // (case, rows after `0,h100-0,drain` (the first is line 3), error line, fragment).
    let cases: [(&str, &str, u64, &str); 7] = [
        ("unknown pool", "5,a100-0,add", 3, "names no pool \"a100\" (pools: h100, b200)"),
        ("index not a number", "5,h100-x,add", 3, "has index \"x\", not a number"),
        ("no index at all", "5,h100,add", 3, "is not named <pool>-<index>"),
        ("a laid-out node", "5,h100-2,add", 3, "node \"h100-2\" to add already exists"),
        ("added twice", "5,h100-9,add\n6,h100-9,add", 4, "node \"h100-9\" to add already exists"),
        (
            "named before its add",
            "5,h100-9,fail\n6,h100-9,add",
            3,
            "node \"h100-9\" is named before it is added (added at t_s=6, line 4)",
        ),
        ("same instant, before it in the file", "6,h100-9,drain\n6,h100-9,add", 3, "is named before it is added"),
    ];
    for (name, rows, line, fragment) in cases {
        let text = format!("t_s,node,event\n0,h100-0,drain\n{rows}\n");
        let err = parse_events_csv(text.as_bytes(), "ev.csv", &cfg).expect_err(name);
        assert_eq!((err.line, err.field.as_deref()), (Some(line), Some("node")), "case {name}: {err}");
        assert!(err.to_string().starts_with(&format!("ev.csv:{line}: ")), "case {name}: {err}");
        assert!(err.to_string().contains(fragment), "case {name}: {err}");
    }
    let err = parse_events_csv("t_s,node,event\n5,h100-1,remove\n".as_bytes(), "ev.csv", &cfg).unwrap_err();
    assert!(err.to_string().contains("use fail, repair, drain, undrain, outage, return or add"), "{err}");
}
