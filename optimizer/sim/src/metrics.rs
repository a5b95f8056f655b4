//! What a run is judged by: job completion times (average, median, p95, p99), queueing delay,
//! makespan, GPU utilisation, communication overhead (GPU-hours lost to placements slower than
//! consolidated) and the worst slowdown (JCT over the job's ideal run time).

use super::cluster::ClusterSpec;
use super::engine::{Outcome, Phase};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub policy: String,
    /// Jobs that ended: ran to completion, or were killed at their time limit.
    pub jobs: usize,
    /// Of those, the jobs Slurm killed at their time limit (TIMEOUT) before their work was done:
    /// they count in every JCT figure and the makespan (their users waited for them), and their
    /// work is lost.
    pub killed: usize,
    pub avg_jct: f64,
    /// The physical limit: the mean of the jobs' ideal run times (every job started at its
    /// submission on its best placement, so run until its work is done or its limit is
    /// reached), which no scheduler can beat.
    pub ideal_avg_jct: f64,
    pub median_jct: f64,
    pub p95_jct: f64,
    pub p99_jct: f64,
    pub avg_queue: f64,
    pub makespan: f64,
    /// GPU utilisation while jobs wait: busy GPUs over all GPUs, averaged over the time at least
    /// one job was pending (when a scheduler could have used idle GPUs; the idle start and tail
    /// of a trace do not dilute it). NaN when no job ever waited.
    pub gpu_util: f64,
    pub comm_overhead_gpu_h: f64,
    pub max_slowdown: f64,
    pub preemptions: u32,
    /// Jobs with a QoS target, and how many of them finished by it (GENIE's QoS-guarantee
    /// percentage is met / targeted).
    pub targeted: usize,
    pub met: usize,
    /// Jobs Slurm cancelled because they could no longer meet their `--deadline`.
    pub cancelled: usize,
    /// Jain's index over users' GPU-time received against their max-min fair share while they
    /// competed ([`crate::fairshare::FairnessMeter`]); NaN for a trace without two competing
    /// users.
    pub fairness_jain: f64,
    /// The least a user received of their fair share while competing (NaN likewise).
    pub worst_user_share: f64,
}

impl Summary {
    /// The share of targeted jobs that missed their target (cancelled ones included).
    pub fn missed_share(&self) -> Option<f64> {
        (self.targeted > 0).then(|| 1.0 - self.met as f64 / self.targeted as f64)
    }
}

pub use cinch_core::util::stats::percentile;

/// Busy GPUs over `gpus`, averaged over the timeline's spans with a job pending (the timeline
/// holds a sample at every change of busy GPUs or pending jobs); NaN when there are none.
pub fn util_while_waiting(timeline: &[crate::engine::Sample], gpus: u32) -> f64 {
    let (mut waiting_s, mut busy_gpu_s) = (0.0, 0.0);
    for pair in timeline.windows(2) {
        let (s, next) = (pair[0], pair[1]);
        if s.pending > 0 {
            let dt = (next.time - s.time).max(0.0);
            waiting_s += dt;
            busy_gpu_s += f64::from(s.busy_gpus) * dt;
        }
    }
    if waiting_s > 0.0 && gpus > 0 {
        busy_gpu_s / (waiting_s * f64::from(gpus))
    } else {
        f64::NAN
    }
}

pub fn summarize(policy: &str, outcome: &Outcome, cluster: &ClusterSpec) -> Summary {
    let done: Vec<_> = outcome
        .jobs
        .iter()
        .filter(|j| j.phase == Phase::Done)
        .collect();
    let mut jct: Vec<f64> = done
        .iter()
        .map(|j| j.finish.unwrap_or(0.0) - j.spec.submit as f64)
        .collect();
    jct.sort_by(f64::total_cmp);
    let n = done.len().max(1) as f64;
    let first_submit = done
        .iter()
        .map(|j| j.spec.submit as f64)
        .fold(f64::INFINITY, f64::min);
    let last_finish = done.iter().filter_map(|j| j.finish).fold(0.0, f64::max);
    let makespan = if done.is_empty() {
        0.0
    } else {
        last_finish - first_submit
    };
    Summary {
        policy: policy.to_string(),
        jobs: done.len(),
        killed: done.iter().filter(|j| j.killed).count(),
        avg_jct: jct.iter().sum::<f64>() / n,
        ideal_avg_jct: done
            .iter()
            .map(|j| j.spec.run_time.min(j.spec.time_limit))
            .sum::<f64>()
            / n,
        median_jct: percentile(&jct, 0.5),
        p95_jct: percentile(&jct, 0.95),
        p99_jct: percentile(&jct, 0.99),
        avg_queue: done
            .iter()
            .map(|j| j.first_start.unwrap_or(0.0) - j.spec.submit as f64)
            .sum::<f64>()
            / n,
        makespan,
        gpu_util: util_while_waiting(&outcome.timeline, cluster.total_gpus()),
        comm_overhead_gpu_h: done.iter().map(|j| j.comm_lost).sum::<f64>() / 3600.0,
        max_slowdown: done
            .iter()
            .map(|j| (j.finish.unwrap_or(0.0) - j.spec.submit as f64) / j.spec.run_time)
            .fold(0.0, f64::max),
        preemptions: done.iter().map(|j| j.restarts).sum(),
        targeted: outcome.jobs.iter().filter(|j| j.spec.due.is_some()).count(),
        met: done
            .iter()
            .filter(|j| j.spec.due.zip(j.finish).is_some_and(|(due, f)| f <= due))
            .count(),
        cancelled: outcome
            .jobs
            .iter()
            .filter(|j| j.phase == Phase::Cancelled)
            .count(),
        fairness_jain: outcome.fairness.map_or(f64::NAN, |f| f.jain),
        worst_user_share: outcome.fairness.map_or(f64::NAN, |f| f.worst),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Sample;

    #[test]
    fn utilisation_counts_only_the_time_jobs_wait() {
        let s = |time, busy_gpus, pending| Sample {
            time,
            busy_gpus,
            pending,
        };
        // 0-10 s: 8 of 16 busy, one waits; 10-30 s: 16 busy, one waits; 30-1000 s: a lone job
        // runs with nobody waiting (left out).
        let timeline = [s(0.0, 8, 1), s(10.0, 16, 1), s(30.0, 2, 0), s(1000.0, 0, 0)];
        let util = util_while_waiting(&timeline, 16);
        assert!(
            (util - (8.0 * 10.0 + 16.0 * 20.0) / (30.0 * 16.0)).abs() < 1e-12,
            "{util}"
        );
        assert!(util_while_waiting(&[s(0.0, 4, 0), s(5.0, 0, 0)], 16).is_nan());
    }
}
