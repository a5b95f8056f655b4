//! Preempt: the running opted-in jobs requeued for starving waiting jobs.

use super::*;

impl Cinch {
    /// Walk running opted-in jobs and waiting jobs by remaining service over the cluster's GPUs:
    /// a running job that no longer fits behind waiting jobs with `preempt_ratio` times less
    /// service is requeued.
    pub(super) fn preemptions(
        &self,
        snapshot: &Snapshot,
        cluster: &Cluster,
        ranked: &[Ranked],
        starved: &[u32],
        left: &RunningLeft,
    ) -> Vec<Decision> {
        let p = &self.0;
        let mut capacity = cluster.schedulable_gpus(snapshot);
        // (service, waiting, job id, GPUs, remaining s, restarts)
        let mut walk: Vec<(f64, bool, u32, u32, f64, u32)> = Vec::new();
        let node_gpus = cluster.node_size();
        for (k, job) in snapshot.running.iter().enumerate() {
            let remaining = left.of(k);
            if job.requeue
                && job.hints.checkpoints()
                && job.restarts < p.max_restarts(job.gpus, node_gpus)
            {
                walk.push((
                    left.score(k),
                    false,
                    job.job_id,
                    job.gpus,
                    remaining,
                    job.restarts,
                ));
            } else {
                capacity = capacity.saturating_sub(u64::from(job.gpus));
            }
        }
        for r in ranked {
            if starved.binary_search(&r.job.job_id).is_ok() {
                // An urgent job goes first in the walk, as in the queue.
                let urgent = r.qos.as_ref().is_some_and(|q| q.urgent);
                let service = if urgent { 0.0 } else { r.score };
                walk.push((service, true, r.job.job_id, r.job.gpus, r.remaining_s, 0));
            }
        }
        walk.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut decisions = Vec::new();
        // The largest service among waiting jobs that took GPUs so far in the walk.
        // A multi-GPU job gives up whole nodes that it needs back whole: only waiting multi-GPU
        // jobs, which take nodes alike, may displace it (small ones would fragment them).
        // (largest rank, longest expected remaining run) among them.
        let mut displacing: Option<(f64, f64)> = None;
        let mut displacing_multi: Option<(f64, f64)> = None;
        let raise = |d: &mut Option<(f64, f64)>, service: f64, remaining: f64| {
            *d = Some(d.map_or((service, remaining), |(s, r)| {
                (s.max(service), r.max(remaining))
            }))
        };
        // What a requeue costs the job: its restart and checkpoint reload, and Slurm's wait
        // before it may start again (the site's credential lifetime + 1).
        let cost = f64::from(p.restart_cost_s) + f64::from(snapshot.requeue_delay_s);
        for (service, waiting, id, gpus, remaining, restarts) in walk {
            if u64::from(gpus) <= capacity {
                capacity -= u64::from(gpus);
                if waiting {
                    raise(&mut displacing, service, remaining);
                    if gpus >= p.min_gpus {
                        raise(&mut displacing_multi, service, remaining);
                    }
                }
                continue;
            }
            let ahead = if gpus >= p.min_gpus {
                displacing_multi
            } else {
                displacing
            };
            let Some((ahead, ahead_remaining)) = ahead else {
                continue;
            };
            // It pays when the jobs it makes way for are expected to end sooner than it would,
            // by more than the requeue costs it (SRPT's exchange argument, on expectations).
            if waiting || service < p.preempt_ratio * ahead || remaining - ahead_remaining < cost {
                continue;
            }
            decisions.push(Decision {
                requeue: Some(true),
                ..Decision::explain(
                    id,
                    Requeued::ForShorter {
                        service,
                        remaining_s: remaining,
                        ahead,
                        restart: restarts + 1,
                        max_restarts: p.max_restarts(gpus, node_gpus),
                    },
                    p.ttl_s,
                )
            });
        }
        decisions
    }
}

impl Cinch {
    /// The running jobs requeued to make way (for starving waiting jobs, and Dally's network
    /// requeues for a job's own consolidated restart), and the decisions of a plan made again
    /// with their GPUs free, so the jobs they make way for are pinned there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_way<'s>(
        &self,
        snapshot: &'s Snapshot,
        ranked: &[Ranked],
        plan: Plan,
        released: &[u32],
        predictor: &Predictor<'_, 's>,
        left: &OnceCell<RunningLeft>,
        history: &History,
        now: i64,
    ) -> Vec<Decision> {
        let p = &self.0;
        let Plan {
            mut decisions,
            starved,
            ..
        } = plan;
        // Jobs requeued to make way for waiting ones.
        let mut requeued: Vec<Decision> = Vec::new();
        // Only starving jobs (expected to wait longer than their Gittins size) displace anyone.
        if p.may_requeue() && p.preempt && !starved.is_empty() {
            let cluster = Cluster::new(snapshot);
            let left = self.running_left(left, snapshot, predictor, now);
            requeued = self.preemptions(snapshot, &cluster, ranked, &starved, left);
            requeued.retain(|d| !released.contains(&d.job_id));
        }
        // Dally's network requeues: they make way for the job's own consolidated restart.
        let mut spread: Vec<Decision> = Vec::new();
        if p.may_requeue() && p.requeue_spread && p.consolidate {
            let mut cluster = Cluster::new(snapshot);
            let sizes = Sizes {
                node_gpus: cluster.node_size(),
                rack_gpus: cluster.largest_rack_gpus(),
            };
            let ratio = Dally::run_ratio(history);
            let mut dally = Dally(p.as_dally());
            for job in &snapshot.running {
                if requeued.iter().any(|d| d.job_id == job.job_id) {
                    continue;
                }
                if released.contains(&job.job_id) {
                    continue;
                }
                // One cap per job whatever it is requeued for: the walk's, by its size.
                dally.0.max_preemptions = p.max_restarts(job.gpus, sizes.node_gpus);
                if let Some(d) =
                    dally.consider_requeue(job, &mut cluster, history, ratio, sizes, now)
                {
                    spread.push(d);
                }
            }
        }
        if !requeued.is_empty() || !spread.is_empty() {
            // Plan again with the requeued jobs' GPUs free, so the jobs they make room for are
            // pinned there rather than left to Slurm's first fit.
            let replan = |requeued: &[Decision]| {
                let mut ids: Vec<u32> = requeued.iter().chain(&spread).map(|d| d.job_id).collect();
                ids.extend(released);
                self.plan(snapshot, ranked, &ids, predictor, left, now)
            };
            let plan = replan(&requeued);
            // A multi-GPU job requeued to make way is requeued only when the plan with its GPUs
            // free starts a job on its nodes now: whole nodes that no waiting job can take yet
            // (the jobs it makes way for wait for a shape it does not complete) would stand
            // idle, and it would pay its restart for nothing. Those kept, the round is planned
            // once more without the rest. (Jobs under `min_gpus` make way for jobs Slurm
            // places, which no pin shows.)
            let starting = plan.started_on();
            let before = requeued.len();
            requeued.retain(|d| {
                snapshot
                    .running
                    .iter()
                    .find(|j| j.job_id == d.job_id)
                    .is_none_or(|j| {
                        j.gpus < p.min_gpus || j.nodes.iter().any(|n| starting.contains(n.as_str()))
                    })
            });
            decisions = if requeued.len() != before {
                replan(&requeued).decisions
            } else {
                plan.decisions
            };
        }
        decisions.extend(requeued);
        decisions.extend(spread);
        decisions
    }
}
