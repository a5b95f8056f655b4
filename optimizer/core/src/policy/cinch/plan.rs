//! Plan: one placement pass over the ranked jobs: each is started where it fits (consolidated if it
//! is worth it), waits for its shape, or is left to Slurm.

use super::*;
use crate::util::words::{gpus, GpuHours, Hours};

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
        let history = predictor.history();
        let p = &self.0;
        let ttl = p.ttl_s;
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
        let mut releases = LazyReleases::new(cluster.free().to_vec());
        let build = |cluster: &Cluster, free: Vec<u32>| {
            let left = self.running_left(left, snapshot, predictor, now);
            Releases::with_ends(snapshot, cluster, free, |k, _| {
                now + left.of(k).ceil() as i64
            })
        };
        let total_gpus = cluster.schedulable_gpus(snapshot);
        // GPUs the jobs behind each job in the order ask for.
        let mut waiting_gpus: u64 = ranked.iter().map(|r| u64::from(r.job.gpus)).sum();
        let mut decisions = Vec::with_capacity(ranked.len());
        // Jobs that cannot start now and are expected to wait longer than their Gittins size.
        let mut starved: Vec<u32> = Vec::new();
        let mut started: Vec<usize> = Vec::new();
        // Whether a job of this round already has the reservation.
        let mut reserved = false;
        // What every job's reason says of the run model, written once a round.
        let model_note = predictor.model().map(|m| {
            format!(
                "predictions here order run times with rank correlation {:.2}, so it is judged \
                 by the runs of the {} ended jobs predicted nearest",
                m.rho, m.window
            )
        });
        let starving = |releases: &mut Releases, r: &Ranked| {
            let ideal = sizes.ideal(r.job.gpus);
            let at = releases.expected_at(now, r.job.gpus, ideal, 2);
            // An urgent job starves once its expected wait is longer than its allowance; any
            // other once it is longer than its size as the queue ranks it (its Gittins size, the
            // rank per GPU; its expected remaining run when predictions are taken as they are):
            // where predictions tell little, a new job's expected remaining run is the mean of a
            // heavy-tailed distribution, hours, while the rank takes it for the probably short
            // job it is, and a job the queue puts first would never count as starved.
            let size = r.remaining_s.min(r.score / f64::from(r.job.gpus.max(1)));
            let patience = match r.qos.as_ref().filter(|q| q.urgent) {
                Some(q) => q.allowance_s.min(r.remaining_s),
                None => size,
            };
            match at {
                Some(at) if ((at - now) as f64) <= patience => 0,
                _ => r.job.job_id,
            }
        };
        for r in ranked {
            waiting_gpus -= u64::from(r.job.gpus);
            let job = r.job;
            let urgent_allowance = r.qos.as_ref().filter(|q| q.urgent).map(|q| q.allowance_s);
            let priority = order_priority(p, r);
            // One string per job, built once: this runs for every pending job every round. Room
            // for the run model's note and the rest of a typical reason, so it is not grown.
            let mut order = String::with_capacity(320 + model_note.as_ref().map_or(0, String::len));
            if let Some(q) = &r.qos {
                describe_qos(&mut order, q, r, now);
            }
            if urgent_allowance.is_some() {
                // Said above.
            } else if p.queue_order {
                match &model_note {
                    Some(note) if r.prediction.source != RunSource::Profile => {
                        let _ = write!(
                            order,
                            "predicted {} (from {}); {note}: {} expected left, ranked as {} \
                             (Gittins); lower first; ",
                            Hours(r.prediction.run_s),
                            r.prediction.source.describe(),
                            GpuHours(r.service),
                            GpuHours(r.score),
                        );
                    }
                    _ => {
                        let _ = write!(
                            order,
                            "predicted {} left ({} on {}, from {}): shorter first; ",
                            GpuHours(r.service),
                            Hours(r.remaining_s),
                            gpus(job.gpus),
                            r.prediction.source.describe()
                        );
                    }
                }
            } else {
                order.push_str("Slurm's order; ");
            }
            let explain = |mut order: String, why: &str| {
                order.push_str(why);
                Decision {
                    priority,
                    ..Decision::explain(job.job_id, order, ttl)
                }
            };
            if let Some(why) = left_as_submitted(job, now) {
                decisions.push(explain(order, &why));
                continue;
            }
            if job.gpus < p.min_gpus {
                match cluster.take_best_fit_node(job) {
                    Some(i) => releases.take(&[(i, job.gpus)], now + r.remaining_s.ceil() as i64),
                    None => starved.push(starving(releases.get(&cluster, build), r)),
                }
                decisions.push(explain(order, "Slurm places it"));
                continue;
            }
            let before = cluster.save();
            let decision = match cluster.place(job, now, true) {
                Ok((placement, reason)) => {
                    let ideal = sizes.ideal(job.gpus);
                    let level = ideal.level_of(placement.gpus_on.len() as u32, placement.racks);
                    let wait = if p.consolidate && level > 0 {
                        let share = waiting_gpus as f64 / total_gpus.max(1) as f64;
                        let releases = releases.get(&cluster, build);
                        self.worth_waiting(job, r, ideal, level, releases, history, share, now)
                    } else {
                        Err(String::new())
                    };
                    match wait {
                        Ok((until, why)) => {
                            cluster.restore(before);
                            let reservation = (p.reserve && !reserved)
                                .then(|| {
                                    self.reservation(
                                        job,
                                        &cluster,
                                        releases.get(&cluster, build),
                                        now,
                                    )
                                })
                                .flatten();
                            match reservation {
                                Some((nodes, at)) => {
                                    reserved = true;
                                    self.reserve_decision(job, nodes, at, order, &why)
                                }
                                // A begin time that passes between rounds lets Slurm start
                                // the job on whatever is free then: at once on its shape if the
                                // release came on time, spread if it came late (predictions are
                                // off by 2x). Held to the next round, it is pinned on its shape.
                                None => {
                                    let held = !p.start_at_release && until < now + RECHECK_S;
                                    let why = if held {
                                        format!(
                                            "{why}; not started before it is looked at again \
                                             in {RECHECK_S} s, so never spread"
                                        )
                                    } else {
                                        why
                                    };
                                    Decision {
                                        delay_until: Some(if held {
                                            now + RECHECK_S
                                        } else {
                                            until
                                        }),
                                        ..explain(order, &why)
                                    }
                                }
                            }
                        }
                        Err(why_not) => {
                            let taken: Vec<(usize, u32)> = placement
                                .gpus_on
                                .iter()
                                .filter_map(|(n, g)| Some((cluster.node_index(n)?, *g)))
                                .collect();
                            releases.take(&taken, now + r.remaining_s.ceil() as i64);
                            order.push_str(&reason);
                            if !why_not.is_empty() {
                                order.push_str("; ");
                                order.push_str(&why_not);
                            }
                            let mut d = pin_decision(job, placement, order, ttl);
                            d.priority = priority;
                            started.push(decisions.len());
                            d
                        }
                    }
                }
                Err(why) => {
                    cluster.restore(before);
                    starved.push(starving(releases.get(&cluster, build), r));
                    // The GPUs free now went to jobs ahead of it in the plan; if Slurm still
                    // finds enough (jobs ahead may not start), it would spread a job that is
                    // expected to lose to that: keep it until the next round looks again.
                    let sens = p
                        .consolidate
                        .then(|| self.sensitivity(job, 2, history))
                        .filter(|sens| sens.slowdown >= p.min_slowdown);
                    let sensitive = sens.is_some();
                    let reservation = (sensitive && p.reserve && !reserved)
                        .then(|| {
                            self.reservation(job, &cluster, releases.get(&cluster, build), now)
                        })
                        .flatten();
                    // Whether or not Slurm sees room for it now, GPUs may free before the
                    // next round: a job that must not start spread waits for that round.
                    if let Some((nodes, at)) = reservation {
                        reserved = true;
                        self.reserve_decision(
                            job,
                            nodes,
                            at,
                            order,
                            "waits for its best shape, and is the first in cinch's order that does",
                        )
                    } else if let Some(sens) = sens {
                        Decision {
                            delay_until: Some(now + RECHECK_S),
                            ..explain(
                                order,
                                &format!(
                                    "waits: no room for its best shape now; not started spread \
                                     (slowdown {:.2}, {}), looked at again in {RECHECK_S} s",
                                    sens.slowdown, sens.source
                                ),
                            )
                        }
                    } else {
                        explain(order, &why)
                    }
                }
            };
            decisions.push(decision);
        }

        starved.retain(|&id| id != 0);
        starved.sort_unstable();
        Plan {
            decisions,
            starved,
            started,
        }
    }
}
