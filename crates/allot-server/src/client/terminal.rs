//! Text for a terminal. What users wrote (a workload's command, name,
//! working directory, env, reasons, account and token names …) reaches the
//! text output of every client command through [`text`], with its control
//! characters written as C escapes, so it cannot move the cursor, clear the
//! screen, set the window title or hide what follows (docs/cli.md, "Text
//! output"). `--json` prints the API's values exactly and does not come
//! here.
//!
//! The escapes, as GNU `ls --quoting-style=escape` and C write them:
//! `\a \b \t \n \v \f \r`, `\e` for ESC, `\xHH` for the other C0 controls
//! and DEL, and `\u{HHHH}` for the C1 controls (U+0080 to U+009F, which
//! some terminals obey as ESC sequences) and the bidirectional overrides
//! (U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, which reorder what a
//! line shows). A backslash itself is left as it is.

use std::borrow::Cow;
use std::fmt::Write;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Whether `c` is written as an escape.
fn escaped(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character (newline too) written as an escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_but(s, None)
}

/// `s` with every control character but `keep` written as an escape.
fn escape_but(s: &str, keep: Option<char>) -> Cow<'_, str> {
    if !s.chars().any(|c| escaped(c) && Some(c) != keep) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if Some(c) == keep || !escaped(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// Every string of a JSON value (object keys too), escaped.
fn escape_value(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if let Cow::Owned(e) = escape(s) {
                *s = e;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(escape_value),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut item) in entries {
                escape_value(&mut item);
                map.insert(escape(&k).into_owned(), item);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `render` of `v` for a terminal: every string in `v` escaped before it
/// is rendered (a newline in a value is `\n`, not a line of its own); then
/// whatever control character the text still holds, but its newlines.
pub fn text<T: Serialize + DeserializeOwned>(v: &T, render: impl FnOnce(&T) -> String) -> String {
    let safe = serde_json::to_value(v).ok().and_then(|mut value| {
        escape_value(&mut value);
        serde_json::from_value::<T>(value).ok()
    });
    let out = match &safe {
        Some(s) => render(s),
        None => render(v),
    };
    match escape_but(&out, Some('\n')) {
        Cow::Borrowed(_) => out,
        Cow::Owned(e) => e,
    }
}

/// A line of text for a terminal (an error, a message): its control
/// characters escaped, its newlines kept.
pub fn line(s: &str) -> Cow<'_, str> {
    escape_but(s, Some('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_c_escapes() {
        let cases = [
            ("plain", "python train.py --lr=0.1 ü", "python train.py --lr=0.1 ü"),
            ("title and clear", "\x1b]0;pwned\x07\x1b[2J", "\\e]0;pwned\\a\\e[2J"),
            ("named", "\t\n\r\u{8}\u{b}\u{c}", "\\t\\n\\r\\b\\v\\f"),
            ("other C0 and DEL", "\u{0}\u{1}\u{7f}", "\\x00\\x01\\x7f"),
            ("C1 CSI", "a\u{9b}2Jb", "a\\u{9b}2Jb"),
            ("bidi override", "x\u{202e}yz", "x\\u{202e}yz"),
            ("backslash kept", "C:\\dir", "C:\\dir"),
        ];
        for (name, s, want) in cases {
            assert_eq!(escape(s), want, "case {name}");
        }
        assert_eq!(line("a\nb\x1b"), "a\nb\\e");
    }

    #[test]
    fn text_escapes_values_and_keeps_the_layout() {
        let v = serde_json::json!({"cmd": ["echo", "\x1b[2J\nfake line"], "env": {"K\x07": "v\r"}});
        let out = text(&v, |v| format!("{}\n{}\n", v["cmd"][1].as_str().unwrap(), v["env"]));
        assert_eq!(out, "\\e[2J\\nfake line\n{\"K\\\\a\":\"v\\\\r\"}\n");
        assert_eq!(text(&v, |_| "raw\x1b\n".to_string()), "raw\\e\n", "what the renderer adds is escaped too");
    }
}
