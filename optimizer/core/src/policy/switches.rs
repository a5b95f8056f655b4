//! `switches`: what Slurm's topology/tree offers with `sbatch --switches=1@<max-wait>` on every
//! multi-GPU job, as a policy: the job waits up to `max_wait_s` from its submission for nodes
//! under one leaf switch (rack) and is pinned there when they are free; after that it takes any
//! nodes Slurm gives it. The baseline an admin already has without cinch.

use serde::{Deserialize, Serialize};

use super::{pin_in_slurm_order, Policy};
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::snapshot::Snapshot;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct SwitchesParams {
    /// Seconds a job waits for one rack (Slurm's `max_switch_wait`, default 300; up to 604800).
    pub max_wait_s: u32,
    /// Jobs asking for at least this many GPUs wait for one rack (2 or more).
    pub min_gpus: u32,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for SwitchesParams {
    fn default() -> Self {
        SwitchesParams {
            max_wait_s: 300,
            min_gpus: 2,
            ttl_s: 300,
        }
    }
}

impl SwitchesParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_wait_s > 604_800 {
            return Err(format!(
                "max_wait_s must be from 0 to 604800, not {}",
                self.max_wait_s
            ));
        }
        super::check_min_gpus(self.min_gpus)?;
        super::check_ttl(self.ttl_s)
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
                        ..Decision::explain(
                            job.job_id,
                            format!("waits up to {wait} s from submission for one rack"),
                            ttl,
                        )
                    }
                } else {
                    Decision::explain(
                        job.job_id,
                        "waited its switch wait for one rack; any nodes now",
                        ttl,
                    )
                }
            },
        )
    }
}
