//! `tiresias`: discretized two-dimensional least-attained-service (Gu et al., NSDI'19), the
//! survey's queue-order baseline. A job's attained service is the GPU-seconds it has received,
//! over all its runs (requeues included, learned from snapshots). Queue k holds jobs that have
//! received at least threshold k; lower queues go first, first come first served inside a queue.
//! The thresholds are the authors' simulator's (`SymbioticLab/Tiresias`, `dlas-gpu`: three
//! queues, at 3,250 and 7,200 GPU-seconds; here 0.9 and 2 GPU-hours).
//!
//! Starvation promotion, as the paper and its simulator do it: a requeued job in a lower queue
//! that has waited at least `promote_knob` times its executed time (its attained service over
//! its GPUs, since its last promotion) goes back to the first queue, its executed time reset
//! (0: never). The reset is derived from what snapshots show: a job whose latest restart came
//! after such a wait counts only its service since then.
//!
//! Live, the queues become Slurm priorities (the same value for every job of a queue, so Slurm's
//! own FIFO tie-break orders each queue); multi-GPU jobs are pinned to their most consolidated
//! free placement in that order. With `preempt`, running jobs that fall behind waiting jobs in
//! queue order and no longer fit are requeued, but only those whose users opted in (`--requeue`
//! and `ckpt=yes`): the others keep their GPUs, and the apply path refuses anything else.

use super::param_table::ParamError;
use super::placement::Cluster;
use super::{left_as_submitted, pin, Policy};
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::{Clause, Reason, Requeued};
use crate::wire::snapshot::{PendingJob, Snapshot};

/// Priority of the first queue; each later queue is one [`QUEUE_STEP`] lower.
pub const TOP_PRIORITY: u32 = 1_000_000;
pub const QUEUE_STEP: u32 = 10_000;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    pub struct TiresiasParams {
        /// Queue thresholds in GPU-hours of attained service, ascending (1 to 20 of them, each
        /// above 0). The default, 0.9 and 2 GPU-hours, is the Tiresias authors' simulator's
        /// (3,250 and 7,200 GPU-seconds; the first rounded to 3,240); the Pollux artifact's
        /// Tiresias has one, 16 GPU-hours.
        thresholds_gpu_h: Vec<f64> = vec![0.9, 2.0];
        /// Requeue running opted-in jobs that fall behind waiting ones.
        preempt: bool = true;
        /// A requeued job goes back to the first queue once it has waited this many times its
        /// executed time since its last promotion (0: never). 2: one of the values the
        /// authors' simulator evaluates (0.5 to 1000).
        promote_knob: f64 = 2.0, range(0.0, 1000.0);
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl TiresiasParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        let t = &self.thresholds_gpu_h;
        let invalid = |why: String| ParamError::Invalid {
            name: "thresholds_gpu_h",
            why,
        };
        if t.is_empty() || t.len() > 20 {
            return Err(invalid(format!(
                "must list 1 to 20 thresholds, not {}",
                t.len()
            )));
        }
        if t.iter().any(|x| !(x.is_finite() && *x > 0.0)) || t.windows(2).any(|w| w[0] >= w[1]) {
            return Err(invalid("must be above 0 and strictly ascending".into()));
        }
        self.check_ranges()
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

impl Tiresias {
    /// The GPU-seconds that decide a job's queue: its attained service, less what it had
    /// received before its latest restart if that restart came after a starvation promotion.
    fn executed(&self, history: &History, job_id: u32, gpus: u32, attained: f64) -> f64 {
        let knob = self.0.promote_knob;
        match history.last_restart(job_id) {
            Some(r)
                if knob > 0.0
                    && r.service_before > 0.0
                    && r.waited_s as f64 >= knob * r.service_before / f64::from(gpus.max(1)) =>
            {
                (attained - r.service_before).max(0.0)
            }
            _ => attained,
        }
    }

    /// A waiting job's queue: by its executed service, or the first queue once it has waited
    /// `promote_knob` times its executed time since its requeue.
    fn pending_queue(&self, history: &History, job: &PendingJob, now: i64) -> usize {
        let attained = history.attained_service(job.job_id, None, now);
        let executed = self.executed(history, job.job_id, job.gpus, attained);
        let waited = (now - job.submit_time).max(0) as f64;
        let knob = self.0.promote_knob;
        if knob > 0.0 && executed > 0.0 && waited >= knob * executed / f64::from(job.gpus.max(1)) {
            return 0;
        }
        self.0.queue(executed)
    }
}

/// A job in the queue walk: (queue, waiting, since, job id, GPUs). Inside a queue running jobs
/// come first: Tiresias preempts only for jobs of a better queue, never to reorder one queue.
type Entry = (usize, bool, i64, u32, u32);

/// Two lists of entries, each in order, walked as one list in order.
struct Merged<A: Iterator<Item = Entry>, B: Iterator<Item = Entry>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = Entry>, B: Iterator<Item = Entry>> Iterator for Merged<A, B> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b < a => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

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
        let mut order: Vec<(usize, &crate::wire::snapshot::PendingJob)> = snapshot
            .pending
            .iter()
            .map(|j| (self.pending_queue(history, j, now), j))
            .collect();
        order.sort_by_key(|(q, j)| (*q, j.submit_time, j.job_id));

        // Each decision is written where it is kept, as cinch's plan does: one is a few
        // hundred bytes (its reason's clauses inline).
        let mut decisions: Vec<Decision> = Vec::with_capacity(order.len());
        for &(queue, job) in &order {
            decisions.push(Decision::explain(job.job_id, Reason::default(), ttl));
            let k = decisions.len() - 1;
            let d = &mut decisions[k];
            d.priority = Some(TOP_PRIORITY - QUEUE_STEP * queue as u32);
            d.reason.push(Clause::LasQueue(queue));
            if let Some(reason) = left_as_submitted(job, now) {
                d.reason.push(Clause::Submitted(reason));
            } else if job.gpus < 2 {
                cluster.take_best_fit_node(job);
            } else {
                let saved = cluster.save();
                match cluster.place(job, now, true) {
                    Ok((placement, reason)) => {
                        d.reason.push(reason.into());
                        pin(d, job, placement);
                    }
                    Err(reason) => {
                        cluster.restore(saved);
                        d.reason.push(reason.into());
                    }
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
        order: &[(usize, &crate::wire::snapshot::PendingJob)],
        now: i64,
        history: &History,
    ) -> Vec<Decision> {
        let mut capacity = cluster.schedulable_gpus(snapshot);
        let mut running: Vec<Entry> = Vec::new();
        for job in &snapshot.running {
            if job.requeue && job.hints.checkpoints() {
                let attained =
                    history.attained_service(job.job_id, Some((job.gpus, job.start_time)), now);
                running.push((
                    self.0
                        .queue(self.executed(history, job.job_id, job.gpus, attained)),
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
        running.sort_unstable();
        // The waiting jobs are in queue order already (`order`, by queue, submission and id,
        // as their entries sort): merged with the running ones, the walk is every entry in
        // order without sorting the queue again each round.
        let waiting = (order.iter())
            .filter(|(_, job)| left_as_submitted(job, now).is_none())
            .map(|&(queue, job)| (queue, true, job.submit_time, job.job_id, job.gpus));
        let walk = Merged {
            a: running.into_iter().peekable(),
            b: waiting.peekable(),
        };
        // Running jobs alone always fit: one that does not was pushed out by waiting jobs ahead.
        let mut decisions = Vec::new();
        for (queue, waiting, _, id, gpus) in walk {
            if u64::from(gpus) <= capacity {
                capacity -= u64::from(gpus);
            } else if !waiting {
                decisions.push(Decision {
                    requeue: Some(true),
                    ..Decision::explain(id, Requeued::Las { queue }, self.0.ttl_s)
                });
            }
        }
        decisions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, pending, snapshot};
    use crate::wire::snapshot::RunningJob;
    use proptest::prelude::*;

    proptest! {
        /// The walk merges running and waiting entries, each list in order, into the order a
        /// sort of all of them gives (which the walk was before).
        #[test]
        fn two_lists_in_order_merge_as_their_sort(
            mut a in proptest::collection::vec((0usize..3, any::<bool>(), 0i64..5, any::<u32>(), 0u32..9), 0..30),
            mut b in proptest::collection::vec((0usize..3, any::<bool>(), 0i64..5, any::<u32>(), 0u32..9), 0..30),
        ) {
            a.sort_unstable();
            b.sort_unstable();
            let mut all: Vec<Entry> = a.iter().chain(&b).copied().collect();
            all.sort_unstable();
            let merged: Vec<Entry> = Merged {
                a: a.into_iter().peekable(),
                b: b.into_iter().peekable(),
            }
            .collect();
            prop_assert_eq!(merged, all);
        }
    }

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
        // Job 1 has run on all 8 GPUs for 3 hours: 24 GPU-hours, in the last queue.
        snap.nodes[0].gpus_alloc = 8;
        snap.nodes[0].state = crate::wire::snapshot::NodeState::Allocated;
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
        assert_eq!(TiresiasParams::default().queue(24.0 * 3600.0), 2);
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
    fn a_requeued_job_that_waited_twice_its_executed_time_is_promoted_and_its_count_reset() {
        // Job 7 ran 1000 s on 4 GPUs (4000 GPU-seconds: queue 1, past 3,240) and was requeued
        // at t=1000. PromoteKnob 2: it goes back to queue 0 once it has waited 2 x 1000 s.
        let p = Tiresias(TiresiasParams::default());
        let mut h = History::default();
        let mut run = hinted_running(7, "n1", 4, 0);
        run.time_limit_min = Some(100);
        let at = |time: i64, running: Vec<RunningJob>, pending: Vec<PendingJob>| {
            let mut s = snapshot(cluster(1, 8, 1), pending);
            s.time = time;
            s.running = running;
            s
        };
        let mut queued = pending(7, 4);
        queued.submit_time = 1000;
        h.observe(&at(0, vec![run.clone()], vec![]));
        h.observe(&at(1000, vec![], vec![queued.clone()]));
        assert_eq!(p.pending_queue(&h, &queued, 2999), 1);
        assert_eq!(p.pending_queue(&h, &queued, 3000), 0);
        // Restarted at 3000 after that wait: only the new run counts (100 s x 4 GPUs: queue
        // 0), not the 4000 GPU-seconds before the promotion.
        let mut again = run.clone();
        again.start_time = 3000;
        h.observe(&at(3000, vec![again.clone()], vec![]));
        let attained = h.attained_service(7, Some((4, 3000)), 3100);
        assert_eq!(attained, 4400.0);
        assert_eq!(p.0.queue(p.executed(&h, 7, 4, attained)), 0);
        // Without promotion (knob 0) the job would have stayed in queue 1 all along.
        let never = Tiresias(TiresiasParams {
            promote_knob: 0.0,
            ..TiresiasParams::default()
        });
        assert_eq!(never.pending_queue(&h, &queued, 1_000_000), 1);
        assert_eq!(never.0.queue(never.executed(&h, 7, 4, attained)), 1);
    }

    #[test]
    fn thresholds_must_ascend() {
        let bad = TiresiasParams {
            thresholds_gpu_h: vec![5.0, 1.0],
            ..TiresiasParams::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ParamError::Invalid {
                name: "thresholds_gpu_h",
                ..
            })
        ));
        // The authors' simulator's queues: below 0.9 GPU-hours, below 2, the rest.
        let p = TiresiasParams::default();
        assert_eq!(p.queue(3239.0), 0);
        assert_eq!(p.queue(3240.0), 1);
        assert_eq!(p.queue(7199.0), 1);
        assert_eq!(p.queue(7200.0), 2);
    }
}
