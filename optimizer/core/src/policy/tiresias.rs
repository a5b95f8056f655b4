//! `tiresias`: discretized two-dimensional least-attained-service (Gu et al., NSDI'19), the
//! survey's queue-order baseline. A job's attained service is the GPU-seconds it has received,
//! over all its runs (requeues included, learned from snapshots). Queue k holds jobs that have
//! received at least threshold k; lower queues go first, first come first served inside a queue.
//!
//! Live, the queues become Slurm priorities (the same value for every job of a queue, so Slurm's
//! own FIFO tie-break orders each queue); multi-GPU jobs are pinned to their most consolidated
//! free placement in that order. With `preempt`, running jobs that fall behind waiting jobs in
//! queue order and no longer fit are requeued, but only those whose users opted in (`--requeue`
//! and `ckpt=yes`): the others keep their GPUs, and the apply path refuses anything else.

use serde::{Deserialize, Serialize};

use super::placement::Cluster;
use super::{checkpoints, left_as_submitted, pin_decision, Policy};
use crate::decision::Decision;
use crate::history::History;
use crate::rng::SeededRng;
use crate::snapshot::Snapshot;

/// Priority of the first queue; each later queue is one [`QUEUE_STEP`] lower.
pub const TOP_PRIORITY: u32 = 1_000_000;
pub const QUEUE_STEP: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct TiresiasParams {
    /// Queue thresholds in GPU-hours of attained service, ascending (1 to 20 of them, each
    /// above 0). The default, one threshold of 16 GPU-hours, is the Pollux artifact's.
    pub thresholds_gpu_h: Vec<f64>,
    /// Requeue running opted-in jobs that fall behind waiting ones.
    pub preempt: bool,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for TiresiasParams {
    fn default() -> Self {
        TiresiasParams {
            thresholds_gpu_h: vec![16.0],
            preempt: true,
            ttl_s: 300,
        }
    }
}

impl TiresiasParams {
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.thresholds_gpu_h;
        if t.is_empty() || t.len() > 20 {
            return Err(format!(
                "thresholds_gpu_h must list 1 to 20 thresholds, not {}",
                t.len()
            ));
        }
        if t.iter().any(|x| !(x.is_finite() && *x > 0.0)) || t.windows(2).any(|w| w[0] >= w[1]) {
            return Err("thresholds_gpu_h must be above 0 and strictly ascending".into());
        }
        super::check_ttl(self.ttl_s)
    }

    /// The queue of a job that received `attained` GPU-seconds.
    pub fn queue(&self, attained: f64) -> usize {
        self.thresholds_gpu_h
            .iter()
            .take_while(|&&t| attained >= t * 3600.0)
            .count()
    }
}

pub struct Tiresias(pub TiresiasParams);

/// A job in the queue walk: (queue, waiting, since, job id, GPUs). Inside a queue running jobs
/// come first: Tiresias preempts only for jobs of a better queue, never to reorder one queue.
type Entry = (usize, bool, i64, u32, u32);

impl Policy for Tiresias {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        let ttl = self.0.ttl_s;
        let mut cluster = Cluster::new(snapshot);
        let mut order: Vec<(usize, &crate::snapshot::PendingJob)> = snapshot
            .pending
            .iter()
            .map(|j| {
                let attained = history.attained_service(j.job_id, None, now);
                (self.0.queue(attained), j)
            })
            .collect();
        order.sort_by_key(|(q, j)| (*q, j.submit_time, j.job_id));

        let mut decisions = Vec::with_capacity(order.len());
        for &(queue, job) in &order {
            let priority = TOP_PRIORITY - QUEUE_STEP * queue as u32;
            let why = format!("2D-LAS queue {queue}");
            if let Some(reason) = left_as_submitted(job, now) {
                decisions.push(Decision {
                    priority: Some(priority),
                    ..Decision::explain(job.job_id, format!("{why}; {reason}"), ttl)
                });
                continue;
            }
            if job.gpus < 2 {
                cluster.take_best_fit_node(job);
                decisions.push(Decision {
                    priority: Some(priority),
                    ..Decision::explain(job.job_id, why, ttl)
                });
                continue;
            }
            let saved = cluster.save();
            match cluster.place(job, now, true) {
                Ok((placement, reason)) => {
                    let mut d = pin_decision(job, placement, format!("{why}; {reason}"), ttl);
                    d.priority = Some(priority);
                    decisions.push(d);
                }
                Err(reason) => {
                    cluster.restore(saved);
                    decisions.push(Decision {
                        priority: Some(priority),
                        ..Decision::explain(job.job_id, format!("{why}; {reason}"), ttl)
                    });
                }
            }
        }

        if self.0.preempt && !order.is_empty() {
            decisions.extend(self.preemptions(snapshot, &cluster, &order, now, history));
        }
        decisions
    }
}

impl Tiresias {
    /// Walk running and waiting jobs in queue order over the cluster's GPUs: a requeueable
    /// running job that no longer fits behind the jobs before it is requeued.
    fn preemptions(
        &self,
        snapshot: &Snapshot,
        cluster: &Cluster,
        order: &[(usize, &crate::snapshot::PendingJob)],
        now: i64,
        history: &History,
    ) -> Vec<Decision> {
        let mut capacity = cluster.schedulable_gpus(snapshot);
        let mut walk: Vec<Entry> = Vec::new();
        for job in &snapshot.running {
            if job.requeue && checkpoints(&job.hints) {
                let attained =
                    history.attained_service(job.job_id, Some((job.gpus, job.start_time)), now);
                walk.push((
                    self.0.queue(attained),
                    false,
                    job.start_time,
                    job.job_id,
                    job.gpus,
                ));
            } else {
                // Jobs that may not be requeued keep their GPUs whatever their queue.
                capacity = capacity.saturating_sub(u64::from(job.gpus));
            }
        }
        for &(queue, job) in order {
            if left_as_submitted(job, now).is_none() {
                walk.push((queue, true, job.submit_time, job.job_id, job.gpus));
            }
        }
        walk.sort_unstable();
        // Running jobs alone always fit: one that does not was pushed out by waiting jobs ahead.
        let mut decisions = Vec::new();
        for (queue, waiting, _, id, gpus) in walk {
            if u64::from(gpus) <= capacity {
                capacity -= u64::from(gpus);
            } else if !waiting {
                decisions.push(Decision {
                    requeue: Some(true),
                    ..Decision::explain(
                        id,
                        format!(
                            "requeued: 2D-LAS queue {queue}, behind waiting jobs with less \
                             attained service"
                        ),
                        self.0.ttl_s,
                    )
                });
            }
        }
        decisions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::RunningJob;
    use crate::testing::{cluster, pending, snapshot};

    fn hinted_running(id: u32, node: &str, gpus: u32, start: i64) -> RunningJob {
        RunningJob {
            job_id: id,
            user: "ann".into(),
            nodes: vec![node.into()],
            gpus,
            start_time: start,
            requeue: true,
            hints: [("ckpt".to_string(), "yes".to_string())].into(),
            ..RunningJob::default()
        }
    }

    #[test]
    fn a_new_job_outranks_one_with_service_and_a_long_runner_is_requeued_for_it() {
        let mut snap = snapshot(cluster(1, 8, 1), vec![pending(2, 8)]);
        let now = snap.time;
        // Job 1 has run on all 8 GPUs for 3 hours: 24 GPU-hours, past the 16 GPU-hour threshold.
        snap.nodes[0].gpus_alloc = 8;
        snap.nodes[0].state = crate::snapshot::NodeState::Allocated;
        snap.running
            .push(hinted_running(1, "n1", 8, now - 3 * 3600));
        let d = Tiresias(TiresiasParams::default()).decide(
            &snap,
            now,
            &mut SeededRng::new(1),
            &History::default(),
        );
        assert_eq!(d[0].job_id, 2);
        assert_eq!(d[0].priority, Some(TOP_PRIORITY));
        let requeue: Vec<u32> = d
            .iter()
            .filter(|d| d.requeue == Some(true))
            .map(|d| d.job_id)
            .collect();
        assert_eq!(requeue, vec![1]);

        // Without the opt-in the long runner keeps its GPUs.
        snap.running[0].hints.clear();
        let d = Tiresias(TiresiasParams::default()).decide(
            &snap,
            now,
            &mut SeededRng::new(1),
            &History::default(),
        );
        assert!(d.iter().all(|d| d.requeue.is_none()), "{d:?}");
    }

    #[test]
    fn thresholds_must_ascend() {
        let bad = TiresiasParams {
            thresholds_gpu_h: vec![5.0, 1.0],
            ..TiresiasParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("ascending"));
        assert_eq!(TiresiasParams::default().queue(15.9 * 3600.0), 0);
        assert_eq!(TiresiasParams::default().queue(16.0 * 3600.0), 1);
    }
}
