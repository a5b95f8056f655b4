//! Slurm as configured by default: priority is submit order (age), or the site's multifactor
//! with fair share where the simulation has one; the engine's main scheduler and backfill, and
//! cons_tres first fit with no locality preference.

use super::first_fit;
use crate::engine::Scheduler;
use crate::engine::State;

pub struct SlurmDefault;

impl Scheduler for SlurmDefault {
    fn name(&self) -> String {
        "slurm".into()
    }

    fn order_key(&self, state: &State, job: usize, now: f64) -> f64 {
        // Higher first; without multifactor every job ties and submit time decides: FIFO.
        -state.site_priority(job, now)
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        first_fit(state, job)
    }
}

/// Slurm's defaults with the jobs' QoS targets given as `--deadline`: a pending job is
/// cancelled once it can no longer end by it.
pub struct SlurmDeadline;

impl Scheduler for SlurmDeadline {
    fn name(&self) -> String {
        "slurm-deadline".into()
    }

    fn order_key(&self, state: &State, job: usize, now: f64) -> f64 {
        SlurmDefault.order_key(state, job, now)
    }

    fn place(&self, state: &State, job: usize, now: f64) -> Option<Vec<(u32, u32)>> {
        SlurmDefault.place(state, job, now)
    }

    fn cancels_past_deadline(&self) -> bool {
        true
    }
}
