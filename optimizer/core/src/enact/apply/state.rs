//! What Slurm shows of a job and what cinch applied to it: the apply path's view of each
//! pending and running job, and the record cinch keeps.

use super::*;

/// Job settings someone other than cinch changed (bit set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields(pub u8);

impl Fields {
    pub const NODES: Fields = Fields(1);
    pub const BEGIN: Fields = Fields(2);
    pub const PRIORITY: Fields = Fields(4);
    pub const NICE: Fields = Fields(8);

    pub fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }
}

/// What cinch has applied to one job (the plugin keeps it in the job's AdminComment, the simulator
/// in memory).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Shared, not copied: the simulated Slurm reads every job's record every round, and a
    /// running job keeps the pin it started on.
    pub pin: Option<Arc<[String]>>,
    /// The job's node count before cinch pinned it, restored on undo.
    pub nodes_was: Option<u32>,
    /// The job's maximum node count before cinch pinned it (0: none), restored on undo. A pin
    /// sets the maximum to the pinned nodes: Slurm takes a node list as nodes the job must
    /// include, and would add others to start it sooner (measured by the live replay,
    /// docs/simulator.md).
    pub max_nodes_was: Option<u32>,
    pub begin: Option<i64>,
    pub hold: bool,
    pub prio: Option<u32>,
    /// (the job's nice before cinch, the nice cinch set)
    pub nice: Option<(i64, i64)>,
    /// (the job's GPU count before cinch, the count cinch set): an elastic job's size.
    pub gpus: Option<(u32, u32)>,
    pub until: i64,
    /// Shared, not copied: the plan reads every pending job's record every round.
    pub why: SharedText,
}

/// Text shared between records, not copied; empty without any allocation. Not `Arc<str>`: its
/// empty default is one static that every empty record in the process shares, so each record
/// made or dropped wrote that static's count, and the suite's threads fought over it (the
/// simulator makes and drops every job's record every round: 3.9% of the suite's `perf`
/// samples sat just after those writes, docs/benchmarks.md).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedText(Option<Arc<str>>);

impl std::ops::Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

impl From<&str> for SharedText {
    fn from(text: &str) -> Self {
        SharedText((!text.is_empty()).then(|| text.into()))
    }
}

impl From<String> for SharedText {
    fn from(text: String) -> Self {
        SharedText((!text.is_empty()).then(|| text.into()))
    }
}

impl PartialEq<&str> for SharedText {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for SharedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for SharedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl Applied {
    pub fn is_empty(&self) -> bool {
        self.pin.is_none()
            && self.begin.is_none()
            && !self.hold
            && self.prio.is_none()
            && self.nice.is_none()
            && self.gpus.is_none()
    }
}

/// A pending job as Slurm shows it now, with what cinch knows about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PendingState {
    pub job_id: u32,
    /// Whether the job has a node list (ReqNodeList), the user's or cinch's.
    pub has_node_list: bool,
    /// Slurm's node count (the minimum until the job runs).
    pub min_nodes: u32,
    /// Slurm's maximum node count (0: none).
    pub max_nodes: u32,
    /// When the job becomes eligible (0: unknown).
    pub eligible_time: i64,
    pub priority: u32,
    pub held: bool,
    /// In user terms (0 = default).
    pub nice: i64,
    /// What cinch applied before (empty: nothing).
    pub applied: Applied,
    /// The end of the submit-time hold, while the job still carries it.
    pub submit_hold: Option<i64>,
    /// Fields a user or admin changed.
    pub foreign: Fields,
    /// A TTL renewed in memory since `applied` was recorded.
    pub renewed_until: Option<i64>,
    /// The job's total GPU count when it is elastic (only elastic jobs are resized; callers may
    /// leave it 0 for the others).
    pub gpus: u32,
    /// The range its user declared (`elastic=MIN-MAX`), if the job is elastic and asks for a
    /// total GPU count (`--gpus`); `None` otherwise.
    pub elastic: Option<crate::models::elastic::Range>,
    /// Why the site's admin keeps cinch off this job (a CPU-only job, an excluded partition or
    /// QOS), if they do: decisions for it are refused, and what cinch applied before is undone.
    pub hands_off: Option<String>,
}

/// A running job, as far as a requeue decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunningState {
    pub job_id: u32,
    /// The user allowed Slurm to requeue the job (`--requeue`).
    pub requeue: bool,
    /// The user said the job resumes from a checkpoint (`ckpt=yes`).
    pub checkpoints: bool,
    /// How often the job has been requeued already (Slurm's restart count).
    pub requeues: u32,
    /// The range its user declared, as for [`PendingState::elastic`].
    pub elastic: Option<crate::models::elastic::Range>,
    /// As [`PendingState::hands_off`]: such a job is never requeued or resized by cinch.
    pub hands_off: Option<String>,
    /// Its GPU count now (read for an elastic job's resize only).
    pub gpus: u32,
    /// What cinch applied to it while it was pending (its record outlives the start).
    pub applied: Applied,
    /// What cinch.conf's `IdleAction` says for its partition and QOS.
    pub idle_action: IdleAction,
    /// Whether its record carries cinch's idle-GPU warning (the round takes it off once no
    /// answer gives it, even one written before slurmctld restarted).
    pub idle_warned: bool,
}

#[cfg(test)]
mod shared_text_tests {
    use super::*;

    /// An empty text holds no `Arc` (so no record shares the process-wide empty one), however it
    /// is made; any other is kept whole and reads back as written.
    #[test]
    fn empty_text_holds_nothing_and_other_text_reads_back() {
        for empty in [
            SharedText::default(),
            SharedText::from(""),
            SharedText::from(String::new()),
        ] {
            assert!(empty.0.is_none());
            assert_eq!(empty, "");
            assert_eq!(format!("{empty}|{empty:?}"), "|\"\"");
        }
        let why = SharedText::from("waits | for its shape");
        assert_eq!(why, "waits | for its shape");
        assert_eq!(why, SharedText::from(String::from("waits | for its shape")));
        assert_ne!(why, SharedText::default());
        let shared = why.clone();
        assert!(Arc::ptr_eq(
            shared.0.as_ref().unwrap(),
            why.0.as_ref().unwrap()
        ));
    }
}
