//! Elastic: ONES's search over the elastic jobs' GPU counts, run before the rest of the round.

use super::*;
use crate::models::elastic::{self, Candidate};

/// What the elastic sizing decided this round.
pub(super) struct ElasticRound {
    /// The snapshot with each sized pending job at its new GPU count; `None` when no count
    /// changed (the round's own snapshot then; no copy of a large queue for nothing).
    pub(super) snapshot: Option<Snapshot>,
    /// Pending elastic jobs: job -> (the GPU count it is given, why).
    pub(super) sized: FxHashMap<u32, (u32, Elastic)>,
    /// Requeues of running jobs to restart at a new size.
    pub(super) resizes: Vec<Decision>,
}

impl ElasticRound {
    /// Puts the sizes on the round's decisions (a sized job with no decision gets one).
    pub(super) fn annotate(self, decisions: &mut Vec<Decision>, ttl_s: u32) {
        let mut sized = self.sized;
        for d in decisions.iter_mut() {
            if let Some((to, why)) = sized.remove(&d.job_id) {
                d.gpus = Some(to);
                d.reason.prepend(Clause::Elastic(why));
            }
        }
        let mut rest: Vec<(u32, (u32, Elastic))> = sized.into_iter().collect();
        rest.sort_by_key(|(id, _)| *id);
        for (id, (to, why)) in rest {
            decisions.push(Decision {
                gpus: Some(to),
                ..Decision::explain(id, why, ttl_s)
            });
        }
        decisions.extend(self.resizes);
    }
}

impl Cinch {
    /// ONES's search over the elastic jobs' GPU counts (crate::models::elastic), when there are any:
    /// pending jobs are sized into the GPUs free after the non-elastic jobs that would start now,
    /// running ones past their resize interval may be resized when that pays for the restart.
    pub(super) fn size_elastic<'s>(
        &self,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
        rng: &mut SeededRng,
    ) -> Option<ElasticRound> {
        let p = &self.0;
        let (mut jobs, mut free) = self.running_candidates(snapshot, predictor, now);
        // No elastic job to size (no running one may be resized, no pending one is elastic):
        // returned before ordering the queue for a search with nothing to do.
        let none_resizable = jobs.iter().all(|j| !j.resizable);
        if none_resizable
            && !snapshot
                .pending
                .iter()
                .any(|j| pending_range(j, now).is_some())
        {
            return None;
        }
        let running_count = jobs.len();
        let pending_of = self.pending_candidates(snapshot, predictor, now, &mut jobs, &mut free);
        // Candidates: running ones first (as pushed), then pending; the search keeps order.
        let params = elastic::SearchParams {
            generations: p.search_generations as usize,
            restart_s: f64::from(p.restart_cost_s),
            ..elastic::SearchParams::default()
        };
        let sizes = elastic::search(&jobs, free, params, rng);
        let mut round = ElasticRound {
            snapshot: None,
            sized: FxHashMap::default(),
            resizes: Vec::new(),
        };
        let say = |job: &Candidate, to: u32| Elastic::Sized {
            min: job.range.min,
            max: job.range.max,
            to,
            jobs: jobs.len(),
            free,
            left_s: job.remaining_on(to),
        };
        for (&size, job) in sizes.iter().zip(&jobs).take(running_count) {
            if job.resizable && size != job.current && size > 0 {
                round.resizes.push(Decision {
                    requeue: Some(true),
                    gpus: Some(size),
                    ..Decision::explain(
                        job.job_id,
                        Reason::from(say(job, size))
                            .and(Clause::Elastic(Elastic::ResizedFrom(job.current))),
                        p.ttl_s,
                    )
                });
            }
        }
        let pending = sizes.iter().zip(&jobs).skip(running_count);
        for ((&size, job), &position) in pending.zip(&pending_of) {
            let asks = snapshot.pending[position].gpus;
            if size > 0 && size != asks {
                round.sized.insert(job.job_id, (size, say(job, size)));
                let entry = &mut round
                    .snapshot
                    .get_or_insert_with(|| snapshot.clone())
                    .pending[position];
                entry.gpus = size;
                entry.min_nodes = 1;
                entry.max_nodes = None;
            } else {
                // It waits (or keeps its count): said every round, so that a count cinch set
                // stands (a size not renewed is undone, as everything cinch applies).
                let why = Elastic::Keeps {
                    min: job.range.min,
                    max: job.range.max,
                    asks,
                    waits: size == 0,
                };
                round.sized.insert(job.job_id, (asks, why));
            }
        }
        Some(round)
    }

    /// The running elastic jobs as the search's candidates, and the GPUs free with those that
    /// may be resized released.
    fn running_candidates<'s>(
        &self,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
    ) -> (Vec<Candidate>, u32) {
        let p = &self.0;
        let mut jobs: Vec<Candidate> = Vec::new();
        let mut free: u32 = snapshot.nodes.iter().map(|n| n.gpus_free()).sum();
        for job in &snapshot.running {
            let Some(range) = elastic::range(&job.hints) else {
                continue;
            };
            let resizable = job.requeue
                && job.hints.checkpoints()
                && now - job.start_time >= i64::from(p.resize_interval_s);
            if resizable {
                free += job.gpus;
            }
            // What the job reports of its progress, else the usual prediction.
            let (remaining_s, reference) = elastic::reported_remaining(&job.hints)
                .unwrap_or_else(|| (self.running_remaining_s(predictor, job, now).0, job.gpus));
            jobs.push(Candidate {
                job_id: job.job_id,
                range,
                current: job.gpus,
                resizable,
                may_shrink: job.restarts < p.max_resizes,
                remaining_s,
                reference,
                serial: serial_of(&job.hints),
            });
        }
        (jobs, free)
    }

    /// The pending elastic jobs, in Slurm's order, appended to `jobs`; the non-elastic jobs
    /// that would start now keep their GPUs (taken from `free`). Returns each appended job's
    /// position in the queue.
    fn pending_candidates<'s>(
        &self,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
        jobs: &mut Vec<Candidate>,
        free: &mut u32,
    ) -> Vec<usize> {
        let history = predictor.history();
        let mut pending_of: Vec<usize> = Vec::new();
        for position in slurm_order_indices(&snapshot.pending) {
            let job = &snapshot.pending[position];
            match pending_range(job, now) {
                Some(range) => {
                    let attained = history.attained_service(job.job_id, None, now);
                    let reported = elastic::reported_remaining(&job.hints);
                    let (remaining, reference) = reported.unwrap_or_else(|| {
                        (self.pending_remaining(predictor, job, now).1, job.gpus)
                    });
                    // A job requeued to be resized never restarts on fewer GPUs than its
                    // latest run: it waits for them instead.
                    let range = match reported {
                        Some((_, last)) if attained > 0.0 => elastic::Range {
                            min: last.clamp(range.min, range.max),
                            max: range.max,
                        },
                        _ => range,
                    };
                    jobs.push(Candidate {
                        job_id: job.job_id,
                        range,
                        current: 0,
                        resizable: true,
                        may_shrink: true,
                        remaining_s: remaining,
                        reference,
                        serial: serial_of(&job.hints),
                    });
                    pending_of.push(position);
                }
                None if job.gpus <= *free => *free -= job.gpus,
                None => {}
            }
        }
        pending_of
    }
}

/// The serial share of a job's application (Amdahl), from its `app` hint.
fn serial_of(hints: &crate::slurm::job_hints::Hints) -> f64 {
    elastic::serial_of(hints.get("app").map(String::as_str))
}

/// A pending job's elastic range, if it may be sized: elastic, not pinned per node, not left
/// as submitted, and checkpointing.
fn pending_range(job: &PendingJob, now: i64) -> Option<elastic::Range> {
    elastic::range(&job.hints).filter(|_| {
        job.gpus_per_node.is_none()
            && left_as_submitted(job, now).is_none()
            && job.hints.checkpoints()
    })
}
