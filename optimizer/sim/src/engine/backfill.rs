//! Slurm's pass as sched/backfill makes it: the pending jobs in priority order, each started
//! where the policy places it if that delays no job before it, and every job that cannot start
//! given a reservation at its earliest start (within `bf_window`), which later jobs may not
//! delay.
//!
//! Slurm reserves for every job its backfill tests, not only the first that cannot start (EASY
//! backfill): measured on the local cluster (docs/simulator.md, "Fidelity"), a one-GPU job
//! behind three blocked 8-GPU jobs waited there until they had started, where a simulator that
//! kept one reservation started it at once and came out 30% optimistic for plain Slurm.
//!
//! The reservations are kept as a profile of free GPUs over time (by the running jobs' time
//! limits), counted over the cluster; a job pinned to nodes (cinch's node lists) reserves those
//! nodes' GPUs, and a later job that would still run then is placed as if they had only their
//! spare ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{start, At, State};
use crate::engine::Scheduler;

/// Slurm's `bf_window` default (1,440 minutes): a job that cannot start within a day of the pass
/// gets no reservation, and later jobs may use what it would need.
const BACKFILL_WINDOW_S: f64 = 86_400.0;

/// Which of slurmctld's two schedulers a pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassKind {
    /// The main scheduler, at events (a submission, an end, an update): jobs in priority order
    /// until the first that cannot start, which blocks the partition for the jobs after it; a
    /// job pinned to nodes that are busy blocks only those nodes (`job_scheduler.c`,
    /// `fail_by_part`).
    Main,
    /// The backfill scheduler, every `bf_interval` on the clock: every job tested, reservations
    /// for those that cannot start.
    Backfill,
}

/// Slurm's pass: pending jobs in the policy's order, each started where the policy places it
/// unless it would delay a reservation, every other tested job reserved at its earliest start
/// (the main scheduler instead stops at the first that cannot start); whether any started.
pub(super) fn backfill(
    state: &mut State,
    scheduler: &mut dyn Scheduler,
    now: f64,
    kind: PassKind,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) -> bool {
    if state.pending.is_empty() || state.free_total == 0 {
        return false;
    }
    if kind == PassKind::Main {
        return main_pass(state, scheduler, now, finishes);
    }
    let order = queue_order(state, scheduler, now);
    // Built at the first job that cannot start (most passes start all they test, or none).
    let mut profile: Option<FreeProfile> = None;
    let mut pinned: Vec<NodeReservation> = Vec::new();
    let mut started = Vec::new();
    let mut tested = 0;
    for &(_, _, job) in &order {
        if state.free_total == 0 || tested >= state.config.max_job_test {
            break;
        }
        if !state.eligible(job, now) {
            continue;
        }
        tested += 1;
        let gpus = state.jobs[job].spec.gpus;
        let limit = state.jobs[job].spec.time_limit;
        let limit_end = now + limit;
        let placement = place_around(state, scheduler, job, &pinned, limit_end, now);
        let fits_plan = |profile: &Option<FreeProfile>| {
            profile
                .as_ref()
                .is_none_or(|p| p.least_over(now, limit_end) >= i64::from(gpus))
        };
        match placement {
            Some(placement) if fits_plan(&profile) => {
                if let Some(p) = profile.as_mut() {
                    p.take(now, limit_end, gpus);
                }
                for r in pinned.iter_mut().filter(|r| r.at < limit_end) {
                    r.take(&placement);
                }
                start(state, job, placement, now, finishes);
                started.push(job);
            }
            _ => {
                let profile = profile.get_or_insert_with(|| FreeProfile::new(state, now));
                let pin = state.jobs[job].control.pin.clone();
                let at = match pin {
                    Some(nodes) => {
                        let r = shadow_on(state, job, &nodes, now);
                        let at = r.at;
                        if at < now + BACKFILL_WINDOW_S {
                            pinned.push(r);
                        }
                        Some(at)
                    }
                    None => profile.earliest(gpus, limit, now),
                };
                if let Some(at) = at.filter(|&at| at < now + BACKFILL_WINDOW_S) {
                    profile.take(at, at + limit, gpus);
                }
            }
        }
    }
    if !started.is_empty() {
        state.pending.retain(|j| !started.contains(j));
    }
    !started.is_empty()
}

/// The pending jobs in the policy's order (ties: submission, then index).
fn queue_order(state: &State, scheduler: &dyn Scheduler, now: f64) -> Vec<(f64, i64, usize)> {
    let mut order: Vec<(f64, i64, usize)> = state
        .pending
        .iter()
        .map(|&j| {
            (
                scheduler.order_key(state, j, now),
                state.jobs[j].spec.submit,
                j,
            )
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    order
}

/// slurmctld's main scheduler: jobs in order until the first that cannot start; a pinned job
/// that cannot start takes its nodes out of the pass instead.
fn main_pass(
    state: &mut State,
    scheduler: &mut dyn Scheduler,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) -> bool {
    let order = queue_order(state, scheduler, now);
    let mut closed: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut started = Vec::new();
    let mut tested = 0;
    for &(_, _, job) in &order {
        if state.free_total == 0 || tested >= state.config.max_job_test {
            break;
        }
        if !state.eligible(job, now) {
            continue;
        }
        tested += 1;
        let placement = if state.jobs[job].spec.gpus <= state.free_total {
            scheduler.place(state, job, now)
        } else {
            None
        };
        if let Some(placement) = placement {
            start(state, job, placement, now, finishes);
            started.push(job);
            continue;
        }
        match state.jobs[job].control.pin.clone() {
            Some(nodes) => {
                let none: Vec<(u32, u32)> = nodes
                    .iter()
                    .filter(|&&n| (n as usize) < state.free.len())
                    .map(|&n| (n, 0))
                    .collect();
                closed.push(mask(state, &none));
            }
            None => break,
        }
    }
    for saved in closed.into_iter().rev() {
        unmask(state, saved);
    }
    if !started.is_empty() {
        state.pending.retain(|j| !started.contains(j));
    }
    !started.is_empty()
}

/// Where the policy places `job` now, with the nodes that pinned reservations hold from before
/// the job's limit lowered to their spare GPUs.
fn place_around(
    state: &mut State,
    scheduler: &mut dyn Scheduler,
    job: usize,
    pinned: &[NodeReservation],
    limit_end: f64,
    now: f64,
) -> Option<Vec<(u32, u32)>> {
    let mut masked = Vec::new();
    for r in pinned.iter().filter(|r| r.at < limit_end) {
        masked.push(mask(state, &r.spare));
    }
    let placement = if state.jobs[job].spec.gpus <= state.free_total {
        scheduler.place(state, job, now)
    } else {
        None
    };
    // Undone in reverse, so each node gets back what it had before the first mask.
    for saved in masked.into_iter().rev() {
        unmask(state, saved);
    }
    placement
}

/// Free GPUs over time as the pass plans them, counted over the cluster: now's free GPUs, more
/// as running jobs reach their time limits, less over each reservation and each job the pass
/// starts (until its limit). Steps `(from, free)` sorted by time, the first at the pass.
#[derive(Debug, Clone, PartialEq)]
struct FreeProfile {
    steps: Vec<(f64, i64)>,
}

impl FreeProfile {
    fn new(state: &State, now: f64) -> Self {
        let mut ends: Vec<(f64, u32)> = state
            .running
            .iter()
            .map(|&j| {
                let job = &state.jobs[j];
                // A job past its limit would be killed by Slurm; here it is about to end.
                (
                    job.expected_end().max(now + state.config.tick_s),
                    job.spec.gpus,
                )
            })
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut steps = Vec::with_capacity(ends.len() + 1);
        let mut free = i64::from(state.free_total);
        steps.push((now, free));
        for (at, gpus) in ends {
            free += i64::from(gpus);
            match steps.last_mut() {
                Some(last) if last.0 == at => last.1 = free,
                _ => steps.push((at, free)),
            }
        }
        FreeProfile { steps }
    }

    /// The index of the step in force at `t` (`t` at or after the first).
    fn index_at(&self, t: f64) -> usize {
        self.steps.partition_point(|s| s.0 <= t).saturating_sub(1)
    }

    /// The fewest free GPUs over `[from, until)`.
    fn least_over(&self, from: f64, until: f64) -> i64 {
        let first = self.index_at(from);
        self.steps[first..]
            .iter()
            .take_while(|s| s.0 < until || s.0 <= from)
            .map(|s| s.1)
            .min()
            .unwrap_or(0)
    }

    /// The earliest step at which `gpus` stay free for `duration`; `None` if never.
    fn earliest(&self, gpus: u32, duration: f64, from: f64) -> Option<f64> {
        let gpus = i64::from(gpus);
        let steps = &self.steps;
        let mut i = self.index_at(from);
        while i < steps.len() {
            if steps[i].1 < gpus {
                i += 1;
                continue;
            }
            let start = steps[i].0.max(from);
            // Every start up to the first short step after it overlaps that step.
            let short = steps[i + 1..]
                .iter()
                .take_while(|s| s.0 < start + duration)
                .position(|s| s.1 < gpus);
            match short {
                None => return Some(start),
                Some(p) => i += p + 2,
            }
        }
        None
    }

    /// `gpus` taken over `[from, until)`.
    fn take(&mut self, from: f64, until: f64, gpus: u32) {
        let a = self.split_at(from);
        let b = self.split_at(until);
        for step in &mut self.steps[a..b] {
            step.1 -= i64::from(gpus);
        }
    }

    /// The index of a step starting exactly at `t` (inserted if none does).
    fn split_at(&mut self, t: f64) -> usize {
        let i = self.steps.partition_point(|s| s.0 < t);
        if self.steps.get(i).is_some_and(|s| s.0 == t) {
            return i;
        }
        let free = if i == 0 {
            self.steps[0].1
        } else {
            self.steps[i - 1].1
        };
        self.steps.insert(i, (t, free));
        i
    }
}

/// The reservation of a job pinned to nodes: when those nodes hold its GPUs by the running jobs'
/// time limits, and each node's GPUs it leaves spare then.
#[derive(Debug, Clone, PartialEq)]
struct NodeReservation {
    at: f64,
    spare: Vec<(u32, u32)>,
}

impl NodeReservation {
    /// A job started before the reservation that still runs then takes from its spare GPUs.
    fn take(&mut self, placement: &[(u32, u32)]) {
        for &(node, taken) in placement {
            if let Some((_, s)) = self.spare.iter_mut().find(|(n, _)| *n == node) {
                *s -= taken.min(*s);
            }
        }
    }
}

/// Lowers the reserved nodes' free GPUs to their spare ones; what they were, to [`unmask`].
fn mask(state: &mut State, spare: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut saved = Vec::with_capacity(spare.len());
    for &(node, s) in spare {
        let free = &mut state.free[node as usize];
        saved.push((node, *free));
        let lowered = (*free).min(s);
        state.free_total -= *free - lowered;
        *free = lowered;
    }
    saved
}

fn unmask(state: &mut State, saved: Vec<(u32, u32)>) {
    for (node, free) in saved {
        state.free_total += free - state.free[node as usize];
        state.free[node as usize] = free;
    }
}

/// The reservation of a job pinned to `nodes`: when those nodes hold its GPUs by the running
/// jobs' time limits, and each node's GPUs it leaves spare then (taken one per node first, then
/// in order, as [`crate::sched::pinned`] places it).
fn shadow_on(state: &State, job: usize, nodes: &[u32], now: f64) -> NodeReservation {
    let gpus = state.jobs[job].spec.gpus;
    let mut free: Vec<(u32, u32)> = nodes
        .iter()
        .filter(|&&n| (n as usize) < state.free.len())
        .map(|&n| (n, state.free[n as usize]))
        .collect();
    let mut ends: Vec<(f64, u32, u32)> = Vec::new();
    for &r in &state.running {
        let j = &state.jobs[r];
        for &(node, g) in &j.placement {
            if free.iter().any(|(n, _)| *n == node) {
                ends.push((j.expected_end().max(now + state.config.tick_s), node, g));
            }
        }
    }
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let fits = |free: &[(u32, u32)]| {
        free.iter().map(|(_, f)| f).sum::<u32>() >= gpus && free.iter().all(|(_, f)| *f > 0)
    };
    let mut at = now;
    let mut ends = ends.into_iter();
    while !fits(&free) {
        let Some((end, node, g)) = ends.next() else {
            return NodeReservation {
                at: f64::INFINITY,
                spare: Vec::new(),
            };
        };
        at = end;
        if let Some((_, f)) = free.iter_mut().find(|(n, _)| *n == node) {
            *f += g;
        }
    }
    // What the job takes: one GPU on each node, then in order.
    let mut left = gpus.saturating_sub(free.len() as u32);
    let spare = free
        .into_iter()
        .map(|(node, f)| {
            let extra = (f - 1).min(left);
            left -= extra;
            (node, f - 1 - extra)
        })
        .collect();
    NodeReservation { at, spare }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(steps: &[(f64, i64)]) -> FreeProfile {
        FreeProfile {
            steps: steps.to_vec(),
        }
    }

    #[test]
    fn the_earliest_start_keeps_the_gpus_free_for_the_whole_limit() {
        // 6 free now, 14 from 70, 24 from 72, 32 from 134.
        let p = profile(&[(16.0, 6), (70.0, 14), (72.0, 24), (134.0, 32)]);
        assert_eq!(p.earliest(4, 60.0, 16.0), Some(16.0));
        assert_eq!(p.earliest(8, 300.0, 16.0), Some(70.0));
        assert_eq!(p.earliest(20, 10.0, 16.0), Some(72.0));
        assert_eq!(p.earliest(33, 10.0, 16.0), None);
        // A dip later on pushes the start past it.
        let dipped = profile(&[(0.0, 8), (10.0, 2), (20.0, 8)]);
        assert_eq!(dipped.earliest(8, 5.0, 0.0), Some(0.0));
        assert_eq!(dipped.earliest(8, 15.0, 0.0), Some(20.0));
    }

    #[test]
    fn reservations_take_their_gpus_for_their_limit_only() {
        let mut p = profile(&[(16.0, 6), (70.0, 14), (72.0, 24), (134.0, 32)]);
        // Three 8-GPU jobs reserved in turn, as Slurm's backfill does.
        for limit in [300.0, 60.0, 900.0] {
            let at = p.earliest(8, limit, 16.0).unwrap();
            p.take(at, at + limit, 8);
        }
        // A one-GPU job with a 60 s limit would delay the third: it may not start now.
        assert_eq!(p.least_over(16.0, 76.0), 0);
        // One that ends before the first reservation may.
        assert_eq!(p.least_over(16.0, 70.0), 6);
        assert_eq!(p.steps.first(), Some(&(16.0, 6)));
        assert_eq!(p.steps.last().map(|s| s.1), Some(32));
    }
}
