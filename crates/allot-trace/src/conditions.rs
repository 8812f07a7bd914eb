//! The text of a workload's conditions, as `allot submit`, the API and
//! traces write them: dependencies (`afterok:ID[:ID…][,afterany:…]`, DEP-1)
//! and arrays (`0-99%8`, ARR-1). One parser for all of them; which ids
//! exist is the caller's to say.

use allot_core::DepKind;

/// Most elements of one array.
pub const MAX_ARRAY_ELEMENTS: usize = 10_000;
/// Largest array index.
pub const MAX_ARRAY_INDEX: u32 = 1_000_000;
/// Most dependencies of one workload, as named (after duplicates are
/// removed).
pub const MAX_DEPENDENCIES: usize = 1_000;
/// Most workloads the dependencies of one workload name once the arrays
/// they name are expanded into their elements.
pub const MAX_DEPENDENCY_TARGETS: usize = MAX_ARRAY_ELEMENTS;

/// An array as asked for: its indices, in ascending order, and at most how
/// many elements may be queued or running at once (ARR-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    pub indices: Vec<u32>,
    pub limit: Option<u32>,
}

/// A bad dependency or array text; the message says what to write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConditionError(pub String);

fn bad(m: impl Into<String>) -> ConditionError {
    ConditionError(m.into())
}

/// Parses `afterok:ID[:ID…]`, several joined by commas (all must hold):
/// the kind and the ids it names, in order, duplicates removed (by a set:
/// a text naming one id many times costs its length, not its square).
pub fn parse_dependencies(s: &str) -> Result<Vec<(DepKind, String)>, ConditionError> {
    let mut out: Vec<(DepKind, String)> = Vec::new();
    let mut seen: std::collections::HashSet<(DepKind, &str)> = std::collections::HashSet::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad(format!("empty dependency in {s:?} (write afterok:ID[:ID…], joined by commas)")));
        }
        let mut fields = part.split(':');
        let kind = fields.next().unwrap_or_default();
        let kind = DepKind::parse(&kind.to_ascii_lowercase()).ok_or_else(|| {
            bad(format!("unknown dependency type {kind:?} in {part:?} (use afterok, afterany or afternotok)"))
        })?;
        let ids: Vec<&str> = fields.map(str::trim).collect();
        if ids.is_empty() || ids.iter().any(|i| i.is_empty()) {
            return Err(bad(format!("{part:?} names no workload (write {}:ID[:ID…])", kind.as_str())));
        }
        for id in ids {
            if seen.insert((kind, id)) {
                out.push((kind, id.to_string()));
                if out.len() > MAX_DEPENDENCIES {
                    return Err(bad(format!("more than {MAX_DEPENDENCIES} dependencies, at most {MAX_DEPENDENCIES}")));
                }
            }
        }
    }
    Ok(out)
}

/// Writes dependencies as [`parse_dependencies`] reads them, grouped by
/// kind (`afterok:12:13,afterany:9`); empty for none.
pub fn format_dependencies<'a>(deps: impl IntoIterator<Item = (DepKind, &'a str)>) -> String {
    let mut by_kind: std::collections::BTreeMap<DepKind, Vec<&str>> = std::collections::BTreeMap::new();
    for (kind, id) in deps {
        by_kind.entry(kind).or_default().push(id);
    }
    by_kind.into_iter().map(|(k, ids)| format!("{}:{}", k.as_str(), ids.join(":"))).collect::<Vec<_>>().join(",")
}

/// Parses an array's indices as Slurm writes them: `0-99`, `1,3,5-9`,
/// `0-15:4` (every fourth), with `%N` at the end for at most N at once.
pub fn parse_array(s: &str) -> Result<ArraySpec, ConditionError> {
    let usage = "write indices as 0-99, 1,3,5-9 or 0-15:4, optionally with %N for at most N at once";
    let (list, limit) =
        match s.split_once('%') {
            Some((l, n)) => {
                let n: u32 =
                    n.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        bad(format!("array limit {n:?} in {s:?} is not a whole number from 1 ({usage})"))
                    })?;
                (l, Some(n))
            }
            None => (s, None),
        };
    let index = |v: &str| -> Result<u32, ConditionError> {
        let v = v.trim();
        let i: u32 =
            v.parse().map_err(|_| bad(format!("array index {v:?} in {s:?} is not a whole number ({usage})")))?;
        if i > MAX_ARRAY_INDEX {
            return Err(bad(format!("array index {i} in {s:?} is above {MAX_ARRAY_INDEX}")));
        }
        Ok(i)
    };
    let mut indices = std::collections::BTreeSet::new();
    for part in list.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad(format!("empty element in array {s:?} ({usage})")));
        }
        let (range, step) = match part.split_once(':') {
            Some((r, st)) => {
                let st: u32 =
                    st.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        bad(format!("array step {st:?} in {s:?} is not a whole number from 1 ({usage})"))
                    })?;
                (r, st)
            }
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (index(a)?, index(b)?),
            None => (index(range)?, index(range)?),
        };
        if lo > hi {
            return Err(bad(format!("array range {range:?} in {s:?} goes down ({usage})")));
        }
        let mut i = lo;
        while i <= hi {
            indices.insert(i);
            if indices.len() > MAX_ARRAY_ELEMENTS {
                return Err(bad(format!("array {s:?} has more than {MAX_ARRAY_ELEMENTS} elements")));
            }
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    Ok(ArraySpec { indices: indices.into_iter().collect(), limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_as_slurm_writes_them() {
        let a = parse_array("0-99%8").unwrap();
        assert_eq!((a.indices.len(), a.indices[0], a.indices[99], a.limit), (100, 0, 99, Some(8)));
        assert_eq!(parse_array("1,3,5-7").unwrap().indices, [1, 3, 5, 6, 7]);
        assert_eq!(parse_array("0-15:4").unwrap().indices, [0, 4, 8, 12]);
        assert_eq!(parse_array("3").unwrap(), ArraySpec { indices: vec![3], limit: None });
        for (bad, says) in [
            ("9-1", "goes down"),
            ("0-9%0", "array limit \"0\""),
            ("a-3", "array index \"a\""),
            ("0-20000", "more than 10000 elements"),
            ("1,,2", "empty element"),
            ("0-9:0", "array step \"0\""),
        ] {
            let e = parse_array(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn dependencies_as_slurm_writes_them() {
        assert_eq!(
            parse_dependencies("afterok:12:13,afterany:9").unwrap(),
            [(DepKind::AfterOk, "12".into()), (DepKind::AfterOk, "13".into()), (DepKind::AfterAny, "9".into())]
        );
        assert_eq!(parse_dependencies("AfterNotOk:4_2").unwrap(), [(DepKind::AfterNotOk, "4_2".into())]);
        let e = parse_dependencies("after:3").unwrap_err().to_string();
        assert_eq!(e, "unknown dependency type \"after\" in \"after:3\" (use afterok, afterany or afternotok)");
        let e = parse_dependencies("afterok").unwrap_err().to_string();
        assert_eq!(e, "\"afterok\" names no workload (write afterok:ID[:ID…])");
    }
}
