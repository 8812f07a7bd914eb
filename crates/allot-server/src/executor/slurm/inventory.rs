//! Inventory: the partition's Slurm nodes (`sinfo`) become the config's
//! nodes, in natural name order, and give them their names.

use allot_core::Cluster;
use allot_core::cluster::ClusterId;

use super::SlurmOptions;
use super::error::{SlurmError, SlurmErrorKind};
use super::health::sinfo;

/// One node of a Slurm partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub gpus: u32,
}

/// The partition's nodes and GPU counts (`sinfo`), in natural name order.
pub async fn nodes(opts: &SlurmOptions) -> Result<Vec<SlurmNode>, SlurmError> {
    let action = match &opts.cluster {
        Some(c) => format!("list the partition's nodes (cluster {c}, slurm executor)"),
        None => "list the partition's nodes (--executor slurm)".to_string(),
    };
    let nodes = parse_sinfo(&sinfo(opts, &action, "%N|%G").await?).map_err(|e| SlurmError::new(&action, e))?;
    if nodes.is_empty() {
        return Err(SlurmError::new(action, SlurmErrorKind::NoNodes { partition: opts.partition.clone() }));
    }
    Ok(nodes)
}

/// Parses `NAME|GRES` lines (a node in several partitions is listed once).
pub fn parse_sinfo(text: &str) -> Result<Vec<SlurmNode>, SlurmErrorKind> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, gres) = line.split_once('|').ok_or_else(|| SlurmErrorKind::Output {
            command: "sinfo",
            line: line.to_string(),
            expected: "NAME|GRES",
        })?;
        if nodes.iter().any(|n| n.name == name) {
            continue;
        }
        nodes.push(SlurmNode { name: name.to_string(), gpus: gpu_count(gres) });
    }
    nodes.sort_by_key(|n| crate::executor::health::natural_key(&n.name));
    Ok(nodes)
}

/// GPUs in a GRES string: `gpu:4`, `gpu:h100:8(S:0-1)`, `gpu:a:2,gpu:b:2`, `(null)`.
fn gpu_count(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu:") || g == &"gpu")
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// The config's nodes of cluster `of`, in order, named after the Slurm
/// nodes (`<cluster>/<Slurm node>` in a fleet: [`SlurmOptions::allot_name`]).
pub fn map_nodes(
    cluster: &mut Cluster,
    of: ClusterId,
    slurm: &[SlurmNode],
    opts: &SlurmOptions,
) -> Result<(), SlurmError> {
    let action = match &opts.cluster {
        Some(c) => format!("map cluster {c}'s nodes onto Slurm's"),
        None => "map the config's nodes onto Slurm's (--executor slurm)".to_string(),
    };
    let fail = |kind| Err(SlurmError::new(action.clone(), kind));
    let mine: Vec<usize> =
        (0..cluster.nodes.len()).filter(|&i| cluster.cluster_of(allot_core::NodeId(i as u32)) == of).collect();
    if mine.len() > slurm.len() {
        return fail(SlurmErrorKind::TooFewNodes {
            config: mine.len(),
            slurm: slurm.len(),
            names: slurm.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "),
        });
    }
    for (&i, s) in mine.iter().zip(slurm) {
        let node = &mut cluster.nodes[i];
        if s.gpus < node.gpus {
            return fail(SlurmErrorKind::TooFewGpus {
                node: node.name.clone(),
                gpus: node.gpus,
                slurm_node: s.name.clone(),
                slurm_gpus: s.gpus,
            });
        }
        node.name = opts.allot_name(&s.name);
    }
    if slurm.len() > mine.len() {
        let rest: Vec<&str> = slurm[mine.len()..].iter().map(|n| n.name.as_str()).collect();
        tracing::warn!(nodes = %rest.join(","), "Slurm nodes beyond the config's are not used by Allot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sinfo_in_natural_order() {
        let n =
            parse_sinfo("node10|gpu:fake:4\nnode2|gpu:h100:8(S:0-1)\nnode2|gpu:h100:8(S:0-1)\nnode9|(null)\n").unwrap();
        let names: Vec<(&str, u32)> = n.iter().map(|n| (n.name.as_str(), n.gpus)).collect();
        assert_eq!(names, [("node2", 8), ("node9", 0), ("node10", 4)]);
        assert_eq!(gpu_count("gpu:a:2,gpu:b:3,license:1"), 5);
        assert!(parse_sinfo("garbage").unwrap_err().to_string().contains("garbage"));
    }

    #[test]
    fn maps_config_nodes_onto_slurm_nodes() {
        let (spec, types) = (crate::executor::test_pool("gpu"), crate::executor::test_types());
        let slurm = |g: &[u32]| -> Vec<SlurmNode> {
            g.iter().enumerate().map(|(i, &gpus)| SlurmNode { name: format!("node{}", i + 1), gpus }).collect()
        };
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        map_nodes(&mut c, ClusterId(0), &slurm(&[4, 8, 8]), &SlurmOptions::default()).unwrap();
        assert_eq!(c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["node1", "node2"]);
        assert_eq!(c.node_by_name("node2"), Some(allot_core::NodeId(1)), "found by its Slurm name");
        assert_eq!(c.node_by_name("gpu-1"), None, "the laid-out name is gone");
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        assert!(
            map_nodes(&mut c, ClusterId(0), &slurm(&[4]), &SlurmOptions::default())
                .unwrap_err()
                .kind
                .to_string()
                .contains("declares 2 nodes but Slurm has 1")
        );
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        assert!(
            map_nodes(&mut c, ClusterId(0), &slurm(&[4, 2]), &SlurmOptions::default())
                .unwrap_err()
                .kind
                .to_string()
                .contains("node2, which has 2 GPUs")
        );
    }

    /// In a fleet, only the cluster's own nodes take Slurm's names, each
    /// as `<cluster>/<Slurm node>`; two Slurm clusters' `node1` stay apart.
    #[test]
    fn maps_one_cluster_of_a_fleet() {
        let (spec, types) = (crate::executor::test_pool("gpu"), crate::executor::test_types());
        let mut c = Cluster::fleet(
            "f",
            types,
            vec![("a".into(), vec![spec.clone()]), ("b".into(), vec![spec.clone()]), ("c".into(), vec![spec])],
        );
        let slurm = vec![SlurmNode { name: "node1".into(), gpus: 4 }, SlurmNode { name: "node2".into(), gpus: 4 }];
        for (id, name) in [(1, "b"), (2, "c")] {
            let opts = SlurmOptions { cluster: Some(name.into()), ..SlurmOptions::default() };
            map_nodes(&mut c, ClusterId(id), &slurm, &opts).unwrap();
        }
        let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a/gpu-0", "a/gpu-1", "b/node1", "b/node2", "c/node1", "c/node2"]);
        assert_eq!(c.node_by_name("c/node1"), Some(allot_core::NodeId(4)));
        let opts = SlurmOptions { cluster: Some("b".into()), ..SlurmOptions::default() };
        assert_eq!(opts.slurm_name("b/node2"), "node2");
        assert_eq!(opts.allot_name("node2"), "b/node2");
        assert_eq!(opts.slurm_name("bb/node2"), "bb/node2", "only this cluster's prefix is taken off");
        assert_eq!(SlurmOptions::default().slurm_name("node2"), "node2", "a fleet of one keeps Slurm's names");
    }
}
