//! Node event files: node names resolve, events sort stably by time, and bad
//! rows name the file, the line and the field.

use std::path::Path;

use allot_core::{NodeEvent, NodeEventKind};
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
    let got = parse_events_csv(text.as_bytes(), "e.csv", &cfg).unwrap();
    let want = vec![
        NodeEvent { t: 0, node: node("b200-1"), kind: NodeEventKind::Fail },
        NodeEvent { t: 10, node: node("h100-3"), kind: NodeEventKind::Drain },
        NodeEvent { t: 10, node: node("h100-0"), kind: NodeEventKind::Undrain },
        NodeEvent { t: 50, node: node("b200-1"), kind: NodeEventKind::Repair },
    ];
    assert_eq!(got, want, "same-time events keep file order");
    let jsonl = "{\"t_s\":50,\"node\":\"b200-1\",\"event\":\"repair\"}\n{\"t_s\":10,\"node\":\"h100-3\",\"event\":\"drain\"}\n\
                 {\"t_s\":0,\"node\":\"b200-1\",\"event\":\"fail\"}\n{\"node\":\"h100-0\",\"event\":\"undrain\",\"t_s\":10}\n";
    assert_eq!(parse_events_jsonl(jsonl.as_bytes(), "e.jsonl", &cfg).unwrap(), want);
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
