//! Inventory: the partition's Slurm nodes (`sinfo`) become the config's
//! nodes, in natural name order, and give them their names.

use allot_core::Cluster;

use super::error::{SlurmError, SlurmErrorKind};
use super::health::sinfo;

/// One node of a Slurm partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub gpus: u32,
}

/// The partition's nodes and GPU counts (`sinfo`), in natural name order.
pub async fn nodes(partition: Option<&str>) -> Result<Vec<SlurmNode>, SlurmError> {
    const ACTION: &str = "list the partition's nodes (--executor slurm)";
    let nodes = parse_sinfo(&sinfo(ACTION, partition, "%N|%G").await?).map_err(|e| SlurmError::new(ACTION, e))?;
    if nodes.is_empty() {
        return Err(SlurmError::new(ACTION, SlurmErrorKind::NoNodes { partition: partition.map(str::to_string) }));
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
    nodes.sort_by_key(|n| natural_key(&n.name));
    Ok(nodes)
}

/// GPUs in a GRES string: `gpu:4`, `gpu:h100:8(S:0-1)`, `gpu:a:2,gpu:b:2`, `(null)`.
fn gpu_count(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu:") || g == &"gpu")
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// `node10` after `node9`.
fn natural_key(s: &str) -> (String, u64, String) {
    let digits_at = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (head, rest) = s.split_at(digits_at);
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    (head.to_string(), rest[..end].parse().unwrap_or(0), rest[end..].to_string())
}

/// The config's nodes, in order, named after the Slurm nodes.
pub fn map_nodes(cluster: &mut Cluster, slurm: &[SlurmNode]) -> Result<(), SlurmError> {
    let fail = |kind| Err(SlurmError::new("map the config's nodes onto Slurm's (--executor slurm)", kind));
    if cluster.nodes.len() > slurm.len() {
        return fail(SlurmErrorKind::TooFewNodes {
            config: cluster.nodes.len(),
            slurm: slurm.len(),
            names: slurm.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "),
        });
    }
    for (node, s) in cluster.nodes.iter_mut().zip(slurm) {
        if s.gpus < node.gpus {
            return fail(SlurmErrorKind::TooFewGpus {
                node: node.name.clone(),
                gpus: node.gpus,
                slurm_node: s.name.clone(),
                slurm_gpus: s.gpus,
            });
        }
        node.name = s.name.clone();
    }
    if slurm.len() > cluster.nodes.len() {
        let rest: Vec<&str> = slurm[cluster.nodes.len()..].iter().map(|n| n.name.as_str()).collect();
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
        let spec = allot_core::PoolSpec {
            name: "gpu".into(),
            gpu: allot_core::GpuTypeId(0),
            nodes: 2,
            gpus_per_node: 4,
            rack_size: 2,
            shared: false,
        };
        let types = vec![allot_core::GpuType { name: "H100".into(), weight: 1.0 }];
        let slurm = |g: &[u32]| -> Vec<SlurmNode> {
            g.iter().enumerate().map(|(i, &gpus)| SlurmNode { name: format!("node{}", i + 1), gpus }).collect()
        };
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        map_nodes(&mut c, &slurm(&[4, 8, 8])).unwrap();
        assert_eq!(c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["node1", "node2"]);
        assert_eq!(c.node_by_name("node2"), Some(allot_core::NodeId(1)), "found by its Slurm name");
        assert_eq!(c.node_by_name("gpu-1"), None, "the laid-out name is gone");
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        assert!(
            map_nodes(&mut c, &slurm(&[4])).unwrap_err().kind.to_string().contains("declares 2 nodes but Slurm has 1")
        );
        let mut c = Cluster::new("c", types, vec![spec]);
        assert!(map_nodes(&mut c, &slurm(&[4, 2])).unwrap_err().kind.to_string().contains("node2, which has 2 GPUs"));
    }
}
