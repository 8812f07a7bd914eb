//! Duration syntax: accepted forms, rejected forms, and format/parse round trips.

use allot_trace::duration::{DurationErrorKind, format_duration, parse_duration};
use proptest::prelude::*;

#[test]
fn parses_units_compounds_and_bare_seconds() {
    let cases = [
        ("seconds", "30s", 30),
        ("minutes", "10m", 600),
        ("hours", "2h", 7200),
        ("days", "7d", 604_800),
        ("compound", "1d12h", 129_600),
        ("all units", "1d2h3m4s", 93_784),
        ("zero", "0s", 0),
        ("bare integer", "45", 45),
        ("surrounding spaces", " 2h ", 7200),
        ("decimal hours", "1.5h", 5400),
        ("decimal minutes", "0.5m", 30),
        ("decimal days", "1.25d", 108_000),
        ("minutes and seconds", "05:30", 330),
        ("hours, minutes, seconds", "02:00:00", 7200),
        ("long hours", "100:00:00", 360_000),
        ("days and hours", "1-12", 129_600),
        ("days, hours, minutes", "1-00:30", 88_200),
        ("days, hours, minutes, seconds", "2-03:04:05", 183_845),
    ];
    for (name, text, want) in cases {
        assert_eq!(parse_duration(text), Ok(want), "case {name}");
    }
}

#[test]
fn rejects_everything_else() {
    let cases = [
        ("unknown unit", "10q"),
        ("empty", ""),
        ("unit only", "h"),
        ("negative", "-5s"),
        ("fraction of a second", "0.5s"),
        ("decimal without unit", "1.5"),
        ("decimal compound", "1.5h30m"),
        ("two points", "1.2.3h"),
        ("empty fraction", "1.h"),
        ("word", "soon"),
        ("sixty minutes", "60:00"),
        ("sixty seconds", "1:00:60"),
        ("day hours past 23", "1-24:00:00"),
        ("four clock fields", "1:2:3:4"),
        ("empty clock field", "1::00"),
        ("clock with unit", "1:30m"),
        ("day only", "1-"),
        ("units out of order", "12h1d"),
        ("repeated unit", "1h1h"),
        ("upper case unit", "2H"),
        ("inner space", "1d 12h"),
        ("trailing digits", "1h30"),
        ("overflow", "99999999999999999999d"),
    ];
    for (name, text) in cases {
        let err = parse_duration(text).expect_err(name).to_string();
        assert!(err.contains(&format!("{text:?}")), "case {name}: {err}");
    }
    let e = parse_duration("10q").unwrap_err();
    assert_eq!(e.kind, DurationErrorKind::Invalid);
    assert_eq!(e.to_string(), "invalid duration \"10q\" (use e.g. 30s, 10m, 2h, 1.5h, 7d, HH:MM:SS or D-HH:MM:SS)");
    let e = parse_duration("0.5s").unwrap_err();
    assert_eq!(e.to_string(), "duration \"0.5s\" is not a whole number of seconds");
    assert_eq!(parse_duration("99999999999999999999d").unwrap_err().kind, DurationErrorKind::TooLarge);
}

#[test]
fn formats_in_the_shortest_readable_form() {
    let cases = [(0, "0s"), (30, "30s"), (90, "1m30s"), (7200, "2h"), (604_800, "7d"), (129_600, "1d12h")];
    for (secs, want) in cases {
        assert_eq!(format_duration(secs), want, "{secs} s");
    }
}

proptest! {
    #[test]
    fn format_then_parse_is_identity(secs in any::<u64>()) {
        prop_assert_eq!(parse_duration(&format_duration(secs)), Ok(secs));
    }

    #[test]
    fn bare_integers_are_seconds(secs in any::<u64>()) {
        prop_assert_eq!(parse_duration(&secs.to_string()), Ok(secs));
    }
}
