//! Why a decision is what it is, as a value: the clauses the policies give, each a typed variant
//! with its numbers, put into words in one place ([`Clause`]'s `Display`). A policy builds a
//! [`Reason`] without writing a word; the words are written only when someone reads them (the
//! answer on the wire, a change Slurm is told of, a log line), so a round whose decisions repeat
//! renders nothing, and tests match variants, not prose.
//!
//! On the wire a reason is its words (a JSON string); one read back from the wire is
//! [`Clause::Said`], words with no structure. Two reasons are equal when they read the same.

use std::fmt::{self, Display, Write as _};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::{smallvec, SmallVec};

use crate::slurm::slurm_time::{format_duration, format_time};
use crate::util::words::{gpus, nodes, Count, GpuHours, Hours};
use crate::wire::idle::IdleAction;

/// A reason: clauses read in order, joined by "; ". Held inline up to two clauses, what nearly
/// every decision has (its place in the order and what became of it): a round of 100,000
/// waiting jobs otherwise allocates 100,000 clause lists (35 MB), more than any other part.
#[derive(Debug, Clone, Default)]
pub struct Reason(SmallVec<[Clause; 2]>);

impl Reason {
    /// The clauses, in the order they are read.
    pub fn clauses(&self) -> &[Clause] {
        &self.0
    }

    /// Whether it has no clause (says nothing).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds a clause at the end.
    pub fn push(&mut self, clause: Clause) {
        self.0.push(clause);
    }

    /// The reason with `clause` added at the end.
    pub fn and(mut self, clause: Clause) -> Self {
        self.0.push(clause);
        self
    }

    /// Puts `clause` first (what happened before the rest was decided).
    pub fn prepend(&mut self, clause: Clause) {
        self.0.insert(0, clause);
    }

    /// The first clause that `pick` takes, for tests and for the few callers that act on a kind.
    pub fn find<'a, T>(&'a self, pick: impl FnMut(&'a Clause) -> Option<T>) -> Option<T> {
        self.0.iter().find_map(pick)
    }

    /// Whether any clause is one that `is` takes.
    pub fn has(&self, is: impl FnMut(&Clause) -> bool) -> bool {
        self.0.iter().any(is)
    }
}

impl From<Clause> for Reason {
    fn from(clause: Clause) -> Self {
        Reason(smallvec![clause])
    }
}

/// Each kind of clause, as a clause and as a reason of that one clause.
macro_rules! clause_from {
    ($($kind:ident => $variant:ident),* $(,)?) => {$(
        impl From<$kind> for Clause {
            fn from(value: $kind) -> Self {
                Clause::$variant(value)
            }
        }
        impl From<$kind> for Reason {
            fn from(value: $kind) -> Self {
                Reason(smallvec![Clause::$variant(value)])
            }
        }
    )*};
}

clause_from!(
    Order => Order,
    QosTarget => QosTarget,
    Submitted => Submitted,
    Placed => Placed,
    Unplaced => Unplaced,
    Shape => Shape,
    Requeued => Requeued,
    Elastic => Elastic,
    DallyStep => Dally,
    EqualSize => EqualShare,
    IdleNote => Idle,
);

/// Words with no structure: a reason read back from the wire or from a record.
impl From<String> for Reason {
    fn from(text: String) -> Self {
        Reason(smallvec![Clause::Said(text)])
    }
}

impl From<&str> for Reason {
    fn from(text: &str) -> Self {
        Reason(smallvec![Clause::Said(text.to_string())])
    }
}

impl Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, clause) in self.0.iter().enumerate() {
            if k > 0 {
                f.write_str("; ")?;
            }
            clause.fmt(f)?;
        }
        Ok(())
    }
}

/// Equal when they read the same: clause by clause where both have the same clauses (no words
/// written), else by their words (a reason read back from the wire against one built here).
impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 || self.to_string() == other.to_string()
    }
}

impl Eq for Reason {}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Reason::from)
    }
}

/// How much a job is expected to slow down spread, and where that figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensitivity {
    pub slowdown: f64,
    pub source: String,
}

/// Placement levels, as Dally names them: 0 one node's worth (consolidated), 1 one rack, 2 any
/// nodes.
pub const LEVEL: [&str; 3] = ["consolidated", "one rack", "any nodes"];

/// One clause of a reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// Words with no structure (read back from the wire or a record).
    Said(String),
    /// Where cinch's order puts the job, and why.
    Order(Order),
    /// A problem with the job's QoS targets (`QoS {0}`): a hint that could not be read, or
    /// targets that do not count here and why (worded by the QoS model).
    QosProblem(String),
    /// The job's QoS target, when it is predicted to finish, and what cinch does about it.
    QosTarget(QosTarget),
    /// What the user asked that cinch leaves to Slurm.
    Submitted(Submitted),
    /// A job too small to place: Slurm's best fit places it.
    SlurmPlaces,
    /// Where the job is pinned.
    Placed(Placed),
    /// Why no placement is free for it now.
    Unplaced(Unplaced),
    /// cinch: why a job whose best shape is not free waits for it, or does not.
    Shape(Shape),
    /// cinch: the round's reservation, on these nodes, expected free at this time.
    Reserved { nodes: Vec<String>, at: i64 },
    /// cinch's order as a nice on top of Slurm's own priority.
    Nice { site_priority: u32, nice: i32 },
    /// A running job requeued.
    Requeued(Requeued),
    /// An elastic job's GPU count.
    Elastic(Elastic),
    /// Dally's delay scheduling.
    Dally(DallyStep),
    /// Tiresias: the job's 2D-LAS queue.
    LasQueue(usize),
    /// strict: held for its best shape (`gpus` on `nodes`, in one rack when one can hold it).
    StrictHeld {
        gpus: u32,
        nodes: u32,
        one_rack: bool,
    },
    /// strict: the reservation for its best shape, expected free on `on` at `at` by the running
    /// jobs' time limits.
    StrictReserved { gpus: u32, on: Vec<String>, at: i64 },
    /// EDF: the job's target and where it came from.
    EarliestDeadline { at: i64, source: String },
    /// QSSF: the predicted service (GPU-seconds) and its source.
    PredictedService { service: f64, source: &'static str },
    /// equal-share: the job's share of the cluster.
    EqualShare(EqualSize),
    /// switches: waits up to this many seconds from submission for one rack.
    SwitchWait(u32),
    /// switches: waited; any nodes now.
    SwitchWaited,
    /// A running job whose GPUs are idle.
    Idle(IdleNote),
}

/// cinch's order.
#[derive(Debug, Clone, PartialEq)]
pub enum Order {
    /// Slurm's own order (queue ordering off).
    Slurm,
    /// Shortest predicted remaining service first: GPU-seconds left, the run left, on how many
    /// GPUs, from which prediction.
    Shortest {
        service: f64,
        remaining_s: f64,
        gpus: u32,
        source: &'static str,
    },
    /// Gittins index over the run model's distribution of similar jobs' runs.
    Gittins {
        run_s: f64,
        source: &'static str,
        /// The model's rank correlation and the ended jobs it judges by.
        rho: f64,
        window: usize,
        service: f64,
        score: f64,
    },
}

/// A job's QoS target as cinch reads it this round.
#[derive(Debug, Clone, PartialEq)]
pub struct QosTarget {
    /// The targets in words (`finish by ... (hint turnaround)`), from the QoS model.
    pub targets: String,
    /// When it would finish if started now, and its predicted run.
    pub finish: i64,
    pub run_s: i64,
    pub source: &'static str,
    /// Seconds it may still wait and meet its target (negative: missed by that much).
    pub allowance_s: f64,
    pub stance: QosStance,
}

/// What cinch does about a job's QoS target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosStance {
    /// Ahead of the jobs without a target, the smallest slack first.
    Urgent,
    /// Predictions too poor to order by slack.
    Untrusted,
    /// Cannot be met any more: not chased.
    Missed,
    /// Enough slack for now.
    Slack,
}

/// What the user asked that cinch leaves to Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// `--begin` still ahead, at this time.
    Begin(i64),
    /// A node list.
    RequiredNodes,
    /// `--constraint`.
    Constraint,
}

/// Where a job is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Inside one rack (named, when the cluster names racks), on the fewest nodes free.
    Consolidated {
        gpus: u32,
        nodes: u32,
        rack: Option<String>,
    },
    /// No rack can hold it: the fewest nodes across racks.
    AcrossRacks { gpus: u32, nodes: u32, racks: usize },
}

/// Why no placement is free for a job now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// Its `--begin`, node list or constraint.
    Submitted(Submitted),
    /// More GPUs than are free in the cluster.
    NoRoom { gpus: u32, free: u64 },
    /// More GPUs per node than any node has.
    PerNodeTooLarge { per_node: u32 },
    /// No rack holds it, and it may not cross racks.
    CrossRackOff { gpus: u32 },
    /// Too few nodes with its GPUs per node free.
    PerNodeShort {
        nodes: u32,
        per_node: u32,
        fitting: u32,
    },
    /// Enough GPUs free, but not on as few nodes as it may use.
    TooSpread { gpus: u32, max_nodes: u32 },
    /// Too few GPUs free on the nodes it may use.
    TooFewUsable { gpus: u32, usable: u64 },
}

impl Unplaced {
    /// Whether the job waits for GPUs to free (rather than never fitting as asked, or being
    /// the user's to place).
    pub fn waits_for_room(&self) -> bool {
        matches!(
            self,
            Unplaced::NoRoom { .. }
                | Unplaced::PerNodeShort { .. }
                | Unplaced::TooSpread { .. }
                | Unplaced::TooFewUsable { .. }
        )
    }
}

/// cinch: whether a job whose best shape is not free waits for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Waits: its best shape is expected free at `at`; spread would cost it `cost_s`
    /// (infinite: `wait_always`).
    Waits {
        at: i64,
        cost_s: f64,
        sens: Sensitivity,
    },
    /// Held by a begin time `hold_s` away (the decision's TTL), so that it never starts spread
    /// between rounds; every round looks at it again.
    HeldToRecheck { hold_s: i64 },
    /// Nothing fits now, and it must not start spread: held likewise.
    NoRoomNotSpread { sens: Sensitivity, hold_s: i64 },
    /// The first in cinch's order waiting for its shape (it gets the reservation).
    FirstToWait,
    /// Not waiting: it hardly slows down spread.
    ComputeBound(Sensitivity),
    /// Not waiting: waiting `wait_s` would miss its QoS target.
    WouldMissTarget { wait_s: i64 },
    /// Not waiting: expected free only in `wait_s`, more than the wait allowed (and than what
    /// spread costs, when finite).
    TooLong {
        wait_s: i64,
        cost_s: f64,
        max_wait_s: u32,
    },
    /// Not waiting: no release is expected to free its shape.
    NoneExpected,
}

/// Why a running job is requeued.
#[derive(Debug, Clone, PartialEq)]
pub enum Requeued {
    /// cinch: waiting jobs with less remaining service need its GPUs (services in GPU-seconds).
    ForShorter {
        service: f64,
        remaining_s: f64,
        ahead: f64,
        restart: u32,
        max_restarts: u32,
    },
    /// Dally: it runs spread and a consolidated placement is free for its restart.
    ToConsolidate {
        nodes: usize,
        sens: Sensitivity,
        remaining_s: f64,
        gain_s: f64,
        restart_cost_s: u32,
        restart: u32,
        max_restarts: u32,
    },
    /// Tiresias: behind waiting jobs with less attained service.
    Las { queue: usize },
}

/// An elastic job's GPU count.
#[derive(Debug, Clone, PartialEq)]
pub enum Elastic {
    /// ONES's search gave it `to` GPUs among `jobs` elastic jobs and `free` GPUs, with the run
    /// predicted left at that size.
    Sized {
        min: u32,
        max: u32,
        to: u32,
        jobs: usize,
        free: u32,
        left_s: f64,
    },
    /// A running job resized by checkpoint and requeue, from this many GPUs.
    ResizedFrom(u32),
    /// It keeps the count it asks for (and waits for them when the search gave it none).
    Keeps {
        min: u32,
        max: u32,
        asks: u32,
        waits: bool,
    },
}

/// Dally's delay scheduling.
#[derive(Debug, Clone, PartialEq)]
pub enum DallyStep {
    /// Waits for placements of level `allowed` or better; `only` the level free now (if one
    /// is); its timer of `timer_s` (set by `how`) ends at `relax_at`.
    Waits {
        allowed: usize,
        sens: Sensitivity,
        only: Option<usize>,
        timer_s: i64,
        how: &'static str,
        relax_at: i64,
    },
    /// Compute-bound: not delayed, pinned to the fewest free nodes.
    ComputeBound { sens: Sensitivity, nodes: u32 },
    /// Placed at `level` after waiting `waited_s`.
    Placed {
        level: usize,
        nodes: u32,
        waited_s: i64,
        sens: Sensitivity,
    },
}

/// equal-share's size for an elastic job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EqualSize {
    pub size: u32,
    pub total: u32,
    pub jobs: u32,
    pub min: u32,
    pub max: u32,
    pub free: u32,
}

/// A running job whose GPUs are idle: since when, how busy, and what comes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleNote {
    pub since: i64,
    /// Its GPUs' busy percent, and the site's idle threshold.
    pub busy: u32,
    pub threshold: u32,
    pub action: IdleAction,
    /// Whether the action is due now (past the grace and the warning).
    pub due: bool,
    /// Whether the job opted in to requeues.
    pub opted_in: bool,
    /// When the action comes unless the GPUs get busy.
    pub act_at: i64,
}

impl Display for Clause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clause::Said(text) => f.write_str(text),
            Clause::Order(order) => order.fmt(f),
            Clause::QosProblem(problem) => write!(f, "QoS {problem}"),
            Clause::QosTarget(q) => q.fmt(f),
            Clause::Submitted(s) => s.fmt(f),
            Clause::SlurmPlaces => f.write_str("Slurm places it"),
            Clause::Placed(p) => p.fmt(f),
            Clause::Unplaced(u) => u.fmt(f),
            Clause::Shape(s) => s.fmt(f),
            Clause::Reserved { nodes, at } => write!(
                f,
                "reserved: pinned to {} (expected free at {}) and first in Slurm's order, so \
                 backfill keeps later jobs off those GPUs",
                nodes.join(","),
                format_time(*at)
            ),
            Clause::Nice {
                site_priority,
                nice,
            } => write!(
                f,
                "Slurm's priority {site_priority} with cinch's nice {nice} puts it at {}",
                i64::from(*site_priority) - i64::from(*nice)
            ),
            Clause::Requeued(r) => r.fmt(f),
            Clause::Elastic(e) => e.fmt(f),
            Clause::Dally(d) => d.fmt(f),
            Clause::LasQueue(queue) => write!(f, "2D-LAS queue {queue}"),
            Clause::StrictHeld {
                gpus: g,
                nodes: n,
                one_rack,
            } => write!(
                f,
                "held: waits for its best shape, {} on {}{}",
                gpus(*g),
                nodes(*n),
                if *one_rack { " in one rack" } else { "" }
            ),
            Clause::StrictReserved { gpus: g, on, at } => write!(
                f,
                "reserved: waits for its best shape, {} on {}, expected free on {} at {} by the \
                 running jobs' time limits; pinned there and first in Slurm's order, so \
                 backfill keeps later jobs off those GPUs",
                gpus(*g),
                nodes(on.len() as u64),
                on.join(","),
                format_time(*at)
            ),
            Clause::EarliestDeadline { at, source } => write!(
                f,
                "earliest deadline first: target {} ({source})",
                format_time(*at)
            ),
            Clause::PredictedService { service, source } => write!(
                f,
                "predicted service {:.1} GPU-hours ({source}): shorter first",
                service / 3600.0
            ),
            Clause::EqualShare(e) => write!(
                f,
                "equal share: {} GPUs ({} GPUs / {} jobs, within elastic={}-{} and the {} free)",
                e.size, e.total, e.jobs, e.min, e.max, e.free
            ),
            Clause::SwitchWait(wait) => {
                write!(f, "waits up to {wait} s from submission for one rack")
            }
            Clause::SwitchWaited => {
                f.write_str("waited its switch wait for one rack; any nodes now")
            }
            Clause::Idle(i) => i.fmt(f),
        }
    }
}

impl Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Order::Slurm => f.write_str("Slurm's order"),
            Order::Shortest {
                service,
                remaining_s,
                gpus: g,
                source,
            } => write!(
                f,
                "predicted {} left ({} on {}, from {source}): shorter first",
                GpuHours(*service),
                Hours(*remaining_s),
                gpus(*g),
            ),
            Order::Gittins {
                run_s,
                source,
                rho,
                window,
                service,
                score,
            } => write!(
                f,
                "predicted {} (from {source}); predictions here order run times with rank \
                 correlation {rho:.2}, so it is judged by the runs of the {window} ended jobs \
                 predicted nearest: {} expected left, ranked as {} (Gittins); lower first",
                Hours(*run_s),
                GpuHours(*service),
                GpuHours(*score),
            ),
        }
    }
}

/// A QoS allowance in words: `slack 01:00:00`, or `misses by 00:10:00` when negative.
pub fn describe_slack(allowance_s: f64) -> String {
    let s = allowance_s.round() as i64;
    if s >= 0 {
        format!("slack {}", format_duration(s))
    } else {
        format!("misses by {}", format_duration(-s))
    }
}

impl Display for QosTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "QoS target: {}; predicted finish {} if started now ({} to run, from {}), {}: {}",
            self.targets,
            format_time(self.finish),
            format_duration(self.run_s),
            self.source,
            describe_slack(self.allowance_s),
            match self.stance {
                QosStance::Urgent =>
                    "urgent, ahead of the jobs without a target (smallest slack first)",
                QosStance::Untrusted =>
                    "run-time predictions here are off by more than 2x on average, too poor to \
                     order by slack: usual order",
                QosStance::Missed => "cannot be met any more, not chased (usual order)",
                QosStance::Slack => "enough slack, usual order for now",
            }
        )
    }
}

impl Display for Submitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Submitted::Begin(at) => write!(
                f,
                "cannot start before {} (--begin); left to Slurm",
                format_time(*at)
            ),
            Submitted::RequiredNodes => {
                f.write_str("the user required specific nodes; left as submitted")
            }
            Submitted::Constraint => f.write_str("the job has a --constraint; left to Slurm"),
        }
    }
}

impl Display for Placed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placed::Consolidated {
                gpus: g,
                nodes: n,
                rack,
            } => {
                write!(f, "consolidated: {} on {}", gpus(*g), nodes(*n))?;
                if let Some(rack) = rack {
                    write!(f, " in rack {rack}")?;
                }
                f.write_str(", the fewest that have them free now")
            }
            Placed::AcrossRacks {
                gpus: g,
                nodes: n,
                racks,
            } => write!(
                f,
                "no single rack has room for {g} GPUs now; pinned to the fewest nodes ({n}) \
                 across {racks} racks"
            ),
        }
    }
}

impl Display for Unplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unplaced::Submitted(s) => s.fmt(f),
            Unplaced::NoRoom { gpus: g, free } => write!(
                f,
                "waits: needs {}, {free} free in the cluster; left to Slurm",
                gpus(*g)
            ),
            Unplaced::PerNodeTooLarge { per_node } => write!(
                f,
                "asks for {} per node, more than any node has; left to Slurm",
                gpus(*per_node)
            ),
            Unplaced::CrossRackOff { gpus: g } => write!(
                f,
                "no single rack has room for {g} GPUs now and cross_rack is off; left to Slurm"
            ),
            Unplaced::PerNodeShort {
                nodes: n,
                per_node,
                fitting,
            } => write!(
                f,
                "waits: needs {} with {} free each, {fitting} such now; left to Slurm",
                nodes(*n),
                gpus(*per_node)
            ),
            Unplaced::TooSpread { gpus: g, max_nodes } => write!(
                f,
                "waits: {} are free but not on at most {}; left to Slurm",
                gpus(*g),
                nodes(*max_nodes)
            ),
            Unplaced::TooFewUsable { gpus: g, usable } => write!(
                f,
                "waits: needs {}, {usable} free on nodes it may use; left to Slurm",
                gpus(*g)
            ),
        }
    }
}

impl Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NOT: &str = "not waiting for its best shape: ";
        match self {
            Shape::Waits { at, cost_s, sens } => {
                // The time, not the seconds to it: a reason that changes every round would be
                // a new decision in the log every round.
                write!(
                    f,
                    "waits for a consolidated placement, expected free at {}; ",
                    format_time(*at)
                )?;
                if cost_s.is_finite() {
                    write!(f, "spread would cost it ~{cost_s:.0} s")?;
                } else {
                    f.write_str("it always waits for one that is expected (wait_always)")?;
                }
                write!(f, " (slowdown {:.2}, {})", sens.slowdown, sens.source)
            }
            Shape::HeldToRecheck { hold_s } => write!(
                f,
                "held, so never spread, and looked at again every round (if cinch stops, the \
                 hold lapses within {hold_s} s)"
            ),
            Shape::NoRoomNotSpread { sens, hold_s } => write!(
                f,
                "waits: no room for its best shape now; not started spread (slowdown {:.2}, {}): \
                 held and looked at again every round (if cinch stops, the hold lapses within \
                 {hold_s} s)",
                sens.slowdown, sens.source
            ),
            Shape::FirstToWait => {
                f.write_str("waits for its best shape, and is the first in cinch's order that does")
            }
            Shape::ComputeBound(sens) => write!(
                f,
                "{NOT}compute-bound (slowdown {:.2} spread, {})",
                sens.slowdown, sens.source
            ),
            Shape::WouldMissTarget { wait_s } => write!(
                f,
                "{NOT}waiting {wait_s} s for it would miss its QoS target"
            ),
            Shape::TooLong {
                wait_s,
                cost_s,
                max_wait_s,
            } => {
                write!(f, "{NOT}it is expected free only in {wait_s} s, more than")?;
                if cost_s.is_finite() {
                    write!(f, " the ~{cost_s:.0} s a wider placement costs or")?;
                }
                write!(f, " the {max_wait_s} s wait allowed")
            }
            Shape::NoneExpected => write!(f, "{NOT}none is expected to free"),
        }
    }
}

impl Display for Requeued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requeued::ForShorter {
                service,
                remaining_s,
                ahead,
                restart,
                max_restarts,
            } => write!(
                f,
                "requeued: ranked {:.1} (about {:.1} h left), waiting jobs ranked {:.1} or less \
                 need its GPUs; restart {restart} of at most {max_restarts}",
                service / 3600.0,
                remaining_s / 3600.0,
                ahead / 3600.0,
            ),
            Requeued::ToConsolidate {
                nodes,
                sens,
                remaining_s,
                gain_s,
                restart_cost_s,
                restart,
                max_restarts,
            } => write!(
                f,
                "requeued to restart consolidated: runs spread on {nodes} nodes (slowdown {:.2}, \
                 {}), ~{remaining_s:.0} s left, saves ~{gain_s:.0} s > restart cost \
                 {restart_cost_s} s; restart {restart} of at most {max_restarts}",
                sens.slowdown, sens.source,
            ),
            Requeued::Las { queue } => write!(
                f,
                "requeued: 2D-LAS queue {queue}, behind waiting jobs with less attained service"
            ),
        }
    }
}

impl Display for Elastic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elastic::Sized {
                min,
                max,
                to,
                jobs,
                free,
                left_s,
            } => write!(
                f,
                "elastic {min}-{max}: {} (ONES search over {} and {}; predicted {} left on {to})",
                gpus(*to),
                Count(*jobs as u64, "elastic job"),
                gpus(*free),
                Hours(*left_s)
            ),
            Elastic::ResizedFrom(from) => {
                write!(f, "resized from {from} GPUs by checkpoint and requeue")
            }
            Elastic::Keeps {
                min,
                max,
                asks,
                waits,
            } => write!(
                f,
                "elastic {min}-{max}: keeps {asks} GPUs{}",
                if *waits { ", waits for them" } else { "" }
            ),
        }
    }
}

impl Display for DallyStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DallyStep::Waits {
                allowed,
                sens,
                only,
                timer_s,
                how,
                relax_at,
            } => {
                write!(
                    f,
                    "waits for a {} placement (slowdown {:.2} spread, {}); ",
                    LEVEL[*allowed], sens.slowdown, sens.source
                )?;
                if let Some(level) = only {
                    write!(f, "only {} free now; ", LEVEL[*level])?;
                }
                write!(
                    f,
                    "timer {timer_s} s ({how}) ends at {}",
                    format_time(*relax_at)
                )
            }
            DallyStep::ComputeBound { sens, nodes } => write!(
                f,
                "compute-bound (slowdown {:.2}, {}): not delayed; pinned to the fewest free \
                 nodes ({nodes})",
                sens.slowdown, sens.source
            ),
            DallyStep::Placed {
                level,
                nodes,
                waited_s,
                sens,
            } => write!(
                f,
                "{} placement on {nodes} node{} after {waited_s} s (slowdown {:.2} spread, {})",
                LEVEL[*level],
                if *nodes == 1 { "" } else { "s" },
                sens.slowdown,
                sens.source
            ),
        }
    }
}

impl Display for IdleNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut idle = String::new();
        let _ = write!(
            idle,
            "its GPUs have been idle since {} ({}% busy, under the site's {}%)",
            format_time(self.since),
            self.busy,
            self.threshold
        );
        let act_at = format_time(self.act_at);
        match (self.action, self.due) {
            (IdleAction::Requeue, _) if !self.opted_in => write!(
                f,
                "{idle}; reported to the site's admin (IdleAction=requeue, but the job did not \
                 opt in to requeues with --requeue and ckpt=yes)"
            ),
            (IdleAction::Report, _) => {
                write!(
                    f,
                    "{idle}; reported to the site's admin (IdleAction=report)"
                )
            }
            (IdleAction::Requeue, false) => write!(
                f,
                "{idle}; it will be requeued at {act_at} unless they get busy \
                 (IdleAction=requeue)"
            ),
            (IdleAction::Cancel, false) => write!(
                f,
                "{idle}; it will be cancelled at {act_at} unless they get busy \
                 (IdleAction=cancel)"
            ),
            (IdleAction::Requeue, true) => write!(
                f,
                "requeued: {idle}, past the grace and the warning (IdleAction=requeue)"
            ),
            (IdleAction::Cancel, true) => write!(
                f,
                "cancelled: {idle}, past the grace and the warning (IdleAction=cancel)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clauses_read_in_order_joined_by_semicolons_and_travel_as_words() {
        let reason = Reason::from(Clause::Order(Order::Slurm))
            .and(Clause::Submitted(Submitted::Constraint))
            .and(Clause::Nice {
                site_priority: 1000,
                nice: -20,
            });
        let text = "Slurm's order; the job has a --constraint; left to Slurm; Slurm's priority \
                    1000 with cinch's nice -20 puts it at 1020";
        assert_eq!(reason.to_string(), text);
        let json = serde_json::to_string(&reason).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        // Read back it is words, and equal to the reason it was made from.
        let back: Reason = serde_json::from_str(&json).unwrap();
        assert_eq!(back.clauses(), [Clause::Said(text.to_string())]);
        assert_eq!(back, reason);
        assert_ne!(back, Reason::from(Clause::Order(Order::Slurm)));
        // Not a string: refused.
        assert!(serde_json::from_str::<Reason>("3").is_err());
    }

    #[test]
    fn a_clause_is_found_by_its_kind() {
        let mut reason = Reason::from(Clause::Placed(Placed::Consolidated {
            gpus: 8,
            nodes: 1,
            rack: Some("r1".into()),
        }));
        reason.prepend(Clause::LasQueue(2));
        assert_eq!(
            reason.find(|c| match c {
                Clause::LasQueue(q) => Some(*q),
                _ => None,
            }),
            Some(2)
        );
        assert!(reason.has(|c| matches!(c, Clause::Placed(Placed::Consolidated { .. }))));
        assert!(!reason.has(|c| matches!(c, Clause::Unplaced(_))));
        assert_eq!(
            reason.to_string(),
            "2D-LAS queue 2; consolidated: 8 GPUs on 1 node in rack r1, the fewest that have \
             them free now"
        );
    }
}
