//! The delta exchange (`POST /v1/schedule/delta`, docs/api.md): the plugin tells the optimizer
//! only what changed since a snapshot the optimizer kept, and the optimizer answers only the
//! decisions that changed since its answer to that snapshot. With 10,000 jobs queued most rounds
//! change a few of them, while encoding, sending and decoding all of them was a third of what a
//! round cost slurmctld (docs/benchmarks.md).
//!
//! Both ends rebuild the very snapshot and answer the whole exchange would carry, so policies,
//! the apply path and the simulator see no difference: [`Sender`] is the plugin's end,
//! [`Receiver`] the service's. Each exchange the optimizer answers gets an id; the next delta
//! names it as its `base`. A base the optimizer no longer keeps (it restarted, or other plugins'
//! exchanges pushed it out) is answered 409, and the plugin sends the whole snapshot as a delta
//! with no base.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use serde::{Deserialize, Serialize};

use crate::wire::snapshot::{with_header, Header, Node, PendingJob, RunningJob, Snapshot};
use crate::{Decision, Decisions, Mode};

/// The delta endpoint's path.
pub const DELTA_PATH: &str = "/v1/schedule/delta";

/// Every this many exchanges the plugin sends the whole snapshot again, so that nothing a
/// delta could miss (a fingerprint collision) outlives a bounded number of rounds.
pub const WHOLE_EVERY: u32 = 100;

/// How many exchanges the optimizer keeps to build deltas on (shared by every plugin that talks
/// to it; one per cluster is the usual case, and a primary and a backup controller take turns).
pub const KEPT_EXCHANGES: usize = 4;

with_header! {
    /// A snapshot as what changed since the snapshot of exchange `base`; its header fields are
    /// the snapshot's, sent every time.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct SnapshotDelta {
        /// The exchange this delta builds on (`exchange` of the optimizer's answer); absent:
        /// none, every job is in `changed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub base: Option<u64>,
        /// Every node, when any changed; absent: the base's nodes (none without a base).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub nodes: Option<Vec<Node>>,
        #[serde(default)]
        pub running: RunningDelta,
        #[serde(default)]
        pub pending: PendingDelta,
    }
}

/// The running jobs: all their ids in the snapshot's order, and the jobs new or changed since
/// the base.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunningDelta {
    #[serde(default)]
    pub order: Vec<u32>,
    #[serde(default)]
    pub changed: Vec<RunningJob>,
}

/// The pending jobs: all their ids in the snapshot's order, and the jobs new or changed since
/// the base.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PendingDelta {
    #[serde(default)]
    pub order: Vec<u32>,
    #[serde(default)]
    pub changed: Vec<PendingJob>,
}

/// An answer as the decisions that changed since the answer of exchange `base`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecisionsDelta {
    pub schema_version: u32,
    /// This exchange's id: the next delta's `base`.
    pub exchange: u64,
    /// The exchange this answer builds on: the request's `base`, or absent (every decision is
    /// in `changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    pub policy: String,
    pub mode: Mode,
    pub time: i64,
    /// The job ids of every decision, in the answer's order (one decision per job: a policy's
    /// second decision for a job is dropped, as the apply path would refuse it).
    pub order: Vec<u32>,
    /// The decisions new or changed since the base's answer.
    #[serde(default)]
    pub changed: Vec<Decision>,
    /// As in [`Decisions`]: sent with every answer (it is small), so that it needs no base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stated_targets: Option<crate::wire::decision::StatedTargets>,
    /// As in [`Decisions`]: what is new since the last answer, so it needs no base either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<crate::wire::decision::ObservedUse>,
}

/// A delta that cannot be built on, with the first reason found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The optimizer does not keep that exchange (answered 409: send the whole snapshot).
    #[error("unknown base exchange {0} (the optimizer restarted or no longer keeps it); send the whole snapshot")]
    UnknownBase(u64),
    #[error("{list} job {job_id} appears twice in order")]
    DuplicateInOrder { list: &'static str, job_id: u32 },
    #[error("{list} job {job_id} appears twice in changed")]
    DuplicateChanged { list: &'static str, job_id: u32 },
    #[error("{list} job {job_id} is in changed but not in order")]
    ChangedNotInOrder { list: &'static str, job_id: u32 },
    #[error("{list} job {job_id} is in order but neither in changed nor in the base")]
    Missing { list: &'static str, job_id: u32 },
    #[error("the answer builds on exchange {got:?}, the request on {sent:?}")]
    WrongBase { sent: Option<u64>, got: Option<u64> },
}

/// A job as one of the lists holds it.
trait Keyed: Clone {
    fn key(&self) -> u32;
}

impl Keyed for PendingJob {
    fn key(&self) -> u32 {
        self.job_id
    }
}

impl Keyed for RunningJob {
    fn key(&self) -> u32 {
        self.job_id
    }
}

impl Keyed for Decision {
    fn key(&self) -> u32 {
        self.job_id
    }
}

/// The list `order` tells, from `changed` and the base's entries (`kept`: a job's, if the base
/// has it).
fn rebuild<T: Keyed>(
    list: &'static str,
    order: &[u32],
    changed: Vec<T>,
    mut kept: impl FnMut(u32) -> Option<T>,
) -> Result<Vec<T>, DeltaError> {
    let mut fresh = by_job(list, changed)?;
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    seen.reserve(order.len());
    let mut out = Vec::with_capacity(order.len());
    for &job_id in order {
        if !seen.insert(job_id) {
            return Err(DeltaError::DuplicateInOrder { list, job_id });
        }
        let entry = match fresh.remove(&job_id) {
            Some(entry) => entry,
            None => kept(job_id).ok_or(DeltaError::Missing { list, job_id })?,
        };
        out.push(entry);
    }
    all_placed(list, fresh)?;
    Ok(out)
}

/// The changed entries by job, each job once.
fn by_job<T: Keyed>(list: &'static str, changed: Vec<T>) -> Result<FxHashMap<u32, T>, DeltaError> {
    let mut fresh: FxHashMap<u32, T> = FxHashMap::default();
    for entry in changed {
        let job_id = entry.key();
        if fresh.insert(job_id, entry).is_some() {
            return Err(DeltaError::DuplicateChanged { list, job_id });
        }
    }
    Ok(fresh)
}

/// Refuses changed entries left over once the order was placed: they are for jobs not in it.
fn all_placed<T>(list: &'static str, left: FxHashMap<u32, T>) -> Result<(), DeltaError> {
    match left.into_keys().min() {
        Some(job_id) => Err(DeltaError::ChangedNotInOrder { list, job_id }),
        None => Ok(()),
    }
}

fn by_id<T: Keyed>(entries: &[T]) -> FxHashMap<u32, T> {
    entries.iter().map(|e| (e.key(), e.clone())).collect()
}

/// A value's fingerprint: what the plugin remembers of each job it sent, to tell which changed
/// without keeping a copy. FxHash, for speed (10,000 jobs a round inside slurmctld): each of its
/// steps is a bijection of its state, so a job whose one number changed always gets another
/// fingerprint; other changes (a string, several fields) collide about as rarely as 64 random
/// bits do. A collision would show the optimizer a job's previous fields until it changes again
/// or the next whole snapshot ([`WHOLE_EVERY`]).
fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = FxHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

/// What the plugin remembers of an exchange: fingerprints of what it sent.
#[derive(Debug, Default)]
struct Sent {
    nodes: u64,
    running: Prints,
    pending: Prints,
}

/// A list's job ids in the order sent, and each job's fingerprint at the same position: most
/// rounds list the same jobs in the same order, compared position by position without a map.
#[derive(Debug, Default)]
struct Prints {
    order: Vec<u32>,
    prints: Vec<u64>,
}

/// The last exchange the optimizer answered.
#[derive(Debug)]
struct Last {
    exchange: u64,
    /// Exchanges since the last whole snapshot, this one included.
    deltas: u32,
    sent: Sent,
    /// Its decisions in the answer's order, once the round gave them back
    /// ([`Sender::give_back`]): while the round holds them, the next delta cannot build on
    /// this exchange.
    decisions: Option<Vec<Decision>>,
}

/// The plugin's end: turns each round's snapshot into a delta on the last exchange the optimizer
/// answered, and its answer back into the whole answer. The whole answer is lent to the round
/// and given back, so that no decision is copied.
#[derive(Debug, Default)]
pub struct Sender {
    last: Option<Last>,
}

/// A delta on its way, with what the sender keeps once it is answered.
#[derive(Debug)]
pub struct Outgoing {
    pub delta: SnapshotDelta,
    sent: Sent,
}

impl Sender {
    /// The last exchange, if a delta can build on it.
    fn base(&self) -> Option<&Last> {
        self.last
            .as_ref()
            .filter(|l| l.decisions.is_some() && l.deltas < WHOLE_EVERY)
    }

    /// The delta that tells `snapshot` on the last exchange answered (the whole snapshot when
    /// none was, its answer was not given back, or after [`Sender::forget`]).
    pub fn delta(&self, snapshot: &Snapshot) -> Outgoing {
        let base = self.base();
        let nodes = fingerprint(&snapshot.nodes);
        let (running_changed, running_prints) =
            changed(&snapshot.running, base.map(|b| &b.sent.running));
        let (pending_changed, pending_prints) =
            changed(&snapshot.pending, base.map(|b| &b.sent.pending));
        let running = RunningDelta {
            order: running_prints.order.clone(),
            changed: running_changed,
        };
        let pending = PendingDelta {
            order: pending_prints.order.clone(),
            changed: pending_changed,
        };
        let sent = Sent {
            nodes,
            running: running_prints,
            pending: pending_prints,
        };
        let mut delta = SnapshotDelta {
            base: base.map(|b| b.exchange),
            nodes: (base.map(|b| b.sent.nodes) != Some(nodes)).then(|| snapshot.nodes.clone()),
            running,
            pending,
            ..SnapshotDelta::default()
        };
        delta.set_header(snapshot.header());
        Outgoing { delta, sent }
    }

    /// The whole answer the optimizer's delta answer to `outgoing` tells, lent to the caller
    /// until [`Sender::give_back`]; the exchange becomes the next delta's base then. An answer
    /// that does not fit is an error, and the next delta is the whole snapshot.
    pub fn receive(
        &mut self,
        outgoing: Outgoing,
        answer: DecisionsDelta,
    ) -> Result<Decisions, DeltaError> {
        let last = self.last.take();
        // A whole answer fits any request (the optimizer may have let the base go meanwhile).
        if answer.base.is_some() && answer.base != outgoing.delta.base {
            return Err(DeltaError::WrongBase {
                sent: outgoing.delta.base,
                got: answer.base,
            });
        }
        let deltas_before = last.as_ref().map_or(0, |l| l.deltas);
        // The base's decisions are moved, not copied, into the answer.
        let kept = last
            .filter(|_| answer.base.is_some())
            .and_then(|l| l.decisions)
            .unwrap_or_default();
        let decisions = if same_order(&kept, &answer.order) {
            replace_changed(kept, answer.changed)?
        } else {
            let mut kept: FxHashMap<u32, Decision> =
                kept.into_iter().map(|d| (d.job_id, d)).collect();
            rebuild("decided", &answer.order, answer.changed, |id| {
                kept.remove(&id)
            })?
        };
        self.last = Some(Last {
            exchange: answer.exchange,
            deltas: match outgoing.delta.base {
                Some(_) => deltas_before + 1,
                None => 1,
            },
            sent: outgoing.sent,
            decisions: None,
        });
        Ok(Decisions {
            schema_version: answer.schema_version,
            policy: answer.policy,
            mode: answer.mode,
            time: answer.time,
            stated_targets: answer.stated_targets,
            observed: answer.observed,
            decisions,
        })
    }

    /// Takes back the answer [`Sender::receive`] lent, unchanged: the next delta builds on it.
    pub fn give_back(&mut self, answer: Decisions) {
        if let Some(last) = self.last.as_mut().filter(|l| l.decisions.is_none()) {
            last.decisions = Some(answer.decisions);
        }
    }

    /// Forgets the last exchange: the next delta is the whole snapshot.
    pub fn forget(&mut self) {
        self.last = None;
    }

    /// The exchange the next delta builds on.
    pub fn next_base(&self) -> Option<u64> {
        self.base().map(|b| b.exchange)
    }
}

/// The entries of `list` new or changed since `base` (all without one), and every entry's
/// fingerprint to remember.
fn changed<T: Keyed + Hash>(list: &[T], base: Option<&Prints>) -> (Vec<T>, Prints) {
    let sent = Prints {
        order: list.iter().map(Keyed::key).collect(),
        prints: list.iter().map(fingerprint).collect(),
    };
    let out = match base {
        None => list.to_vec(),
        Some(base) if base.order == sent.order => list
            .iter()
            .zip(sent.prints.iter().zip(&base.prints))
            .filter(|(_, (now, then))| now != then)
            .map(|(entry, _)| entry.clone())
            .collect(),
        Some(base) => {
            let then: FxHashMap<u32, u64> = base
                .order
                .iter()
                .copied()
                .zip(base.prints.iter().copied())
                .collect();
            list.iter()
                .zip(&sent.prints)
                .filter(|(entry, now)| then.get(&entry.key()) != Some(now))
                .map(|(entry, _)| entry.clone())
                .collect()
        }
    };
    (out, sent)
}

/// Whether `order` lists the jobs of `kept` in the same order.
fn same_order(kept: &[Decision], order: &[u32]) -> bool {
    kept.len() == order.len() && kept.iter().zip(order).all(|(d, &id)| d.job_id == id)
}

/// The base's decisions, in the same order as the answer's, with the changed ones put in place.
/// (The base's order passed [`rebuild`]'s checks when it came: only `changed` needs checking.)
fn replace_changed(
    mut kept: Vec<Decision>,
    changed: Vec<Decision>,
) -> Result<Vec<Decision>, DeltaError> {
    const LIST: &str = "decided";
    if changed.is_empty() {
        return Ok(kept);
    }
    let mut fresh = by_job(LIST, changed)?;
    for slot in &mut kept {
        if let Some(d) = fresh.remove(&slot.job_id) {
            *slot = d;
            if fresh.is_empty() {
                break;
            }
        }
    }
    all_placed(LIST, fresh)?;
    Ok(kept)
}

/// One exchange the optimizer keeps.
#[derive(Debug)]
struct Kept {
    exchange: u64,
    nodes: Vec<Node>,
    running: FxHashMap<u32, RunningJob>,
    pending: FxHashMap<u32, PendingJob>,
    decisions: FxHashMap<u32, Decision>,
}

/// The optimizer's end: the last few exchanges, to rebuild deltas on and answer in deltas.
#[derive(Debug)]
pub struct Receiver {
    kept: VecDeque<Kept>,
    next_id: u64,
}

impl Receiver {
    /// Exchange ids start at `first_id`: a restarted optimizer should start elsewhere, so that
    /// a plugin's old base is unknown to it rather than mistaken for a new exchange.
    pub fn new(first_id: u64) -> Receiver {
        Receiver {
            kept: VecDeque::new(),
            next_id: first_id,
        }
    }

    /// The whole snapshot `delta` tells (not validated: the caller validates it as any
    /// snapshot).
    pub fn snapshot(&self, delta: SnapshotDelta) -> Result<Snapshot, DeltaError> {
        let header = delta.header();
        let base = match delta.base {
            Some(id) => Some(
                self.kept
                    .iter()
                    .find(|k| k.exchange == id)
                    .ok_or(DeltaError::UnknownBase(id))?,
            ),
            None => None,
        };
        let running = rebuild(
            "running",
            &delta.running.order,
            delta.running.changed,
            |id| base?.running.get(&id).cloned(),
        )?;
        let pending = rebuild(
            "pending",
            &delta.pending.order,
            delta.pending.changed,
            |id| base?.pending.get(&id).cloned(),
        )?;
        let mut snapshot = Snapshot {
            nodes: match delta.nodes {
                Some(nodes) => nodes,
                None => base.map(|b| b.nodes.clone()).unwrap_or_default(),
            },
            running,
            pending,
            ..Snapshot::default()
        };
        snapshot.set_header(header);
        Ok(snapshot)
    }

    /// Keeps `snapshot` and its answer as a new exchange, and tells the answer as a delta on
    /// the answer of exchange `base` (whole when `base` is `None` or no longer kept).
    pub fn answer(
        &mut self,
        base: Option<u64>,
        snapshot: &Snapshot,
        answer: &Decisions,
    ) -> DecisionsDelta {
        let exchange = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut decisions: FxHashMap<u32, Decision> = FxHashMap::default();
        decisions.reserve(answer.decisions.len());
        let mut order = Vec::with_capacity(answer.decisions.len());
        let mut changed = Vec::new();
        let kept_base = base.and_then(|id| self.kept.iter().find(|k| k.exchange == id));
        for d in &answer.decisions {
            if decisions.contains_key(&d.job_id) {
                continue;
            }
            order.push(d.job_id);
            if kept_base.and_then(|k| k.decisions.get(&d.job_id)) != Some(d) {
                changed.push(d.clone());
            }
            decisions.insert(d.job_id, d.clone());
        }
        let answered_base = base.filter(|_| kept_base.is_some());
        if self.kept.len() >= KEPT_EXCHANGES {
            self.kept.pop_front();
        }
        self.kept.push_back(Kept {
            exchange,
            nodes: snapshot.nodes.clone(),
            running: by_id(&snapshot.running),
            pending: by_id(&snapshot.pending),
            decisions,
        });
        DecisionsDelta {
            schema_version: answer.schema_version,
            exchange,
            base: answered_base,
            policy: answer.policy.clone(),
            mode: answer.mode,
            time: answer.time,
            order,
            changed,
            stated_targets: answer.stated_targets.clone(),
            observed: answer.observed.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::snapshot::NodeState;
    use crate::SCHEMA_VERSION;

    fn node(name: &str, alloc: u32) -> Node {
        Node {
            name: name.into(),
            gpus_total: 8,
            gpus_alloc: alloc,
            state: NodeState::Mixed,
            features: Vec::new(),
            partitions: vec!["gpu".into()],
            rack: None,
        }
    }

    fn snapshot(time: i64, pending: &[u32]) -> Snapshot {
        Snapshot {
            idle: Default::default(),
            schema_version: SCHEMA_VERSION,
            time,
            nodes: vec![node("n1", 4), node("n2", 0)],
            running: vec![RunningJob {
                job_id: 1,
                user: "ann".into(),
                nodes: vec!["n1".into()],
                gpus: 4,
                start_time: 100,
                ..RunningJob::default()
            }],
            pending: pending
                .iter()
                .map(|&id| PendingJob::new(id, "bob", 2, 50 + i64::from(id)))
                .collect(),
            requeue_delay_s: 31,
            agent: None,
        }
    }

    fn decide(snapshot: &Snapshot) -> Decisions {
        Decisions {
            observed: Default::default(),
            schema_version: SCHEMA_VERSION,
            policy: "cinch".into(),
            mode: Mode::Enforce,
            time: snapshot.time,
            stated_targets: None,
            decisions: snapshot
                .pending
                .iter()
                .map(|j| Decision::explain(j.job_id, format!("{} GPUs", j.gpus), 300))
                .collect(),
        }
    }

    /// One exchange through both ends, as JSON: the snapshot the optimizer rebuilds, and the
    /// answer the plugin rebuilds, with the delta each way.
    fn exchange(
        sender: &mut Sender,
        receiver: &mut Receiver,
        snap: &Snapshot,
        answer: impl Fn(&Snapshot) -> Decisions,
    ) -> (Snapshot, Decisions, SnapshotDelta, DecisionsDelta) {
        let out = sender.delta(snap);
        let wire: SnapshotDelta =
            serde_json::from_slice(&serde_json::to_vec(&out.delta).unwrap()).unwrap();
        let base = wire.base;
        let rebuilt = receiver.snapshot(wire.clone()).unwrap();
        let told = receiver.answer(base, &rebuilt, &answer(&rebuilt));
        let told: DecisionsDelta =
            serde_json::from_slice(&serde_json::to_vec(&told).unwrap()).unwrap();
        let whole = sender.receive(out, told.clone()).unwrap();
        sender.give_back(whole.clone());
        (rebuilt, whole, wire, told)
    }

    #[test]
    fn both_ends_rebuild_the_whole_exchange_and_send_only_what_changed() {
        let mut sender = Sender::default();
        let mut receiver = Receiver::new(7);
        let first = snapshot(1_000, &[10, 11, 12]);
        let (rebuilt, answer, delta, told) = exchange(&mut sender, &mut receiver, &first, decide);
        assert_eq!(rebuilt, first);
        assert_eq!(answer, decide(&first));
        assert_eq!((delta.base, delta.pending.changed.len()), (None, 3));
        assert!(delta.nodes.is_some());
        assert_eq!((told.exchange, told.base, told.changed.len()), (7, None, 3));

        // Nothing changed but the time: no job, node or decision is sent again.
        let idle = snapshot(1_060, &[10, 11, 12]);
        let (rebuilt, answer, delta, told) = exchange(&mut sender, &mut receiver, &idle, decide);
        assert_eq!(rebuilt, idle);
        assert_eq!(answer, decide(&idle));
        assert_eq!(delta.base, Some(7));
        assert!(delta.nodes.is_none());
        assert!(delta.pending.changed.is_empty() && delta.running.changed.is_empty());
        assert_eq!(delta.pending.order, [10, 11, 12]);
        assert_eq!(
            (told.base, told.order.len(), told.changed.len()),
            (Some(7), 3, 0)
        );

        // One job ends, one changes, one arrives, a node fills, and the order changes.
        let mut busy = snapshot(1_120, &[13, 12, 10]);
        busy.pending[2].gpus = 4;
        busy.nodes[1].gpus_alloc = 8;
        let (rebuilt, answer, delta, told) = exchange(&mut sender, &mut receiver, &busy, decide);
        assert_eq!(rebuilt, busy);
        assert_eq!(answer, decide(&busy));
        let sent: Vec<u32> = delta.pending.changed.iter().map(|j| j.job_id).collect();
        assert_eq!(sent, [13, 10]);
        assert_eq!(delta.nodes.as_ref(), Some(&busy.nodes));
        let told_ids: Vec<u32> = told.changed.iter().map(|d| d.job_id).collect();
        assert_eq!((told.base, told_ids), (Some(8), vec![13, 10]));
        assert_eq!(told.order, [13, 12, 10]);
    }

    #[test]
    fn every_hundredth_exchange_sends_the_whole_snapshot_again() {
        let mut sender = Sender::default();
        let mut receiver = Receiver::new(1);
        let snap = snapshot(1_000, &[10, 11]);
        let whole: Vec<usize> = (0..2 * WHOLE_EVERY)
            .filter_map(|i| {
                let (_, _, delta, _) = exchange(&mut sender, &mut receiver, &snap, decide);
                delta.base.is_none().then_some(i as usize)
            })
            .collect();
        assert_eq!(whole, [0, WHOLE_EVERY as usize]);
    }

    #[test]
    fn a_base_the_optimizer_no_longer_keeps_is_refused_and_the_whole_snapshot_goes_again() {
        let mut sender = Sender::default();
        let mut receiver = Receiver::new(1);
        let snap = snapshot(1_000, &[10]);
        exchange(&mut sender, &mut receiver, &snap, decide);
        // The optimizer restarts, counting from elsewhere.
        let mut restarted = Receiver::new(1_000);
        let out = sender.delta(&snap);
        assert_eq!(
            restarted.snapshot(out.delta.clone()),
            Err(DeltaError::UnknownBase(1))
        );
        sender.forget();
        let (rebuilt, answer, delta, _) = exchange(&mut sender, &mut restarted, &snap, decide);
        assert_eq!((delta.base, rebuilt), (None, snap.clone()));
        assert_eq!(answer, decide(&snap));

        // Other plugins' exchanges push the oldest out.
        let mut receiver = Receiver::new(1);
        let mut old = Sender::default();
        exchange(&mut old, &mut receiver, &snap, decide);
        for _ in 0..KEPT_EXCHANGES {
            exchange(&mut Sender::default(), &mut receiver, &snap, decide);
        }
        let out = old.delta(&snap);
        assert_eq!(
            receiver.snapshot(out.delta),
            Err(DeltaError::UnknownBase(1))
        );
    }

    #[test]
    fn deltas_that_do_not_add_up_are_refused_and_change_nothing() {
        let mut sender = Sender::default();
        let mut receiver = Receiver::new(1);
        exchange(
            &mut sender,
            &mut receiver,
            &snapshot(1_000, &[10, 11]),
            decide,
        );
        let good = sender.delta(&snapshot(1_060, &[10, 11])).delta;
        let bad = |edit: &dyn Fn(&mut SnapshotDelta)| {
            let mut d = good.clone();
            edit(&mut d);
            receiver.snapshot(d).unwrap_err().to_string()
        };
        type Edit = dyn Fn(&mut SnapshotDelta);
        let cases: [(&Edit, &str); 4] = [
            (
                &|d| d.pending.order.push(99),
                "pending job 99 is in order but neither",
            ),
            (
                &|d| d.pending.order.push(10),
                "pending job 10 appears twice in order",
            ),
            (
                &|d| {
                    d.running.changed.push(RunningJob {
                        job_id: 5,
                        ..RunningJob::default()
                    })
                },
                "running job 5 is in changed but not in order",
            ),
            (
                &|d| {
                    let j = PendingJob::new(11, "bob", 1, 0);
                    d.pending.changed = vec![j.clone(), j];
                },
                "pending job 11 appears twice in changed",
            ),
        ];
        for (edit, why) in cases {
            let got = bad(edit);
            assert!(got.contains(why), "{got}");
        }
        // The base is still there to build on.
        assert!(receiver.snapshot(good).is_ok());
        // Without a base, every job must be sent.
        let mut whole = Sender::default().delta(&snapshot(1_000, &[10])).delta;
        whole.pending.changed.clear();
        assert!(receiver.snapshot(whole).is_err());
    }

    #[test]
    fn an_answer_that_does_not_fit_the_request_is_an_error_and_the_next_delta_is_whole() {
        let mut sender = Sender::default();
        let mut receiver = Receiver::new(1);
        let snap = snapshot(1_000, &[10, 11]);
        exchange(&mut sender, &mut receiver, &snap, decide);
        let out = sender.delta(&snap);
        let mut told = receiver.answer(out.delta.base, &snap, &decide(&snap));
        told.base = Some(12_345);
        assert!(matches!(
            sender.receive(out, told),
            Err(DeltaError::WrongBase { .. })
        ));
        assert_eq!(sender.next_base(), None);
        // An order naming a decision neither sent nor kept.
        let out = sender.delta(&snap);
        let mut told = receiver.answer(None, &snap, &decide(&snap));
        told.order.push(77);
        assert_eq!(
            sender.receive(out, told).unwrap_err().to_string(),
            "decided job 77 is in order but neither in changed nor in the base"
        );
        // On a base, in the base's order (the sender's quick path): a decision changed twice,
        // or for a job not in the order.
        for (extra, error) in [
            (&[11, 11][..], "decided job 11 appears twice in changed"),
            (&[77][..], "decided job 77 is in changed but not in order"),
        ] {
            exchange(&mut sender, &mut receiver, &snap, decide);
            let out = sender.delta(&snap);
            let mut told = receiver.answer(out.delta.base, &snap, &decide(&snap));
            assert!(told.base.is_some() && told.changed.is_empty());
            told.changed = extra
                .iter()
                .map(|&id| Decision::explain(id, "changed", 300))
                .collect();
            assert_eq!(sender.receive(out, told).unwrap_err().to_string(), error);
            assert_eq!(sender.next_base(), None);
        }
        // And one changed decision is put in its place.
        exchange(&mut sender, &mut receiver, &snap, decide);
        let out = sender.delta(&snap);
        let mut told = receiver.answer(out.delta.base, &snap, &decide(&snap));
        told.changed = vec![Decision::explain(11, "changed", 300)];
        let whole = sender.receive(out, told).unwrap();
        let reasons: Vec<String> = whole
            .decisions
            .iter()
            .map(|d| d.reason.to_string())
            .collect();
        assert_eq!(reasons, ["2 GPUs", "changed"]);
    }

    #[test]
    fn a_policys_second_decision_for_a_job_is_dropped_as_the_apply_path_would() {
        let mut receiver = Receiver::new(1);
        let snap = snapshot(1_000, &[10]);
        let mut twice = decide(&snap);
        twice.decisions.push(Decision::explain(10, "again", 300));
        let told = receiver.answer(None, &snap, &twice);
        assert_eq!(told.order, [10]);
        assert_eq!(told.changed[0].reason, "2 GPUs".into());
    }
}
