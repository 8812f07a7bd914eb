//! The GPUs of this host, read through `nvidia-smi` (the NVML command-line
//! front end), and the two ways `allot serve` uses them
//! (`--gpu-inventory`):
//!
//! * `config` (the default): the config's pools are the inventory, so the
//!   local executor works on machines without GPUs; the hardware, where
//!   present, is only compared with it and mismatches are logged.
//! * `hardware`: the host's GPUs are the inventory. The config must declare
//!   the host as one pool of one node; its GPU count is replaced by the
//!   driver's, its GPU type is the configured type the driver's model name
//!   contains, and workloads are given GPUs by UUID (robust to the order in
//!   which CUDA enumerates devices).
//!
//! `ALLOT_NVIDIA_SMI` names another `nvidia-smi` program (tests use a fake).

use std::collections::HashMap;
use std::process::Command;

use allot_core::{Cluster, GpuTypeId, PoolSpec};

/// Where the GPU inventory comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GpuInventory {
    Config,
    Hardware,
}

impl GpuInventory {
    pub fn parse(s: &str) -> Option<GpuInventory> {
        match s {
            "config" => Some(GpuInventory::Config),
            "hardware" => Some(GpuInventory::Hardware),
            _ => None,
        }
    }
}

/// One GPU the driver reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardwareGpu {
    pub index: u32,
    pub name: String,
    pub uuid: String,
}

/// What `CUDA_VISIBLE_DEVICES` names for each node's GPU index: absent for
/// a node means the index itself.
pub type DeviceMap = HashMap<String, Vec<String>>;

fn program() -> String {
    std::env::var("ALLOT_NVIDIA_SMI").unwrap_or_else(|_| "nvidia-smi".to_string())
}

/// The host's GPUs; `Err` says why they could not be read (no driver, the
/// program failed, or it printed nothing usable).
pub fn detect() -> Result<Vec<HardwareGpu>, String> {
    let prog = program();
    let out = Command::new(&prog)
        .args(["--query-gpu=index,name,uuid", "--format=csv,noheader"])
        .output()
        .map_err(|e| format!("cannot run {prog}: {e} (no NVIDIA driver on this host?)"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{prog} failed ({}): {}", out.status, err.trim()));
    }
    let gpus = parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout))?;
    if gpus.is_empty() {
        return Err(format!("{prog} reports no GPUs"));
    }
    Ok(gpus)
}

/// Parses `index, name, uuid` lines (the uuid may be missing); a malformed
/// line is an error naming it.
pub fn parse_nvidia_smi(text: &str) -> Result<Vec<HardwareGpu>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut fields = line.split(',').map(str::trim);
        let bad = || format!("nvidia-smi output line {}: expected `index, name, uuid`, got {line:?}", n + 1);
        let index = fields.next().and_then(|i| i.parse().ok()).ok_or_else(bad)?;
        let name = fields.next().filter(|s| !s.is_empty()).ok_or_else(bad)?.to_string();
        let uuid = fields.next().unwrap_or("").to_string();
        out.push(HardwareGpu { index, name, uuid });
    }
    Ok(out)
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
        if !hw.is_empty() && !names_model(&hw[0].name, model) {
            out.push(format!("pool {} declares GPU type {model}; this host has {}", p.name, hw[0].name));
        }
    }
    out
}

fn names_model(hardware: &str, model: &str) -> bool {
    hardware.to_ascii_lowercase().contains(&model.to_ascii_lowercase())
}

/// The cluster with the host's GPUs as its inventory (`--gpu-inventory
/// hardware`), and how each GPU is named to CUDA.
pub fn from_hardware(cluster: &Cluster, hw: &[HardwareGpu]) -> Result<(Cluster, DeviceMap), String> {
    let [pool] = cluster.pools.as_slice() else {
        return Err(format!(
            "--gpu-inventory hardware: the config must declare this host as one pool of one node; it declares {} pools",
            cluster.pools.len()
        ));
    };
    if pool.nodes != 1 {
        return Err(format!(
            "--gpu-inventory hardware: the config must declare this host as one pool of one node; pool {} has {} nodes",
            pool.name, pool.nodes
        ));
    }
    let first = hw.first().ok_or("--gpu-inventory hardware: the host has no GPUs")?;
    if let Some(other) = hw.iter().find(|g| g.name != first.name) {
        return Err(format!(
            "--gpu-inventory hardware: this host mixes GPU models ({} and {}); declare them in the config and use --gpu-inventory config",
            first.name, other.name
        ));
    }
    if hw.len() > allot_core::cluster::MAX_GPUS_PER_NODE as usize {
        return Err(format!(
            "--gpu-inventory hardware: this host has {} GPUs; at most {} per node are supported",
            hw.len(),
            allot_core::cluster::MAX_GPUS_PER_NODE
        ));
    }
    // The longest configured name the model contains ("H100" rather than "H1").
    let gpu = cluster
        .gpu_types
        .iter()
        .enumerate()
        .filter(|(_, t)| names_model(&first.name, &t.name))
        .max_by_key(|(_, t)| t.name.len())
        .map(|(i, _)| GpuTypeId(i as u16))
        .ok_or_else(|| {
            let known: Vec<&str> = cluster.gpu_types.iter().map(|t| t.name.as_str()).collect();
            format!(
                "--gpu-inventory hardware: the host's GPUs are {:?}, which names none of the config's GPU types ({}); \
                 add a GPU type whose name the model contains",
                first.name,
                known.join(", ")
            )
        })?;
    let spec = PoolSpec {
        name: pool.name.clone(),
        gpu,
        nodes: 1,
        gpus_per_node: hw.len() as u32,
        rack_size: pool.rack_size,
        shared: pool.shared,
    };
    let built = Cluster::new(cluster.name.clone(), cluster.gpu_types.clone(), vec![spec]);
    let names = hw.iter().map(|g| if g.uuid.is_empty() { g.index.to_string() } else { g.uuid.clone() }).collect();
    let devices = HashMap::from([(built.nodes[0].name.clone(), names)]);
    Ok((built, devices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_core::GpuType;

    fn h100(n: u32) -> Vec<HardwareGpu> {
        (0..n)
            .map(|i| HardwareGpu { index: i, name: "NVIDIA H100 80GB HBM3".into(), uuid: format!("GPU-{i:04}") })
            .collect()
    }

    fn cluster(types: &[&str], pools: &[(u32, u32)]) -> Cluster {
        let types = types.iter().map(|t| GpuType { name: t.to_string(), weight: 1.0 }).collect();
        let specs = pools
            .iter()
            .enumerate()
            .map(|(i, &(nodes, gpus))| PoolSpec {
                name: format!("p{i}"),
                gpu: GpuTypeId(0),
                nodes,
                gpus_per_node: gpus,
                rack_size: 1,
                shared: false,
            })
            .collect();
        Cluster::new("c", types, specs)
    }

    #[test]
    fn parses_nvidia_smi_and_names_a_bad_line() {
        let hw = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, GPU-a\n1, NVIDIA H100 80GB HBM3, GPU-b\n\n").unwrap();
        assert_eq!(hw.len(), 2);
        assert_eq!(hw[1], HardwareGpu { index: 1, name: "NVIDIA H100 80GB HBM3".into(), uuid: "GPU-b".into() });
        let err = parse_nvidia_smi("0, A100, GPU-a\nbogus\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("bogus"), "{err}");
    }

    #[test]
    fn compares_the_config_with_the_hardware() {
        let hw = h100(2);
        assert!(mismatches(&cluster(&["H100"], &[(1, 2)]), &hw).is_empty());
        assert_eq!(mismatches(&cluster(&["H100"], &[(1, 8)]), &hw).len(), 1);
        assert_eq!(mismatches(&cluster(&["A100"], &[(1, 2)]), &hw).len(), 1);
    }

    #[test]
    fn builds_the_inventory_from_the_hardware() {
        let (c, devices) = from_hardware(&cluster(&["A100", "H100"], &[(1, 8)]), &h100(4)).unwrap();
        assert_eq!(c.pools[0].gpus_per_node, 4);
        assert_eq!(c.nodes.len(), 1);
        assert_eq!(c.nodes[0].gpus, 4);
        assert_eq!(c.gpu_types[c.pools[0].gpu.0 as usize].name, "H100");
        assert_eq!(devices[&c.nodes[0].name], vec!["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]);
    }

    #[test]
    fn refuses_what_the_hardware_cannot_be() {
        let err = |c: Cluster, hw: &[HardwareGpu]| from_hardware(&c, hw).unwrap_err();
        assert!(err(cluster(&["H100"], &[(1, 8), (1, 8)]), &h100(8)).contains("2 pools"));
        assert!(err(cluster(&["H100"], &[(4, 8)]), &h100(8)).contains("4 nodes"));
        assert!(err(cluster(&["B200"], &[(1, 8)]), &h100(8)).contains("names none"));
        let mut mixed = h100(2);
        mixed[1].name = "NVIDIA A100-SXM4-80GB".into();
        assert!(err(cluster(&["H100"], &[(1, 2)]), &mixed).contains("mixes"));
        assert!(err(cluster(&["H100"], &[(1, 2)]), &[]).contains("no GPUs"));
    }
}
