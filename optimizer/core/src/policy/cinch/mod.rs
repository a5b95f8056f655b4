//! `cinch`: cinch's own policy, the default. Three parts, each switchable so their effect can be
//! measured apart (docs/policies/cinch.md):
//!
//! - **Queue order** (`queue_order`): shortest predicted remaining service first. A job's
//!   service is its GPUs times its predicted remaining run time; the prediction comes from the
//!   source that has predicted best on this cluster so far (its time limit scaled by how much of
//!   their limits jobs really run, or how long similar jobs ran; [`History::predict_run_s`]).
//!   A job that already ran longer than predicted (a requeued one) is expected to run as long
//!   again, as least-attained-service does for jobs nobody can predict. The order becomes Slurm
//!   priorities, so Slurm's own scheduler and backfill start jobs in it.
//! - **Placement** (`consolidate`): multi-GPU jobs are pinned, in that order, to the most
//!   consolidated placement free now. A network-sensitive job whose best shape is not free waits
//!   for it (a begin time) only while the wait expected from the running jobs' predicted ends is
//!   shorter than what running spread would cost it; otherwise it takes the spread placement at
//!   once. GPUs are never held idle for a consolidation that is expected to lose.
//! - **Preemption** (`preempt`): a running job whose users opted in (`--requeue` and `ckpt=yes`)
//!   is requeued when waiting jobs with at least `preempt_ratio` times less remaining service
//!   need its GPUs, or when it runs spread, is network-sensitive and a consolidated placement is
//!   free for it; at most `max_preemptions` times per job. The plugin refuses any other requeue.
//! - **QoS targets** (`qos`; GENIE's Shortest Waiting Allowance First, docs/policies/qos.md): a
//!   job with a start or finish target ([`crate::models::qos`]) whose waiting allowance (target - now -
//!   predicted run) has shrunk to `qos_urgency` times its predicted run goes ahead of the jobs
//!   without one, the smallest allowance first; it does not wait for a consolidated shape that
//!   would make it miss. A target that cannot be met any more is said, not chased.
//!
//! A round ([`Cinch::decide`]) runs these phases in order, one module each: `elastic` (ONES's
//! sizes, first, so the rest plans at the new sizes), `rank` (predictions, QoS targets, the
//! order and the priority or nice that expresses it), `plan` (one placement pass: start,
//! consolidate, or wait), `wait` (whether waiting for a shape pays, and the reservation),
//! `preempt` (the requeues that make way, and the pass again around them); `expect` holds what
//! is expected of running jobs (their remaining runs, the release model) and `explain` the
//! wording the others share. `params` is the parameters with their ranges.

use std::cell::OnceCell;

use rustc_hash::{FxHashMap, FxHashSet};

use super::dally::{Dally, DallyParams};
use super::placement::Cluster;
use super::shapes::{Ideal, ReleaseEvents, Releases, Sizes};
use super::{left_as_submitted, pin, slurm_order_indices, Policy};
use crate::learn::history::{History, Predictor, RunPrediction, RunSource};
use crate::learn::run_model::JobDistribution;
use crate::models::qos::{self, QosClass, Targets};
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::{
    Clause, Elastic, Order, Placed, Reason, Requeued, Sensitivity, Shape, Unplaced,
};
use crate::wire::snapshot::{PendingJob, RunningJob, Snapshot};

mod elastic;
mod expect;
mod explain;
mod params;
mod plan;
mod preempt;
mod rank;
mod wait;

use expect::*;
use explain::*;
pub use params::*;
use plan::*;
pub use rank::nice_for;
use rank::*;
pub use wait::RESERVED_PRIORITY;

pub struct Cinch(pub CinchParams);

/// A user's targets judged before their fit decides whether the next ones count.
const MIN_TARGETS_JUDGED: u64 = 3;
/// Below this share of a user's recent targets fitting their jobs' runs, the next ones do not
/// count ([`History::target_fit`]).
const MIN_TARGET_FIT: f64 = 0.5;

/// The longest a job goes without a round looking at it, seconds: the live agent's rounds come
/// every `IntervalSeconds` and are skipped on a quiet cluster for at most a minute
/// ([`crate::wire::snapshot::MAX_QUIET_S`]). A shape expected free sooner than this is not
/// waited for by a begin time at the release (it could pass unseen and let Slurm spread the
/// job): the job is held and the round that sees the shape free pins it there.
const RECHECK_S: i64 = crate::wire::snapshot::MAX_QUIET_S;

/// Runs of each kind (consolidated, spread) on as many GPUs before their slowdown is used.
const MIN_CLASS_RUNS: u64 = 5;

impl Policy for Cinch {
    /// One round, phase by phase: elastic sizes, the queue ranked, one placement pass, the
    /// requeues that make way (and the pass again around them), and the decisions in Slurm's
    /// terms (priorities as nice, elastic sizes annotated).
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        let p = &self.0;
        // Elastic jobs sized first: the rest of the round plans the pending ones at their new
        // size, with the GPUs of running ones being resized free.
        let elastic = if p.elastic {
            self.size_elastic(snapshot, &history.predictor(), now, rng)
        } else {
            None
        };
        let snapshot = elastic
            .as_ref()
            .and_then(|e| e.snapshot.as_ref())
            .unwrap_or(snapshot);
        let released: Vec<u32> = elastic
            .as_ref()
            .map(|e| e.resizes.iter().map(|d| d.job_id).collect())
            .unwrap_or_default();
        // Each user looked up once in the history this round.
        let predictor = history.predictor();
        let ranked = self.ranked(snapshot, &predictor, history, now);
        // Each running job's predicted remaining run, once per round, when first needed (a
        // round that starts every pending job at once never needs it).
        let left = OnceCell::new();
        let plan = self.plan(snapshot, &ranked, &released, &predictor, &left, now);
        let mut decisions = self.make_way(
            snapshot, &ranked, plan, &released, &predictor, &left, history, now,
        );
        // Each job's site priority and its priority now, where Slurm's own priorities order
        // the round.
        let site: FxHashMap<u32, (u32, u32)> = if p.order_weight > 0 && rank::site_order(p, &ranked)
        {
            ranked
                .iter()
                .filter_map(|r| Some((r.job.job_id, (r.job.site_priority?, r.job.priority))))
                .collect()
        } else {
            FxHashMap::default()
        };
        drop(ranked);
        // Hands what it worked out back to the history before the resized view it read goes.
        drop(predictor);
        if let Some(elastic) = elastic {
            elastic.annotate(&mut decisions, p.ttl_s);
        }
        if p.order_weight > 0 {
            // cinch's order as a bounded adjustment on top of Slurm's own priorities, said in
            // the reason with the nice the decision finally carries (a reservation raises it
            // after the job's rank was written).
            for d in &mut decisions {
                if let Some(priority) = d.priority.take() {
                    d.nice = Some(nice_for(priority, p.order_weight));
                }
            }
            keep_nices_in_order(&mut decisions, &site, p.order_weight);
            for d in &mut decisions {
                if let (Some(nice), Some(&(at, _))) = (d.nice, site.get(&d.job_id)) {
                    d.reason.push(Clause::Nice {
                        site_priority: at,
                        nice,
                    });
                }
            }
        }
        decisions
    }
}

#[cfg(test)]
mod tests;
