//! Counts in words, as people write them: `1 GPU`, `2 GPUs`, `1 node`.

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

/// A span of seconds as people read it: `1d 2h`, `1h 30m`, `45s`; the two
/// largest units that are not zero, `0s` for nothing.
pub fn duration(s: u64) -> String {
    let units = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")];
    let parts: Vec<String> = units
        .iter()
        .scan(s, |left, &(u, name)| {
            let n = *left / u;
            *left %= u;
            Some((n, name))
        })
        .filter(|(n, _)| *n > 0)
        .take(2)
        .map(|(n, name)| format!("{n}{name}"))
        .collect();
    if parts.is_empty() { "0s".to_string() } else { parts.join(" ") }
}

/// `1 GPU`, `8 GPUs`.
pub fn gpus(n: u64) -> String {
    count(n, "GPU")
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn durations_in_the_two_largest_units() {
        for (s, want) in [(0, "0s"), (45, "45s"), (90, "1m 30s"), (3600, "1h"), (5400, "1h 30m"), (93_784, "1d 2h")] {
            assert_eq!(duration(s), want);
        }
    }
}
