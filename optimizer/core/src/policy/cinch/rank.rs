//! Rank: each pending job's predicted run and remaining service, its QoS targets, and the priority
//! (or the nice on top of Slurm's priority) that puts it in cinch's order.

use super::*;
use crate::slurm::order::OrderKey;

/// The priority cinch's order gives a ranked job, if any: urgent QoS targets by allowance, the
/// rest by predicted service when cinch orders the queue.
pub(super) fn order_priority(p: &CinchParams, r: &Ranked) -> Option<u32> {
    match r.qos.as_ref().filter(|q| q.urgent) {
        Some(q) => Some(urgent_priority(q.allowance_s)),
        None => p.queue_order.then(|| priority_for(r.score, r.overdue)),
    }
}

/// Whether Slurm's own priorities order the round: cinch's order is a bounded nice on top of
/// them (`order_weight` > 0) and the agent reported every job's site priority.
pub(super) fn site_order(p: &CinchParams, ranked: &[Ranked]) -> bool {
    p.order_weight > 0 && ranked.iter().all(|r| r.job.site_priority.is_some())
}

/// The priority Slurm will give a ranked job once cinch's nice is set: the site's priority less
/// that nice (never positive, so it only raises).
pub(super) fn effective_priority(p: &CinchParams, r: &Ranked) -> i64 {
    let nice = order_priority(p, r).map_or(0, |q| nice_for(q, p.order_weight));
    i64::from(r.job.site_priority.unwrap_or(0)) - i64::from(nice)
}

/// The `nice` (from `-weight` to 0) that expresses cinch's `priority` on top of the priority
/// Slurm computes, keeping cinch's order: the job cinch reserves for is raised most, then urgent
/// QoS jobs, then jobs that have waited too long, then the rest by predicted service (fewer
/// GPU-hours, raised more). Never positive: multifactor floors a priority at 1, which would
/// erase the order among jobs lowered below it, so cinch only ever raises jobs. Within each band
/// the priority's logarithmic service steps are spread evenly; the ordinary jobs get most of the
/// range.
pub fn nice_for(priority: u32, weight: u32) -> i32 {
    let w = f64::from(weight.min(MAX_ORDER_WEIGHT));
    // Service steps beyond 1e8 GPU-seconds (about 28,000 GPU-hours) all map to the end.
    let max_steps = (1e8f64).ln_1p() * PRIORITY_PER_E_FOLD;
    // (the band's most favourable nice, its width, the priority at its top)
    let (low, width, top) = if priority >= RESERVED_PRIORITY {
        return -(w as i32);
    } else if priority > 2 * TOP_PRIORITY {
        (-w + 1.0, 0.125 * w - 1.0, 3 * TOP_PRIORITY)
    } else if priority > TOP_PRIORITY {
        (-0.875 * w + 1.0, 0.125 * w - 1.0, 2 * TOP_PRIORITY)
    } else {
        (-0.75 * w + 1.0, 0.75 * w - 1.0, TOP_PRIORITY)
    };
    let steps = f64::from(top.saturating_sub(priority)).min(max_steps);
    let nice = low + width.max(0.0) * steps / max_steps;
    nice.round().clamp(-w, 0.0) as i32
}

/// Keeps the nice a waiting job already has wherever that leaves Slurm's order as the new nices
/// would make it, so that a round rewrites only the jobs whose place in the order changed.
///
/// A job's nice follows its rank score, and the score moves a little whenever any job ends (the
/// run model, its user's history): most waiting jobs would otherwise get a nice a few units off
/// every few rounds, each a Slurm update, a log line and a record, for an order that did not
/// change (docs/benchmarks.md). The order is the decision; the nice's last digits are not.
///
/// `site` gives each job's site priority and its priority now (site priority less its nice now);
/// `decisions` carry their new nices. In the new order (by site priority less new nice, highest
/// first), a job keeps its nice now if its priority now lies strictly between the priority given
/// to the job before it and the new priority of the job after it, and strictly apart from both
/// in the new order (a tie is left as the new nices make it): each kept job then sits where the
/// new nices would put it, the order is the same, and no constant decides what is "close".
/// A nice now outside cinch's range (`-weight` to 0) is not cinch's and is never kept.
pub(super) fn keep_nices_in_order(
    decisions: &mut [Decision],
    site: &FxHashMap<u32, (u32, u32)>,
    weight: u32,
) {
    let w = i64::from(weight.min(MAX_ORDER_WEIGHT));
    // (new priority, priority now, position) of each job with a nice and a site priority.
    let mut order: Vec<(i64, i64, usize)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(k, d)| {
            let nice = i64::from(d.nice?);
            let &(site_priority, now) = site.get(&d.job_id)?;
            Some((i64::from(site_priority) - nice, i64::from(now), k))
        })
        .collect();
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
    let mut above = i64::MAX;
    for i in 0..order.len() {
        let (new, now, k) = order[i];
        let before = if i == 0 { i64::MAX } else { order[i - 1].0 };
        let after = order.get(i + 1).map_or(i64::MIN, |o| o.0);
        let site_priority = site[&decisions[k].job_id].0;
        let nice_now = i64::from(site_priority) - now;
        let keep = (-w..=0).contains(&nice_now)
            && before > new
            && new > after
            && above > now
            && now > after;
        if keep {
            decisions[k].nice = Some(nice_now as i32);
            above = now;
        } else {
            above = new;
        }
    }
}

/// A job's QoS target as this round sees it.
pub(super) struct QosRank {
    pub(super) targets: Targets,
    /// Seconds it can still wait and meet its targets (negative: it cannot).
    pub(super) allowance_s: f64,
    /// Goes ahead of the jobs without a target (allowance short, still feasible).
    pub(super) urgent: bool,
    /// Whether its run-time prediction is good enough to order by the allowance.
    pub(super) trusted: bool,
}

/// The mean |ln(predicted / actual)| of a run-time source beyond which its allowances are not
/// acted on: ln 2, predictions off by 2x on average.
pub(super) const TRUSTED_LOG_ERROR: f64 = std::f64::consts::LN_2;

/// A pending job with its predicted remaining service.
pub(super) struct Ranked<'a> {
    pub(super) job: &'a PendingJob,
    /// Waited longer than `max_stretch` times its predicted remaining run time: goes first.
    pub(super) overdue: bool,
    /// Boxed: few jobs have targets, and a queue of large records is slow to order.
    pub(super) qos: Option<Box<QosRank>>,
    pub(super) prediction: RunPrediction,
    /// Expected remaining run seconds.
    pub(super) remaining_s: f64,
    /// GPUs x expected remaining run.
    pub(super) service: f64,
    /// What the queue is ordered by, smaller first: GPUs over the job's Gittins index under the
    /// run model (GPU-seconds; with exact predictions its remaining service), else its
    /// predicted remaining service.
    pub(super) score: f64,
}

/// Remaining run seconds of a job predicted to run `predicted_s` that already ran `ran_s`: the
/// rest of the prediction, or, once past it, as long again (least attained service).
pub(super) fn remaining_s(predicted_s: f64, ran_s: f64) -> f64 {
    if ran_s < predicted_s {
        predicted_s - ran_s
    } else {
        ran_s.max(1.0)
    }
}

/// The Slurm priority of a job with `service` GPU-seconds predicted: overdue jobs first, then
/// fewer GPU-seconds first.
pub fn priority_for(service: f64, overdue: bool) -> u32 {
    let steps = (service.max(0.0).ln_1p() * PRIORITY_PER_E_FOLD).min(f64::from(TOP_PRIORITY - 1));
    let top = if overdue {
        2 * TOP_PRIORITY
    } else {
        TOP_PRIORITY
    };
    top - steps as u32
}

/// The Slurm priority of an urgent job with `allowance_s` seconds to spare: above every job
/// without a target, the smallest allowance first. In steps of 5% of the allowance, so that a
/// shrinking allowance changes the job's priority (a Slurm update) now and then, not every round.
pub fn urgent_priority(allowance_s: f64) -> u32 {
    pub(super) const STEP: f64 = 0.05;
    let buckets = (allowance_s.max(0.0).ln_1p() / STEP).floor();
    let steps = (buckets * STEP * PRIORITY_PER_E_FOLD).min(f64::from(TOP_PRIORITY - 1));
    3 * TOP_PRIORITY - steps as u32
}

/// Where a job goes in cinch's order, as integers compared at once: urgent targets first
/// (smallest allowance first), then, in cinch's order (`queue_order`), overdue jobs and shorter
/// service, each tie in Slurm's order (its key, then the job's place in the snapshot, as
/// [`slurm_order_indices`] sorts). The place makes every key distinct, so one unstable sort
/// gives the order a stable sort by the first three of the jobs in Slurm's order gives, at a
/// fraction of the cost of comparing through options and floats and of sorting twice (100,000
/// jobs a round at scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RankKey {
    not_urgent: bool,
    first: u64,
    second: u64,
    slurm_order: OrderKey,
    /// The job's place in the snapshot: [`RankKey::position`].
    position: usize,
}

impl RankKey {
    pub(super) fn of(
        allowance_s: Option<f64>,
        overdue: bool,
        score: f64,
        queue_order: bool,
        (slurm_order, position): (OrderKey, usize),
    ) -> Self {
        let (not_urgent, first, second) = match allowance_s {
            Some(allowance) => (false, total_order_bits(allowance), 0),
            None if queue_order => (true, u64::from(!overdue), total_order_bits(score)),
            None => (true, 0, 0),
        };
        RankKey {
            not_urgent,
            first,
            second,
            slurm_order,
            position,
        }
    }

    /// The job's place in the snapshot.
    pub(super) fn position(self) -> usize {
        self.position
    }
}

/// `x`'s bits as an integer that orders as [`f64::total_cmp`] orders the floats (the same
/// transform it uses, made unsigned).
fn total_order_bits(x: f64) -> u64 {
    let bits = x.to_bits() as i64;
    let ordered = bits ^ ((((bits >> 63) as u64) >> 1) as i64);
    (ordered as u64) ^ (1 << 63)
}

impl Cinch {
    /// A job's predicted run time, from what it says of itself (its profile: iterations and
    /// the rate it measured) and the history.
    #[allow(clippy::too_many_arguments)] // the fields both a pending and a running job have
    pub(super) fn predict<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        job_id: u32,
        user: &'s str,
        name: Option<&'s str>,
        gpus: u32,
        limit_min: Option<u32>,
        hints: &crate::slurm::job_hints::Hints,
    ) -> RunPrediction {
        if let Some(profile) = (!hints.is_empty()).then(|| qos::profile(hints)).flatten() {
            return RunPrediction {
                run_s: profile.run_s.max(1.0),
                source: RunSource::Profile,
                log_error: None,
            };
        }
        let limit_s = limit_min.map(|m| f64::from(m) * 60.0);
        predictor.predict_job_run_s(
            job_id,
            user,
            name,
            gpus,
            limit_s,
            f64::from(self.0.default_run_s),
        )
    }

    /// A pending job's run-time prediction, its expected remaining run seconds and its rank per
    /// GPU: a requeued job's earlier runs count against the prediction.
    pub(super) fn pending_remaining<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        job: &'s PendingJob,
        now: i64,
    ) -> (RunPrediction, f64, f64) {
        let prediction = self.predict(
            predictor,
            job.job_id,
            &job.user,
            job.name.as_deref(),
            job.gpus,
            job.time_limit_min,
            &job.hints,
        );
        let ran_s = predictor.history().attained_service(job.job_id, None, now)
            / f64::from(job.gpus.max(1));
        let expectation = self.expect(predictor, prediction, ran_s);
        (
            prediction,
            expectation.remaining(),
            expectation.per_gpu_waiting(),
        )
    }

    /// What is expected of a job predicted to run `prediction` that has run `ran_s`: under the
    /// run model when there is one (its distribution among the jobs predicted nearest, and its
    /// Gittins index there), else the prediction itself (what is left of it, or as long again
    /// once past it). A job's own profile is taken as exact.
    pub(super) fn expect(
        &self,
        predictor: &Predictor,
        prediction: RunPrediction,
        ran_s: f64,
    ) -> Expectation {
        match (prediction.source != RunSource::Profile)
            .then(|| predictor.distribution(prediction.run_s))
            .flatten()
        {
            Some(distribution) => Expectation::Model(distribution, ran_s),
            None => Expectation::Plain(remaining_s(prediction.run_s, ran_s)),
        }
    }

    /// Whether the targets `job`'s user stated count, by the admin's settings.
    pub(super) fn user_targets(
        &self,
        job: &PendingJob,
        beyond_cap: &FxHashSet<u32>,
        history: &History,
    ) -> qos::UserTargets {
        let p = &self.0;
        let listed = |list: &[String], name: &Option<String>| {
            name.as_ref().is_some_and(|n| list.contains(n))
        };
        if !(p.user_targets
            || listed(&p.user_target_accounts, &job.account)
            || listed(&p.user_target_qos, &job.qos))
        {
            let who = if p.user_target_accounts.is_empty() && p.user_target_qos.is_empty() {
                "this site does not count targets users state".to_string()
            } else {
                "this site counts stated targets only in some accounts and QOS, not this \
                 job's"
                    .to_string()
            };
            return qos::UserTargets::NotCounted(format!("{who} (admin: user_targets)"));
        }
        if beyond_cap.contains(&job.job_id) {
            return qos::UserTargets::NotCounted(format!(
                "{} has {} earlier pending jobs with targets, and only that many count at once \
                 (admin: user_target_max_pending)",
                job.user, p.user_target_max_pending
            ));
        }
        // A user whose recent targets were mostly shorter than their jobs' own runs (missed
        // however early the job started) states urgency it does not have: not counted until
        // their targets fit again (they are still learned).
        if let Some(fit) = history
            .target_fit(&job.user)
            .filter(|f| f.count >= MIN_TARGETS_JUDGED && f.value < MIN_TARGET_FIT)
        {
            return qos::UserTargets::NotCounted(format!(
                "{}'s recent targets were mostly shorter than their jobs' own runs (about {:.0}% \
                 could be met even starting at submission), so cinch counts them again once they fit",
                job.user,
                100.0 * fit.value
            ));
        }
        qos::UserTargets::Counted {
            floor_s: u64::from(p.user_target_min_s),
        }
    }

    /// The pending jobs whose stated targets would count but for their user's cap: beyond the
    /// earliest `user_target_max_pending` of that user's jobs with a target.
    pub(super) fn beyond_cap(&self, pending: &[PendingJob], history: &History) -> FxHashSet<u32> {
        let cap = self.0.user_target_max_pending as usize;
        let none = FxHashSet::default();
        if cap == 0 || !self.0.qos {
            return none;
        }
        let mut stated: Vec<&PendingJob> = pending
            .iter()
            .filter(|j| qos::states_target(&j.hints))
            .filter(|j| {
                matches!(
                    self.user_targets(j, &none, history),
                    qos::UserTargets::Counted { .. }
                )
            })
            .collect();
        stated.sort_by_key(|j| (j.submit_time, j.job_id));
        let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
        stated
            .into_iter()
            .filter(|j| {
                let n = seen.entry(j.user.as_str()).or_default();
                *n += 1;
                *n > cap
            })
            .map(|j| j.job_id)
            .collect()
    }

    /// A pending job with its prediction and remaining service.
    pub(super) fn rank<'a>(
        &self,
        predictor: &Predictor<'_, 'a>,
        job: &'a PendingJob,
        classes: &[qos::Class],
        beyond_cap: &FxHashSet<u32>,
        now: i64,
    ) -> Ranked<'a> {
        let (prediction, remaining, per_gpu) = self.pending_remaining(predictor, job, now);
        let gpus = f64::from(job.gpus.max(1));
        // Since its submission or its user's own begin time: a requeued job's earlier runs count
        // as waiting, so it becomes overdue sooner (its waits alone lost on the tune half,
        // docs/policies/cinch.md).
        let waited = (now - job.submit_time.max(job.begin_time.unwrap_or(0))).max(0) as f64;
        let qos = self
            .0
            .qos
            .then(|| {
                let can_have =
                    job.deadline.is_some() || !classes.is_empty() || !job.hints.is_empty();
                can_have.then(|| {
                    // Whether the user's targets count matters only to a job that states one
                    // (and saying why not is words for every hinted job, every round).
                    let user = if qos::states_target(&job.hints) {
                        self.user_targets(job, beyond_cap, predictor.history())
                    } else {
                        qos::UserTargets::Counted { floor_s: 0 }
                    };
                    qos::targets(job, classes, &user)
                })
            })
            .flatten()
            .filter(|t| !t.is_empty() || !t.problems.is_empty())
            .map(|targets| {
                let allowance_s = targets.allowance_s(now, remaining).unwrap_or(f64::INFINITY);
                // An allowance is only as good as the run-time prediction under it: from a
                // source that has been off by more than 2x on average here, SWAF would chase
                // targets it cannot judge, and shortest-first serves them better.
                let trusted = prediction.log_error.is_none_or(|e| e <= TRUSTED_LOG_ERROR);
                Box::new(QosRank {
                    urgent: !targets.is_empty()
                        && trusted
                        && allowance_s >= 0.0
                        && allowance_s <= self.0.qos_urgency * remaining,
                    trusted,
                    targets,
                    allowance_s,
                })
            });
        Ranked {
            job,
            overdue: self.0.max_stretch > 0.0 && waited > self.0.max_stretch * remaining,
            qos,
            prediction,
            remaining_s: remaining,
            service: gpus * remaining,
            score: gpus * per_gpu,
        }
    }
}

impl Cinch {
    /// The pending jobs with their predictions, in cinch's order: urgent QoS targets first
    /// (smallest allowance first), then overdue jobs and shorter service; or in Slurm's own
    /// order less cinch's nice where the site's priorities order the round.
    pub(super) fn ranked<'s>(
        &self,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        history: &History,
        now: i64,
    ) -> Vec<Ranked<'s>> {
        let p = &self.0;
        // Validated when set; a class that no longer parses here would be a bug: no classes.
        let classes = if p.qos {
            qos::parse_classes(&p.qos_classes).unwrap_or_default()
        } else {
            Vec::new()
        };
        let beyond_cap = self.beyond_cap(&snapshot.pending, history);
        // Ranked in the snapshot's order (a pass through memory, not a jump to each job in
        // Slurm's order): each job's rank is its own. The order is worked out on positions and
        // the ranked jobs are moved into it once.
        let by_position: Vec<Ranked> = snapshot
            .pending
            .iter()
            .map(|job| self.rank(predictor, job, &classes, &beyond_cap, now))
            .collect();
        let urgent = |r: &Ranked| r.qos.as_ref().filter(|q| q.urgent).map(|q| q.allowance_s);
        let order = if p.queue_order || by_position.iter().any(|r| urgent(r).is_some()) {
            // Urgent targets first, smallest allowance first (SWAF); then, in cinch's order,
            // overdue jobs and shorter service. Stable: equals keep Slurm's order.
            let mut keys: Vec<RankKey> = by_position
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let slurm = (r.job.slurm_order_key(), i);
                    RankKey::of(urgent(r), r.overdue, r.score, p.queue_order, slurm)
                })
                .collect();
            keys.sort_unstable();
            keys.into_iter().map(RankKey::position).collect()
        } else {
            slurm_order_indices(&snapshot.pending)
        };
        let mut slots: Vec<Option<Ranked>> = by_position.into_iter().map(Some).collect();
        // Sized first: collected through `filter_map`, the list would grow by copying. The
        // slots are read in the order's jumps, each asked for a few jobs ahead.
        let mut ranked: Vec<Ranked> = Vec::with_capacity(order.len());
        for (k, &i) in order.iter().enumerate() {
            if let Some(ahead) = order
                .get(k + crate::util::FETCH_AHEAD)
                .and_then(|&ahead| slots.get(ahead))
            {
                crate::util::prefetch(ahead);
            }
            ranked.extend(slots[i].take());
        }

        if site_order(p, &ranked) {
            // Slurm runs jobs by the site's priority less the nice cinch sets: planned in that
            // order, the GPUs free now go to the job the site's fair share, QOS and age put
            // first, never kept from it (by a delay) for a job only cinch's order prefers.
            // Stable: equals keep cinch's order. Each key once (a logarithm and a nice each).
            ranked.sort_by_cached_key(|r| std::cmp::Reverse(effective_priority(p, r)));
        }
        ranked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::rng::SeededRng;
    use std::cmp::Ordering;

    /// The order the rank keys give is the stable sort by the comparator they stand for: urgent
    /// first by allowance (`total_cmp`), then overdue, then score, ties in Slurm's order; with
    /// and without cinch's order, on values with many ties, signed zeros, infinities and NaN.
    #[test]
    fn rank_keys_order_as_the_stable_comparator() {
        let values = [
            -1.0,
            -0.0,
            0.0,
            1.0,
            2.5,
            1e9,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        let mut rng = SeededRng::new(7);
        let pick = |rng: &mut SeededRng| values[rng.below(values.len() as u64) as usize];
        for round in 0..200 {
            let queue_order = round % 2 == 0;
            let n = 1 + rng.below(60) as usize;
            let jobs: Vec<(Option<f64>, bool, f64)> = (0..n)
                .map(|_| {
                    let urgent = (rng.below(3) == 0).then(|| pick(&mut rng));
                    (urgent, rng.below(2) == 0, pick(&mut rng))
                })
                .collect();
            let mut stable: Vec<usize> = (0..n).collect();
            stable.sort_by(|&a, &b| {
                let (a, b) = (jobs[a], jobs[b]);
                match (a.0, b.0) {
                    (Some(x), Some(y)) => x.total_cmp(&y),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) if queue_order => b.1.cmp(&a.1).then(a.2.total_cmp(&b.2)),
                    (None, None) => Ordering::Equal,
                }
            });
            let mut keyed: Vec<usize> = (0..n).collect();
            // Slurm's order: the jobs as listed, some with equal keys (told apart by place).
            keyed.sort_unstable_by_key(|&k| {
                let (urgent, overdue, score) = jobs[k];
                let slurm = crate::slurm::order::order_key(0, (k / 2) as i64, 0);
                RankKey::of(urgent, overdue, score, queue_order, (slurm, k))
            });
            assert_eq!(keyed, stable, "jobs {jobs:?}, queue_order {queue_order}");
        }
    }
}
