//! The map of docs/architecture.md, kept true: the crates depend on each
//! other only along the arrows drawn there, and no two modules of a crate
//! import each other, directly or round a circle (at any depth of the module
//! tree, and between the top-level modules as wholes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The arrows of docs/architecture.md: crate → the workspace crates it may
/// depend on (normal dependencies; tests may use more).
const ARROWS: &[(&str, &[&str])] = &[
    ("allot-core", &[]),
    ("allot-testkit", &["allot-core"]),
    ("allot-sim", &["allot-core"]),
    ("allot-trace", &["allot-core"]),
    ("allot-report", &["allot-core", "allot-sim"]),
    ("allot-server", &["allot-core", "allot-sim", "allot-trace", "allot-report"]),
    ("allot", &["allot-core", "allot-sim", "allot-trace", "allot-report", "allot-server"]),
];

fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).expect("manifest");
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some(name) = line.split(['=', '.', ' ']).next().filter(|n| n.starts_with("allot")) {
            deps.insert(name.to_string());
        }
    }
    deps
}

#[test]
fn crates_depend_only_along_the_documented_arrows() {
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(crates_dir()).expect("crates") {
        let dir = entry.expect("entry").path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.exists() {
            continue;
        }
        let name = dir.file_name().expect("name").to_string_lossy().to_string();
        let allowed = ARROWS.iter().find(|(c, _)| *c == name).map(|(_, a)| *a);
        let Some(allowed) = allowed else {
            panic!("crate {name} is not on the map of docs/architecture.md (add it there and here)");
        };
        for dep in dependencies(&manifest) {
            assert!(allowed.contains(&dep.as_str()), "{name} depends on {dep}: not an arrow of docs/architecture.md");
        }
        seen.insert(name);
    }
    assert_eq!(seen.len(), ARROWS.len(), "every crate of the map exists");
}

/// Module path (`a::b`) → the module paths it names through `crate::` or
/// `super::` (comments, `mod tests` blocks and modules compiled only for
/// tests, `#[cfg(test)] mod x;`, left out).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<Vec<String>>> {
    let mut out = BTreeMap::new();
    let mut test_only: BTreeSet<String> = BTreeSet::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().to_string()).collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                parts.clear();
            }
            let text = std::fs::read_to_string(&p).expect("source");
            for (at, _) in text.match_indices("#[cfg(test)]\n") {
                let next = text[at..].lines().nth(1).unwrap_or_default().trim();
                let decl = next.strip_prefix("pub(crate) ").unwrap_or(next);
                if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                    test_only.insert(parts.iter().map(String::as_str).chain([name]).collect::<Vec<_>>().join("::"));
                }
            }
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
            let mut named = BTreeSet::new();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (at, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
                    let rest = &code[at..];
                    let path: Vec<&str> = rest
                        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .next()
                        .unwrap_or_default()
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .collect();
                    let mut target: Vec<String> = match path.first() {
                        Some(&"super") => parts[..parts.len().saturating_sub(1)].to_vec(),
                        _ => Vec::new(),
                    };
                    target.extend(path[1..].iter().map(|s| s.to_string()));
                    named.insert(target);
                }
            }
            out.insert(parts.join("::"), named);
        }
    }
    out.retain(|m, _| !test_only.contains(m));
    out
}

/// The circles of the graph of modules cut to `depth` path segments
/// (usize::MAX: every module), ignoring a module's references to its own
/// ancestors or descendants.
fn circles(src: &Path, depth: usize) -> Vec<Vec<String>> {
    let imports = imports(src);
    let cut = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, named) in &imports {
        for n in named {
            // The longest prefix of the named path that is a module.
            let Some(target) = (1..=n.len()).rev().map(|k| n[..k].join("::")).find(|t| imports.contains_key(t)) else {
                continue;
            };
            let related = target == *m
                || target.starts_with(&format!("{m}::"))
                || m.starts_with(&format!("{target}::"))
                || m.is_empty()
                || target.is_empty();
            if !related && cut(&target) != cut(m) {
                graph.entry(cut(m)).or_default().insert(cut(&target));
            }
        }
    }
    // Modules that reach each other are on a circle.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(x) = todo.pop() {
            for y in graph.get(&x).into_iter().flatten() {
                if seen.insert(y.clone()) {
                    todo.push(y.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        let r = reach(m);
        if r.contains(m) {
            let mut circle: Vec<String> = r.into_iter().filter(|x| reach(x).contains(m)).collect();
            circle.sort();
            if !found.contains(&circle) {
                found.push(circle);
            }
        }
    }
    found
}

#[test]
fn no_module_imports_itself_round_a_circle() {
    for name in ARROWS.iter().map(|(c, _)| *c) {
        let src = crates_dir().join(name).join("src");
        for depth in [1, usize::MAX] {
            let c = circles(&src, depth);
            assert!(c.is_empty(), "{name}: modules import each other round a circle: {c:?}");
        }
    }
}
