//! Slurm with topology/tree and `sbatch --switches=1@<max-wait>` on every multi-GPU job: the
//! job waits up to max-wait for nodes under one leaf switch (rack), then takes any nodes.
//! Within the chosen rack Slurm picks the rack that fits most tightly and first-fits nodes
//! there; it does not minimise the node count.

use super::placement::first_fit_in;
use super::{first_fit, Scheduler};
use crate::sim::engine::State;

pub struct SlurmSwitches {
    /// Slurm's `max_switch_wait` (default 300 s).
    pub max_wait_s: f64,
}

impl Scheduler for SlurmSwitches {
    fn name(&self) -> String {
        format!("slurm-switches@{}", self.max_wait_s)
    }

    fn order_key(&self, _state: &State, _job: usize, _now: f64) -> f64 {
        0.0
    }

    fn place(&self, state: &State, job: usize, now: f64) -> Option<Vec<(u32, u32)>> {
        let spec = &state.jobs[job].spec;
        let cluster = state.cluster();
        // One switch is trivially met by one node: Slurm's own single-node best fit.
        if spec.gpus <= 1 || cluster.racks == 1 || spec.gpus <= cluster.gpus_per_node {
            if let Some(p) = first_fit(state, job).filter(|p| p.len() == 1) {
                return Some(p);
            }
        }
        if cluster.racks == 1 {
            return first_fit(state, job);
        }
        // Racks by free GPUs, tightest first; the first that holds the job.
        let mut racks: Vec<(u32, u32)> = (0..cluster.racks)
            .map(|r| {
                let free = (0..cluster.nodes)
                    .filter(|&n| cluster.rack_of(n) == r)
                    .map(|n| state.free[n as usize])
                    .sum();
                (free, r)
            })
            .filter(|&(free, _)| free >= spec.gpus)
            .collect();
        racks.sort_unstable();
        for (_, rack) in racks {
            let nodes = (0..cluster.nodes).filter(|&n| cluster.rack_of(n) == rack);
            if let Some(p) = first_fit_in(state, spec.gpus, spec.gpus_per_node, nodes) {
                return Some(p);
            }
        }
        if now - spec.submit as f64 >= self.max_wait_s {
            first_fit(state, job)
        } else {
            None
        }
    }
}
