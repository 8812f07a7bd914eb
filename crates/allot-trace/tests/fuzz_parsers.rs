//! Fuzzing the input parsers: any text given as a config, a trace or an
//! event file yields a value or an error that names the file (and, for rows,
//! the line) with a message, and never panics. Inputs are random bytes and
//! mutations of valid files (lines dropped, values replaced, bytes spliced
//! in); case counts are bounded.

use std::path::Path;

use allot_trace::config::{Config, load_config, parse_config};
use allot_trace::duration::parse_duration;
use allot_trace::error::FormatError;
use allot_trace::events::{parse_events_csv, parse_events_jsonl};
use allot_trace::trace::{parse_trace_csv, parse_trace_jsonl};
use proptest::prelude::*;

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats").join(name);
    std::fs::read_to_string(p).expect("fixture")
}

fn config() -> Config {
    load_config(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/small.toml")).expect("config")
}

/// Values that stress parsers: empty, huge, negative, non-numeric, quotes,
/// separators, control characters, non-ASCII.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("-1".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e308".to_string()),
        Just("NaN".to_string()),
        Just("\"".to_string()),
        Just(",,".to_string()),
        Just("[".to_string()),
        Just("{}".to_string()),
        Just("\u{0}".to_string()),
        Just("é".to_string()),
        Just("0".to_string()),
        "[ -~]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(16).collect()),
    ]
}

/// A valid file, mutated: lines dropped, some values after `=`, `,` or
/// `:` replaced, some bytes spliced in.
fn mutated(valid: String) -> impl Strategy<Value = String> {
    let lines: Vec<String> = valid.lines().map(str::to_string).collect();
    let n = lines.len().max(1);
    (
        proptest::collection::vec(proptest::bool::weighted(0.9), n),
        proptest::collection::vec((0..n, token()), 0..4),
        proptest::collection::vec((0..n, any::<u8>()), 0..3),
    )
        .prop_map(move |(keep, repl, bytes)| {
            let mut out = lines.clone();
            for (line, keep) in out.iter_mut().zip(&keep) {
                if !keep {
                    line.clear();
                }
            }
            for (i, t) in repl {
                let l = &mut out[i.min(n - 1)];
                if let Some(p) = l.rfind(['=', ',', ':']) {
                    l.truncate(p + 1);
                    l.push_str(&t);
                }
            }
            let mut text = out.join("\n").into_bytes();
            for (i, b) in bytes {
                let at = (i * 31) % (text.len() + 1);
                text.insert(at, b);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
}

fn located(e: &FormatError, file: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(&e.file, file);
    prop_assert!(!e.message.is_empty(), "an error without a message: {e:?}");
    let shown = e.to_string();
    prop_assert!(shown.starts_with(file), "{shown}");
    Ok(())
}

/// Row errors of traces and events name the line (the header is line 1).
fn on_a_line(e: &FormatError, file: &str, text: &str) -> Result<(), TestCaseError> {
    located(e, file)?;
    if let Some(line) = e.line {
        let lines = text.lines().count().max(1) as u64;
        prop_assert!(line >= 1 && line <= lines + 1, "line {line} of {lines}: {e}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn config_text_is_a_config_or_a_located_error(text in prop_oneof![mutated(fixture("small.toml")), any::<String>()]) {
        if let Err(e) = parse_config(&text, "fuzz.toml") {
            located(&e, "fuzz.toml")?;
        }
    }

    #[test]
    fn trace_csv_is_rows_or_a_located_error(text in prop_oneof![mutated(fixture("rows.csv")), any::<String>()]) {
        let cfg = config();
        if let Err(e) = parse_trace_csv(text.as_bytes(), "fuzz.csv", &cfg) {
            on_a_line(&e, "fuzz.csv", &text)?;
        }
    }

    #[test]
    fn trace_jsonl_is_rows_or_a_located_error(text in prop_oneof![mutated(fixture("rows.jsonl")), any::<String>()]) {
        let cfg = config();
        if let Err(e) = parse_trace_jsonl(text.as_bytes(), "fuzz.jsonl", &cfg) {
            on_a_line(&e, "fuzz.jsonl", &text)?;
            prop_assert!(e.line.is_some(), "a JSON Lines error names its line: {e}");
        }
    }

    #[test]
    fn events_are_events_or_a_located_error(
        text in prop_oneof![
            Just("t_s,node,event\n10,h100-0,fail\n20,h100-0,repair\n".to_string()).prop_flat_map(mutated),
            any::<String>(),
        ],
        jsonl in any::<bool>(),
    ) {
        let cfg = config();
        let r = if jsonl {
            parse_events_jsonl(text.as_bytes(), "fuzz.events", &cfg)
        } else {
            parse_events_csv(text.as_bytes(), "fuzz.events", &cfg)
        };
        if let Err(e) = r {
            on_a_line(&e, "fuzz.events", &text)?;
        }
    }

    #[test]
    fn durations_parse_or_say_why(text in prop_oneof![token(), "[0-9dhms ]{0,12}"]) {
        match parse_duration(&text) {
            Ok(_) => {}
            Err(m) => prop_assert!(m.to_string().contains("duration"), "{m}"),
        }
    }
}

/// Found by the config fuzzer: a NUL byte in a comment gave an error with
/// an empty message.
#[test]
fn a_control_character_in_a_comment_is_named() {
    let e = parse_config("# a comment\u{0} with a NUL\n[cluster]\nname = \"x\"\n", "nul.toml").expect_err("invalid");
    assert_eq!(e.line, Some(1), "{e}");
    assert!(e.message.contains("control character"), "{e}");
}
