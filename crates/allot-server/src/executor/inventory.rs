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

use allot_core::cluster::{ClusterId, PoolId};
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

/// What failed while reading or using the host's GPUs, and why.
#[derive(Debug, thiserror::Error)]
#[error("failed to {}", .kind.action())]
pub struct InventoryError {
    #[source]
    pub kind: InventoryErrorKind,
}

/// Why the host's GPUs could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryErrorKind {
    #[error("cannot run {program} (no NVIDIA driver on this host?)")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} exited with {status}: {stderr}")]
    Exit { program: String, status: std::process::ExitStatus, stderr: String },
    #[error("nvidia-smi output line {line}: expected `index, name, uuid`, got {text:?}")]
    Malformed { line: usize, text: String },
    #[error("{program} reports no GPUs")]
    NoGpus { program: String },
    #[error("the config must declare this host as one pool of one node; it declares {0} pools")]
    Pools(usize),
    #[error("the config must declare this host as one pool of one node; pool {pool} has {nodes} nodes")]
    Nodes { pool: String, nodes: u32 },
    #[error("this host mixes GPU models ({0} and {1}); declare them in the config and use --gpu-inventory config")]
    MixedModels(String, String),
    #[error("this host has {0} GPUs; at most {max} per node are supported", max = allot_core::cluster::MAX_GPUS_PER_NODE)]
    TooManyGpus(usize),
    #[error(
        "the host's GPUs are {model:?}, which names none of the config's GPU types ({known}); add a GPU type whose \
         name the model contains"
    )]
    UnknownModel { model: String, known: String },
}

impl InventoryErrorKind {
    fn action(&self) -> &'static str {
        match self {
            InventoryErrorKind::Spawn { .. }
            | InventoryErrorKind::Exit { .. }
            | InventoryErrorKind::Malformed { .. }
            | InventoryErrorKind::NoGpus { .. } => "read the host's GPUs",
            _ => "use the host's GPUs as the inventory (--gpu-inventory hardware)",
        }
    }
}

impl From<InventoryErrorKind> for InventoryError {
    fn from(kind: InventoryErrorKind) -> InventoryError {
        InventoryError { kind }
    }
}

/// The `nvidia-smi` program: `ALLOT_NVIDIA_SMI`, else `nvidia-smi` on `PATH`.
pub(crate) fn program() -> String {
    std::env::var("ALLOT_NVIDIA_SMI").unwrap_or_else(|_| "nvidia-smi".to_string())
}

/// The host's GPUs; `Err` says why they could not be read (no driver, the
/// program failed, or it printed nothing usable).
pub fn detect() -> Result<Vec<HardwareGpu>, InventoryError> {
    let program = program();
    let out = Command::new(&program)
        .args(["--query-gpu=index,name,uuid", "--format=csv,noheader"])
        .output()
        .map_err(|source| InventoryErrorKind::Spawn { program: program.clone(), source })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(InventoryErrorKind::Exit { program, status: out.status, stderr }.into());
    }
    let gpus = parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout))?;
    if gpus.is_empty() {
        return Err(InventoryErrorKind::NoGpus { program }.into());
    }
    Ok(gpus)
}

/// Parses `index, name, uuid` lines (the uuid may be missing); a malformed
/// line is an error naming it.
pub fn parse_nvidia_smi(text: &str) -> Result<Vec<HardwareGpu>, InventoryError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut fields = line.split(',').map(str::trim);
        let bad = || InventoryErrorKind::Malformed { line: n + 1, text: line.to_string() };
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

/// MNT-5: the pool of cluster `of` a node that appears joins: of the
/// pools whose nodes have at most its `gpus`, the first (config order)
/// whose GPU type its `product` names (as the driver's model name names
/// one), else — with no product, or one naming none of them — the first
/// of them. `Err` says why none fits.
pub fn pool_for(cluster: &Cluster, of: ClusterId, gpus: u32, product: Option<&str>) -> Result<PoolId, String> {
    let fits: Vec<PoolId> = (0..cluster.pools.len() as u32)
        .map(PoolId)
        .filter(|&p| cluster.pool(p).cluster == of && cluster.pool(p).gpus_per_node <= gpus)
        .collect();
    let named = |p: &&PoolId| {
        product.is_some_and(|m| names_model(m, &cluster.gpu_types[cluster.pool(**p).gpu.0 as usize].name))
    };
    fits.iter().find(named).or(fits.first()).copied().ok_or_else(|| {
        format!(
            "MNT-5: it has {gpus} GPUs and no pool of cluster {} has nodes of at most {gpus}",
            cluster.cluster_name(of)
        )
    })
}

/// The cluster with the host's GPUs as its inventory (`--gpu-inventory
/// hardware`), and how each GPU is named to CUDA.
pub fn from_hardware(cluster: &Cluster, hw: &[HardwareGpu]) -> Result<(Cluster, DeviceMap), InventoryError> {
    let [pool] = cluster.pools.as_slice() else {
        return Err(InventoryErrorKind::Pools(cluster.pools.len()).into());
    };
    if pool.nodes != 1 {
        return Err(InventoryErrorKind::Nodes { pool: pool.name.clone(), nodes: pool.nodes }.into());
    }
    let first = hw.first().ok_or_else(|| InventoryErrorKind::NoGpus { program: program() })?;
    if let Some(other) = hw.iter().find(|g| g.name != first.name) {
        return Err(InventoryErrorKind::MixedModels(first.name.clone(), other.name.clone()).into());
    }
    if hw.len() > allot_core::cluster::MAX_GPUS_PER_NODE as usize {
        return Err(InventoryErrorKind::TooManyGpus(hw.len()).into());
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
            InventoryErrorKind::UnknownModel { model: first.name.clone(), known: known.join(", ") }
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

    /// MNT-5: a node that appears joins the pool its GPUs fit, the one its
    /// product names first.
    #[test]
    fn a_node_that_appears_joins_the_pool_it_fits() {
        let mut c = cluster(&["A100", "H100"], &[(1, 4), (1, 8)]);
        c.pools[1].gpu = GpuTypeId(1);
        let of = ClusterId(0);
        /// (case, GPUs, product, the pool's index or the error's words).
        type Case<'a> = (&'a str, u32, Option<&'a str>, Result<u32, &'a str>);
        let cases: [Case; 5] = [
            ("8 GPUs, no product: the first pool it fits", 8, None, Ok(0)),
            ("8 GPUs, the product names the second pool's type", 8, Some("NVIDIA-H100-80GB-HBM3"), Ok(1)),
            ("4 GPUs fit the 4-GPU pool only, whatever the product", 4, Some("NVIDIA-H100-80GB-HBM3"), Ok(0)),
            ("a product naming no pool's type", 8, Some("NVIDIA-B200"), Ok(0)),
            ("fewer GPUs than any pool's nodes", 2, None, Err("has 2 GPUs and no pool of cluster c")),
        ];
        for (case, gpus, product, want) in cases {
            match (pool_for(&c, of, gpus, product), want) {
                (Ok(p), Ok(w)) => assert_eq!(p.0, w, "{case}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{case}: {e}"),
                (got, _) => panic!("{case}: {got:?}"),
            }
        }
    }

    #[test]
    fn parses_nvidia_smi_and_names_a_bad_line() {
        let hw = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, GPU-a\n1, NVIDIA H100 80GB HBM3, GPU-b\n\n").unwrap();
        assert_eq!(hw.len(), 2);
        assert_eq!(hw[1], HardwareGpu { index: 1, name: "NVIDIA H100 80GB HBM3".into(), uuid: "GPU-b".into() });
        let err = parse_nvidia_smi("0, A100, GPU-a\nbogus\n").unwrap_err().kind.to_string();
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
        let err = |c: Cluster, hw: &[HardwareGpu]| from_hardware(&c, hw).unwrap_err().kind.to_string();
        assert!(err(cluster(&["H100"], &[(1, 8), (1, 8)]), &h100(8)).contains("2 pools"));
        assert!(err(cluster(&["H100"], &[(4, 8)]), &h100(8)).contains("4 nodes"));
        assert!(err(cluster(&["B200"], &[(1, 8)]), &h100(8)).contains("names none"));
        let mut mixed = h100(2);
        mixed[1].name = "NVIDIA A100-SXM4-80GB".into();
        assert!(err(cluster(&["H100"], &[(1, 2)]), &mixed).contains("mixes"));
        assert!(err(cluster(&["H100"], &[(1, 2)]), &[]).contains("no GPUs"));
    }
}
