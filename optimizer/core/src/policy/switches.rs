//! `switches`: what Slurm's topology/tree offers with `sbatch --switches=1@<max-wait>` on every
//! multi-GPU job, as a policy: the job waits up to `max_wait_s` from its submission for nodes
//! under one leaf switch (rack) and is pinned there when they are free; after that it takes any
//! nodes Slurm gives it. The baseline an admin already has without cinch.

use super::param_table::ParamError;
use super::{pin_in_slurm_order, Policy};
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::Clause;
use crate::wire::snapshot::Snapshot;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct SwitchesParams {
        /// Seconds a job waits for one rack (Slurm's `max_switch_wait`).
        max_wait_s: u32 = 300, range(0, 604_800);
        /// Jobs asking for at least this many GPUs wait for one rack.
        min_gpus: u32 = 2, range(2, 1_000_000, " (a 1-GPU job is always on one node)");
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl SwitchesParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct Switches(pub SwitchesParams);

impl Policy for Switches {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        let ttl = self.0.ttl_s;
        let wait = self.0.max_wait_s;
        pin_in_slurm_order(
            snapshot,
            now,
            self.0.min_gpus,
            false,
            ttl,
            |_, _, _| true,
            |_, job| {
                let until = job.submit_time + i64::from(wait);
                if until > now {
                    Decision {
                        delay_until: Some(until),
                        ..Decision::explain(job.job_id, Clause::SwitchWait(wait), ttl)
                    }
                } else {
                    Decision::explain(job.job_id, Clause::SwitchWaited, ttl)
                }
            },
        )
    }
}
