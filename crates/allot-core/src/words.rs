//! Counts and spans in words, as people write them: `1 GPU`, `2 GPUs`,
//! `1 node`, `3 min`, `1 h 10 min`.

/// `n` and the noun, its plural unless `n` is 1: `count(1, "node")` is
/// `1 node`, `count(3, "GPU")` is `3 GPUs`. Nouns ending in `s`, `x`,
/// `ch` or `sh` take `es`; a consonant and `y`, `ies`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 { format!("1 {noun}") } else { format!("{n} {}", plural(noun)) }
}

/// The plural of an English noun by the regular rules.
pub fn plural(noun: &str) -> String {
    let consonant_y = noun.ends_with('y') && !noun[..noun.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &noun[..noun.len() - 1])
    } else if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

/// A span of seconds as people say it, to about two figures: `40 s`,
/// `3 min`, `1 h 10 min`, `2 d 3 h`.
pub fn span(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => match s % 3600 / 60 {
            0 => format!("{} h", s / 3600),
            m => format!("{} h {m} min", s / 3600),
        },
        s => match s % 86_400 / 3600 {
            0 => format!("{} d", s / 86_400),
            h => format!("{} d {h} h", s / 86_400),
        },
    }
}

/// `1 GPU`, `8 GPUs`.
pub fn gpus(n: u64) -> String {
    count(n, "GPU")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        for (s, want) in [
            (0, "0 s"),
            (59, "59 s"),
            (60, "1 min"),
            (3599, "59 min"),
            (3600, "1 h"),
            (4200, "1 h 10 min"),
            (86_400, "1 d"),
            (97_200, "1 d 3 h"),
        ] {
            assert_eq!(span(s), want);
        }
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        let cases = [
            (0, "GPU", "0 GPUs"),
            (1, "GPU", "1 GPU"),
            (2, "node", "2 nodes"),
            (1, "workload", "1 workload"),
            (7, "workload", "7 workloads"),
            (2, "class", "2 classes"),
            (3, "policy", "3 policies"),
            (2, "day", "2 days"),
        ];
        for (n, noun, want) in cases {
            assert_eq!(count(n as u64, noun), want);
        }
    }
}
