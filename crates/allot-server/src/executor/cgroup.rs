//! Kernel containment of the local executor's attempts: each attempt runs
//! in a cgroup of its own, so that no process it starts (`setsid`, double
//! forks, dropped environment variables) can outlive it unseen.
//!
//! * The cgroup2 hierarchy is found at run time in `/proc/self/mountinfo`:
//!   the whole hierarchy on a pure cgroup2 host, or the `unified` mount
//!   beside the v1 controllers in a hybrid layout. Only its core files are
//!   used (`cgroup.procs`, `cgroup.events`, `cgroup.kill`), which exist
//!   with no controller enabled.
//! * Groups: `<cgroup2 mount>/allot-<instance>/<seq>.<attempt>/<rank>`, one
//!   leaf per node process of the attempt. `<instance>` is the store's
//!   random id, so two servers (or anything else on the host) never touch
//!   each other's groups, and a restarted server finds its own.
//! * A node process joins its leaf between `fork` and `exec` (it writes
//!   `0` to the leaf's `cgroup.procs`): everything it ever starts is in the
//!   group. The attempt is over when the attempt group's `cgroup.events`
//!   reads `populated 0`; stop sends SIGTERM to every process listed in
//!   the group, kill writes `1` to `cgroup.kill`.
//! * Devices (as Slurm's `ConstrainDevices`): where the v1 `devices`
//!   controller is mounted, each node process also joins
//!   `<devices mount>/allot-<instance>/<seq>.<attempt>/<rank>`, whose rules
//!   deny every device by default, then allow every block device, every
//!   character major but NVIDIA's 195, and of major 195 only the node's own
//!   GPUs (`/dev/nvidia<index>`, minor = index) and the control devices
//!   (`nvidiactl` 255, `nvidia-modeset` 254). `nvidia-uvm` and
//!   `nvidia-caps` have majors of their own and stay allowed. On a pure
//!   cgroup2 host device access is a BPF program (`BPF_CGROUP_DEVICE`),
//!   which this executor does not load: there, GPUs are separated only by
//!   `CUDA_VISIBLE_DEVICES`, and the server says so when it starts.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// NVIDIA's character major (`/dev/nvidia<N>`, `nvidiactl`, `nvidia-modeset`).
pub const NVIDIA_MAJOR: u32 = 195;
/// Minors of major 195 every GPU process needs: `nvidia-modeset`, `nvidiactl`.
const NVIDIA_CONTROL_MINORS: [u32; 2] = [254, 255];
/// Character majors are below this (Linux `CHRDEV_MAJOR_MAX`).
const CHAR_MAJORS: u32 = 512;

/// Why containment could not be set up or applied.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup2 file system is mounted (no line of type cgroup2 in /proc/self/mountinfo)")]
    NoCgroup2,
    #[error("the cgroup2 group {0} has no cgroup.kill (Linux 5.14 or later is needed)")]
    NoKill(PathBuf),
    #[error("failed to {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io { op, path: path.to_path_buf(), source }
}

/// Where the cgroup file systems this executor uses are mounted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The cgroup2 mount (the whole hierarchy, or `unified` in a hybrid layout).
    pub unified: Option<PathBuf>,
    /// The v1 `devices` controller's mount, where there is one.
    pub devices_v1: Option<PathBuf>,
}

impl Mounts {
    /// Reads `/proc/self/mountinfo`.
    pub fn of_this_process() -> io::Result<Mounts> {
        Ok(Mounts::parse(&fs::read_to_string("/proc/self/mountinfo")?))
    }

    /// Parses mountinfo lines (`ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS
    /// [OPTIONAL…] - FSTYPE SOURCE SUPEROPTS`); the first mount of each
    /// kind wins.
    pub fn parse(mountinfo: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in mountinfo.lines() {
            let Some((head, tail)) = line.split_once(" - ") else { continue };
            let Some(point) = head.split(' ').nth(4) else { continue };
            let mut t = tail.split(' ');
            let (fstype, super_opts) = (t.next().unwrap_or(""), t.nth(1).unwrap_or(""));
            let point = PathBuf::from(unescape(point));
            match fstype {
                "cgroup2" if m.unified.is_none() => m.unified = Some(point),
                "cgroup" if m.devices_v1.is_none() && super_opts.split(',').any(|o| o == "devices") => {
                    m.devices_v1 = Some(point)
                }
                _ => {}
            }
        }
        m
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The v1 devices rules of one node process: `(file, rule)` in the order
/// they are written (deny all first, then the allowed exceptions).
pub fn device_rules(own_gpus: &[u32]) -> Vec<(&'static str, String)> {
    let mut rules = vec![("devices.deny", "a".to_string()), ("devices.allow", "b *:* rwm".to_string())];
    for major in (0..CHAR_MAJORS).filter(|m| *m != NVIDIA_MAJOR) {
        rules.push(("devices.allow", format!("c {major}:* rwm")));
    }
    let mut minors: Vec<u32> = own_gpus.iter().copied().chain(NVIDIA_CONTROL_MINORS).collect();
    minors.sort_unstable();
    minors.dedup();
    for minor in minors {
        rules.push(("devices.allow", format!("c {NVIDIA_MAJOR}:{minor} rwm")));
    }
    rules
}

/// This server's parent groups (one per store instance).
#[derive(Debug)]
pub struct Containment {
    unified: PathBuf,
    devices: Option<PathBuf>,
}

impl Containment {
    /// Creates (or reuses) `allot-<instance>` under the mounts; fails when
    /// no cgroup2 group can be created there (no mount, not privileged, a
    /// kernel without `cgroup.kill`). A devices controller that cannot be
    /// written is left out (see [`Containment::devices`]).
    pub fn new(mounts: &Mounts, instance: &str) -> Result<Containment, CgroupError> {
        let name = format!("allot-{instance}");
        let unified = mounts.unified.as_ref().ok_or(CgroupError::NoCgroup2)?.join(&name);
        make_dir(&unified)?;
        if !unified.join("cgroup.kill").exists() {
            return Err(CgroupError::NoKill(unified));
        }
        // The parent may be left from a previous server: check that groups
        // can be made in it now.
        let probe = unified.join(format!("probe-{}", std::process::id()));
        make_dir(&probe)?;
        fs::remove_dir(&probe).map_err(io_err("remove", &probe))?;
        let devices = match &mounts.devices_v1 {
            Some(d) => match make_dir(&d.join(&name)) {
                Ok(()) => Some(d.join(&name)),
                Err(error) => {
                    tracing::warn!(%error, "the devices controller cannot be used: GPUs are separated only by CUDA_VISIBLE_DEVICES");
                    None
                }
            },
            None => None,
        };
        Ok(Containment { unified, devices })
    }

    /// The v1 devices group of this server, when attempts are constrained
    /// to their own GPU devices.
    pub fn devices(&self) -> Option<&Path> {
        self.devices.as_deref()
    }

    /// Makes the group of one attempt, with a leaf per node process;
    /// `own_gpus[rank]` are that node's GPU indices.
    pub fn create(&self, name: &str, own_gpus: &[Vec<u32>]) -> Result<AttemptGroup, CgroupError> {
        let group = self.group(name);
        match self.populate(&group, own_gpus) {
            Ok(joins) => Ok(AttemptGroup { joins, ..group }),
            Err(e) => {
                group.remove();
                Err(e)
            }
        }
    }

    fn populate(&self, g: &AttemptGroup, own_gpus: &[Vec<u32>]) -> Result<Vec<Vec<CString>>, CgroupError> {
        make_dir(&g.dir)?;
        if let Some(d) = &g.devices {
            make_dir(d)?;
        }
        let mut joins = Vec::with_capacity(own_gpus.len());
        for (rank, gpus) in own_gpus.iter().enumerate() {
            let leaf = g.dir.join(rank.to_string());
            make_dir(&leaf)?;
            let mut procs = vec![c_path(&leaf.join("cgroup.procs"))];
            if let Some(d) = &g.devices {
                let leaf = d.join(rank.to_string());
                make_dir(&leaf)?;
                for (file, rule) in device_rules(gpus) {
                    let path = leaf.join(file);
                    let mut f = fs::OpenOptions::new().write(true).open(&path).map_err(io_err("open", &path))?;
                    f.write_all(rule.as_bytes()).map_err(io_err("write a rule to", &path))?;
                }
                procs.push(c_path(&leaf.join("cgroup.procs")));
            }
            joins.push(procs);
        }
        Ok(joins)
    }

    /// The group of an attempt by name, whether or not it exists.
    fn group(&self, name: &str) -> AttemptGroup {
        AttemptGroup {
            dir: self.unified.join(name),
            devices: self.devices.as_ref().map(|d| d.join(name)),
            joins: Vec::new(),
        }
    }

    /// Every attempt group under this server's parents (left by a previous
    /// server of the same store): those of the cgroup2 mount and those of
    /// the devices controller.
    pub fn existing(&self) -> Vec<AttemptGroup> {
        let mut names = std::collections::BTreeSet::new();
        for parent in std::iter::once(&self.unified).chain(&self.devices) {
            let Ok(dir) = fs::read_dir(parent) else { continue };
            names.extend(
                dir.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().to_str().map(str::to_string)),
            );
        }
        names.iter().map(|n| self.group(n)).collect()
    }

    /// At a clean stop: removes every empty attempt group, then this
    /// server's parents (`allot-<instance>` under each mount) if nothing is
    /// left in them. Groups whose processes still run stay for the next
    /// start, which stops them, and so do their parents. Returns how many
    /// groups are left.
    pub fn remove_empty(&self) -> usize {
        let mut left = 0;
        for g in self.existing() {
            if g.populated() {
                left += 1;
            } else {
                g.remove();
            }
        }
        if left == 0 {
            for parent in std::iter::once(&self.unified).chain(&self.devices) {
                match fs::remove_dir(parent) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        tracing::warn!(group = %parent.display(), error = %e, "cannot remove the server's cgroup")
                    }
                    _ => {}
                }
            }
        }
        left
    }
}

fn make_dir(path: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(io_err("create the cgroup", path)(e)),
        _ => Ok(()),
    }
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("cgroup paths have no NUL byte")
}

/// The cgroup of one attempt.
#[derive(Debug)]
pub struct AttemptGroup {
    dir: PathBuf,
    devices: Option<PathBuf>,
    /// Per rank: the `cgroup.procs` files its process joins.
    joins: Vec<Vec<CString>>,
}

impl AttemptGroup {
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Moves the calling process into rank `rank`'s groups. Runs between
    /// `fork` and `exec`: only system calls, no allocation.
    pub fn join(&self, rank: usize) -> io::Result<()> {
        for path in self.joins.get(rank).map(Vec::as_slice).unwrap_or_default() {
            // SAFETY: `path` is a valid C string; open, write and close are
            // async-signal-safe and touch no memory of this process but the
            // one-byte buffer.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Whether any process is in the group (`cgroup.events`); a group that
    /// does not exist is empty.
    pub fn populated(&self) -> bool {
        fs::read_to_string(self.dir.join("cgroup.events")).is_ok_and(|t| t.lines().any(|l| l.trim() == "populated 1"))
    }

    /// Every process in the group and its leaves.
    pub fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        collect_pids(&self.dir, &mut out, 0);
        out
    }

    /// Sends `sig` to every process in the group.
    pub fn signal(&self, sig: i32) {
        for pid in self.pids() {
            if pid > 1 {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, sig);
                }
            }
        }
    }

    /// Kills every process in the group at once (`cgroup.kill`).
    pub fn kill(&self) {
        let path = self.dir.join("cgroup.kill");
        if let Err(error) = fs::write(&path, "1")
            && self.populated()
        {
            tracing::error!(group = %self.dir.display(), %error, "cannot write cgroup.kill; killing each process");
            self.signal(libc::SIGKILL);
        }
    }

    /// Waits until the group is empty, checking every `poll`.
    pub async fn wait_empty(&self, poll: Duration) {
        while self.populated() {
            tokio::time::sleep(poll).await;
        }
    }

    /// Removes the (empty) group: leaves first.
    pub fn remove(&self) {
        for dir in std::iter::once(&self.dir).chain(&self.devices) {
            if let Ok(leaves) = fs::read_dir(dir) {
                for leaf in leaves.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                    let _ = fs::remove_dir(leaf.path());
                }
            }
            match fs::remove_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::warn!(group = %dir.display(), error = %e, "cannot remove the cgroup")
                }
                _ => {}
            }
        }
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>, depth: u32) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if depth >= 8 {
        return;
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            collect_pids(&e.path(), out, depth + 1);
        }
    }
}

/// The server's containment: `Ok(None)` only where no cgroup can be made
/// and `allow_uncontained` accepts that; says at startup what is enforced.
pub fn for_server(instance: &str, allow_uncontained: bool) -> Result<Option<Containment>, CgroupError> {
    let made = Mounts::of_this_process()
        .map_err(io_err("read", Path::new("/proc/self/mountinfo")))
        .and_then(|m| Containment::new(&m, instance));
    match made {
        Ok(c) => {
            match c.devices() {
                Some(d) => tracing::info!(cgroup = %c.unified.display(), devices = %d.display(),
                    "each attempt runs in its own cgroup and may open only its own GPU devices"),
                None => tracing::warn!(cgroup = %c.unified.display(),
                    "each attempt runs in its own cgroup; no devices controller can be written here (a pure cgroup2 \
                     host needs a BPF device program, which is not loaded): GPUs are separated only by \
                     CUDA_VISIBLE_DEVICES"),
            }
            Ok(Some(c))
        }
        Err(error) if allow_uncontained => {
            tracing::warn!(%error, "running UNCONTAINED (--allow-uncontained): a workload's processes that leave \
                their process group escape stop and kill, and a restarted server finds them only by ALLOT_TAG");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn mounts_are_found_in_each_layout() {
        let cases = [
            ("hybrid", HYBRID.to_string(), Some("/sys/fs/cgroup/unified"), Some("/sys/fs/cgroup/devices")),
            (
                "pure cgroup2",
                "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n".to_string(),
                Some("/sys/fs/cgroup"),
                None,
            ),
            (
                "escaped mount point",
                "41 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 none rw\n".to_string(),
                Some("/mnt/my cgroups"),
                None,
            ),
            ("none", "22 1 0:21 / /proc rw - proc proc rw\n".to_string(), None, None),
        ];
        for (name, text, unified, devices) in cases {
            let m = Mounts::parse(&text);
            assert_eq!(m.unified.as_deref(), unified.map(Path::new), "{name}");
            assert_eq!(m.devices_v1.as_deref(), devices.map(Path::new), "{name}");
        }
    }

    #[test]
    fn a_mount_that_is_no_cgroup2_hierarchy_is_refused() {
        let none = Containment::new(&Mounts::default(), "x").unwrap_err();
        assert!(matches!(none, CgroupError::NoCgroup2), "{none}");
        let dir = std::env::temp_dir().join(format!("allot-cgroup-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let plain = Mounts { unified: Some(dir.clone()), devices_v1: None };
        let err = Containment::new(&plain, "x").unwrap_err();
        assert!(err.to_string().contains("has no cgroup.kill"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn device_rules_deny_other_gpus_and_keep_the_rest() {
        let rules = device_rules(&[1, 3]);
        assert_eq!(rules[0], ("devices.deny", "a".to_string()), "deny by default first");
        let allowed: Vec<&str> = rules[1..]
            .iter()
            .map(|(f, r)| {
                assert_eq!(*f, "devices.allow");
                r.as_str()
            })
            .collect();
        let nvidia: Vec<&str> = allowed.iter().copied().filter(|r| r.starts_with("c 195:")).collect();
        assert_eq!(nvidia, ["c 195:1 rwm", "c 195:3 rwm", "c 195:254 rwm", "c 195:255 rwm"]);
        assert!(allowed.contains(&"b *:* rwm") && allowed.contains(&"c 1:* rwm") && allowed.contains(&"c 511:* rwm"));
        assert!(!allowed.contains(&"c 195:* rwm"));
        assert_eq!(
            device_rules(&[]).iter().filter(|(_, r)| r.starts_with("c 195:")).count(),
            2,
            "no GPU: control only"
        );
    }
}
