//! The GPUs of this host, where the NVIDIA driver is present: read through
//! `nvidia-smi` (the NVML command-line front end) and compared with the
//! config's inventory, which stays the source of truth (so the local
//! executor works on machines without GPUs).

use std::process::Command;

use allot_core::Cluster;

/// One GPU the driver reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardwareGpu {
    pub index: u32,
    pub name: String,
}

/// The host's GPUs, or `None` when there is no NVIDIA driver.
pub fn detect() -> Option<Vec<HardwareGpu>> {
    let out = Command::new("nvidia-smi").args(["--query-gpu=index,name", "--format=csv,noheader"]).output().ok()?;
    out.status.success().then(|| parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses `index, name` lines; malformed lines are skipped.
pub fn parse_nvidia_smi(text: &str) -> Vec<HardwareGpu> {
    text.lines()
        .filter_map(|l| {
            let (i, name) = l.split_once(',')?;
            Some(HardwareGpu { index: i.trim().parse().ok()?, name: name.trim().to_string() })
        })
        .collect()
}

/// What does not match between the config and the hardware: the local
/// executor runs every node's workloads on this host, so a node with more
/// GPUs than the host has would hand out indices that do not exist.
pub fn mismatches(cluster: &Cluster, hw: &[HardwareGpu]) -> Vec<String> {
    let mut out = Vec::new();
    for p in &cluster.pools {
        if p.gpus_per_node as usize > hw.len() {
            out.push(format!(
                "pool {} has {} GPUs per node but this host has {}; CUDA_VISIBLE_DEVICES may name GPUs that do not exist",
                p.name,
                p.gpus_per_node,
                hw.len()
            ));
        }
        let model = &cluster.gpu_types[p.gpu.0 as usize].name;
        if !hw.is_empty() && !hw.iter().any(|g| g.name.to_ascii_lowercase().contains(&model.to_ascii_lowercase())) {
            out.push(format!("pool {} declares GPU type {model}; this host has {}", p.name, hw[0].name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi_and_compares_with_the_config() {
        let hw = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3\n1, NVIDIA H100 80GB HBM3\nbogus\n");
        assert_eq!(hw.len(), 2);
        assert_eq!(hw[1], HardwareGpu { index: 1, name: "NVIDIA H100 80GB HBM3".into() });
        let spec = |gpus| allot_core::PoolSpec {
            name: "p".into(),
            gpu: allot_core::GpuTypeId(0),
            nodes: 1,
            gpus_per_node: gpus,
            rack_size: 1,
            shared: false,
        };
        let types = vec![allot_core::GpuType { name: "H100".into(), weight: 1.0 }];
        let fits = Cluster::new("c", types.clone(), vec![spec(2)]);
        assert!(mismatches(&fits, &hw).is_empty());
        let too_many = Cluster::new("c", types, vec![spec(8)]);
        assert_eq!(mismatches(&too_many, &hw).len(), 1);
    }
}
