//! Tiresias (Gu et al., NSDI'19), discretized two-dimensional least-attained-service: jobs sit
//! in priority queues by the GPU-seconds they have received (queue k holds jobs below
//! threshold k), FIFO inside a queue. Every tick the jobs that fit, in queue order, are the
//! ones that should run: running jobs outside that set are preempted (they keep their progress
//! and pay the restart penalty). Placement prefers consolidation (fewest nodes), relaxing to
//! any free GPUs. The default single threshold of 16 GPU-hours (two queues) is what the
//! Pollux artifact's Tiresias uses, so the fidelity check compares like with like.

use super::{consolidated, Scheduler};
use crate::sim::engine::{Action, Phase, State};

pub struct Tiresias {
    /// Queue thresholds in GPU-seconds, ascending.
    pub thresholds: Vec<f64>,
    /// Seconds between preemption decisions (the Pollux simulator's 60 s rounds).
    pub period_s: f64,
    next_round: f64,
}

impl Default for Tiresias {
    fn default() -> Self {
        Tiresias {
            thresholds: vec![16.0 * 3600.0],
            period_s: 60.0,
            next_round: 0.0,
        }
    }
}

impl Tiresias {
    fn queue(&self, state: &State, job: usize, now: f64) -> usize {
        let attained = state.jobs[job].attained_at(now);
        self.thresholds
            .iter()
            .take_while(|&&t| attained >= t)
            .count()
    }
}

impl Scheduler for Tiresias {
    fn name(&self) -> String {
        "tiresias".into()
    }

    fn prepare(&mut self, state: &State, now: f64) -> Vec<Action> {
        if now < self.next_round {
            return Vec::new();
        }
        self.next_round = ((now / self.period_s).floor() + 1.0) * self.period_s;
        let mut active: Vec<(usize, i64, usize)> = state
            .running
            .iter()
            .chain(state.pending.iter())
            .map(|&j| (self.queue(state, j, now), state.jobs[j].spec.submit, j))
            .collect();
        active.sort_unstable();
        let mut capacity = state.cluster().total_gpus();
        let mut actions = Vec::new();
        for (_, _, job) in active {
            let gpus = state.jobs[job].spec.gpus;
            if gpus <= capacity {
                capacity -= gpus;
            } else if state.jobs[job].phase == Phase::Running {
                actions.push(Action::Preempt(job));
            }
        }
        actions
    }

    fn order_key(&self, state: &State, job: usize, now: f64) -> f64 {
        self.queue(state, job, now) as f64
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        consolidated(state, job)
    }

    fn reserves(&self) -> bool {
        false // Work-conserving: what fits runs; priority is enforced by preemption.
    }

    fn wants_ticks(&self) -> bool {
        true
    }
}
