//! Plan: one placement pass over the ranked jobs: each is started where it fits (consolidated if it
//! is worth it), waits for its shape, or is left to Slurm.

use super::wait::reserve;
use super::*;
use crate::policy::placement::{Placement, Saved};

/// One placement pass's outcome.
pub(super) struct Plan {
    pub(super) decisions: Vec<Decision>,
    /// The jobs that cannot start and are expected to wait longer than they run (sorted ids).
    pub(super) starved: Vec<u32>,
    /// Positions in `decisions` of the jobs it starts now, on the nodes they are pinned to
    /// (not those it delays or reserves nodes for, nor those it leaves to Slurm).
    pub(super) started: Vec<usize>,
}

impl Plan {
    /// The nodes of the jobs the plan starts now.
    pub(super) fn started_on(&self) -> FxHashSet<&str> {
        self.started
            .iter()
            .filter_map(|&k| self.decisions[k].pin_nodes.as_ref())
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

impl Cinch {
    /// One placement pass over the ranked jobs, with the GPUs of `requeued` running jobs free.
    pub(super) fn plan<'s>(
        &self,
        snapshot: &'s Snapshot,
        ranked: &[Ranked],
        requeued: &[u32],
        predictor: &Predictor<'_, 's>,
        left: &OnceCell<RunningLeft>,
        now: i64,
    ) -> Plan {
        let mut pass = Pass::new(self, snapshot, ranked, requeued, predictor, left, now);
        // Each decision is written where it is kept: one is a few hundred bytes (its reason's
        // clauses inline), and with 100,000 pending jobs, building each elsewhere and moving
        // it into place was about a tenth of the round (docs/benchmarks.md).
        let mut decisions: Vec<Decision> = Vec::with_capacity(ranked.len());
        let mut started = Vec::new();
        for r in crate::util::fetch_ahead(ranked, |r| Some(r.job)) {
            decisions.push(Decision::explain(
                r.job.job_id,
                Reason::default(),
                self.0.ttl_s,
            ));
            let k = decisions.len() - 1;
            if pass.decide(r, &mut decisions[k]) {
                started.push(k);
            }
        }
        pass.starved.retain(|&id| id != 0);
        pass.starved.sort_unstable();
        Plan {
            decisions,
            starved: pass.starved,
            started,
        }
    }
}

/// What a pass reads and never changes.
struct PassContext<'a, 'p, 's> {
    cinch: &'a Cinch,
    snapshot: &'s Snapshot,
    predictor: &'a Predictor<'p, 's>,
    left: &'a OnceCell<RunningLeft>,
    now: i64,
    sizes: Sizes,
    total_gpus: u64,
    /// What every job's reason says of the run model (its rank correlation and window), read
    /// once a round.
    model_note: Option<(f64, usize)>,
}

impl<'s> PassContext<'_, '_, 's> {
    /// The release model, built the first time a job has to wait.
    fn releases<'r>(&self, lazy: &'r mut LazyReleases, cluster: &Cluster<'s>) -> &'r mut Releases {
        let (cinch, left, snapshot, predictor, now) = (
            self.cinch,
            self.left,
            self.snapshot,
            self.predictor,
            self.now,
        );
        lazy.get(cluster, |cluster, free| {
            let left = cinch.running_left(left, snapshot, predictor, now);
            Releases::with_events(
                snapshot,
                cluster,
                free,
                left.releases(snapshot, cluster, now),
            )
        })
    }

    /// The reason's opening, put in `order`: where the job stands in cinch's order and why (its
    /// words are written only if someone reads them).
    fn order_reason(&self, r: &Ranked, order: &mut Reason) {
        let p = &self.cinch.0;
        if let Some(q) = &r.qos {
            describe_qos(order, q, r, self.now);
        }
        if r.qos.as_ref().is_some_and(|q| q.urgent) {
            // Said above.
        } else if p.queue_order {
            order.push(Clause::Order(match self.model_note {
                Some((rho, window)) if r.prediction.source != RunSource::Profile => {
                    Order::Gittins {
                        run_s: r.prediction.run_s,
                        source: r.prediction.source.describe(),
                        rho,
                        window,
                        service: r.service,
                        score: r.score,
                    }
                }
                _ => Order::Shortest {
                    service: r.service,
                    remaining_s: r.remaining_s,
                    gpus: r.job.gpus,
                    source: r.prediction.source.describe(),
                },
            }));
        } else {
            order.push(Clause::Order(Order::Slurm));
        }
    }
}

/// A placement pass in progress: the cluster as the pass has taken it so far, the release model
/// and the decisions made.
struct Pass<'a, 'p, 's> {
    ctx: PassContext<'a, 'p, 's>,
    cluster: Cluster<'s>,
    releases: LazyReleases,
    /// GPUs the jobs behind the current one in the order ask for.
    waiting_gpus: u64,
    /// Whether a job of this round already has the reservation.
    reserved: bool,
    /// Jobs that cannot start now and are expected to wait longer than their Gittins size.
    starved: Vec<u32>,
}

impl<'a, 'p, 's> Pass<'a, 'p, 's> {
    fn new(
        cinch: &'a Cinch,
        snapshot: &'s Snapshot,
        ranked: &[Ranked],
        requeued: &[u32],
        predictor: &'a Predictor<'p, 's>,
        left: &'a OnceCell<RunningLeft>,
        now: i64,
    ) -> Self {
        let mut cluster = Cluster::new(snapshot);
        for job in snapshot
            .running
            .iter()
            .filter(|j| requeued.contains(&j.job_id))
        {
            let mut left = job.gpus;
            for node in &job.nodes {
                left -= cluster.release(node, left);
            }
        }
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let model_note = predictor.model().map(|m| (m.rho, m.window));
        Pass {
            ctx: PassContext {
                cinch,
                snapshot,
                predictor,
                left,
                now,
                sizes,
                total_gpus: cluster.schedulable_gpus(snapshot),
                model_note,
            },
            releases: LazyReleases::new(cluster.free().to_vec()),
            cluster,
            waiting_gpus: ranked.iter().map(|r| u64::from(r.job.gpus)).sum(),
            reserved: false,
            starved: Vec::new(),
        }
    }

    fn params(&self) -> &'a CinchParams {
        &self.ctx.cinch.0
    }

    /// The next job in the order: started (true: pinned where it starts now), waiting for its
    /// shape, or left to Slurm. Its decision `d` comes changing nothing and saying nothing, and
    /// is written here.
    fn decide(&mut self, r: &Ranked, d: &mut Decision) -> bool {
        self.waiting_gpus -= u64::from(r.job.gpus);
        let (job, now) = (r.job, self.ctx.now);
        d.priority = order_priority(self.params(), r);
        self.ctx.order_reason(r, &mut d.reason);
        if let Some(why) = left_as_submitted(job, now) {
            d.reason.push(Clause::Submitted(why));
            return false;
        }
        if job.gpus < self.params().min_gpus {
            match self.cluster.take_best_fit_node(job) {
                Some(i) => self
                    .releases
                    .take(&[(i, job.gpus)], now + r.remaining_s.ceil() as i64),
                None => self.starve(r),
            }
            d.reason.push(Clause::SlurmPlaces);
            return false;
        }
        let before = self.cluster.save();
        match self.cluster.place(job, now, true) {
            Ok((placement, reason)) => self.placed(r, d, before, placement, reason),
            Err(why) => {
                self.cluster.restore(before);
                self.starve(r);
                self.not_placed(r, d, why);
                false
            }
        }
    }

    /// Notes `r` among the starved if its expected wait is longer than it may be.
    fn starve(&mut self, r: &Ranked) {
        let now = self.ctx.now;
        let ideal = self.ctx.sizes.ideal(r.job.gpus);
        let releases = self.ctx.releases(&mut self.releases, &self.cluster);
        let at = releases.expected_at(now, r.job.gpus, ideal, 2);
        // An urgent job starves once its expected wait is longer than its allowance; any other
        // once it is longer than its size as the queue ranks it (its Gittins size, the rank per
        // GPU; its expected remaining run when predictions are taken as they are): where
        // predictions tell little, a new job's expected remaining run is the mean of a
        // heavy-tailed distribution, hours, while the rank takes it for the probably short job
        // it is, and a job the queue puts first would never count as starved.
        let size = r.remaining_s.min(r.score / f64::from(r.job.gpus.max(1)));
        let patience = match r.qos.as_ref().filter(|q| q.urgent) {
            Some(q) => q.allowance_s.min(r.remaining_s),
            None => size,
        };
        self.starved.push(match at {
            Some(at) if ((at - now) as f64) <= patience => 0,
            _ => r.job.job_id,
        });
    }

    /// A job that fits now: started where it fits (true), unless waiting for its best shape
    /// pays.
    fn placed(
        &mut self,
        r: &Ranked,
        d: &mut Decision,
        before: Saved,
        placement: Placement,
        reason: Placed,
    ) -> bool {
        let (job, now) = (r.job, self.ctx.now);
        let p = self.params();
        let ideal = self.ctx.sizes.ideal(job.gpus);
        let level = ideal.level_of(placement.gpus_on.len() as u32, placement.racks);
        let wait = if p.consolidate && level > 0 {
            let share = self.waiting_gpus as f64 / self.ctx.total_gpus.max(1) as f64;
            let releases = self.ctx.releases(&mut self.releases, &self.cluster);
            let history = self.ctx.predictor.history();
            self.ctx
                .cinch
                .worth_waiting(job, r, ideal, level, releases, history, share, now)
                .map_err(Some)
        } else {
            Err(None)
        };
        match wait {
            Ok((until, why)) => {
                self.cluster.restore(before);
                self.wait_for_shape(job, d, until, why);
                false
            }
            Err(why_not) => {
                let taken: Vec<(usize, u32)> = placement.taken().collect();
                self.releases
                    .take(&taken, now + r.remaining_s.ceil() as i64);
                d.reason.push(Clause::Placed(reason));
                if let Some(why_not) = why_not {
                    d.reason.push(Clause::Shape(why_not));
                }
                pin(d, job, placement);
                true
            }
        }
    }

    /// A job that waits for its best shape until `until`: with the reservation if no job of
    /// this round has it, else held by a begin time.
    fn wait_for_shape(&mut self, job: &PendingJob, d: &mut Decision, until: i64, why: Shape) {
        let (p, now) = (self.params(), self.ctx.now);
        if let Some((nodes, at)) = self.reservation(job) {
            reserve(d, job, nodes, at, why);
            return;
        }
        // A begin time that passes between rounds lets Slurm start the job on whatever is free
        // then: at once on its shape if the release came on time, spread if it came late
        // (predictions are off by 2x). Held instead, it is pinned on its shape by the round that
        // finds it free. The hold is the decision's TTL long: every round looks at the job
        // again and lifts it when the job should start, and the apply path renews a begin time
        // only near its end, so a job that keeps waiting costs Slurm one update per TTL, not
        // one per round; if cinch stops, the hold lapses within the TTL.
        let held = !p.start_at_release && until < now + RECHECK_S;
        let hold_s = i64::from(p.ttl_s);
        d.reason.push(Clause::Shape(why));
        if held {
            d.reason
                .push(Clause::Shape(Shape::HeldToRecheck { hold_s }));
        }
        d.delay_until = Some(if held { now + hold_s } else { until });
    }

    /// The round's reservation for `job` if reserving is on and no job has it yet: the nodes
    /// its best shape is expected to free on first, and when.
    fn reservation(&mut self, job: &PendingJob) -> Option<(Vec<String>, i64)> {
        if !self.params().reserve || self.reserved {
            return None;
        }
        let releases = self.ctx.releases(&mut self.releases, &self.cluster);
        let reservation = self
            .ctx
            .cinch
            .reservation(job, &self.cluster, releases, self.ctx.now);
        self.reserved |= reservation.is_some();
        reservation
    }

    /// A job that does not fit now. The GPUs free now went to jobs ahead of it in the plan; if
    /// Slurm still finds enough (jobs ahead may not start), it would spread a job that is
    /// expected to lose to that: keep it until the next round looks again.
    fn not_placed(&mut self, r: &Ranked, d: &mut Decision, why: Unplaced) {
        let (job, p, now) = (r.job, self.params(), self.ctx.now);
        let history = self.ctx.predictor.history();
        let sens = p
            .consolidate
            .then(|| self.ctx.cinch.sensitivity(job, 2, history))
            .filter(|sens| sens.slowdown >= p.min_slowdown);
        let Some(sens) = sens else {
            d.reason.push(why.into());
            return;
        };
        // Whether or not Slurm sees room for it now, GPUs may free before the next round: a
        // job that must not start spread waits for that round.
        if let Some((nodes, at)) = self.reservation(job) {
            reserve(d, job, nodes, at, Shape::FirstToWait);
            return;
        }
        let hold_s = i64::from(p.ttl_s);
        // Held as in `wait_for_shape`: looked at every round, renewed near the TTL's end.
        d.delay_until = Some(now + hold_s);
        d.reason
            .push(Clause::Shape(Shape::NoRoomNotSpread { sens, hold_s }));
    }
}
