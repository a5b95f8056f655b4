//! `equal-share`: the simple elastic baseline. Each elastic pending job (`elastic=MIN-MAX`,
//! checkpointing, asking for a total `--gpus`) is sized to an equal share of the cluster's GPUs
//! among the jobs running and waiting, within its range and what is free now (first come, first
//! served); Slurm places it. Running jobs are never resized, other jobs are left to Slurm.

use super::param_table::ParamError;
use super::{left_as_submitted, slurm_order, Policy};
use crate::learn::history::History;
use crate::models::elastic;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::EqualSize;
use crate::wire::snapshot::Snapshot;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    pub struct EqualShareParams {
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl EqualShareParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct EqualShare(pub EqualShareParams);

impl Policy for EqualShare {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        let total: u32 = snapshot.nodes.iter().map(|n| n.gpus_total).sum();
        let mut free: u32 = snapshot.nodes.iter().map(|n| n.gpus_free()).sum();
        let jobs = (snapshot.running.len() + snapshot.pending.len()).max(1) as u32;
        let share = (total / jobs).max(1);
        let mut decisions = Vec::new();
        for job in slurm_order(&snapshot.pending) {
            let range = elastic::range(&job.hints).filter(|_| {
                job.gpus_per_node.is_none()
                    && job.hints.checkpoints()
                    && left_as_submitted(job, now).is_none()
            });
            let Some(range) = range else {
                free = free.saturating_sub(job.gpus);
                continue;
            };
            let size = share.min(free).clamp(range.min, range.max);
            if size > free {
                break; // first come, first served: nothing behind it jumps ahead
            }
            free -= size;
            if size != job.gpus {
                decisions.push(Decision {
                    gpus: Some(size),
                    ..Decision::explain(
                        job.job_id,
                        EqualSize {
                            size,
                            total,
                            jobs,
                            min: range.min,
                            max: range.max,
                            free: free + size,
                        },
                        self.0.ttl_s,
                    )
                });
            }
        }
        decisions
    }
}
