//! Where `allot submit` says the workload runs: the submitter's current
//! directory (absolute, as the client sees it), or `--chdir DIR`, a
//! relative `DIR` taken from the current directory (docs/server.md,
//! "Where a workload runs").

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The `workdir` of a submission: `chdir` if absolute, else the current
/// directory joined with it (or alone without `chdir`).
pub fn for_submission(chdir: Option<&Path>) -> Result<String> {
    let dir = match chdir {
        Some(d) if d.is_absolute() => d.to_path_buf(),
        _ => {
            let cwd =
                current_dir().context("failed to read the current directory (give --chdir with an absolute DIR)")?;
            resolve(&cwd, chdir)
        }
    };
    match dir.to_str() {
        Some(s) => Ok(s.to_string()),
        None => bail!("the working directory {} is not valid UTF-8; give --chdir DIR", dir.display()),
    }
}

/// `chdir` taken from `cwd` (`cwd` itself without one).
fn resolve(cwd: &Path, chdir: Option<&Path>) -> PathBuf {
    match chdir {
        None => cwd.to_path_buf(),
        Some(d) if d == Path::new(".") => cwd.to_path_buf(),
        Some(d) => cwd.join(d.strip_prefix(".").unwrap_or(d)),
    }
}

/// The current directory as the shell names it (`$PWD`, as `pwd` prints
/// it, symbolic links kept) when that is the same directory, else the
/// kernel's.
fn current_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let real = std::env::current_dir()?;
    let same = |p: &Path| {
        let (a, b) = (std::fs::metadata(p), std::fs::metadata("."));
        matches!((a, b), (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino())
    };
    Ok(std::env::var_os("PWD").map(PathBuf::from).filter(|p| p.is_absolute() && same(p)).unwrap_or(real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_chdir_is_taken_from_the_current_directory() {
        let cwd = Path::new("/home/ann/proj");
        let cases: [(&str, Option<&str>, &str); 5] = [
            ("none", None, "/home/ann/proj"),
            ("dot", Some("."), "/home/ann/proj"),
            ("relative", Some("runs/a"), "/home/ann/proj/runs/a"),
            ("dot-relative", Some("./runs"), "/home/ann/proj/runs"),
            ("parent", Some("../data"), "/home/ann/proj/../data"),
        ];
        for (name, chdir, want) in cases {
            assert_eq!(resolve(cwd, chdir.map(Path::new)), Path::new(want), "case {name}");
        }
        assert_eq!(for_submission(Some(Path::new("/abs/dir"))).unwrap(), "/abs/dir", "an absolute DIR as given");
        let here = std::env::current_dir().unwrap();
        let got = PathBuf::from(for_submission(None).unwrap());
        assert!(got.is_absolute(), "{}", got.display());
        assert_eq!(got.canonicalize().unwrap(), here.canonicalize().unwrap(), "the current directory by default");
    }
}
