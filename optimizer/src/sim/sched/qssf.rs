//! QSSF-like (Helios, SC'21): quasi-shortest-service-first. A pending job's priority is its
//! predicted service (GPUs x run time), predicted from the history of finished jobs: the mean
//! run time of the same user's jobs with the same GPU count, else of all jobs with that GPU
//! count, else the job's own time limit. Non-preemptive, Slurm first fit and backfill.

use std::collections::HashMap;

use super::{first_fit, Scheduler};
use crate::sim::engine::State;

#[derive(Default)]
pub struct Qssf {
    /// (sum of run times, count) by (user, GPUs) and by GPUs.
    by_user: HashMap<(String, u32), (f64, u32)>,
    by_gpus: HashMap<u32, (f64, u32)>,
}

impl Qssf {
    fn predicted_run_time(&self, state: &State, job: usize) -> f64 {
        let spec = &state.jobs[job].spec;
        let mean = |(sum, n): (f64, u32)| sum / f64::from(n);
        self.by_user
            .get(&(spec.user.clone(), spec.gpus))
            .or_else(|| self.by_gpus.get(&spec.gpus))
            .map(|&s| mean(s))
            .unwrap_or(spec.time_limit)
    }
}

impl Scheduler for Qssf {
    fn name(&self) -> String {
        "qssf".into()
    }

    fn order_key(&self, state: &State, job: usize, _now: f64) -> f64 {
        f64::from(state.jobs[job].spec.gpus) * self.predicted_run_time(state, job)
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        first_fit(state, job)
    }

    fn on_finish(&mut self, state: &State, job: usize) {
        let j = &state.jobs[job];
        // What the history shows is the wall time from start to end (placement included).
        let ran = j.finish.unwrap_or(0.0) - j.first_start.unwrap_or(0.0);
        for entry in [
            self.by_user
                .entry((j.spec.user.clone(), j.spec.gpus))
                .or_default(),
            self.by_gpus.entry(j.spec.gpus).or_default(),
        ] {
            entry.0 += ran;
            entry.1 += 1;
        }
    }
}
