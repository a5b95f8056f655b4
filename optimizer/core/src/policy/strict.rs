//! `strict`: strict consolidation, the survey's baseline. A multi-GPU job starts only on its best
//! shape: the fewest nodes its GPUs fit on, inside one rack whenever some rack is big enough. While
//! that shape is not free the job is held (priority 0, released by cinch, undone if cinch stands
//! aside); as soon as it is free the job is pinned there. Jobs are planned in Slurm's order, and
//! the GPUs of jobs Slurm places itself (1-GPU jobs) are taken in the plan where Slurm's best fit
//! puts them, so a pin is not planned on GPUs Slurm is about to give away.

use serde::{Deserialize, Serialize};

use super::placement::Cluster;
use super::{pin_in_slurm_order, Policy};
use crate::decision::Decision;
use crate::history::{fewest_nodes, History};
use crate::rng::SeededRng;
use crate::snapshot::{PendingJob, Snapshot};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct StrictParams {
    /// Jobs asking for at least this many GPUs wait for their best shape (2 or more).
    pub min_gpus: u32,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for StrictParams {
    fn default() -> Self {
        StrictParams {
            min_gpus: 2,
            ttl_s: 300,
        }
    }
}

impl StrictParams {
    pub fn validate(&self) -> Result<(), String> {
        super::check_min_gpus(self.min_gpus)?;
        super::check_ttl(self.ttl_s)
    }
}

pub struct Strict(pub StrictParams);

impl Policy for Strict {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        let ttl = self.0.ttl_s;
        // The best shape: the fewest nodes, inside one rack whenever some rack can hold it.
        let best_nodes = |cluster: &Cluster, job: &PendingJob| match job.gpus_per_node {
            Some(p) => job.min_nodes.max(job.gpus.div_ceil(p)),
            None => fewest_nodes(job.gpus, cluster.node_size()).max(job.min_nodes),
        };
        let one_rack = |cluster: &Cluster, job: &PendingJob| {
            u64::from(job.gpus) <= cluster.largest_rack_gpus()
        };
        pin_in_slurm_order(
            snapshot,
            now,
            self.0.min_gpus,
            true,
            ttl,
            |cluster, job, placement| {
                placement.gpus_on.len() as u32 <= best_nodes(cluster, job)
                    && (placement.racks <= 1 || !one_rack(cluster, job))
            },
            |cluster, job| {
                let nodes = best_nodes(cluster, job);
                let shape = if one_rack(cluster, job) {
                    " in one rack"
                } else {
                    ""
                };
                Decision {
                    hold: Some(true),
                    ..Decision::explain(
                        job.job_id,
                        format!(
                            "held: waits for its best shape, {} GPUs on {nodes} node{}{shape}",
                            job.gpus,
                            if nodes == 1 { "" } else { "s" }
                        ),
                        ttl,
                    )
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, node, pending, snapshot};

    fn decide(snap: &Snapshot) -> Vec<Decision> {
        Strict(StrictParams::default()).decide(
            snap,
            snap.time,
            &mut SeededRng::new(1),
            &History::default(),
        )
    }

    #[test]
    fn pins_the_best_shape_and_holds_a_job_whose_shape_is_not_free() {
        // n1 half busy, n2 and n3 idle in rack r1/r2: an 8-GPU job's best shape is one node.
        let mut nodes = cluster(4, 8, 2);
        nodes[0] = node("n1", 8, 4, "r1");
        nodes[1] = node("n2", 8, 4, "r1");
        nodes[2] = node("n3", 8, 4, "r2");
        let snap = snapshot(nodes, vec![pending(1, 8), pending(2, 8)]);
        let d = decide(&snap);
        assert_eq!(d[0].pin_nodes.as_deref(), Some(&["n4".to_string()][..]));
        // Job 2 would need 2 half-free nodes: not its best shape; held.
        assert_eq!(d[1].hold, Some(true), "{:?}", d[1]);
        assert!(d[1].reason.contains("1 node"), "{}", d[1].reason);
    }

    #[test]
    fn one_gpu_jobs_ahead_take_their_gpus_where_slurm_will() {
        // n1 has 1 free GPU, n2 8: the 1-GPU job ahead goes to n1 (best fit), so the 8-GPU job
        // can still have n2.
        let nodes = vec![node("n1", 8, 7, "r1"), node("n2", 8, 0, "r1")];
        let mut small = pending(1, 1);
        small.submit_time = 0;
        let snap = snapshot(nodes, vec![small, pending(2, 8)]);
        let d = decide(&snap);
        assert_eq!(d.len(), 1, "the 1-GPU job is Slurm's: {d:?}");
        assert_eq!(d[0].pin_nodes.as_deref(), Some(&["n2".to_string()][..]));
    }
}
