//! A cluster of the fleet out of service and back (FLEET-3, FLEET-4):
//! decided by the engine ([`allot_core::Engine::cluster_down`],
//! [`allot_core::Engine::cluster_up`]), which fails the cluster's nodes in
//! service and remembers them as the outage's; its effects record each
//! node's `outage` or `return` event, so availability, requeues (MNT-2,
//! CON-3) and the store's node history are what a failed node's are, and
//! recovery replays them. Nodes added to a cluster (MNT-5).

use allot_core::Time;
use allot_core::engine::{Answer, Input};

use super::Scheduler;

impl Scheduler {
    /// The executor of `cluster` cannot be reached: FLEET-3, in the engine.
    pub(crate) fn cluster_down(&mut self, cluster: &str, why: &str, now: Time) {
        let Some(c) = self.engine.state().cluster.cluster_by_name(cluster) else {
            tracing::warn!(cluster, "an executor reported an unknown cluster down");
            return;
        };
        let nodes = self.feed(Input::ClusterDown { cluster: c, why: why.into() }, now).count();
        tracing::error!(cluster, nodes, why, "FLEET-3: cluster out of service");
        self.apply(now);
    }

    /// MNT-5: a node of `cluster` appeared with `gpus` GPUs of `product`:
    /// it joins the pool it fits ([`crate::executor::inventory::pool_for`]),
    /// in service, in the engine and in the catalog's admission check. One
    /// that fits no pool, or whose name a node has, is logged and not used.
    pub(crate) fn node_added(&mut self, cluster: &str, node: &str, gpus: u32, product: Option<&str>) {
        let st = self.engine.state();
        if st.cluster.node_by_name(node).is_some() {
            return;
        }
        let Some(c) = st.cluster.cluster_by_name(cluster) else {
            tracing::warn!(cluster, node, "a node appeared in an unknown cluster");
            return;
        };
        let pool = match crate::executor::inventory::pool_for(&st.cluster, c, gpus, product) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(cluster, node, %why, "a node appeared that fits no pool: not used");
                return;
            }
        };
        let now = self.tick_now();
        match self.feed(Input::AddNode { pool, name: node.into() }, now) {
            Answer::NodeAdded(Ok(n)) => {
                let pool_name = &self.engine.state().cluster.pool(pool).name;
                tracing::info!(cluster, node, pool = %pool_name, id = n.0, "MNT-5: node added to its pool, in service");
                self.publish_shape();
            }
            Answer::NodeAdded(Err(e)) => {
                tracing::warn!(cluster, node, error = %e, "a node appeared and cannot be added")
            }
            a => unreachable!("a node added answers NodeAdded, not {a:?}"),
        }
    }

    /// At start: the clusters an outage had taken out when the last
    /// server stopped (recovery replayed their nodes' `outage` events)
    /// return (FLEET-4). Every Slurm cluster answered before recovery (its
    /// nodes were mapped with `sinfo`), and recovery stopped the store's
    /// jobs there
    /// ([`Executor::terminate_survivors`](crate::executor::Executor::terminate_survivors)),
    /// so the cluster is reconciled.
    pub(crate) fn resume_after_outages(&mut self, now: Time) {
        for c in self.engine.clusters_out() {
            let name = self.engine.state().cluster.cluster_name(c).to_string();
            self.cluster_up(&name, now);
        }
    }

    /// The cluster answers again and was reconciled: FLEET-4, in the
    /// engine. The executor then reports the cluster's own node states
    /// afresh.
    pub(crate) fn cluster_up(&mut self, cluster: &str, now: Time) {
        let Some(c) = self.engine.state().cluster.cluster_by_name(cluster) else {
            tracing::warn!(cluster, "an executor reported an unknown cluster back");
            return;
        };
        let nodes = self.feed(Input::ClusterUp { cluster: c }, now).count();
        tracing::warn!(cluster, nodes, "FLEET-4: cluster back in service");
        self.apply(now);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use allot_core::{Engine, Health, NodeEventKind, Phase, State};

    use crate::executor::{ExecEvent, ExitStatus, Launch};
    use crate::scheduler::Live;
    use crate::scheduler::testing::{Unused, batch, scheduler};
    use crate::store::{Op, Store};

    const FLEET: &str = r#"
[[clusters]]
name = "a"
[[clusters.pools]]
name = "gpu"
gpu = "H100"
nodes = 2
gpus_per_node = 2
[[clusters]]
name = "b"
[[clusters.pools]]
name = "gpu"
gpu = "H100"
nodes = 1
gpus_per_node = 2
[[accounts]]
path = "org/a"
share = 1
"#;

    /// A restart's recovery of `store` at `now`.
    async fn recover(
        cfg: &allot_trace::config::Config,
        store: &Store,
        now: allot_core::Time,
    ) -> crate::recovery::Recovered {
        let run = crate::identity::RunPolicy::new(true, 1000);
        let mut policy = allot_core::PolicyKind::Fifo.build();
        crate::recovery::recover(cfg, store, &Unused, &run, &mut *policy, now).await.unwrap()
    }

    fn nodes_of(l: &Launch) -> Vec<&str> {
        l.gpus.iter().map(|n| n.node.as_str()).collect()
    }

    /// A cluster out of service: its nodes in service fail through the
    /// node-event path, the abort cites FLEET-3, the workload (reported
    /// lost) runs on the other cluster; back, only the nodes the outage
    /// took return (a node drained before stays drained).
    #[tokio::test]
    async fn an_outage_fails_the_clusters_nodes_and_its_return_repairs_only_those() {
        let cfg = allot_trace::config::parse_config(FLEET, "fleet.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-fleet-outage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.unwrap();
        let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        let mut s = scheduler(Engine::new(state), store, &dir);
        let now = s.tick_now();
        s.node_action("a/gpu-1", NodeEventKind::Drain, "operator", None, now).unwrap();
        let spec = batch("1", cfg.accounts.get("org/a").unwrap(), 2, 1, now);
        let live = Live {
            seq: 1,
            command: vec!["work".into()],
            env: BTreeMap::new(),
            workdir: None,
            run_as: crate::identity::RunAs::Server,
            after: Vec::new(),
        };
        let w = s.arrive(spec, live, 0, now);
        s.pass(now);
        // The commands the step allows (the store is not asked here).
        let first = s.launches.pop().expect("launched");
        assert_eq!(nodes_of(&first), ["a/gpu-0"], "on a (config order), not on its drained node");
        s.exec_event(ExecEvent::Started { key: first.key, pid: 7 });
        s.ops.clear();

        s.exec_event(ExecEvent::ClusterDown { cluster: "a".into(), reason: "Slurm has not answered for 30 s".into() });
        let st = s.engine.state();
        let health = |n: &str| st.health[st.cluster.node_by_name(n).unwrap().0 as usize];
        assert_eq!((health("a/gpu-0"), health("a/gpu-1")), (Health::Down, Health::Drained), "in service: failed");
        assert_eq!(health("b/gpu-0"), Health::Up, "the other cluster keeps scheduling");
        assert_eq!(s.engine.state().run(w).phase, Phase::Stopping);
        let reasons: Vec<&str> = s
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::WorkloadState { reason, .. } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            reasons.iter().any(|r| r.starts_with("FLEET-3: cluster a is out of service") && r.contains("MNT-2")),
            "the abort cites the outage, then the node's rule: {reasons:?}"
        );
        s.exec_event(ExecEvent::Exited { key: first.key, status: ExitStatus { code: None, signal: None } });
        let now = s.tick_now();
        s.pass(now);
        let second = s.launches.pop().expect("requeued and launched again");
        assert_eq!((second.key.attempt, nodes_of(&second)), (2, vec!["b/gpu-0"]), "on the other cluster");

        s.exec_event(ExecEvent::ClusterUp { cluster: "a".into() });
        let st = s.engine.state();
        let health = |n: &str| st.health[st.cluster.node_by_name(n).unwrap().0 as usize];
        assert_eq!(health("a/gpu-0"), Health::Up, "the outage's node is back");
        assert_eq!(health("a/gpu-1"), Health::Drained, "a node drained before the outage stays drained");
        s.exec_event(ExecEvent::ClusterUp { cluster: "a".into() });
        assert!(s.engine.state().by_outage.is_empty());
        let kinds: Vec<(&str, &str)> = s
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::NodeEvent { node, kind, .. } => Some((node.as_str(), kind.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, [("a/gpu-0", "outage"), ("a/gpu-0", "return")], "the store's node history");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A server stopped while a cluster was out of service: at the next
    /// start, recovery finds the nodes the outage failed (their last event
    /// is FLEET-3's) and they return (FLEET-4); a node drained before the
    /// outage, or failed by someone else, stays out.
    #[tokio::test]
    async fn a_restart_returns_the_nodes_an_outage_took() {
        let cfg = allot_trace::config::parse_config(FLEET, "fleet.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-fleet-restart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("allot.db").display());
        let store = Store::open(&url).await.unwrap();
        let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        let mut s = scheduler(Engine::new(state), store.clone(), &dir);
        let now = s.tick_now();
        s.node_action("a/gpu-1", NodeEventKind::Drain, "operator", None, now).unwrap();
        s.node_action("b/gpu-0", NodeEventKind::Fail, "operator: FLEET-3 is not my name", None, now).unwrap();
        s.exec_event(ExecEvent::ClusterDown { cluster: "a".into(), reason: "Slurm has not answered for 30 s".into() });
        store.apply(&std::mem::take(&mut s.ops)).await.unwrap();
        drop(s);

        let rec = recover(&cfg, &store, now + 60).await;
        let names: Vec<&str> =
            rec.engine.state().by_outage.iter().map(|&n| rec.engine.state().cluster.node(n).name.as_str()).collect();
        assert_eq!(names, ["a/gpu-0"], "only the node the outage failed");
        let mut s = scheduler(rec.engine, store.clone(), &dir);
        s.resume_after_outages(now + 60);
        let st = s.engine.state();
        let health = |n: &str| st.health[st.cluster.node_by_name(n).unwrap().0 as usize];
        assert_eq!(
            (health("a/gpu-0"), health("a/gpu-1"), health("b/gpu-0")),
            (Health::Up, Health::Drained, Health::Down),
            "the outage's node is back; the drained and the operator's failed node are not"
        );
        let repaired: Vec<&str> = s
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::NodeEvent { node, kind, principal, .. } if kind == "return" => {
                    assert!(principal.contains("FLEET-4"), "{principal}");
                    Some(node.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(repaired, ["a/gpu-0"]);
        assert!(s.engine.state().by_outage.is_empty());

        // `allot export` writes the outage's events as such, and the
        // simulator's events file takes them: it replays the outage.
        store.apply(&std::mem::take(&mut s.ops)).await.unwrap();
        let exported = crate::export::export_store(&store, &dir.join("run.csv")).await.unwrap();
        let events_path = exported.events_path.expect("node events exported");
        let events = allot_trace::events::load_events(&events_path, &cfg).unwrap();
        let kinds: Vec<(&str, NodeEventKind)> =
            events.changes.iter().map(|e| (cfg.cluster.node(e.node).name.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("a/gpu-1", NodeEventKind::Drain),
                ("b/gpu-0", NodeEventKind::Fail),
                ("a/gpu-0", NodeEventKind::Outage),
                ("a/gpu-0", NodeEventKind::Return),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store written before outages had their own event kinds (schema
    /// 18: `fail` by a principal citing FLEET-3) is migrated, so recovery
    /// still returns the node the outage took, and only it.
    #[tokio::test]
    async fn an_older_stores_outage_is_migrated_and_returns() {
        let cfg = allot_trace::config::parse_config(FLEET, "fleet.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-fleet-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("allot.db").display());
        let store = Store::open(&url).await.unwrap();
        let event = |node: &str, kind: &str, principal: &str| Op::NodeEvent {
            t: 100,
            node: node.into(),
            kind: kind.into(),
            principal: principal.into(),
            reason: None,
        };
        let old = "slurm: FLEET-3: cluster a is out of service: Slurm has not answered for 30 s";
        store
            .apply(&[
                event("a/gpu-0", "fail", old),
                event("a/gpu-1", "fail", old),
                event("a/gpu-1", "fail", "operator"),
                event("b/gpu-0", "fail", "operator: FLEET-3 is not my name"),
            ])
            .await
            .unwrap();
        sqlx::query("DELETE FROM allot_schema WHERE version = 19").execute(&store.pool).await.unwrap();
        store.close().await;
        let store = Store::open(&url).await.unwrap();
        let rec = recover(&cfg, &store, 200).await;
        let st = rec.engine.state();
        let names: Vec<&str> = st.by_outage.iter().map(|&n| st.cluster.node(n).name.as_str()).collect();
        assert_eq!(names, ["a/gpu-0"], "the operator's later failure of a/gpu-1 outlasts the outage");
        let mut s = scheduler(rec.engine, store, &dir);
        s.resume_after_outages(200);
        let st = s.engine.state();
        let health = |n: &str| st.health[st.cluster.node_by_name(n).unwrap().0 as usize];
        assert_eq!((health("a/gpu-0"), health("a/gpu-1"), health("b/gpu-0")), (Health::Up, Health::Down, Health::Down));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The API's admission check reads the engine's own view, published
    /// when its shape moves: a node added while serving (MNT-5) is in the
    /// catalog's fleet (the dashboard's History sized the fleet from the
    /// config's nodes, without it), and an account edit is in its tree.
    #[tokio::test]
    async fn the_catalog_is_the_engines_view_after_a_node_is_added_or_an_account_edited() {
        let cfg = allot_trace::config::parse_config(FLEET, "fleet.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-fleet-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.unwrap();
        let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        let engine = Engine::new(state);
        let catalog = crate::submission::Catalog::new(engine.admission_view(), allot_core::PolicyKind::Allot);
        let mut s = scheduler(engine, store, &dir);
        s.catalog = Some(catalog.clone());
        assert_eq!(catalog.cluster().nodes.len(), 3);
        s.node_added("b", "b/gpu-1", 2, Some("NVIDIA H100 80GB HBM3"));
        let names: Vec<String> = catalog.cluster().nodes.iter().map(|n| n.name.clone()).collect();
        assert_eq!(names, ["a/gpu-0", "a/gpu-1", "b/gpu-0", "b/gpu-1"], "the added node is in the catalog's fleet");
        assert_eq!(catalog.template().cluster.nodes.len(), 4);
        assert!(!catalog.account_exists("org/new"));
        let create =
            allot_core::AccountEdit::Create(allot_core::AccountSpec { path: "org/new".into(), ..Default::default() });
        let now = s.tick_now();
        s.edit_accounts(&[create], false, false, "admin", now).await.unwrap().unwrap();
        assert!(catalog.account_exists("org/new"), "the edited tree is the catalog's");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
