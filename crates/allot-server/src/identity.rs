//! People as Unix users (docs/security.md).
//!
//! * A person is a Unix user, resolved through NSS (`getpwnam_r`,
//!   `getgrouplist`, so that LDAP and SSSD sites work) each time it is
//!   needed: at sign-in, when a request's principal is built (briefly
//!   cached) and when a workload is launched as them.
//! * What they may do comes from `[[grants]]`: the grants that name the
//!   user or one of their groups, merged ([`crate::auth::principal_of`]).
//! * Workloads run as the Unix user of whoever submitted them
//!   ([`RunAs::User`]); only `allot serve --single-user` runs them as the
//!   server's own user ([`RunAs::Server`]), and never a uid below
//!   `[identity] min_uid` (root is 0) otherwise.

use std::ffi::CString;
use std::path::PathBuf;

use nix::unistd::{Gid, Group, Uid, User};

/// A Unix user as NSS answers for it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group the user is in, its primary group first.
    pub groups: Vec<u32>,
    /// The names of `groups` that have one.
    pub group_names: Vec<String>,
    pub home: PathBuf,
    pub shell: PathBuf,
}

/// Why a Unix identity could not be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    #[error("there is no Unix user {0:?} on this host")]
    NoSuchUser(String),
    #[error("there is no Unix user with uid {0} on this host")]
    NoSuchUid(u32),
    #[error("cannot look up Unix user {0:?}: {1}")]
    Lookup(String, String),
    #[error(
        "Unix user {name:?} has uid {uid}, below this server's minimum {min} ([identity] min_uid): workloads never \
         run as root or a system account"
    )]
    BelowMinimum { name: String, uid: u32, min: u32 },
    #[error("{0}")]
    NoOne(String),
}

impl UnixUser {
    /// The user named `name`, with its groups.
    pub fn by_name(name: &str) -> Result<UnixUser, IdentityError> {
        match User::from_name(name) {
            Ok(Some(u)) => Self::complete(u),
            Ok(None) => Err(IdentityError::NoSuchUser(name.to_string())),
            Err(e) => Err(IdentityError::Lookup(name.to_string(), e.desc().to_string())),
        }
    }

    /// The user whose uid is `uid`, with its groups.
    pub fn by_uid(uid: u32) -> Result<UnixUser, IdentityError> {
        match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(u)) => Self::complete(u),
            Ok(None) => Err(IdentityError::NoSuchUid(uid)),
            Err(e) => Err(IdentityError::Lookup(format!("uid {uid}"), e.desc().to_string())),
        }
    }

    /// The server's own (effective) user.
    pub fn current() -> Result<UnixUser, IdentityError> {
        Self::by_uid(Uid::effective().as_raw())
    }

    fn complete(u: User) -> Result<UnixUser, IdentityError> {
        let lookup = |e: nix::Error| IdentityError::Lookup(u.name.clone(), format!("its groups: {}", e.desc()));
        let cname = CString::new(u.name.as_bytes()).map_err(|_| IdentityError::NoSuchUser(u.name.clone()))?;
        let mut groups: Vec<u32> = vec![u.gid.as_raw()];
        for g in nix::unistd::getgrouplist(&cname, u.gid).map_err(lookup)? {
            if !groups.contains(&g.as_raw()) {
                groups.push(g.as_raw());
            }
        }
        let group_names =
            groups.iter().filter_map(|&g| Group::from_gid(Gid::from_raw(g)).ok().flatten()).map(|g| g.name).collect();
        Ok(UnixUser {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups,
            group_names,
            home: u.dir,
            shell: u.shell,
        })
    }

    /// This user, unless its uid is below `min_uid`.
    pub fn at_least(self, min_uid: u32) -> Result<UnixUser, IdentityError> {
        if self.uid < min_uid {
            return Err(IdentityError::BelowMinimum { name: self.name, uid: self.uid, min: min_uid });
        }
        Ok(self)
    }
}

/// Whose Unix identity a workload runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// The server's own user (`allot serve --single-user`).
    Server,
    /// The Unix user of this name (resolved at launch).
    User(String),
    /// No one this server may run it as: it was submitted to a
    /// `--single-user` server (or before schema 15) and this one, root,
    /// runs work only as its submitters. Its launch fails (ID-1).
    Nobody,
}

impl RunAs {
    /// The user to store in the `run_as` column.
    pub fn user(&self) -> Option<&str> {
        match self {
            RunAs::Server | RunAs::Nobody => None,
            RunAs::User(u) => Some(u),
        }
    }

    /// The user to launch as (`None`: the server's own), or why it cannot
    /// be launched here.
    pub fn launch_as(&self) -> Result<Option<&str>, String> {
        match self {
            RunAs::Server => Ok(None),
            RunAs::User(u) => Ok(Some(u)),
            RunAs::Nobody => Err("it was submitted to a server that ran every workload as itself (--single-user), \
                 and this one, as root, runs work only as its submitters: cancel it and submit it again"
                .to_string()),
        }
    }
}

/// How `allot serve` runs workloads: as their submitters (the default), or
/// all as itself (`--single-user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPolicy {
    pub single_user: bool,
    /// The server's effective uid.
    pub server_uid: u32,
    /// The server's own user name (for messages).
    pub server_user: String,
    pub min_uid: u32,
}

impl RunPolicy {
    /// Whom a stored workload runs as, from its `run_as` column: a
    /// workload stored without a user runs as the server only where the
    /// server runs every workload as itself, or is not root.
    pub fn stored(&self, column: Option<&str>) -> RunAs {
        match column {
            Some(u) => RunAs::User(u.to_string()),
            None if self.single_user || self.server_uid != 0 => RunAs::Server,
            None => RunAs::Nobody,
        }
    }

    pub fn new(single_user: bool, min_uid: u32) -> RunPolicy {
        let server_uid = Uid::effective().as_raw();
        let server_user = UnixUser::by_uid(server_uid).map(|u| u.name).unwrap_or_else(|_| format!("uid {server_uid}"));
        RunPolicy { single_user, server_uid, server_user, min_uid }
    }

    /// ID-1: the Unix identity a Kubernetes pod of `who` runs as
    /// (`runAsUser`, `runAsGroup`, `supplementalGroups`), or why it cannot
    /// run: `None` on a `--single-user` server (the image's own non-root
    /// user). The server does not switch users for a pod, so whether it is
    /// root does not matter here; the submitter must have a Unix user on
    /// this host (the same NSS the cluster's nodes and storage use) at or
    /// above `min_uid`.
    pub fn pod_user(&self, name: &str, unix_user: Option<&str>) -> Result<Option<UnixUser>, String> {
        if self.single_user {
            return Ok(None);
        }
        let Some(user) = unix_user else {
            return Err(no_unix_user(name));
        };
        let u = UnixUser::by_name(user).map_err(|e| e.to_string())?;
        Ok(Some(u.at_least(self.min_uid).map_err(|e| e.to_string())?))
    }

    /// The identity `who`'s workloads run as, or why they cannot run here.
    /// `name` is the submitter as the API knows them, `unix_user` their
    /// Unix user if they have one.
    pub fn run_as(&self, name: &str, unix_user: Option<&str>) -> Result<RunAs, String> {
        if self.single_user {
            return Ok(RunAs::Server);
        }
        let Some(user) = unix_user else {
            return Err(no_unix_user(name));
        };
        let u = UnixUser::by_name(user).map_err(|e| e.to_string())?;
        let u = u.at_least(self.min_uid).map_err(|e| e.to_string())?;
        if self.server_uid != 0 && u.uid == self.server_uid {
            // A server that is not root runs its own user's work as itself:
            // no identity to switch to (and none it could switch to).
            return Ok(RunAs::Server);
        }
        if self.server_uid != 0 && u.uid != self.server_uid {
            return Err(format!(
                "this server runs as {} (uid {}) and can start work only as itself, not as {}: run allot serve as \
                 root, or with --single-user on a machine of one person",
                self.server_user, self.server_uid, u.name
            ));
        }
        Ok(RunAs::User(u.name))
    }
}

fn no_unix_user(name: &str) -> String {
    format!(
        "{name} has no Unix user, and this server runs every workload as its submitter's Unix user: sign in as \
         yourself (allot login), or have an admin create the token with --user LOGIN for the service account it \
         acts for"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_stored_without_a_user_never_runs_as_a_root_server() {
        let policy =
            |single_user, server_uid| RunPolicy { single_user, server_uid, server_user: "s".into(), min_uid: 1000 };
        let alice = RunAs::User("alice".into());
        // Submitted under --single-user (or before schema 15), restarted:
        assert_eq!(policy(true, 0).stored(None), RunAs::Server, "a single-user root server: as itself");
        assert_eq!(policy(false, 1500).stored(None), RunAs::Server, "a server that is not root: as itself");
        assert_eq!(policy(false, 0).stored(None), RunAs::Nobody, "a multi-user root server: no one");
        assert!(RunAs::Nobody.launch_as().unwrap_err().contains("submit it again"));
        assert_eq!(policy(false, 0).stored(Some("alice")), alice);
        assert_eq!(alice.launch_as(), Ok(Some("alice")));
        assert_eq!(RunAs::Nobody.user(), None);
    }

    #[test]
    fn the_server_resolves_its_own_user() {
        let me = UnixUser::current().unwrap();
        assert_eq!(me.uid, Uid::effective().as_raw());
        assert_eq!(UnixUser::by_name(&me.name).unwrap().uid, me.uid);
        assert!(matches!(UnixUser::by_name("no-such-user-x9"), Err(IdentityError::NoSuchUser(_))));
        let low = UnixUser { uid: 0, ..me };
        assert!(matches!(low.at_least(1000), Err(IdentityError::BelowMinimum { .. })));
    }
}
