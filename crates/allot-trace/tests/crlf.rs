//! Line numbers in errors do not depend on how lines end: CRLF (what
//! spreadsheets and Python's `csv` module write), LF, blank lines between
//! rows. Each case is checked with both line ends.

use std::path::Path;

use allot_trace::config::{Config, load_config};
use allot_trace::events::parse_events_csv;
use allot_trace::import::{Format, ImportOptions, import};
use allot_trace::trace::parse_trace_csv;

const HEADER: &str = "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible";
const GOOD_ROW: &str = "ok1,0,org/a/p1,ann,batch,8,1,H100,3600,0,1.0,normal,false";
const BAD_ACCOUNT: &str = "x,0,org/zz,u,batch,8,1,,60,0,1,normal,false";

/// h100: 4 nodes × 8 H100; b200: 2 nodes × 8 B200; accounts org/a/p1, org/a/p2, org/b.
fn config() -> Config {
    load_config(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/small.toml")).unwrap()
}

/// `lines` joined and ended by `eol`.
fn text(lines: &[&str], eol: &str) -> String {
    lines.iter().map(|l| format!("{l}{eol}")).collect()
}

/// (line ends, case, lines of the file, line of the error, field, message fragment)
type Case = (&'static str, &'static [&'static str], u64, &'static str, &'static str);

const TRACE_CASES: &[Case] = &[
    ("first data row", &[HEADER, BAD_ACCOUNT], 2, "account", "unknown account"),
    ("third line", &[HEADER, GOOD_ROW, BAD_ACCOUNT], 3, "account", "unknown account"),
    ("after a blank line", &[HEADER, GOOD_ROW, "", BAD_ACCOUNT], 4, "account", "unknown account"),
    (
        "duplicate id names both lines",
        &[HEADER, GOOD_ROW, "ok1,0,org/b,u,batch,8,0,,60,0,1,normal,false"],
        3,
        "id",
        "(first on line 2)",
    ),
    (
        "after a quoted line break",
        &[HEADER, "\"a", "b\",0,org/b,u,batch,8,0,,60,0,1,normal,false", BAD_ACCOUNT],
        4,
        "account",
        "unknown account",
    ),
];

#[test]
fn trace_errors_name_the_line_whatever_the_line_ends() {
    let cfg = config();
    for eol in ["\r\n", "\n"] {
        for (name, lines, line, field, fragment) in TRACE_CASES {
            let err = parse_trace_csv(text(lines, eol).as_bytes(), "t.csv", &cfg).expect_err(name);
            let case = format!("case {name} ({eol:?})");
            assert_eq!((err.line, err.field.as_deref()), (Some(*line), Some(*field)), "{case}: {err}");
            assert!(err.to_string().starts_with(&format!("t.csv:{line}: ")), "{case}: {err}");
            assert!(err.message.contains(fragment), "{case}: {err}");
        }
    }
}

#[test]
fn malformed_csv_rows_name_their_line() {
    let cfg = config();
    for eol in ["\r\n", "\n"] {
        let err = parse_trace_csv(text(&[HEADER, GOOD_ROW, "a,1,2"], eol).as_bytes(), "t.csv", &cfg).unwrap_err();
        assert_eq!(err.line, Some(3), "{eol:?}: {err}");
        assert!(err.message.contains("expected 13 fields"), "{err}");
    }
}

#[test]
fn event_errors_name_the_line_whatever_the_line_ends() {
    let cfg = config();
    for eol in ["\r\n", "\n"] {
        let cases: [(&str, &[&str], u64); 3] = [
            ("first data row", &["t_s,node,event", "5,h100-9,fail"], 2),
            ("third line", &["t_s,node,event", "0,h100-0,drain", "5,h100-9,fail"], 3),
            ("after a blank line", &["t_s,node,event", "0,h100-0,drain", "", "5,h100-9,fail"], 4),
        ];
        for (name, lines, line) in cases {
            let err = parse_events_csv(text(lines, eol).as_bytes(), "e.csv", &cfg).expect_err(name);
            assert_eq!((err.line, err.field.as_deref()), (Some(line), Some("node")), "case {name} ({eol:?}): {err}");
        }
    }
}

#[test]
fn legacy_sizes_errors_name_the_line_whatever_the_line_ends() {
    let dir = std::env::temp_dir().join(format!("allot-crlf-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import/helios_cluster_log.csv");
    for (i, eol) in ["\r\n", "\n"].into_iter().enumerate() {
        let path = dir.join(format!("sizes-{i}.csv"));
        std::fs::write(&path, text(&["vc,gpus", "vcA,17", "", "vcB,many"], eol)).unwrap();
        let mut opts = ImportOptions::default();
        opts.sizing.legacy_sizes = Some(path);
        let err = import(Format::Helios, &log, &opts).unwrap_err().to_string();
        assert!(err.contains("line 4: column \"gpus\""), "{eol:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
