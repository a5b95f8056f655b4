//! `dally`: network-sensitive consolidation by delay scheduling (after Dally, arXiv 2401.16492;
//! the algorithm and its parameters are explained in docs/policies/consolidation.md).
//!
//! Each pending multi-GPU job has a placement *level* it wants: 0 = the fewest nodes it fits on
//! inside one rack (one node for a job that fits a node), 1 = any nodes of one rack, 2 = anywhere.
//! A job whose training is network-sensitive declines placements worse than the level it is
//! allowed: it starts at level 0 and is allowed one level more each time a delay timer runs out.
//! While it declines it is delayed (BeginTime) until its next timer; as soon as a placement at its
//! allowed level is free it is pinned there. Compute-bound jobs are never delayed.
//!
//! Timers are either fixed by the admin or set by the auto-tuner: per job and level, wait at most
//! as long as running spread would cost (break-even: run time x slowdown / (1 - slowdown)), and
//! not at all when the cluster's running jobs are not expected to free such a placement within
//! that time. Run times are time limits scaled by how long jobs really ran here ([`History`]).
//!
//! Network-sensitive preemption: a sensitive job that runs spread, allows requeueing and said it
//! checkpoints is requeued when a level-0 placement is free for it and the time it would save
//! beats the restart cost, at most `max_preemptions` times per job.

use super::param_table::ParamError;
use super::placement::Cluster;
use super::shapes::{Ideal, Releases, Sizes};
use super::Policy;
use crate::learn::history::{job_key, History};
use crate::models::apps::app_slowdown;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::{Clause, DallyStep, Requeued, Sensitivity};
use crate::wire::snapshot::{PendingJob, RunningJob, Snapshot};

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    pub struct DallyParams {
        /// Jobs asking for at least this many GPUs are placed by this policy.
        min_gpus: u32 = 2, range(2, 1_000_000, " (a 1-GPU job is always on one node)");
        /// Fixed seconds a job waits for level 0 (fewest nodes, one rack) before taking level 1;
        /// omitted or null: the auto-tuner sets it per job.
        node_timer_s: Option<u32> = None, range(0, 604_800, " (7 days)");
        /// Fixed seconds a job waits at level 1 (one rack) before taking any nodes; omitted or
        /// null: auto-tuned.
        rack_timer_s: Option<u32> = None, range(0, 604_800, " (7 days)");
        /// Longest timer the auto-tuner sets, seconds.
        max_timer_s: u32 = 86_400, range(0, 604_800, " (7 days)");
        /// Jobs expected to slow down less than this when spread are never delayed.
        min_slowdown: f64 = 0.1, range(0.0, 1.0);
        /// Slowdown assumed for a job whose application is unknown and not yet learned.
        default_slowdown: f64 = 0.2, range(0.0, 0.95);
        /// Run time assumed for a job without a time limit, seconds.
        default_run_s: u32 = 3600, at_least(1);
        /// Requeue spread, sensitive, checkpointing jobs when a consolidated placement frees.
        preempt: bool = true;
        /// Most times one job is requeued (Slurm's restart count).
        max_preemptions: u32 = 1, range(0, 100);
        /// What a requeue costs the job (restart, checkpoint reload, Slurm's requeue delay),
        /// seconds.
        restart_cost_s: u32 = 300;
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl DallyParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

/// Runs of each kind (consolidated, spread) before an application's learned slowdown is used.
const MIN_APP_RUNS: u64 = 5;

/// Prior weight (in jobs) of the assumption that jobs run half their time limit.
const PRIOR_JOBS: f64 = 3.0;
const PRIOR_RATIO: f64 = 0.5;

pub struct Dally(pub DallyParams);

impl Dally {
    /// Expected slowdown spread, from the app hint, else learned, else the default.
    pub fn sensitivity(
        &self,
        hints: &crate::slurm::job_hints::Hints,
        key: &str,
        history: &History,
    ) -> Sensitivity {
        if let Some(app) = hints.get("app") {
            // What this cluster's network did to the application beats the quiet-network table.
            if let Some(s) = history.learned_app_slowdown(app, MIN_APP_RUNS) {
                return Sensitivity {
                    slowdown: s,
                    source: format!("app={app}, learned here"),
                };
            }
            if let Some(s) = app_slowdown(app) {
                return Sensitivity {
                    slowdown: s,
                    source: format!("app={app}"),
                };
            }
        }
        if let Some(s) = history.learned_slowdown(key) {
            return Sensitivity {
                slowdown: s,
                source: "learned from similar jobs".into(),
            };
        }
        Sensitivity {
            slowdown: self.0.default_slowdown,
            source: "default".into(),
        }
    }

    /// Fraction of their time limit jobs really run, learned, with a prior of one half.
    pub(super) fn run_ratio(history: &History) -> f64 {
        match history.limit_ratio() {
            Some(m) => {
                (m.value * m.count as f64 + PRIOR_RATIO * PRIOR_JOBS)
                    / (m.count as f64 + PRIOR_JOBS)
            }
            None => PRIOR_RATIO,
        }
    }

    fn expected_run_s(&self, limit_min: Option<u32>, ratio: f64) -> f64 {
        limit_min.map_or(f64::from(self.0.default_run_s), |m| {
            f64::from(m) * 60.0 * ratio
        })
    }

    /// Seconds a job waits at `level` before taking the next one, and how that was set.
    #[allow(clippy::too_many_arguments)]
    fn timer(
        &self,
        level: usize,
        job: &PendingJob,
        ideal: Ideal,
        slowdown: f64,
        run_s: f64,
        releases: &mut Releases,
        now: i64,
    ) -> (i64, &'static str) {
        let fixed = if level == 0 {
            self.0.node_timer_s
        } else {
            self.0.rack_timer_s
        };
        if let Some(t) = fixed {
            return (i64::from(t), "fixed");
        }
        // Spread, the job runs slowdown/(1 - slowdown) longer; while others wait, the GPU time
        // it wastes delays them too, so the break-even grows with the waiting demand.
        let break_even = run_s * slowdown / (1.0 - slowdown).max(0.05) * (1.0 + releases.pressure);
        let cap = f64::from(self.0.max_timer_s);
        match releases.expected_at(now, job.gpus, ideal, level) {
            Some(at) if ((at - now) as f64) <= break_even.min(cap) => {
                (break_even.min(cap) as i64, "auto: break-even")
            }
            Some(_) => (0, "auto: not expected to free in time"),
            None => (0, "auto: never free"),
        }
    }
}

impl Policy for Dally {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        let p = &self.0;
        let mut cluster = Cluster::new(snapshot);
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let ratio = Self::run_ratio(history);
        let mut releases = Releases::new(snapshot, &cluster, ratio, p.default_run_s);

        let mut order: Vec<&PendingJob> = snapshot
            .pending
            .iter()
            .filter(|j| j.gpus >= p.min_gpus)
            .collect();
        order.sort_by_key(|j| j.slurm_order_key());

        let mut decisions = Vec::with_capacity(order.len());
        for job in order {
            let decision =
                self.decide_job(job, &mut cluster, &mut releases, sizes, ratio, history, now);
            decisions.push(decision);
        }

        if p.preempt && p.max_preemptions > 0 {
            for job in &snapshot.running {
                if let Some(d) =
                    self.consider_requeue(job, &mut cluster, history, ratio, sizes, now)
                {
                    decisions.push(d);
                }
            }
        }
        decisions
    }
}

impl Dally {
    /// One pending job's decision: pinned at the level its timers allow now, or delayed until
    /// the next timer ends.
    #[allow(clippy::too_many_arguments)]
    fn decide_job(
        &self,
        job: &PendingJob,
        cluster: &mut Cluster,
        releases: &mut Releases,
        sizes: Sizes,
        ratio: f64,
        history: &History,
        now: i64,
    ) -> Decision {
        let p = &self.0;
        let explain = |why: Clause| Decision::explain(job.job_id, why, p.ttl_s);
        let key = job_key(&job.user, job.name.as_deref(), job.gpus);
        let sens = self.sensitivity(&job.hints, &key, history);
        let ideal = sizes.ideal(job.gpus);
        let since = job.submit_time.max(job.begin_time.unwrap_or(0));
        let waited = now - since;
        let run_s = self.expected_run_s(job.time_limit_min, ratio);
        let (allowed, relax_at, how) =
            self.allowed_level(job, ideal, sens.slowdown, run_s, releases, since, now);
        let waits = |only: Option<usize>| Decision {
            delay_until: Some(relax_at.max(now + 1)),
            ..explain(Clause::Dally(DallyStep::Waits {
                allowed,
                sens: sens.clone(),
                only,
                timer_s: relax_at - since,
                how,
                relax_at,
            }))
        };

        let before = cluster.save();
        match cluster.place(job, now, true) {
            Ok((placement, _)) => {
                let level = ideal.level_of(placement.gpus_on.len() as u32, placement.racks);
                if level > allowed {
                    cluster.restore(before);
                    return waits(Some(level));
                }
                let count = placement.gpus_on.len() as u32;
                let why = if sens.slowdown < p.min_slowdown {
                    DallyStep::ComputeBound { sens, nodes: count }
                } else {
                    DallyStep::Placed {
                        level,
                        nodes: count,
                        waited_s: waited,
                        sens,
                    }
                };
                let mut d = explain(Clause::Dally(why));
                super::pin(&mut d, job, placement);
                d
            }
            Err(why) if allowed < 2 && why.waits_for_room() => {
                cluster.restore(before);
                waits(None)
            }
            Err(why) => {
                cluster.restore(before);
                explain(Clause::Unplaced(why))
            }
        }
    }

    /// The level a job may take now, relaxed one level per expired timer; when the current
    /// timer ends, and how it was set.
    #[allow(clippy::too_many_arguments)]
    fn allowed_level(
        &self,
        job: &PendingJob,
        ideal: Ideal,
        slowdown: f64,
        run_s: f64,
        releases: &mut Releases,
        since: i64,
        now: i64,
    ) -> (usize, i64, &'static str) {
        let mut allowed = 0;
        let mut relax_at = since;
        let mut how = "";
        if slowdown < self.0.min_slowdown {
            return (2, relax_at, how);
        }
        while allowed < 2 {
            let (t, h) = self.timer(allowed, job, ideal, slowdown, run_s, releases, now);
            if relax_at + t > now {
                relax_at += t;
                how = h;
                break;
            }
            relax_at += t;
            allowed = ideal.next_level(allowed);
        }
        (allowed, relax_at, how)
    }

    /// A requeue decision for a running job, if it is worth it and allowed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn consider_requeue(
        &self,
        job: &RunningJob,
        cluster: &mut Cluster,
        history: &History,
        ratio: f64,
        sizes: Sizes,
        now: i64,
    ) -> Option<Decision> {
        let p = &self.0;
        // `ckpt=yes` only, as the apply path reads it: dally asked for requeues of `true` and `1`
        // before, which the apply path refused.
        let checkpoints = job.hints.checkpoints();
        if job.gpus < p.min_gpus || !job.requeue || !checkpoints {
            return None;
        }
        if job.restarts >= p.max_preemptions {
            return None;
        }
        let ideal = sizes.ideal(job.gpus);
        let (rack_of, _) = cluster.racks();
        let mut racks: Vec<usize> = job
            .nodes
            .iter()
            .filter_map(|n| cluster.node_index(n).map(|i| rack_of[i]))
            .collect();
        racks.sort_unstable();
        racks.dedup();
        if ideal.level_of(job.nodes.len() as u32, racks.len()) == 0 {
            return None;
        }
        let key = job_key(&job.user, job.name.as_deref(), job.gpus);
        let sens = self.sensitivity(&job.hints, &key, history);
        if sens.slowdown < p.min_slowdown {
            return None;
        }
        let remaining = (job.start_time as f64 + self.expected_run_s(job.time_limit_min, ratio)
            - now as f64)
            .max(0.0);
        let gain = remaining * sens.slowdown;
        if gain <= f64::from(p.restart_cost_s) {
            return None;
        }
        // Plan it as if its own GPUs were free, and keep the plan only at level 0.
        let before = cluster.save();
        // The snapshot does not say how the job's GPUs split over its nodes: free them node by
        // node, as many as each node has busy.
        let mut left = job.gpus;
        for node in &job.nodes {
            left -= cluster.release(node, left);
        }
        let as_pending = PendingJob {
            name: job.name.clone(),
            time_limit_min: job.time_limit_min,
            hints: job.hints.clone(),
            ..PendingJob::new(job.job_id, job.user.clone(), job.gpus, job.start_time)
        };
        match cluster.place(&as_pending, now, true) {
            Ok((placement, _))
                if ideal.level_of(placement.gpus_on.len() as u32, placement.racks) == 0 =>
            {
                Some(Decision {
                    requeue: Some(true),
                    ..Decision::explain(
                        job.job_id,
                        Requeued::ToConsolidate {
                            nodes: job.nodes.len(),
                            sens,
                            remaining_s: remaining,
                            gain_s: gain,
                            restart_cost_s: p.restart_cost_s,
                            restart: job.restarts + 1,
                            max_restarts: p.max_preemptions,
                        },
                        p.ttl_s,
                    )
                })
            }
            _ => {
                cluster.restore(before);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pending, snapshot};

    fn fixed(timer: u32) -> Dally {
        Dally(DallyParams {
            node_timer_s: Some(timer),
            rack_timer_s: Some(0),
            ..DallyParams::default()
        })
    }

    fn with_app(mut job: PendingJob, app: &str) -> PendingJob {
        job.hints.insert("app".into(), app.into());
        job
    }

    /// One rack: n1 and n2 half busy, n3 free: 16 GPUs fit only spread over all three.
    fn half_busy() -> Vec<crate::wire::snapshot::Node> {
        vec![
            node("n1", 8, 4, "r1"),
            node("n2", 8, 4, "r1"),
            node("n3", 8, 0, "r1"),
        ]
    }

    fn decide(policy: &Dally, snap: &Snapshot, now: i64) -> Vec<Decision> {
        policy.decide(snap, now, &mut SeededRng::new(0), &History::default())
    }

    #[test]
    fn a_sensitive_job_waits_for_two_whole_nodes_until_its_timer_then_runs_spread() {
        let mut job = with_app(pending(1, 16), "bert");
        job.submit_time = 1000;
        let snap = snapshot(half_busy(), vec![job]);
        let d = decide(&fixed(60), &snap, 1010);
        assert_eq!(d[0].delay_until, Some(1060), "{d:?}");
        assert!(d[0].pin_nodes.is_none());
        assert!(d[0]
            .reason
            .has(|c| matches!(c, Clause::Dally(DallyStep::Waits { allowed: 0, .. }))));
        // Timer over: level 1 (any nodes of the rack) is allowed, the spread set is pinned.
        let d = decide(&fixed(60), &snap, 1060);
        assert_eq!(d[0].delay_until, None);
        assert_eq!(d[0].pin_nodes.as_ref().unwrap().len(), 3, "{d:?}");
        assert!(d[0].reason.has(|c| matches!(
            c,
            Clause::Dally(DallyStep::Placed {
                level: 1,
                nodes: 3,
                ..
            })
        )));
    }

    #[test]
    fn a_consolidated_placement_is_pinned_at_once_and_compute_bound_jobs_never_wait() {
        let mut nodes = half_busy();
        nodes.push(node("n4", 8, 0, "r1"));
        let d = decide(
            &fixed(600),
            &snapshot(nodes, vec![with_app(pending(1, 16), "bert")]),
            1_000_000,
        );
        assert_eq!(
            d[0].pin_nodes.as_deref(),
            Some(&["n3".to_string(), "n4".to_string()][..])
        );
        let d = decide(
            &fixed(600),
            &snapshot(half_busy(), vec![with_app(pending(2, 16), "cifar10")]),
            1_000_000,
        );
        assert_eq!(d[0].delay_until, None);
        assert_eq!(d[0].pin_nodes.as_ref().unwrap().len(), 3);
        assert!(
            matches!(
                d[0].reason.clauses(),
                [Clause::Dally(DallyStep::ComputeBound { .. })]
            ),
            "{}",
            d[0].reason
        );
    }

    #[test]
    fn sensitivity_comes_from_the_app_then_history_then_the_default() {
        let dally = Dally(DallyParams::default());
        let hints = |app: &str| [("app".to_string(), app.to_string())].into();
        let none = History::default();
        assert_eq!(
            dally.sensitivity(&hints("BERT"), "k", &none).slowdown,
            0.487
        );
        let unknown = dally.sensitivity(&hints("gpt-x"), "k", &none);
        assert_eq!(unknown.slowdown, 0.2);
        assert_eq!(unknown.source, "default");
    }

    #[test]
    fn a_spread_checkpointing_job_is_requeued_once_when_consolidation_frees() {
        // Job 9 runs its 16 GPUs over n1 (4), n2 (4) and n3 (8) while n4 and n5 are free:
        // requeued, it can restart on two whole nodes.
        let mut nodes = half_busy();
        nodes[2].gpus_alloc = 8;
        nodes.push(node("n4", 8, 0, "r1"));
        nodes.push(node("n5", 8, 0, "r1"));
        let mut snap = snapshot(nodes, vec![]);
        let running = RunningJob {
            job_id: 9,
            user: "ann".into(),
            name: Some("big".into()),
            nodes: vec!["n1".into(), "n2".into(), "n3".into()],
            gpus: 16,
            start_time: snap.time - 600,
            submit_time: None,
            time_limit_min: Some(24 * 60),
            requeue: true,
            restarts: 0,
            hints: [("app", "bert"), ("ckpt", "yes")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            progress: None,
            idle_action: Default::default(),
        };
        snap.running.push(running.clone());
        let now = snap.time;
        let d = decide(&fixed(600), &snap, now);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].requeue, Some(true));
        assert!(
            d[0].reason.has(|c| matches!(
                c,
                Clause::Requeued(Requeued::ToConsolidate {
                    restart: 1,
                    max_restarts: 1,
                    ..
                })
            )),
            "{}",
            d[0].reason
        );

        for change in [
            |j: &mut RunningJob| j.requeue = false,
            |j: &mut RunningJob| j.restarts = 1,
            |j: &mut RunningJob| {
                j.hints.remove("ckpt");
            },
            // Only `yes` says so (any case), as the apply path and the user's warning read it.
            |j: &mut RunningJob| {
                j.hints.insert("ckpt".into(), "true".into());
            },
            |j: &mut RunningJob| j.time_limit_min = Some(11), // nearly done: no gain
        ] {
            let mut job = running.clone();
            change(&mut job);
            snap.running = vec![job];
            assert!(decide(&fixed(600), &snap, now).is_empty());
        }
    }

    #[test]
    fn parameters_are_validated() {
        assert!(DallyParams::default().validate().is_ok());
        let bad = DallyParams {
            min_slowdown: 1.5,
            ..DallyParams::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ParamError::OutOfRange {
                name: "min_slowdown",
                ..
            })
        ));
        let bad = DallyParams {
            node_timer_s: Some(10_000_000),
            ..DallyParams::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "node_timer_s must be from 0 to 604800 (7 days), not 10000000"
        );
    }
}
