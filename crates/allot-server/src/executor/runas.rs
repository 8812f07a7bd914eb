//! Running a workload as its Unix user (ID-1, docs/security.md).
//!
//! * [`Identity::resolve`]: the user and every group, through NSS, in the
//!   parent (NSS, SSSD and LDAP are not async-signal-safe), refused below
//!   `[identity] min_uid`.
//! * [`Identity::switch`]: between `fork` and `exec`, only raw system calls,
//!   in this order (CERT POS36): `setgroups`, `setresgid`, `setresuid`,
//!   check that they took, `chdir` to the workload's directory *as the
//!   user*, `PR_SET_NO_NEW_PRIVS`, `umask`. std's `Command::uid` is not
//!   used (it drops every supplementary group) nor `current_dir` (it runs
//!   as root, before the switch).
//! * [`environment`]: built from nothing: an allow-list of the server's
//!   locale and time zone, the user's `HOME`, `USER`, `LOGNAME`, `SHELL`, a
//!   plain `PATH`, then Allot's variables and the submission's `env`;
//!   never the server's secrets.
//! * [`private_files`]: the workload's checkpoint directory and log file,
//!   owned by the user, made without following anything the workload can
//!   change (its own directories may hold links it planted).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fstat, mkdirat};

use crate::identity::{IdentityError, RunAs, UnixUser};

/// The Unix identity a process is switched to, resolved in the parent.
#[derive(Clone, Debug)]
pub struct Identity {
    pub user: UnixUser,
    /// The working directory, as a C string for the child.
    dir: CString,
}

/// Variables of the server's environment a workload may see: locale and
/// time zone, nothing else.
const ALLOWED_ENV: [&str; 4] = ["LANG", "LANGUAGE", "TZ", "TERM"];

/// `PATH` of a workload that does not set its own.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

impl Identity {
    /// `run_as` resolved now: `None` for the server's own user.
    pub fn resolve(run_as: &RunAs, min_uid: u32, workdir: Option<&Path>) -> Result<Option<Identity>, IdentityError> {
        let Some(name) = run_as.launch_as().map_err(IdentityError::NoOne)? else { return Ok(None) };
        let name = &name.to_string();
        let user = UnixUser::by_name(name)?.at_least(min_uid)?;
        let dir = workdir.unwrap_or(&user.home).as_os_str().as_bytes().to_vec();
        let dir =
            CString::new(dir).map_err(|_| IdentityError::Lookup(name.clone(), "a NUL in its directory".into()))?;
        Ok(Some(Identity { user, dir }))
    }

    /// Becomes the user: runs between `fork` and `exec` (only system
    /// calls, no allocation). Fails, and the child exits before `exec`,
    /// when any step does not take.
    pub fn switch(&self) -> io::Result<()> {
        let u = &self.user;
        // SAFETY: every call is a raw, async-signal-safe system call on
        // memory owned by `self`, which outlives the child's exec.
        unsafe {
            let groups: &[libc::gid_t] = &u.groups;
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(u.gid, u.gid, u.gid) != 0
                || libc::setresuid(u.uid, u.uid, u.uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // Root must be gone for good: a process that could regain it
            // (or kept root's groups) never runs the workload.
            let (mut r, mut e, mut s) = (0, 0, 0);
            libc::getresuid(&mut r, &mut e, &mut s);
            if r != u.uid || e != u.uid || s != u.uid || libc::setuid(0) == 0 {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            libc::getresgid(&mut r, &mut e, &mut s);
            if r != u.gid || e != u.gid || s != u.gid {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            if libc::chdir(self.dir.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::umask(0o022);
        }
        Ok(())
    }

    /// The working directory the child changes to.
    pub fn dir(&self) -> &Path {
        Path::new(OsStr::from_bytes(self.dir.as_bytes()))
    }
}

/// Why the user cannot enter `dir` ("cannot be entered by alice: …"), by
/// the permission bits of it and every directory above it (ACLs aside),
/// checked in the parent so that a launch fails with a clear reason
/// (MNT-4) before anything starts.
pub fn cannot_enter(dir: &Path, user: &UnixUser) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut path = PathBuf::from("/");
    let check = |p: &Path| -> Option<String> {
        let m = std::fs::metadata(p).ok()?;
        let bits = m.mode();
        let x = if m.uid() == user.uid {
            bits & 0o100
        } else if user.groups.contains(&m.gid()) {
            bits & 0o010
        } else {
            bits & 0o001
        };
        (x == 0).then(|| format!("cannot be entered by {} ({} is not searchable by it)", user.name, p.display()))
    };
    for c in dir.components().skip(1) {
        path.push(c);
        if let Some(why) = check(&path) {
            return Some(why);
        }
    }
    None
}

/// A workload's environment, built from nothing: the allowed variables of
/// the server's (locale, time zone), the user's (`HOME`, `USER`,
/// `LOGNAME`, `SHELL`; for the server's own user, its own), a plain
/// `PATH`, then `own` (the submission's `env` and Allot's variables, which
/// win).
pub fn environment<'a>(
    user: Option<&UnixUser>,
    own: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| ALLOWED_ENV.contains(&k.as_str()) || k.starts_with("LC_")).collect();
    let me;
    let user = match user {
        Some(u) => Some(u),
        None => {
            me = UnixUser::current().ok();
            me.as_ref()
        }
    };
    if let Some(u) = user {
        env.push(("HOME".into(), u.home.display().to_string()));
        env.push(("USER".into(), u.name.clone()));
        env.push(("LOGNAME".into(), u.name.clone()));
        env.push(("SHELL".into(), u.shell.display().to_string()));
    }
    env.push(("PATH".into(), DEFAULT_PATH.into()));
    for (k, v) in own {
        env.retain(|(e, _)| e != k);
        env.push((k.to_string(), v.to_string()));
    }
    env
}

/// Makes `dir` (whose parent is the server's and holds only what the
/// server made) a directory of `owner`'s, mode 0700, without following a
/// link: an existing link or non-directory there is an error, an existing
/// directory is given to `owner`.
fn owned_dir(dir: &Path, owner: Option<&UnixUser>) -> io::Result<OwnedFd> {
    let parent = dir.parent().ok_or_else(|| io::Error::other("a directory without a parent"))?;
    let name = dir.file_name().ok_or_else(|| io::Error::other("a directory without a name"))?;
    std::fs::create_dir_all(parent)?;
    let pfd = nix::fcntl::open(parent, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY, Mode::empty())?;
    match mkdirat(pfd.as_fd(), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::Error::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = openat(
        pfd.as_fd(),
        name,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )
    .map_err(|e| io::Error::other(format!("{} is not a directory of Allot's ({e})", dir.display())))?;
    give(&fd, owner, 0o700)?;
    Ok(fd)
}

/// `fd` owned by `owner` (when given) with `mode`.
fn give(fd: &OwnedFd, owner: Option<&UnixUser>, mode: u32) -> io::Result<()> {
    if let Some(u) = owner {
        let st = fstat(fd.as_fd())?;
        if st.st_uid != u.uid || st.st_gid != u.gid {
            nix::unistd::fchown(fd.as_fd(), Some(u.uid.into()), Some(u.gid.into()))?;
        }
    }
    nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(mode))?;
    Ok(())
}

/// Opens (creating it 0600) the file `name` in the directory `dir` for
/// appending, never through a link, and only if it is a regular file with
/// one name (not a hard link to a file elsewhere) that belongs to `owner`
/// (or to the server).
fn own_file(dir: &OwnedFd, name: &OsStr, owner: Option<&UnixUser>) -> io::Result<std::fs::File> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_APPEND
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY;
    let fd = openat(dir.as_fd(), name, flags, Mode::from_bits_truncate(0o600))?;
    let st = fstat(fd.as_fd())?;
    plain_file(&st, owner.map(|u| u.uid))?;
    give(&fd, owner, 0o600)?;
    // Back to blocking writes (the workload's output goes through it).
    let fl = nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(fl) & !OFlag::O_NONBLOCK))?;
    Ok(std::fs::File::from(fd))
}

/// A regular file with one link, owned by the server or `owner`.
fn plain_file(st: &FileStat, owner: Option<u32>) -> io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::other("not a regular file"));
    }
    if st.st_nlink != 1 {
        return Err(io::Error::other("a file with other names (hard links)"));
    }
    if st.st_uid != me && Some(st.st_uid) != owner {
        return Err(io::Error::other(format!("a file of uid {}, not the workload's", st.st_uid)));
    }
    Ok(())
}

/// Makes `checkpoint_dir` and the directory of `log_path` directories of
/// `owner`'s (mode 0700; the server's own when `None`), and opens the log
/// file (0600, appended to, owned likewise): what is made for a workload
/// is private to the user it runs as. Nothing the workload may have put
/// there (a link, a hard link, a FIFO) is followed or written through.
pub fn private_files(checkpoint_dir: &Path, log_path: &Path, owner: Option<&UnixUser>) -> io::Result<std::fs::File> {
    owned_dir(checkpoint_dir, owner)?;
    let dir = log_path.parent().ok_or_else(|| io::Error::other("a log path without a directory"))?;
    let dfd = owned_dir(dir, owner)?;
    let name = log_path.file_name().ok_or_else(|| io::Error::other("a log path without a name"))?;
    own_file(&dfd, name, owner)
}

/// Opens a workload's file `path` (a log) for reading without following a
/// link at its last component, only if it is a regular file with one link
/// that the server or the workload's user made: a workload that replaced
/// its log with a link to any other file publishes nothing.
pub fn open_for_reading(path: &Path) -> io::Result<std::fs::File> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )?;
    let st = fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 1 {
        return Err(io::Error::other(format!("{} is not a plain file", path.display())));
    }
    Ok(std::fs::File::from(fd))
}

/// Writes `body` as the file `name` of the workload's directory `dir`
/// (its checkpoint directory), owned by the directory's owner, never
/// through a link: a fresh file beside it, then renamed over the name
/// (a rename replaces a link; it does not follow it).
pub fn write_in(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let dfd = nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    let st = fstat(dfd.as_fd())?;
    let tmp = format!(".{name}.{}", crate::secret::new_token_id());
    let fd = openat(
        dfd.as_fd(),
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me {
        nix::unistd::fchown(fd.as_fd(), Some(st.st_uid.into()), Some(st.st_gid.into()))?;
    }
    let mut f = std::fs::File::from(fd);
    let written = f.write_all(body).and_then(|()| f.sync_data());
    let renamed = written
        .and_then(|()| nix::fcntl::renameat(dfd.as_fd(), tmp.as_str(), dfd.as_fd(), name).map_err(io::Error::from));
    if renamed.is_err() {
        let _ = nix::unistd::unlinkat(dfd.as_fd(), tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    renamed
}

/// Removes the file `name` of the workload's directory `dir`, never
/// through a link (an unlink removes a link itself). Missing is fine.
pub fn remove_in(dir: &Path, name: &str) -> io::Result<()> {
    let dfd = nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    match nix::unistd::unlinkat(dfd.as_fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_made_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        let (ck, logs) = (d.path().join("checkpoints/w1"), d.path().join("logs/w1"));
        // The workload planted links where the server writes.
        std::fs::create_dir_all(&logs).unwrap();
        std::os::unix::fs::symlink(&secret, logs.join("attempt-1.log")).unwrap();
        let e = private_files(&ck, &logs.join("attempt-1.log"), None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        std::fs::hard_link(&secret, logs.join("attempt-2.log")).unwrap();
        let e = private_files(&ck, &logs.join("attempt-2.log"), None).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        let mut f = private_files(&ck, &logs.join("attempt-3.log"), None).unwrap();
        std::io::Write::write_all(&mut f, b"out\n").unwrap();
        assert!(open_for_reading(&logs.join("attempt-1.log")).is_err(), "a link is not read");
        assert!(open_for_reading(&logs.join("attempt-2.log")).is_err(), "a hard link is not read");
        assert_eq!(std::io::read_to_string(open_for_reading(&logs.join("attempt-3.log")).unwrap()).unwrap(), "out\n");
        // A link in place of the idle warning is replaced, not written through.
        std::os::unix::fs::symlink(&secret, ck.join("warning")).unwrap();
        write_in(&ck, "warning", b"{}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
        assert_eq!(std::fs::read_to_string(ck.join("warning")).unwrap(), "{}\n");
        remove_in(&ck, "warning").unwrap();
        remove_in(&ck, "warning").unwrap();
        // A link in place of the checkpoint directory is refused.
        let ck2 = d.path().join("checkpoints/w2");
        std::os::unix::fs::symlink(d.path(), &ck2).unwrap();
        assert!(private_files(&ck2, &logs.join("attempt-4.log"), None).is_err());
    }

    #[test]
    fn the_environment_is_built_from_nothing() {
        let env = environment(None, [("A", "1"), ("PATH", "/opt/bin")]);
        let get = |k: &str| env.iter().find(|(e, _)| e == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("1"));
        assert_eq!(get("PATH"), Some("/opt/bin"), "the submission's PATH wins");
        assert!(get("HOME").is_some() && get("USER").is_some());
        assert!(get("CARGO").is_none() && get("CARGO_MANIFEST_DIR").is_none(), "nothing else of the server's: {env:?}");
    }
}
