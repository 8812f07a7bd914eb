//! The valid choices an error names after an unknown name (an account, a
//! GPU type, a cluster): all of them when there are few, else the nearest
//! by edit distance, so a typo is answered with what was meant.

/// Up to this many choices are listed in full.
pub const LIST_ALL_UP_TO: usize = 10;

/// How many of many choices are listed: the nearest.
pub const NEAREST: usize = 5;

/// The choices for `name` among `known`, for an error message: `a, b, c`
/// in their given order when there are at most [`LIST_ALL_UP_TO`]; else the
/// [`NEAREST`] nearest to `name` by edit distance (ties by name),
/// `a, b, c, d, e, … (the 5 nearest of 120)`; `none` when there are none.
pub fn list<S: AsRef<str>>(name: &str, known: &[S]) -> String {
    if known.is_empty() {
        return "none".to_string();
    }
    if known.len() <= LIST_ALL_UP_TO {
        return known.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", ");
    }
    let mut ranked: Vec<(usize, &str)> = known.iter().map(|k| (distance(name, k.as_ref()), k.as_ref())).collect();
    ranked.sort_unstable();
    let nearest: Vec<&str> = ranked.iter().take(NEAREST).map(|(_, k)| *k).collect();
    format!("{}, … (the {NEAREST} nearest of {})", nearest.join(", "), known.len())
}

/// Levenshtein distance over characters: insertions, deletions and
/// substitutions, each costing one.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_of_named_pairs() {
        let cases = [
            ("equal", "lab/bob", "lab/bob", 0),
            ("one insertion", "lab/bob", "lab/bobb", 1),
            ("one deletion", "lab/alice", "lab/alce", 1),
            ("one substitution", "H100", "H200", 1),
            ("from empty", "", "abc", 3),
            ("to empty", "abc", "", 3),
            ("swap costs two", "ab", "ba", 2),
            ("unrelated", "kitten", "sitting", 3),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(distance(a, b), want, "{name}");
            assert_eq!(distance(b, a), want, "{name} (symmetric)");
        }
    }

    #[test]
    fn few_choices_are_listed_in_full_and_in_order() {
        assert_eq!(list("x", &["org/b", "org/a"]), "org/b, org/a");
        assert_eq!(list::<&str>("x", &[]), "none");
        let ten: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        assert_eq!(list("zz", &ten), ten.join(", "));
    }

    #[test]
    fn many_choices_are_the_nearest_with_their_count() {
        let mut known: Vec<String> = (0..40).map(|i| format!("org/team{i:02}")).collect();
        known.push("lab/bob".into());
        known.push("lab/alice".into());
        let got = list("lab/bobb", &known);
        assert!(got.starts_with("lab/bob, "), "{got}");
        assert!(got.ends_with(", … (the 5 nearest of 42)"), "{got}");
        assert_eq!(got.matches(", ").count(), 5, "five names and the count: {got}");
        // Ties by name: equally far names come in name order.
        assert_eq!(
            list("org/team0", &known[..12]),
            "org/team00, org/team01, org/team02, org/team03, org/team04, … (the 5 nearest of 12)"
        );
    }
}
