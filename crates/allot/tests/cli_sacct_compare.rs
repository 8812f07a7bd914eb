//! A real Slurm site's accounting through the real binary: `allot trace
//! import --format sacct` on the Slurm 22.05 outputs of
//! `crates/allot-trace/tests/fixtures/slurm-real/` (jobs, nodes,
//! associations, configuration), then `allot compare` of the `slurm`
//! baseline against `allot` on what it wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const FIXTURES: &str = "crates/allot-trace/tests/fixtures/slurm-real";
const POLICIES: [&str; 2] = ["slurm", "allot"];
const OUTCOMES: [&str; 6] = ["completed", "failed", "cancelled", "idle_reclaimed", "rejected", "unfinished"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn allot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_allot")).args(args).current_dir(repo()).output().expect("run allot")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn a_real_sacct_import_compares_slurm_with_allot() {
    let dir = std::env::temp_dir().join(format!("allot-sacct-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, config, out) = (dir.join("site.csv"), dir.join("site.toml"), dir.join("cmp"));
    let fixture = |f: &str| format!("{FIXTURES}/{f}");
    let r = allot(&[
        "trace",
        "import",
        "--format",
        "sacct",
        &fixture("sacct-epoch.txt"),
        "--slurm-nodes",
        &fixture("scontrol-show-nodes.txt"),
        "--slurm-assoc",
        &fixture("sacctmgr-assoc.txt"),
        "--slurm-config",
        &fixture("scontrol-show-config.txt"),
        "--out",
        trace.to_str().unwrap(),
        "--config-out",
        config.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "import: {}", String::from_utf8_lossy(&r.stderr));
    // The site's configuration reached the config the comparison reads.
    let toml = read(&config);
    assert!(toml.contains("\n[slurm]\n"), "no [slurm] knobs in {toml}");
    let rows = read(&trace).lines().skip(1).filter(|l| !l.trim().is_empty()).count();
    assert!(rows > 20, "the fixture's jobs became rows: {rows}");

    let (c, t, o) = (config.to_str().unwrap(), trace.to_str().unwrap(), out.to_str().unwrap());
    let r = allot(&["compare", "--config", c, "--trace", t, "--policies", &POLICIES.join(","), "--out", o]);
    assert!(r.status.success(), "compare: {}", String::from_utf8_lossy(&r.stderr));

    // Both policies ran, in order, on every imported row; every workload
    // has exactly one outcome.
    let json: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let reports = json.as_array().expect("an array of reports");
    let names: Vec<&str> = reports.iter().map(|r| r["policy"].as_str().expect("a policy name")).collect();
    assert_eq!(names, POLICIES, "the reports are the policies compared");
    for r in reports {
        let p = &r["policy"];
        let n = r["workloads"].as_u64().expect("a workload count");
        assert_eq!(n, rows as u64, "{p}: every imported row is a workload");
        let m = &r["metrics"];
        let sum: u64 = OUTCOMES.iter().map(|o| m[format!("{o}_workloads")].as_u64().expect("an outcome count")).sum();
        assert_eq!(sum, n, "{p}: outcomes add up to the workloads");
        assert!(m["completed_workloads"].as_u64().unwrap() > 0, "{p}: some work completes");
    }

    // The headline opens the summary, names both policies and compares
    // allot against the Slurm baseline; the table has a column each.
    let md = read(&out.join("summary.md"));
    let after_title = md.split_once("\n\n").expect("a title").1;
    let opening = format!("Compared slurm, allot on trace {t} ({rows} workloads)");
    assert!(after_title.starts_with(&opening), "{md}");
    assert!(md.contains("\nAgainst slurm, allot "), "a headline paragraph against slurm: {md}");
    let at = |needle: &str| md.find(needle).unwrap_or_else(|| panic!("no {needle:?} in {md}"));
    assert!(at("\nAgainst slurm, allot ") < at("| measure |"), "the headline comes before the figures");
    let header = md.lines().find(|l| l.starts_with("| measure |")).expect("a header row");
    assert_eq!(header, "| measure | slurm | allot |");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(stdout.starts_with(&opening), "{stdout}");
    let html = read(&out.join("report.html"));
    assert!(html.contains("<p class=\"headline\">Compared slurm, allot"), "report.html has the headline");
    let _ = std::fs::remove_dir_all(&dir);
}
