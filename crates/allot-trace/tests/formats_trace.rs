//! Workload traces: defaults, CSV/JSONL equivalence and errors that name
//! the file, the line and the field.

use std::path::{Path, PathBuf};

use allot_core::{Class, Priority, WorkloadSpec};
use allot_trace::config::{Config, load_config};
use allot_trace::trace::{load_trace, parse_trace_csv, parse_trace_jsonl};

const HEADER: &str = "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible";
const GOOD_ROW: &str = "ok1,0,org/a/p1,ann,batch,8,1,H100,3600,0,1.0,normal,false";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats").join(name)
}

/// h100: 4 nodes × 8 H100; b200: 2 nodes × 8 B200; accounts org/a/p1, org/a/p2, org/b.
fn config() -> Config {
    load_config(&fixture("small.toml")).unwrap()
}

fn csv(rows: &[&str]) -> String {
    let mut s = String::from(HEADER);
    for r in rows {
        s.push('\n');
        s.push_str(r);
    }
    s.push('\n');
    s
}

#[test]
fn csv_and_jsonl_of_the_same_rows_are_identical() {
    let cfg = config();
    let from_csv = load_trace(&fixture("rows.csv"), &cfg).unwrap();
    let from_jsonl = load_trace(&fixture("rows.jsonl"), &cfg).unwrap();
    assert_eq!(from_csv, from_jsonl);
    let ids: Vec<&str> = from_csv.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2", "w3", "w4"], "file order, not submit order");

    let h100 = cfg.cluster.gpu_type_by_name("H100");
    let w1 = &from_csv[0];
    assert_eq!(
        (w1.gpus, w1.nodes, w1.gpu_type, w1.checkpoint_s, w1.util, w1.priority),
        (16, 2, h100, 600, 0.9, Priority::High)
    );
    let w3 = &from_csv[2];
    assert_eq!((w3.class, w3.priority, w3.preemptible), (Class::Service, Priority::Urgent, true), "case-insensitive");
    assert_eq!(w3.account, cfg.accounts.get("org/b").unwrap());
    let w4 = &from_csv[3];
    assert_eq!(w4.account, cfg.accounts.get("org/a").unwrap(), "an account implied by a path is valid");
    assert_eq!((w4.preemptible, w4.priority), (true, Priority::Low), "preemptible 1 = true");
}

fn defaults_expected(cfg: &Config, id: &str, submit: u64, account: &str, gpus: u32, work_s: u64) -> WorkloadSpec {
    WorkloadSpec {
        id: id.into(),
        submit,
        account: cfg.accounts.get(account).unwrap(),
        user: "default".into(),
        class: Class::Batch,
        gpus,
        nodes: 0,
        gpu_type: None,
        clusters: allot_core::cluster::ClusterSet::ANY,
        work_s,
        checkpoint_s: 0,
        util: 1.0,
        priority: Priority::Normal,
        preemptible: false,
        time_limit_s: None,
        checkpoint_on_signal: false,
        after: Vec::new(),
        array: None,
        hold: false,
        billing: None,
    }
}

#[test]
fn absent_columns_and_empty_cells_get_the_defaults() {
    let cfg = config();
    let want =
        vec![defaults_expected(&cfg, "a", 7, "org/a/p2", 3, 60), defaults_expected(&cfg, "b", 9, "org/b", 16, 5)];
    let only_required = "account,id,gpus,work_s,submit_s\norg/a/p2,a,3,60,7\norg/b,b,16,5,9\n";
    assert_eq!(parse_trace_csv(only_required.as_bytes(), "req.csv", &cfg).unwrap(), want, "absent columns");
    let empty_cells = csv(&["a,7,org/a/p2,,,3,,,60,,,,", "b,9,org/b,,,16,,,5,,,,"]);
    assert_eq!(parse_trace_csv(empty_cells.as_bytes(), "empty.csv", &cfg).unwrap(), want, "empty cells");
    let jsonl = "{\"id\":\"a\",\"submit_s\":7,\"account\":\"org/a/p2\",\"gpus\":3,\"work_s\":60}\n\
                 {\"id\":\"b\",\"submit_s\":9,\"account\":\"org/b\",\"gpus\":16,\"work_s\":5,\"user\":null}\n";
    assert_eq!(parse_trace_jsonl(jsonl.as_bytes(), "req.jsonl", &cfg).unwrap(), want, "jsonl");
}

#[test]
fn bad_rows_name_file_line_and_field() {
    let cfg = config();
    // (case, bad row placed on line 3 after GOOD_ROW, field, message fragment)
    let cases = [
        ("unknown account", "x,0,org/zz,u,batch,8,1,,60,0,1,normal,false", "account", "unknown account \"org/zz\""),
        (
            "negative gpus",
            "x,0,org/b,u,batch,-3,0,,60,0,1,normal,false",
            "gpus",
            "expected a non-negative integer, got \"-3\"",
        ),
        ("non-numeric submit", "x,soon,org/b,u,batch,8,1,,60,0,1,normal,false", "submit_s", "got \"soon\""),
        ("fractional work", "x,0,org/b,u,batch,8,1,,1.5,0,1,normal,false", "work_s", "got \"1.5\""),
        ("negative checkpoint", "x,0,org/b,u,batch,8,1,,60,-1,1,normal,false", "checkpoint_s", "non-negative"),
        ("zero gpus", "x,0,org/b,u,batch,0,0,,60,0,1,normal,false", "gpus", "at least 1"),
        ("zero work", "x,0,org/b,u,batch,8,0,,0,0,1,normal,false", "work_s", "at least 1"),
        ("gpus not a multiple of nodes", "x,0,org/b,u,batch,8,3,,60,0,1,normal,false", "nodes", "not a multiple"),
        ("util above 1", "x,0,org/b,u,batch,8,0,,60,0,1.5,normal,false", "util", "between 0 and 1"),
        ("util negative", "x,0,org/b,u,batch,8,0,,60,0,-0.1,normal,false", "util", "between 0 and 1"),
        ("util not finite", "x,0,org/b,u,batch,8,0,,60,0,NaN,normal,false", "util", "between 0 and 1"),
        ("util not a number", "x,0,org/b,u,batch,8,0,,60,0,most,normal,false", "util", "\"most\""),
        ("unknown class", "x,0,org/b,u,training,8,0,,60,0,1,normal,false", "class", "unknown class \"training\""),
        ("unknown priority", "x,0,org/b,u,batch,8,0,,60,0,1,top,false", "priority", "unknown priority \"top\""),
        ("preemptible not a boolean", "x,0,org/b,u,batch,8,0,,60,0,1,normal,yes", "preemptible", "got \"yes\""),
        ("unknown gpu type", "x,0,org/b,u,batch,8,0,A100,60,0,1,normal,false", "gpu_type", "unknown gpu type \"A100\""),
        (
            "larger than the cluster",
            "x,0,org/b,u,batch,64,0,,60,0,1,normal,false",
            "gpus",
            "larger than any pool: asks 64 GPUs",
        ),
        (
            "larger than any pool of its type",
            "x,0,org/b,u,batch,24,0,B200,60,0,1,normal,false",
            "gpus",
            "larger than any pool: asks 24 GPUs of type B200, the largest such pool b200 has 2 nodes × 8 GPUs",
        ),
        ("more nodes than any pool", "x,0,org/b,u,batch,40,5,,60,0,1,normal,false", "gpus", "asks 5 nodes × 8 GPUs"),
        (
            "duplicate id",
            "ok1,0,org/b,u,batch,8,0,,60,0,1,normal,false",
            "id",
            "duplicate id \"ok1\" (first on line 2)",
        ),
        ("empty id", ",0,org/b,u,batch,8,0,,60,0,1,normal,false", "id", "empty id"),
        ("missing required value", "x,0,org/b,u,batch,8,0,,,0,1,normal,false", "work_s", "missing value"),
        ("root account", "x,0,,u,batch,8,0,,60,0,1,normal,false", "account", "missing value"),
    ];
    for (name, row, field, fragment) in cases {
        let text = csv(&[GOOD_ROW, row]);
        let err = parse_trace_csv(text.as_bytes(), "bad.csv", &cfg).expect_err(name);
        assert_eq!((err.line, err.field.as_deref()), (Some(3), Some(field)), "case {name}: {err}");
        let shown = err.to_string();
        assert!(shown.starts_with(&format!("bad.csv:3: field `{field}`: ")), "case {name}: {shown}");
        assert!(shown.contains(fragment), "case {name}: {shown}");
    }
}

#[test]
fn csv_line_numbers_are_physical_lines() {
    let cfg = config();
    // The first row's user spans two lines, so the bad row starts on line 4.
    let text =
        csv(&["q,0,org/b,\"two\nlines\",batch,8,0,,60,0,1,normal,false", "x,0,org/b,u,batch,0,0,,60,0,1,normal,false"]);
    let err = parse_trace_csv(text.as_bytes(), "q.csv", &cfg).unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(4), Some("gpus")), "{err}");
}

#[test]
fn bad_headers_and_shapes_are_errors() {
    let cfg = config();
    let cases = [
        ("unknown column", "id,submit_s,account,gpus,work_s,gpu\n", Some(1), Some("gpu"), "unknown column"),
        ("missing required column", "id,submit_s,account,gpus\n", Some(1), Some("work_s"), "missing required column"),
        ("duplicate column", "id,submit_s,account,gpus,work_s,gpus\n", Some(1), Some("gpus"), "appears twice"),
        ("empty file", "", Some(1), None, "empty file"),
        ("short row", "id,submit_s,account,gpus,work_s\na,0,org/b,8,60\nb,0,org/b,8\n", Some(3), None, "found 4"),
    ];
    for (name, text, line, field, fragment) in cases {
        let err = parse_trace_csv(text.as_bytes(), "h.csv", &cfg).expect_err(name);
        assert_eq!((err.line, err.field.as_deref()), (line, field), "case {name}: {err}");
        assert!(err.to_string().contains(fragment), "case {name}: {err}");
    }
}

#[test]
fn bad_jsonl_lines_name_the_line() {
    let cfg = config();
    let good = r#"{"id":"a","submit_s":0,"account":"org/b","gpus":8,"work_s":60}"#;
    let cases = [
        (
            "unknown key",
            r#"{"id":"b","submit_s":0,"account":"org/b","gpus":8,"work_s":60,"gpu":1}"#,
            Some("gpu"),
            "unknown field",
        ),
        ("invalid json", r#"{"id":"b","#, None, "invalid json"),
        ("not an object", "[1,2]", None, "one json object per line"),
        (
            "nested value",
            r#"{"id":"b","submit_s":0,"account":"org/b","gpus":[8],"work_s":60}"#,
            Some("gpus"),
            "expected a string",
        ),
        (
            "negative number",
            r#"{"id":"b","submit_s":-1,"account":"org/b","gpus":8,"work_s":60}"#,
            Some("submit_s"),
            "got \"-1\"",
        ),
        (
            "fractional gpus",
            r#"{"id":"b","submit_s":0,"account":"org/b","gpus":8.5,"work_s":60}"#,
            Some("gpus"),
            "got \"8.5\"",
        ),
        (
            "missing required key",
            r#"{"id":"b","submit_s":0,"account":"org/b","gpus":8}"#,
            Some("work_s"),
            "missing value",
        ),
        ("duplicate id", good, Some("id"), "first on line 1"),
    ];
    for (name, bad, field, fragment) in cases {
        // Line 2 is blank and skipped; the bad line is line 3.
        let text = format!("{good}\n\n{bad}\n");
        let err = parse_trace_jsonl(text.as_bytes(), "t.jsonl", &cfg).expect_err(name);
        assert_eq!((err.line, err.field.as_deref()), (Some(3), field), "case {name}: {err}");
        assert!(err.to_string().starts_with("t.jsonl:3: "), "case {name}: {err}");
        assert!(err.to_string().contains(fragment), "case {name}: {err}");
    }
}

#[test]
fn format_follows_the_extension() {
    let cfg = config();
    let err = load_trace(Path::new("trace.txt"), &cfg).unwrap_err();
    assert!(err.to_string().starts_with("trace.txt: ") && err.to_string().contains("`.txt`"), "{err}");
    let err = load_trace(Path::new("trace"), &cfg).unwrap_err();
    assert!(err.to_string().contains("no extension"), "{err}");
    let err = load_trace(Path::new("/nonexistent/t.ndjson"), &cfg).unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/t.ndjson: cannot read the file");
}

#[test]
fn time_limits_come_from_the_column_or_the_class_default_and_are_held_to_the_maximum() {
    let mut cfg = config();
    cfg.contract.time_limit.interactive = Some(3600);
    cfg.contract.max_time_limit.batch = Some(7200);
    let text = "id,submit_s,account,class,gpus,work_s,time_limit_s\n\
                a,0,org/a/p1,batch,1,60,7200\n\
                b,0,org/a/p1,batch,1,60,\n\
                c,0,org/a/p1,interactive,1,60,\n\
                d,0,org/a/p1,interactive,1,60,600\n";
    let specs = parse_trace_csv(text.as_bytes(), "t.csv", &cfg).unwrap();
    let limits: Vec<Option<u64>> = specs.iter().map(|w| w.time_limit_s).collect();
    assert_eq!(limits, [Some(7200), None, Some(3600), Some(600)], "CON-6: no default limit is none");
    let jsonl =
        "{\"id\":\"a\",\"submit_s\":0,\"account\":\"org/a/p1\",\"gpus\":1,\"work_s\":60,\"time_limit_s\":7200}\n";
    let from_jsonl = parse_trace_jsonl(jsonl.as_bytes(), "t.jsonl", &cfg).unwrap();
    assert_eq!(from_jsonl[0].time_limit_s, Some(7200));

    let cases = [
        (
            "above the maximum",
            "7201",
            "t.csv:2: field `time_limit_s`: time limit 7201 s is above the batch maximum of 7200 s",
        ),
        ("zero", "0", "field `time_limit_s`: must be at least 1, got 0"),
        ("not a number", "soon", "field `time_limit_s`"),
    ];
    for (name, cell, want) in cases {
        let text = format!("id,submit_s,account,gpus,work_s,time_limit_s\na,0,org/a/p1,1,60,{cell}\n");
        let err = parse_trace_csv(text.as_bytes(), "t.csv", &cfg).unwrap_err().to_string();
        assert!(err.contains(want), "case {name}: {err}");
    }
}

#[test]
fn billing_is_optional_and_checked() {
    let cfg = config();
    // SLURM-2: absent column or empty cell is "not given"; 0 is a billing.
    let text = "id,submit_s,account,gpus,work_s,billing\n\
                a,0,org/a/p1,1,60,8\n\
                b,0,org/a/p1,1,60,\n\
                c,0,org/a/p1,1,60,0\n";
    let specs = parse_trace_csv(text.as_bytes(), "t.csv", &cfg).unwrap();
    let billing: Vec<Option<u64>> = specs.iter().map(|w| w.billing).collect();
    assert_eq!(billing, [Some(8), None, Some(0)]);
    let old = parse_trace_csv("id,submit_s,account,gpus,work_s\na,0,org/a/p1,1,60\n".as_bytes(), "o.csv", &cfg);
    assert_eq!(old.unwrap()[0].billing, None, "a trace without the column");
    let jsonl = "{\"id\":\"a\",\"submit_s\":0,\"account\":\"org/a/p1\",\"gpus\":1,\"work_s\":60,\"billing\":3}\n";
    assert_eq!(parse_trace_jsonl(jsonl.as_bytes(), "t.jsonl", &cfg).unwrap()[0].billing, Some(3));
    let cases = [
        ("fraction", "1.5", "t.csv:2: field `billing`: expected a non-negative integer, got \"1.5\""),
        ("negative", "-1", "t.csv:2: field `billing`: expected a non-negative integer"),
        ("too large", "2199023255553", "t.csv:2: field `billing`: must be at most 1099511627776"),
    ];
    for (name, cell, want) in cases {
        let text = format!("id,submit_s,account,gpus,work_s,billing\na,0,org/a/p1,1,60,{cell}\n");
        let err = parse_trace_csv(text.as_bytes(), "t.csv", &cfg).unwrap_err().to_string();
        assert!(err.contains(want), "case {name}: {err}");
    }
}
