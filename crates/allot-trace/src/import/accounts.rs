//! Placing an import's accounts in a Slurm account tree (`--slurm-assoc`,
//! docs/importers.md): each team account `<root>/<account>` moves to its
//! place in the tree (`<root>/<parent>/…/<account>`), every account of the
//! tree is declared with its `Fairshare` share, and users' shares become the
//! project's user shares (`--projects team`, FS-2) or the shares of the
//! users' projects (`--projects user`).

use std::collections::{BTreeMap, BTreeSet};

use super::options::{ProjectBy, TEAM_PROJECT};
use super::record::sanitize;
use super::slurm::AssocTree;
use crate::write::AccountOut;

/// What an import's account tree changes: its rows' accounts, the
/// config's accounts, the summary's notes.
pub(crate) struct Parts<'a> {
    pub rows: &'a mut [crate::write::TraceRow],
    pub config: &'a mut crate::write::ConfigOut,
    pub summary: &'a mut super::summary::ImportSummary,
}

pub(crate) fn apply(tree: &AssocTree, root: &str, by: ProjectBy, imp: Parts<'_>) {
    let prefix = format!("{root}/");
    let mut unknown = BTreeSet::new();
    let mut remap = |path: &str| -> String {
        let Some(rest) = path.strip_prefix(&prefix) else { return path.to_string() };
        let (team, tail) = rest.split_once('/').map_or((rest, ""), |(t, x)| (t, x));
        match tree.by_sanitized(team).and_then(|a| tree.path(a)) {
            Some(segs) if tail.is_empty() => format!("{prefix}{}", segs.join("/")),
            Some(segs) => format!("{prefix}{}/{tail}", segs.join("/")),
            None => {
                unknown.insert(team.to_string());
                path.to_string()
            }
        }
    };
    for r in imp.rows.iter_mut() {
        r.account = remap(&r.account);
    }
    let accounts = &mut imp.config.accounts;
    for a in accounts.iter_mut() {
        a.path = remap(&a.path);
    }
    // A budget covers its subtree: a team inside another team's subtree
    // adds its budget to every ancestor's.
    let own: Vec<(String, f64)> =
        accounts.iter().filter_map(|a| a.budget_gpu_hours.map(|b| (a.path.clone(), b))).collect();
    for a in accounts.iter_mut().filter(|a| a.budget_gpu_hours.is_some()) {
        let below = format!("{}/", a.path);
        let sum: f64 = own.iter().filter(|(p, _)| *p == a.path || p.starts_with(&below)).map(|(_, b)| b).sum();
        a.budget_gpu_hours = Some(crate::write::round_budget(sum));
    }
    let mut by_path: BTreeMap<String, AccountOut> = accounts.drain(..).map(|a| (a.path.clone(), a)).collect();
    let mut inherit = 0;
    for (name, acc) in tree.accounts.iter().filter(|(n, _)| n.as_str() != "root") {
        let Some(segs) = tree.path(name) else { continue };
        let path = format!("{prefix}{}", segs.join("/"));
        let entry =
            by_path.entry(path.clone()).or_insert_with(|| AccountOut { path: path.clone(), ..Default::default() });
        entry.share = acc.share;
        inherit += u32::from(acc.share.is_none());
        for (user, share) in &acc.users {
            let Some(share) = share else {
                inherit += 1;
                continue;
            };
            let user = sanitize(user).0;
            match by {
                ProjectBy::Team => {
                    if let Some(p) = by_path.get_mut(&format!("{path}/{TEAM_PROJECT}")) {
                        p.users.insert(user, *share);
                    }
                }
                ProjectBy::User => {
                    if let Some(p) = by_path.get_mut(&format!("{path}/{user}")) {
                        p.share = Some(*share);
                    }
                }
            }
        }
    }
    // Slurm's root account has user associations too (root/root always):
    // Fair Tree ranks them beside the top accounts, so they are users of
    // `<root>` itself.
    if let Some(top) = tree.accounts.get("root") {
        let users: BTreeMap<String, f64> =
            top.users.iter().filter_map(|(u, s)| s.map(|s| (sanitize(u).0, s))).collect();
        if !users.is_empty() {
            let path = root.to_string();
            let entry = by_path.entry(path.clone()).or_insert_with(|| AccountOut { path, ..Default::default() });
            entry.users.extend(users);
        }
    }
    *accounts = by_path.into_values().collect();
    let notes = &mut imp.summary.notes;
    notes.push(format!("accounts placed in the Slurm account tree ({} accounts)", tree.accounts.len()));
    if inherit > 0 {
        notes.push(format!(
            "{inherit} associations with Share=parent: written without a share (the config's default share)"
        ));
    }
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.into_iter().collect();
        notes.push(format!("accounts not in the association file, kept under {root}: {}", list.join(", ")));
    }
}
