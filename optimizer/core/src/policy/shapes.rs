//! Where a multi-GPU job can go and when: the placement *levels* of a job (its best shape on the
//! fewest nodes of one rack, any nodes of one rack, anywhere) and when the running jobs are
//! expected to free each. Shared by the policies that wait for a shape (`dally`, `cinch`) or
//! reserve one (`strict`).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::placement::Cluster;
use crate::learn::history::fewest_nodes;
use crate::wire::snapshot::{RunningJob, Snapshot};

/// The job's needs for levels: fewest nodes, and whether one rack can hold it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ideal {
    pub(super) nodes: u32,
    pub(super) one_rack: bool,
}

/// What the cluster's nodes and racks can hold at most, for [`Ideal`]s.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub(super) node_gpus: u32,
    pub(super) rack_gpus: u64,
}

impl Sizes {
    pub(super) fn ideal(self, gpus: u32) -> Ideal {
        Ideal {
            nodes: fewest_nodes(gpus, self.node_gpus),
            one_rack: u64::from(gpus) <= self.rack_gpus,
        }
    }
}

impl Ideal {
    /// The level of a placement on `nodes` nodes across `racks` racks.
    pub(super) fn level_of(self, nodes: u32, racks: usize) -> usize {
        if nodes <= self.nodes && (racks <= 1 || !self.one_rack) {
            0
        } else if racks <= 1 {
            1
        } else {
            2
        }
    }

    /// The levels that exist for the job (a job bigger than a rack has no level 1).
    pub(super) fn next_level(self, level: usize) -> usize {
        if level == 0 && !self.one_rack {
            2
        } else {
            (level + 1).min(2)
        }
    }
}

/// When running jobs are expected to end, per node: the input of the tuner's wait estimate.
pub(super) struct Releases {
    /// (expected end, node index, GPUs) of the running jobs, by time.
    events: Vec<(i64, usize, u32)>,
    /// GPUs the plan took, by (expected end, node index): kept apart from `events` so taking
    /// costs a tree insert rather than shifting every later release.
    planned: BTreeMap<(i64, usize), u32>,
    free: Vec<u32>,
    /// Per rack, the GPUs in `free` and the most on one node: what tells most racks unable to
    /// hold a job without reading their nodes (a check of every node for every waiting job was
    /// a tenth of a round at 100,000 pending on 10,000 nodes; docs/benchmarks.md).
    rack_free: Vec<u64>,
    rack_max: Vec<u32>,
    /// GPUs of each node, busy or not.
    totals: Vec<u32>,
    rack_of: Vec<usize>,
    /// Nodes of each rack (by position).
    rack_nodes: Vec<Vec<usize>>,
    racks: usize,
    /// Answers of [`Releases::expected_at`] by (GPUs, level), each with whether it fitted in
    /// the GPUs free now (kept across [`Releases::take`] where still right).
    cache: FxHashMap<(u32, usize), (Option<i64>, bool)>,
    /// GPUs the pending jobs ask for, per GPU in the cluster (capped at 10).
    pub(super) pressure: f64,
}

/// The running jobs' releases: (expected end, node index, GPUs), by time. A round plans more
/// than once (again with the GPUs of jobs it requeues free) from the same running jobs and the
/// same expected ends, so it works them out once.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReleaseEvents(Vec<(i64, usize, u32)>);

impl ReleaseEvents {
    /// From the snapshot's running jobs and when each is expected to end (given its position
    /// in the snapshot and itself).
    pub(super) fn of(
        snapshot: &Snapshot,
        cluster: &Cluster,
        expected_end: impl Fn(usize, &RunningJob) -> i64,
    ) -> Self {
        let mut events = Vec::new();
        for (k, job) in snapshot.running.iter().enumerate() {
            let end = expected_end(k, job);
            // The snapshot does not say how a job's GPUs split over its nodes: evenly, the
            // remainder on its first nodes, so that all of them are released.
            let n = (job.nodes.len() as u32).max(1);
            for (k, node) in job.nodes.iter().enumerate() {
                if let Some(i) = cluster.node_index(node) {
                    let share = job.gpus / n + u32::from((k as u32) < job.gpus % n);
                    events.push((end, i, share));
                }
            }
        }
        events.sort_unstable();
        ReleaseEvents(events)
    }
}

impl Releases {
    /// From the snapshot's running jobs, before anything is planned on `cluster`.
    pub(super) fn new(
        snapshot: &Snapshot,
        cluster: &Cluster,
        ratio: f64,
        default_run_s: u32,
    ) -> Self {
        Self::with_ends(snapshot, cluster, cluster.free().to_vec(), |_, job| {
            let limit = job
                .time_limit_min
                .map_or(f64::from(default_run_s), |m| f64::from(m) * 60.0);
            let end = job.start_time + (limit * ratio) as i64;
            if end <= snapshot.time {
                // Ran past its expected time: assume it ends halfway to its limit.
                snapshot.time + ((job.start_time + limit as i64 - snapshot.time).max(0) / 2).max(1)
            } else {
                end
            }
        })
    }

    /// From the snapshot's running jobs and when each is expected to end (given its position
    /// in the snapshot and itself), with `free` GPUs per node (the cluster's before a plan took
    /// any).
    pub(super) fn with_ends(
        snapshot: &Snapshot,
        cluster: &Cluster,
        free: Vec<u32>,
        expected_end: impl Fn(usize, &RunningJob) -> i64,
    ) -> Self {
        let events = ReleaseEvents::of(snapshot, cluster, expected_end);
        Self::with_events(snapshot, cluster, free, events)
    }

    /// [`Releases::with_ends`] from the running jobs' releases, worked out before.
    pub(super) fn with_events(
        snapshot: &Snapshot,
        cluster: &Cluster,
        free: Vec<u32>,
        ReleaseEvents(events): ReleaseEvents,
    ) -> Self {
        let (rack_of, racks) = cluster.racks();
        let mut rack_nodes = vec![Vec::new(); racks.max(1)];
        for (i, &r) in rack_of.iter().enumerate() {
            rack_nodes[r].push(i);
        }
        let (rack_free, rack_max) = rack_nodes
            .iter()
            .map(|nodes: &Vec<usize>| {
                let frees = nodes.iter().map(|&i| free[i]);
                (
                    frees.clone().map(u64::from).sum::<u64>(),
                    frees.max().unwrap_or(0),
                )
            })
            .unzip();
        Releases {
            events,
            planned: BTreeMap::new(),
            free,
            rack_free,
            rack_max,
            totals: cluster.totals().to_vec(),
            rack_nodes,
            rack_of: rack_of.to_vec(),
            racks,
            cache: FxHashMap::default(),
            pressure: {
                let total: u64 = snapshot.nodes.iter().map(|n| u64::from(n.gpus_total)).sum();
                let asked: u64 = snapshot.pending.iter().map(|j| u64::from(j.gpus)).sum();
                (asked as f64 / total.max(1) as f64).min(10.0)
            },
        }
    }

    /// Whether `free` holds a level-`level` placement of `gpus` GPUs: in one rack where the
    /// level or the job asks for one, else on the `ideal.nodes` freest nodes anywhere.
    /// `scratch` is room to select the freest nodes in, kept by the caller across calls (this
    /// runs for every job that has to wait).
    fn fits(
        &self,
        free: &[u32],
        gpus: u32,
        ideal: Ideal,
        level: usize,
        scratch: &mut Vec<u32>,
    ) -> bool {
        if level > 0 || ideal.one_rack {
            return (0..self.racks.max(1))
                .any(|rack| self.rack_fits(free, rack, gpus, ideal, level, scratch));
        }
        holds_on_freest(free.iter().copied(), ideal.nodes as usize, gpus, scratch)
    }

    /// [`Releases::fits`] in the GPUs free now: only the racks whose free GPUs in all and on
    /// their freest node could hold the job are read node by node.
    fn fits_now(&self, gpus: u32, ideal: Ideal, level: usize, scratch: &mut Vec<u32>) -> bool {
        if !(level > 0 || ideal.one_rack) {
            return self.fits(&self.free, gpus, ideal, level, scratch);
        }
        let gpus_64 = u64::from(gpus);
        (0..self.racks.max(1)).any(|rack| {
            // Necessary whatever the level: the rack's GPUs, and its freest node's on as many
            // nodes as the job's best shape has (any number of nodes above level 0).
            self.rack_free[rack] >= gpus_64
                && (level > 0 || u64::from(ideal.nodes) * u64::from(self.rack_max[rack]) >= gpus_64)
                && self.rack_fits(&self.free, rack, gpus, ideal, level, scratch)
        })
    }

    /// When a level-`level` placement for `gpus` GPUs is expected to be free (partitions and
    /// other pending jobs aside), if running jobs ever free one.
    pub(super) fn expected_at(
        &mut self,
        now: i64,
        gpus: u32,
        ideal: Ideal,
        level: usize,
    ) -> Option<i64> {
        if let Some(&(t, _)) = self.cache.get(&(gpus, level)) {
            return t;
        }
        let found = self.walk(now, gpus, ideal, level);
        self.cache.insert((gpus, level), found);
        found.0
    }

    /// Releases in time order until a placement fits; only the rack a release touched is
    /// checked again (the whole cluster for a job bigger than any rack). Also says whether it
    /// fitted in the GPUs free now.
    fn walk(&self, now: i64, gpus: u32, ideal: Ideal, level: usize) -> (Option<i64>, bool) {
        let mut scratch = Vec::new();
        if self.fits_now(gpus, ideal, level, &mut scratch) {
            return (Some(now), true);
        }
        let mut free = self.free.clone();
        let per_rack = level > 0 || ideal.one_rack;
        // Each rack's free GPUs as the releases come: a rack with fewer than the job asks for
        // cannot hold it, whatever its nodes.
        let mut rack_free = if per_rack {
            self.rack_free.clone()
        } else {
            Vec::new()
        };
        for (t, i, g) in self.in_time_order() {
            free[i] += g;
            let fits = if per_rack {
                let rack = self.rack_of[i];
                rack_free[rack] += u64::from(g);
                rack_free[rack] >= u64::from(gpus)
                    && self.rack_fits(&free, rack, gpus, ideal, level, &mut scratch)
            } else {
                self.fits(&free, gpus, ideal, level, &mut scratch)
            };
            if fits {
                return (Some(t), false);
            }
        }
        // Once every running job ended each node is whole again, whatever the guessed splits
        // left busy.
        let last = self
            .events
            .last()
            .map(|e| e.0)
            .max(self.planned.last_key_value().map(|(k, _)| k.0));
        let whole = last.filter(|_| self.fits(&self.totals, gpus, ideal, level, &mut scratch));
        (whole, false)
    }

    /// Every release, (time, node index, GPUs): the running jobs' and the plan's, each kept in
    /// time order, merged.
    fn in_time_order(&self) -> impl Iterator<Item = (i64, usize, u32)> + '_ {
        let mut running = self.events.iter().copied().peekable();
        let mut planned = (self.planned.iter())
            .map(|(&(t, i), &g)| (t, i, g))
            .peekable();
        std::iter::from_fn(move || match (running.peek(), planned.peek()) {
            (Some(a), Some(b)) if a <= b => running.next(),
            (_, Some(_)) => planned.next(),
            (Some(_), None) => running.next(),
            (None, None) => None,
        })
    }

    /// Whether rack `rack` alone holds a level-`level` placement in `free`.
    fn rack_fits(
        &self,
        free: &[u32],
        rack: usize,
        gpus: u32,
        ideal: Ideal,
        level: usize,
        scratch: &mut Vec<u32>,
    ) -> bool {
        let frees = self.rack_nodes[rack].iter().map(|&i| free[i]);
        if level > 0 {
            return frees.map(u64::from).sum::<u64>() >= u64::from(gpus);
        }
        if ideal.nodes <= 1 {
            return frees.max().unwrap_or(0) >= gpus;
        }
        holds_on_freest(frees, ideal.nodes as usize, gpus, scratch)
    }

    /// When a best-shape placement (level 0) of `gpus` GPUs is expected free, and on which
    /// nodes (by position): the first rack, or the whole cluster for a job bigger than a rack,
    /// whose `ideal.nodes` freest nodes hold it, fewest nodes first.
    pub(super) fn first_best_shape(
        &self,
        now: i64,
        gpus: u32,
        ideal: Ideal,
    ) -> Option<(i64, Vec<usize>)> {
        let everywhere: Vec<usize>;
        let groups: &[Vec<usize>] = if ideal.one_rack {
            &self.rack_nodes
        } else {
            everywhere = (0..self.free.len()).collect();
            std::slice::from_ref(&everywhere)
        };
        // The walk below asks after every release, and most releases leave the job not
        // fitting yet: a group is told unable to hold it by `holds_on_freest` (no sort), and
        // its nodes are sorted only when they can.
        let mut frees: Vec<u32> = Vec::new();
        let mut pick = |free: &[u32]| -> Option<Vec<usize>> {
            groups.iter().find_map(|group| {
                let k = ideal.nodes as usize;
                if !holds_on_freest(group.iter().map(|&i| free[i]), k, gpus, &mut frees) {
                    return None;
                }
                let mut nodes: Vec<usize> =
                    group.iter().copied().filter(|&i| free[i] > 0).collect();
                nodes.sort_by_key(|&i| (std::cmp::Reverse(free[i]), i));
                let mut sum = 0u64;
                let mut taken = Vec::new();
                for i in nodes.into_iter().take(ideal.nodes as usize) {
                    sum += u64::from(free[i]);
                    taken.push(i);
                    if sum >= u64::from(gpus) {
                        return Some(taken);
                    }
                }
                None
            })
        };
        let mut free = self.free.clone();
        if let Some(nodes) = pick(&free) {
            return Some((now, nodes));
        }
        for (t, i, g) in self.in_time_order() {
            free[i] += g;
            if let Some(nodes) = pick(&free) {
                return Some((t.max(now), nodes));
            }
        }
        None
    }

    /// GPUs a plan takes now on nodes (by position) until `end`: what later estimates see.
    pub(super) fn take(&mut self, taken: &[(usize, u32)], end: i64) {
        // GPUs taken now and given back at `end` leave an answer found by the walk later than
        // `end` as it was: the walk sees the same free GPUs from `end` on and less before, so
        // nothing fits sooner (and the time of the last release, were it the answer, stays).
        // An answer "never" stays too once there was any release to walk: the whole cluster
        // cannot hold that job. Every other answer is walked again.
        // (Taking more than is free would give back more than it took: walked again too.)
        let walked = !self.events.is_empty() || !self.planned.is_empty();
        let mut exact = true;
        for &(i, g) in taken {
            exact &= g <= self.free[i];
            let before = self.free[i];
            self.free[i] = before.saturating_sub(g);
            *self.planned.entry((end, i)).or_default() += g;
            let rack = self.rack_of[i];
            self.rack_free[rack] -= u64::from(before - self.free[i]);
            if before == self.rack_max[rack] {
                self.rack_max[rack] = (self.rack_nodes[rack].iter())
                    .map(|&n| self.free[n])
                    .max()
                    .unwrap_or(0);
            }
        }
        self.cache.retain(|_, &mut (at, fits_now)| match at {
            Some(t) => exact && !fits_now && t > end,
            None => walked,
        });
    }
}

/// Whether the `k` freest of `frees` hold `gpus` GPUs. Told without selecting them when the
/// total, the freest or the count of nodes with any GPU free already tells (most racks asked
/// cannot hold the job); `scratch` is room to select in, kept by the caller.
fn holds_on_freest(
    frees: impl Iterator<Item = u32> + Clone,
    k: usize,
    gpus: u32,
    scratch: &mut Vec<u32>,
) -> bool {
    let (mut total, mut freest, mut with_any) = (0u64, 0u32, 0usize);
    for f in frees.clone() {
        total += u64::from(f);
        freest = freest.max(f);
        with_any += usize::from(f > 0);
    }
    let gpus = u64::from(gpus);
    if total < gpus || (k as u64) * u64::from(freest) < gpus {
        return false;
    }
    if k == 0 || with_any <= k {
        return true;
    }
    scratch.clear();
    scratch.extend(frees.filter(|&f| f > 0));
    scratch.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    scratch[..k].iter().map(|&f| u64::from(f)).sum::<u64>() >= gpus
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{busy_snapshot, node, snapshot};

    /// A shape free now is not free now any more once its GPUs are taken, even by a plan that
    /// gives them back before now: asked again, it is walked again.
    #[test]
    fn a_shape_free_now_is_walked_again_once_taken() {
        let now = 1_000;
        let snap = snapshot(vec![node("a", 8, 0, "r"), node("b", 8, 8, "r")], vec![]);
        let cluster = Cluster::new(&snap);
        let ideal = Sizes {
            node_gpus: 8,
            rack_gpus: 16,
        }
        .ideal(8);
        let mut releases = Releases::with_ends(&snap, &cluster, cluster.free().to_vec(), |_, _| 0);
        assert_eq!(releases.expected_at(now, 8, ideal, 0), Some(now));
        releases.take(&[(0, 8)], now + 600);
        assert_eq!(releases.expected_at(now, 8, ideal, 0), Some(now + 600));
        let mut releases = Releases::with_ends(&snap, &cluster, cluster.free().to_vec(), |_, _| 0);
        assert_eq!(releases.expected_at(now, 8, ideal, 0), Some(now));
        releases.take(&[(0, 8)], now - 50);
        assert_eq!(releases.expected_at(now, 8, ideal, 0), Some(now - 50));
    }

    /// [`Releases::fits`] as first written: every rack's free nodes listed and sorted.
    fn fits_by_sorting(
        releases: &Releases,
        free: &[u32],
        gpus: u32,
        ideal: Ideal,
        level: usize,
    ) -> bool {
        let mut per_rack: Vec<Vec<u32>> = vec![Vec::new(); releases.racks.max(1)];
        for (i, &f) in free.iter().enumerate() {
            if f > 0 {
                per_rack[releases.rack_of[i]].push(f);
            }
        }
        let top = |mut frees: Vec<u32>, k: usize| -> u64 {
            frees.sort_unstable_by(|a, b| b.cmp(a));
            frees.iter().take(k).map(|&f| u64::from(f)).sum()
        };
        let k = ideal.nodes as usize;
        match (level, ideal.one_rack) {
            (0, true) => per_rack.into_iter().any(|r| top(r, k) >= u64::from(gpus)),
            (0, false) => top(free.to_vec(), k) >= u64::from(gpus),
            _ => per_rack
                .into_iter()
                .any(|r| r.iter().map(|&f| u64::from(f)).sum::<u64>() >= u64::from(gpus)),
        }
    }

    /// [`Releases::walk`] as first written: every release taken in, then every rack read
    /// node by node.
    fn walk_reading_every_rack(
        releases: &Releases,
        now: i64,
        gpus: u32,
        ideal: Ideal,
        level: usize,
    ) -> (Option<i64>, bool) {
        let mut free = releases.free.clone();
        let mut scratch = Vec::new();
        if releases.fits(&free, gpus, ideal, level, &mut scratch) {
            return (Some(now), true);
        }
        for (t, i, g) in releases.in_time_order() {
            free[i] += g;
            if releases.fits(&free, gpus, ideal, level, &mut scratch) {
                return (Some(t), false);
            }
        }
        let last = (releases.events.last().map(|e| e.0))
            .max(releases.planned.last_key_value().map(|(k, _)| k.0));
        let fits_whole = releases.fits(&releases.totals, gpus, ideal, level, &mut scratch);
        (last.filter(|_| fits_whole), false)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]
        /// Whether a placement fits, told without sorting or listing every rack, is what
        /// sorting every rack's free nodes tells: any free GPUs, job size and level.
        #[test]
        fn fits_is_what_sorting_every_rack_tells(
            seed in 0u64..1_000,
            racks in 1u32..6,
            free in proptest::collection::vec(0u32..=8, 24),
            gpus in 0u32..=64,
            level in 0usize..3,
        ) {
            let snap = busy_snapshot(24, 8, racks, 0, seed);
            let cluster = Cluster::new(&snap);
            let sizes = Sizes { node_gpus: 8, rack_gpus: cluster.largest_rack_gpus() };
            let releases = Releases::with_ends(&snap, &cluster, free.clone(), |_, _| 0);
            let ideal = sizes.ideal(gpus);
            let by_sorting = fits_by_sorting(&releases, &free, gpus, ideal, level);
            prop_assert_eq!(releases.fits(&free, gpus, ideal, level, &mut Vec::new()), by_sorting);
            prop_assert_eq!(releases.fits_now(gpus, ideal, level, &mut Vec::new()), by_sorting);
        }

        /// The answers `expected_at` keeps across `take`s are the ones a fresh walk gives:
        /// whatever is taken (until before now, now, or later) and whatever was asked before.
        /// Times are in steps of 100 s, so that releases and takes often end together.
        #[test]
        fn answers_kept_across_takes_are_what_a_fresh_walk_gives(
            seed in 0u64..1_000,
            ends in proptest::collection::vec(1i64..50, 64),
            steps in proptest::collection::vec(
                (any::<bool>(), 1u32..=24, 0usize..3, 0usize..16, 1u32..=8, -5i64..50),
                1..60,
            ),
        ) {
            let now = 1_000;
            let snap = busy_snapshot(16, 8, 4, 0, seed);
            let cluster = Cluster::new(&snap);
            let sizes = Sizes { node_gpus: 8, rack_gpus: cluster.largest_rack_gpus() };
            let free = cluster.free().to_vec();
            let mut releases =
                Releases::with_ends(&snap, &cluster, free, |k, _| now + 100 * ends[k % ends.len()]);
            for (query, gpus, level, node, take, end) in steps {
                if query {
                    let ideal = sizes.ideal(gpus);
                    let kept = releases.expected_at(now, gpus, ideal, level);
                    let walked = releases.walk(now, gpus, ideal, level);
                    prop_assert_eq!(kept, walked.0);
                    prop_assert_eq!(walked, walk_reading_every_rack(&releases, now, gpus, ideal, level));
                } else {
                    // Mostly GPUs that are free, as plans take; now and then more.
                    let free = releases.free[node];
                    let take = if free > 0 && take < 8 { 1 + take % free } else { take };
                    releases.take(&[(node, take)], now + 100 * end);
                }
            }
        }
    }
}
