//! The failed-shape cache of a pass.

use crate::pending::Shape;
use crate::workload::WorkloadSpec;

/// Remembers, within one pass, the smallest gang of each shape that failed
/// to place: a larger gang of the same shape cannot fit either, because a
/// pass only ever consumes free GPUs.
#[derive(Default)]
pub(crate) struct FailCache {
    /// ((GPU type, clusters, exact nodes, scope), smallest failed gang).
    shapes: Vec<(ShapeKey, u32)>,
}

type ShapeKey = (Option<crate::cluster::GpuTypeId>, crate::cluster::ClusterSet, u32, u64);

impl FailCache {
    /// `scope` distinguishes sets of allowed pools (0 when all pools).
    pub(crate) fn known_to_fail(&self, spec: &WorkloadSpec, scope: u64) -> bool {
        self.known_shape(Shape::of(spec), scope)
    }

    /// [`FailCache::known_to_fail`] for a gang of this shape.
    pub(crate) fn known_shape(&self, shape: Shape, scope: u64) -> bool {
        let key = (shape.gpu_type, shape.clusters, shape.nodes, scope);
        self.shapes.iter().any(|(k, g)| *k == key && shape.gpus >= *g)
    }

    pub(crate) fn record(&mut self, spec: &WorkloadSpec, scope: u64) {
        let key = (spec.gpu_type, spec.clusters, spec.nodes, scope);
        match self.shapes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => *g = (*g).min(spec.gpus),
            None => self.shapes.push((key, spec.gpus)),
        }
    }
}
