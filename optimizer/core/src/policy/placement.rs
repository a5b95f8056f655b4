//! The placement engine every placing policy shares: a free-GPU view of the snapshot's nodes
//! (by rack, partition and exclusion), and the planner that finds the most consolidated placement
//! free now, taking its GPUs so that later jobs in the same plan see what is left.
//!
//! Cost per job that may use any node is a few set look-ups, the best rack kept per kind of ask
//! and brought up to date from the racks that changed; a job limited to some nodes costs two
//! passes over the nodes plus a scan of (racks x GPU counts). A 10k-job, 1k-node snapshot is
//! planned in milliseconds (docs/benchmarks.md).

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeSet, HashSet};

use rustc_hash::FxHashMap;

use super::free_index::NodesByFree;
use crate::wire::reason::{Placed, Unplaced};
use crate::wire::snapshot::{PendingJob, Snapshot};

/// Where a job's GPUs are planned: `(node, GPUs used there)`, in pick order, the nodes named as
/// the snapshot names them (a plan tries many placements it then undoes; names are copied
/// only for the jobs pinned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement<'a> {
    pub job_id: u32,
    pub gpus_on: Vec<(&'a str, u32)>,
    pub racks: usize,
    /// The nodes' positions in the snapshot, in the order of `gpus_on`.
    pub(super) positions: Vec<usize>,
}

impl Placement<'_> {
    /// `(node position, GPUs used there)`, in pick order.
    pub(super) fn taken(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        (self.positions.iter().copied()).zip(self.gpus_on.iter().map(|&(_, g)| g))
    }
}

/// A job's placement with the reason for it, or the reason it has none.
pub type PlanOutcome<'a> = Result<(Placement<'a>, Placed), Unplaced>;

/// The free-GPU view the planner works on, indexed by node position.
///
/// Besides each node's free GPUs it keeps, updated on every change, the nodes by free-GPU
/// count (in the cluster and per rack) and how many there are, so placing a job that may use
/// every node costs a few set look-ups instead of a pass over all nodes; a job limited to some
/// partition or excluding nodes is placed by a pass over the nodes it may use.
pub(super) struct Cluster<'a> {
    names: Vec<&'a str>,
    /// Node position by name, made on first use (a round that only places jobs never asks).
    index: OnceCell<FxHashMap<&'a str, usize>>,
    rack_of: Vec<usize>,
    rack_names: Vec<&'a str>,
    partitions: Vec<&'a [String]>,
    /// Partitions every node is in (nodes without partition information are in every one);
    /// `None` when no node has partition information.
    everywhere: Option<HashSet<&'a str>>,
    free: Vec<u32>,
    /// GPUs of each node, busy or not (schedulable or not).
    totals: Vec<u32>,
    total_free: u64,
    max_gpus: usize,
    /// Nodes of each rack, in snapshot order.
    rack_nodes: Vec<Vec<usize>>,
    /// Nodes with `f` free GPUs (f >= 1), in the cluster and per rack, with their counts:
    /// built only once a job is placed from them, as many views are made only to read free
    /// GPUs.
    by_free: Option<NodesByFree>,
    /// Jobs placed by a pass over the nodes so far (before the indexes are built).
    passes: u32,
    /// Every change of a node's free GPUs, `(node, free before)`, so a tentative plan is undone
    /// without copying the whole view.
    journal: Vec<(usize, u32)>,
    /// The rack of every change to the indexes, in order: what [`RackAnswers`] catch up on.
    rack_changes: Vec<usize>,
    /// [`Cluster::best_rack`]'s answers per kind of ask, kept across the jobs of a plan.
    rack_answers: RefCell<FxHashMap<AskKey, RackAnswers>>,
    /// Whether the cluster has racks enough to keep [`RackAnswers`]
    /// ([`KEEP_ANSWERS_FROM_RACKS`]); else [`Cluster::rack_changes`] stays empty.
    keeps_answers: bool,
}

/// Racks from which [`Cluster::best_rack`] keeps its answers: a scan of fewer costs less than
/// keeping them (2.3% more instructions in a 2-rack simulation when kept; docs/benchmarks.md).
const KEEP_ANSWERS_FROM_RACKS: usize = 8;

/// Each rack's answer to one kind of ask (its nodes and GPUs left over, if it holds the job)
/// and the racks that hold it in order, kept up to date from the racks changed since: a plan
/// asks the same few kinds of ask (one GPU, a node of 8, ...) for thousands of jobs, and each
/// placement changes one rack or two, where a scan sizes every rack for every job.
struct RackAnswers {
    per_rack: Vec<Option<(u32, u64)>>,
    /// `(nodes, left over, rack)` of the racks that hold it: the first is the best.
    holding: BTreeSet<(u32, u64, usize)>,
    /// How much of [`Cluster::rack_changes`] is taken in.
    seen: usize,
}

impl RackAnswers {
    fn set(&mut self, rack: usize, answer: Option<(u32, u64)>) {
        let old = std::mem::replace(&mut self.per_rack[rack], answer);
        if old == answer {
            return;
        }
        if let Some((nodes, left)) = old {
            self.holding.remove(&(nodes, left, rack));
        }
        if let Some((nodes, left)) = answer {
            self.holding.insert((nodes, left, rack));
        }
    }
}

/// Placements made by a pass over the nodes before the indexes are built.
const INDEX_AFTER: u32 = 4;

/// A point to undo a tentative plan back to ([`Cluster::save`], [`Cluster::restore`]).
pub(super) struct Saved(usize);

impl<'a> Cluster<'a> {
    pub(super) fn new(snapshot: &'a Snapshot) -> Self {
        // Keyed by `util::non_empty` (no rack and an empty one are one rack): a cluster
        // without racks would compare an empty name for every node.
        let mut rack_ids: FxHashMap<Option<&str>, usize> = FxHashMap::default();
        let mut rack_names = Vec::new();
        let mut rack_nodes: Vec<Vec<usize>> = Vec::new();
        let mut rack_of = Vec::with_capacity(snapshot.nodes.len());
        for (i, node) in snapshot.nodes.iter().enumerate() {
            let rack = node.rack.as_deref().and_then(crate::util::non_empty);
            let id = *rack_ids.entry(rack).or_insert_with(|| {
                rack_names.push(rack.unwrap_or(""));
                rack_nodes.push(Vec::new());
                rack_names.len() - 1
            });
            rack_of.push(id);
            rack_nodes[id].push(i);
        }
        let max_gpus = snapshot
            .nodes
            .iter()
            .map(|n| n.gpus_total as usize)
            .max()
            .unwrap_or(0);
        let mut everywhere: Option<HashSet<&str>> = None;
        for node in snapshot.nodes.iter().filter(|n| !n.partitions.is_empty()) {
            let here: HashSet<&str> = node.partitions.iter().map(String::as_str).collect();
            everywhere = Some(match everywhere {
                None => here,
                Some(all) => all.intersection(&here).copied().collect(),
            });
        }
        let mut cluster = Cluster {
            names: snapshot.nodes.iter().map(|n| n.name.as_str()).collect(),
            index: OnceCell::new(),
            partitions: snapshot
                .nodes
                .iter()
                .map(|n| n.partitions.as_slice())
                .collect(),
            everywhere,
            total_free: 0,
            totals: snapshot.nodes.iter().map(|n| n.gpus_total).collect(),
            max_gpus,
            free: vec![0; snapshot.nodes.len()],
            by_free: None,
            passes: 0,
            journal: Vec::new(),
            rack_changes: Vec::new(),
            rack_answers: RefCell::new(FxHashMap::default()),
            keeps_answers: rack_names.len() >= KEEP_ANSWERS_FROM_RACKS,
            rack_of,
            rack_names,
            rack_nodes,
        };
        for (i, node) in snapshot.nodes.iter().enumerate() {
            cluster.free[i] = node.gpus_free().min(node.gpus_total);
        }
        cluster.total_free = cluster.free.iter().map(|&f| u64::from(f)).sum();
        cluster
    }

    /// Builds the indexes of nodes by free GPUs, if not yet built.
    fn ensure_indexed(&mut self) {
        if self.by_free.is_none() {
            self.by_free = Some(NodesByFree::new(
                &self.free,
                &self.rack_of,
                &self.rack_nodes,
                self.max_gpus + 1,
            ));
        }
    }

    /// Sets node `i`'s free GPUs, keeping the indexes and the journal up to date.
    fn set_free(&mut self, i: usize, free: u32) {
        let old = self.free[i];
        if old == free {
            return;
        }
        self.journal.push((i, old));
        self.reindex(i, old, free);
    }

    fn reindex(&mut self, i: usize, old: u32, free: u32) {
        self.free[i] = free;
        self.total_free = self.total_free + u64::from(free) - u64::from(old);
        // The first build needs no log of changed racks, since every kept answer is made
        // after it.
        let Some(by_free) = &mut self.by_free else {
            return;
        };
        by_free.move_node(i, self.rack_of[i], old, free);
        if self.keeps_answers {
            self.rack_changes.push(self.rack_of[i]);
        }
    }

    /// A point to undo tentative changes back to with [`Cluster::restore`].
    pub(super) fn save(&self) -> Saved {
        Saved(self.journal.len())
    }

    /// Undoes every change since `saved`.
    pub(super) fn restore(&mut self, saved: Saved) {
        while self.journal.len() > saved.0 {
            let Some((i, old)) = self.journal.pop() else {
                break;
            };
            let now = self.free[i];
            self.reindex(i, now, old);
        }
    }

    /// Whether `job` may use every node (no partition some node lacks, no excluded node), so
    /// the cluster-wide indexes can answer for it.
    fn unconstrained(&self, job: &PendingJob) -> bool {
        job.excluded_nodes.is_empty()
            && job.gpus > 0
            && match (job.partition.as_deref(), &self.everywhere) {
                (Some(p), Some(everywhere)) => everywhere.contains(p),
                _ => true,
            }
    }

    /// Whether to place `job` from the indexes (built here when first needed) rather than by a
    /// pass over the nodes: only for an unconstrained job, and only from the [`INDEX_AFTER`]th
    /// placement on, as building them costs about a pass, which is all a round with a few
    /// pending jobs needs.
    fn use_indexes(&mut self, job: &PendingJob) -> bool {
        if self.by_free.is_none() {
            self.passes += 1;
            if self.passes < INDEX_AFTER {
                return false;
            }
        }
        let unconstrained = self.unconstrained(job);
        if unconstrained {
            self.ensure_indexed();
        }
        unconstrained
    }

    /// Frees up to `gpus` on the node named `name` (a job planned to leave it), never beyond
    /// the node's size; returns how many it freed.
    pub(super) fn release(&mut self, name: &str, gpus: u32) -> u32 {
        let Some(i) = self.node_index(name) else {
            return 0;
        };
        let freed = gpus.min(self.totals[i].saturating_sub(self.free[i]));
        self.set_free(i, self.free[i] + freed);
        freed
    }

    /// Takes `job`'s GPUs where Slurm itself would put a job that one node holds (cons_tres best
    /// fit: the node with the fewest free GPUs that still has enough, the first such in node
    /// order), so a plan leaves for later jobs what Slurm will leave. The node it took, if
    /// it fit.
    pub(super) fn take_best_fit_node(&mut self, job: &PendingJob) -> Option<usize> {
        if u64::from(job.gpus) > self.total_free {
            return None;
        }
        let indexed = self.use_indexes(job);
        let best = match self.by_free.as_mut().filter(|_| indexed) {
            Some(by_free) => by_free.best_fit(job.gpus as usize),
            None => (0..self.free.len())
                .filter(|&i| self.free[i] >= job.gpus && self.eligible(job, i))
                .min_by_key(|&i| (self.free[i], i)),
        };
        if let Some(i) = best {
            self.set_free(i, self.free[i] - job.gpus);
        }
        best
    }

    /// GPUs on nodes Slurm may schedule to, busy or not: what jobs can ever share.
    pub(super) fn schedulable_gpus(&self, snapshot: &Snapshot) -> u64 {
        snapshot
            .nodes
            .iter()
            .filter(|n| {
                n.state.schedulable() || n.state == crate::wire::snapshot::NodeState::Allocated
            })
            .map(|n| u64::from(n.gpus_total))
            .sum()
    }

    /// The most GPUs any node has.
    pub(super) fn node_size(&self) -> u32 {
        self.max_gpus as u32
    }

    /// Name of the node at position `i`.
    pub(super) fn name(&self, i: usize) -> &'a str {
        self.names[i]
    }

    /// Position of the named node.
    pub(super) fn node_index(&self, name: &str) -> Option<usize> {
        self.index
            .get_or_init(|| {
                self.names
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (n, i))
                    .collect()
            })
            .get(name)
            .copied()
    }

    /// Rack id of each node (by position), and how many racks there are.
    pub(super) fn racks(&self) -> (&[usize], usize) {
        (&self.rack_of, self.rack_names.len())
    }

    /// GPUs per node (by position), busy or not.
    pub(super) fn totals(&self) -> &[u32] {
        &self.totals
    }

    /// Free GPUs per node (by position).
    pub(super) fn free(&self) -> &[u32] {
        &self.free
    }

    /// GPUs of the largest rack (all its nodes, busy or not): what one rack can ever hold.
    pub(super) fn largest_rack_gpus(&self) -> u64 {
        self.rack_nodes
            .iter()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|&i| u64::from(self.totals[i]))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether `job` may use node `i` at all (partition and exclusions), ignoring free GPUs.
    fn eligible(&self, job: &PendingJob, i: usize) -> bool {
        let in_partition = match &job.partition {
            // Nodes without partition information are taken to be in every partition.
            Some(p) => self.partitions[i].is_empty() || self.partitions[i].iter().any(|q| q == p),
            None => true,
        };
        in_partition && !job.excluded_nodes.iter().any(|n| n == self.names[i])
    }
}

/// How many nodes to take from each free-GPU bucket, and what that leaves unused.
struct Take {
    per_bucket: Vec<u32>,
    nodes: u32,
    leftover: u64,
}

/// Largest-first: the fewest nodes whose free GPUs cover `gpus`, at least `min_nodes` of them.
fn take_fewest(counts: &[u32], gpus: u32, min_nodes: u32) -> Option<Take> {
    let mut per_bucket = vec![0u32; counts.len()];
    let (nodes, leftover) = fewest(counts, gpus, min_nodes, |f, t| per_bucket[f] = t)?;
    Some(Take {
        per_bucket,
        nodes,
        leftover,
    })
}

/// The size of [`take_fewest`]'s answer, `(nodes, GPUs left over)`, telling `took` how many
/// nodes it takes from each bucket; nothing allocated, so racks are compared cheaply.
fn fewest(
    counts: &[u32],
    gpus: u32,
    min_nodes: u32,
    mut took: impl FnMut(usize, u32),
) -> Option<(u32, u64)> {
    let (mut remaining, mut nodes, mut taken_free) = (u64::from(gpus), 0u32, 0u64);
    for f in (1..counts.len()).rev() {
        if remaining == 0 && nodes >= min_nodes {
            break;
        }
        let by_gpus = remaining.div_ceil(f as u64);
        let by_count = u64::from(min_nodes.saturating_sub(nodes));
        let t = by_gpus.max(by_count).min(u64::from(counts[f])) as u32;
        took(f, t);
        nodes += t;
        taken_free += u64::from(t) * f as u64;
        remaining = remaining.saturating_sub(u64::from(t) * f as u64);
    }
    (remaining == 0 && nodes >= min_nodes).then(|| (nodes, taken_free - u64::from(gpus)))
}

/// Best fit: `nodes` nodes with at least `per_node` free each, tightest first.
fn take_best_fit(counts: &[u32], per_node: u32, nodes: u32) -> Option<Take> {
    let mut per_bucket = vec![0u32; counts.len()];
    let (mut need, mut leftover) = (nodes, 0u64);
    for (f, &count) in counts.iter().enumerate().skip(per_node as usize) {
        if need == 0 {
            break;
        }
        let t = need.min(count);
        per_bucket[f] = t;
        need -= t;
        leftover += u64::from(t) * (f as u64 - u64::from(per_node));
    }
    (need == 0).then_some(Take {
        per_bucket,
        nodes,
        leftover,
    })
}

/// An [`Ask`] as a key: asks that are equal have the same answers.
type AskKey = (u32, Option<u32>, u32, u32);

/// What a job asks of the nodes, as the placement counts it.
struct Ask {
    gpus: u32,
    per_node: Option<u32>,
    nodes_needed: u32,
    max_nodes: u32,
}

impl Ask {
    fn of(job: &PendingJob) -> Ask {
        let per_node = job.gpus_per_node;
        Ask {
            gpus: job.gpus,
            per_node,
            nodes_needed: match per_node {
                Some(p) => job.min_nodes.max(job.gpus.div_ceil(p)),
                None => job.min_nodes,
            },
            max_nodes: job.max_nodes.unwrap_or(u32::MAX),
        }
    }

    fn key(&self) -> AskKey {
        (self.gpus, self.per_node, self.nodes_needed, self.max_nodes)
    }

    /// The nodes to take from a free-GPU histogram, if it holds the job.
    fn plan_in(&self, counts: &[u32]) -> Option<Take> {
        match self.per_node {
            Some(p) => take_best_fit(counts, p, self.nodes_needed),
            None => take_fewest(counts, self.gpus, self.nodes_needed),
        }
        .filter(|take| take.nodes <= self.max_nodes)
    }

    /// How many nodes a histogram's plan takes and how many GPUs it leaves over, without
    /// building the plan.
    fn size_in(&self, counts: &[u32]) -> Option<(u32, u64)> {
        match self.per_node {
            Some(_) => self.plan_in(counts).map(|t| (t.nodes, t.leftover)),
            None => fewest(counts, self.gpus, self.nodes_needed, |_, _| ())
                .filter(|&(nodes, _)| nodes <= self.max_nodes),
        }
    }
}

impl<'a> Cluster<'a> {
    /// The most consolidated placement free now for `job`: the fewest nodes, inside one rack when
    /// one can hold it (else across racks if `cross_rack`), then the tightest fit; its GPUs are
    /// taken from this view. Or why there is none.
    pub(super) fn place(
        &mut self,
        job: &PendingJob,
        now: i64,
        cross_rack: bool,
    ) -> PlanOutcome<'a> {
        // A job that cannot start yet would hold GPUs in the plan it cannot use before then.
        if let Some(why) = super::left_as_submitted(job, now) {
            return Err(Unplaced::Submitted(why));
        }
        if u64::from(job.gpus) > self.total_free {
            return Err(Unplaced::NoRoom {
                gpus: job.gpus,
                free: self.total_free,
            });
        }
        let ask = Ask::of(job);
        if ask.per_node.is_some_and(|p| p as usize > self.max_gpus) {
            return Err(Unplaced::PerNodeTooLarge {
                per_node: ask.per_node.unwrap_or(0),
            });
        }
        // The kept indexes of nodes by free GPUs, when the job is placed from them.
        let index = if self.use_indexes(job) {
            self.by_free.as_ref()
        } else {
            None
        };
        let (counts, all) = self.histograms(job, index);
        // No rack can hold what the whole cluster cannot.
        let Some(across) = ask.plan_in(&all) else {
            return Err(why_not(job, &all, ask.nodes_needed, ask.max_nodes));
        };
        let (take, rack_order, single_rack) = match self.best_rack(&ask, &counts, &across, index) {
            Some((r, take)) => (take, vec![r], true),
            None if !cross_rack => {
                return Err(Unplaced::CrossRackOff { gpus: job.gpus });
            }
            None => {
                // Racks with the most usable free GPUs first, so the job spans as few as possible.
                let buckets = self.max_gpus + 1;
                let mut order: Vec<usize> = (0..self.rack_names.len()).collect();
                let free_in = |r: usize| -> u64 {
                    (1..buckets)
                        .map(|f| u64::from(counts[r * buckets + f]) * f as u64)
                        .sum()
                };
                order.sort_by_key(|&r| (std::cmp::Reverse(free_in(r)), r));
                (across, order, false)
            }
        };
        let (picked, racks_used) = self.pick(job, take, &rack_order, index);
        let (gpus_on, positions) = self.take_gpus(picked, &ask);
        let count = gpus_on.len();
        let reason = if single_rack {
            let rack = self.rack_names[rack_order[0]];
            Placed::Consolidated {
                gpus: job.gpus,
                nodes: count as u32,
                rack: (!rack.is_empty()).then(|| rack.to_string()),
            }
        } else {
            Placed::AcrossRacks {
                gpus: job.gpus,
                nodes: count as u32,
                racks: racks_used,
            }
        };
        Ok((
            Placement {
                job_id: job.job_id,
                gpus_on,
                racks: racks_used,
                positions,
            },
            reason,
        ))
    }

    /// Free-GPU histograms per rack (rack-major) and in the cluster, over the nodes this job may
    /// use: the kept `index` when it may use any node, else counted.
    fn histograms<'v>(
        &'v self,
        job: &PendingJob,
        index: Option<&'v NodesByFree>,
    ) -> (Cow<'v, [u32]>, Cow<'v, [u32]>) {
        if let Some(by_free) = index {
            return (
                Cow::Borrowed(by_free.rack_counts()),
                Cow::Borrowed(by_free.counts()),
            );
        }
        let buckets = self.max_gpus + 1;
        let mut counts = vec![0u32; self.rack_names.len() * buckets];
        let mut all = vec![0u32; buckets];
        for i in 0..self.free.len() {
            let f = self.free[i] as usize;
            if f > 0 && self.eligible(job, i) {
                counts[self.rack_of[i] * buckets + f] += 1;
                all[f] += 1;
            }
        }
        (Cow::Owned(counts), Cow::Owned(all))
    }

    /// The best single rack for the job and its plan there: fewest nodes, then least left
    /// over, then rack order. From the kept [`RackAnswers`] when the job may use any node
    /// (`index`: `counts` are its per-rack counts) in a cluster of many racks; else sized
    /// without building each rack's plan (a scan of every rack).
    fn best_rack(
        &self,
        ask: &Ask,
        counts: &[u32],
        across: &Take,
        index: Option<&NodesByFree>,
    ) -> Option<(usize, Take)> {
        let buckets = self.max_gpus + 1;
        let racks = self.rack_names.len();
        let rack_counts = |r: usize| &counts[r * buckets..(r + 1) * buckets];
        let best = if index.is_some() && self.keeps_answers {
            self.kept_best_rack(ask, counts)
        } else {
            // No rack needs fewer nodes than the whole cluster, nor leaves less than nothing
            // over: the first rack that does that well is the best, and the scan stops there.
            let bound = (across.nodes, 0);
            let mut best: Option<(u32, u64, usize)> = None;
            for r in 0..racks {
                // A rack with fewer free GPUs than the job asks for cannot hold it.
                if index.is_some_and(|by_free| by_free.rack_free(r) < u64::from(ask.gpus)) {
                    continue;
                }
                let Some((nodes, left)) = ask.size_in(rack_counts(r)) else {
                    continue;
                };
                if best.is_none_or(|b| (nodes, left, r) < b) {
                    best = Some((nodes, left, r));
                }
                if (nodes, left) <= bound {
                    break;
                }
            }
            best
        };
        debug_assert_eq!(
            best,
            (0..racks)
                .filter_map(|r| ask
                    .size_in(rack_counts(r))
                    .map(|(nodes, left)| (nodes, left, r)))
                .min(),
            "not the best rack"
        );
        best.and_then(|(_, _, r)| ask.plan_in(rack_counts(r)).map(|t| (r, t)))
    }

    /// The best `(nodes, left over, rack)` for `ask` from its kept answers, sized for every rack
    /// the first time and since then only for the racks changed (`counts`: the kept per-rack
    /// counts).
    fn kept_best_rack(&self, ask: &Ask, counts: &[u32]) -> Option<(u32, u64, usize)> {
        let buckets = self.max_gpus + 1;
        let size = |r: usize| ask.size_in(&counts[r * buckets..(r + 1) * buckets]);
        let mut kept = self.rack_answers.borrow_mut();
        let answers = kept.entry(ask.key()).or_insert_with(|| {
            let mut answers = RackAnswers {
                per_rack: vec![None; self.rack_names.len()],
                holding: BTreeSet::new(),
                seen: self.rack_changes.len(),
            };
            for r in 0..self.rack_names.len() {
                answers.set(r, size(r));
            }
            answers
        });
        for &r in &self.rack_changes[answers.seen..] {
            answers.set(r, size(r));
        }
        answers.seen = self.rack_changes.len();
        answers.holding.first().copied()
    }

    /// The nodes to take: the planned number from each bucket, in rack order then node order
    /// (from `index` when the job may use any node), largest first as planned, with their free
    /// GPUs; and how many racks they span.
    fn pick(
        &self,
        job: &PendingJob,
        take: Take,
        rack_order: &[usize],
        index: Option<&NodesByFree>,
    ) -> (Vec<(usize, u32)>, usize) {
        let mut wanted = take.per_bucket;
        let mut left_to_pick = take.nodes;
        let mut racks_used = 0;
        let mut picked: Vec<(usize, u32)> = Vec::with_capacity(take.nodes as usize);
        for &r in rack_order {
            if left_to_pick == 0 {
                break;
            }
            let before = picked.len();
            match index {
                Some(by_free) => {
                    for (f, want) in wanted.iter_mut().enumerate().skip(1) {
                        for i in by_free
                            .in_rack(r, f, &self.rack_nodes[r])
                            .take(*want as usize)
                        {
                            picked.push((i, f as u32));
                            *want -= 1;
                        }
                    }
                }
                None => {
                    for &i in &self.rack_nodes[r] {
                        let f = self.free[i] as usize;
                        if f > 0 && wanted[f] > 0 && self.eligible(job, i) {
                            wanted[f] -= 1;
                            picked.push((i, f as u32));
                        }
                    }
                }
            }
            left_to_pick -= (picked.len() - before) as u32;
            racks_used += usize::from(picked.len() > before);
        }
        // Largest nodes first, as planned, so the GPU split matches the plan.
        picked.sort_by_key(|&(i, f)| (std::cmp::Reverse(f), i));
        (picked, racks_used)
    }

    /// Takes the job's GPUs from the `picked` nodes in this view: the GPUs on each node, and
    /// the nodes' positions.
    fn take_gpus(
        &mut self,
        picked: Vec<(usize, u32)>,
        ask: &Ask,
    ) -> (Vec<(&'a str, u32)>, Vec<usize>) {
        let mut remaining = ask.gpus;
        let mut gpus_on = Vec::with_capacity(picked.len());
        let mut positions = Vec::with_capacity(picked.len());
        for (i, f) in picked {
            let used = match ask.per_node {
                Some(p) => p,
                None => f.min(remaining),
            };
            remaining = remaining.saturating_sub(used);
            self.set_free(i, self.free[i] - used);
            gpus_on.push((self.names[i], used));
            positions.push(i);
        }
        (gpus_on, positions)
    }
}

fn why_not(job: &PendingJob, all: &[u32], nodes_needed: u32, max_nodes: u32) -> Unplaced {
    match job.gpus_per_node {
        Some(p) => Unplaced::PerNodeShort {
            nodes: nodes_needed,
            per_node: p,
            fitting: all.iter().skip(p as usize).sum(),
        },
        None => {
            let usable: u64 = all
                .iter()
                .enumerate()
                .map(|(f, &c)| f as u64 * u64::from(c))
                .sum();
            if usable >= u64::from(job.gpus) {
                Unplaced::TooSpread {
                    gpus: job.gpus,
                    max_nodes,
                }
            } else {
                Unplaced::TooFewUsable {
                    gpus: job.gpus,
                    usable,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{node, pending, snapshot};

    /// The free-GPU histogram and node sets recomputed from scratch.
    fn recount(c: &Cluster) -> (Vec<u32>, Vec<u32>) {
        let buckets = c.max_gpus + 1;
        let mut all = vec![0; buckets];
        let mut racks = vec![0; c.rack_names.len() * buckets];
        for (i, &f) in c.free.iter().enumerate() {
            if f > 0 {
                all[f as usize] += 1;
                racks[c.rack_of[i] * buckets + f as usize] += 1;
            }
        }
        (all, racks)
    }

    #[test]
    fn nodes_without_a_rack_and_with_an_empty_one_share_one_rack_apart_from_named_ones() {
        let mut nodes = vec![
            node("a", 8, 0, ""),
            node("b", 8, 0, "r1"),
            node("c", 8, 0, ""),
            node("d", 8, 0, "r1"),
        ];
        nodes[2].rack = Some(String::new());
        let snap = snapshot(nodes, vec![]);
        let cluster = Cluster::new(&snap);
        assert_eq!(cluster.racks(), (&[0, 1, 0, 1][..], 2));
        assert_eq!(cluster.rack_names, ["", "r1"]);
    }

    proptest! {
        /// A job that may use every node is placed from the indexes; the same job limited by an
        /// exclusion of a node that does not exist is placed by a pass over the nodes. Both
        /// must give the same placements, the same reasons and the same free GPUs after every
        /// step, tentative plans undone included.
        #[test]
        fn the_indexes_place_as_a_pass_over_the_nodes_does(
            // Up to 12 racks: clusters of few racks and of enough to keep the best racks.
            nodes in proptest::collection::vec((0u32..=8, 0usize..12), 1..40),
            jobs in proptest::collection::vec(
                (0u32..=20, proptest::option::of(1u32..=8), 1u32..=3, proptest::option::of(0u32..=3),
                 0u8..6),
                1..40,
            ),
        ) {
            let nodes = nodes
                .iter()
                .enumerate()
                .map(|(i, &(free, rack))| {
                    let mut n = node(&format!("n{i}"), 8, 8 - free, &format!("r{rack}"));
                    n.partitions = vec!["gpu".into()];
                    n
                })
                .collect();
            let snap = snapshot(nodes, vec![]);
            let mut fast = Cluster::new(&snap);
            // Indexed from the first job on, so the indexes are what is compared.
            fast.passes = INDEX_AFTER;
            let mut slow = Cluster::new(&snap);
            for (id, &(gpus, per_node, min_nodes, extra, action)) in jobs.iter().enumerate() {
                let mut job = pending(id as u32 + 1, gpus);
                job.partition = Some("gpu".into());
                job.gpus_per_node = per_node;
                job.min_nodes = min_nodes;
                job.max_nodes = extra.map(|e| min_nodes + e);
                let mut limited = job.clone();
                limited.excluded_nodes = vec!["elsewhere".into()];
                prop_assert!(job.gpus == 0 || fast.unconstrained(&job));
                prop_assert!(!slow.unconstrained(&limited));
                match action {
                    0 | 1 => prop_assert_eq!(
                        fast.take_best_fit_node(&job),
                        slow.take_best_fit_node(&limited)
                    ),
                    2 => {
                        let (a, b) = (fast.save(), slow.save());
                        prop_assert_eq!(fast.place(&job, 0, true), slow.place(&limited, 0, true));
                        fast.restore(a);
                        slow.restore(b);
                    }
                    3 => {
                        let name = format!("n{}", id % snap.nodes.len());
                        prop_assert_eq!(fast.release(&name, 3), slow.release(&name, 3));
                    }
                    _ => prop_assert_eq!(
                        fast.place(&job, 0, action == 4),
                        slow.place(&limited, 0, action == 4)
                    ),
                }
                prop_assert_eq!(&fast.free, &slow.free);
                fast.ensure_indexed();
                prop_assert_eq!(fast.total_free, fast.free.iter().map(|&f| u64::from(f)).sum::<u64>());
                let (all, racks) = recount(&fast);
                let by_free = fast.by_free.as_ref().expect("built above");
                prop_assert_eq!(by_free.counts(), &all[..]);
                prop_assert_eq!(by_free.rack_counts(), &racks[..]);
                let mut rack_free = vec![0u64; fast.rack_names.len()];
                for (i, &f) in fast.free.iter().enumerate() {
                    rack_free[fast.rack_of[i]] += u64::from(f);
                }
                for (r, &gpus) in rack_free.iter().enumerate() {
                    prop_assert_eq!(by_free.rack_free(r), gpus);
                }
                let bits: Vec<u32> = (0..all.len()).map(|f| if f == 0 { 0 } else { by_free.len(f) }).collect();
                prop_assert_eq!(bits, all);
            }
        }
    }
}
