//! What the plugin tells the optimizer: the cluster's nodes, running jobs and pending jobs at one
//! instant. Versioned JSON (see docs/api.md); unknown fields are refused so that a plugin/optimizer
//! version mismatch is an error, not silently ignored data.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// The snapshot/decisions schema version this optimizer speaks.
pub const SCHEMA_VERSION: u32 = 1;

/// Pending jobs one snapshot lists at most, the first in Slurm's order (priority, then submit
/// time): the live agent and the simulator cut at the same place, so simulated results see the
/// queue as live decisions do.
pub const MAX_SNAPSHOT_PENDING: usize = 10_000;

/// The longest the agent goes without sending a snapshot, seconds: even with nothing changed in
/// the cluster it asks the optimizer at least this often, as answers can depend on time
/// (attained service, timers) and renew what cinch applied. A policy may count on looking at
/// every pending job at least this often.
pub const MAX_QUIET_S: i64 = 60;

/// The snapshot's header, declared once: the scalar fields a snapshot and its delta
/// ([`crate::wire::exchange::SnapshotDelta`], which sends them every time) both carry, with
/// their wire form. It gives [`Header`] and `with_header!`, which declares a struct with these
/// fields first and its `header()`/`set_header()`; a new scalar field of the snapshot is one
/// entry here. (Not a flattened struct: serde's `flatten` does not work with
/// `deny_unknown_fields`, which every wire type keeps.)
macro_rules! snapshot_header {
    ($d:tt $($(#[$attr:meta])* $field:ident: $ty:ty,)*) => {
        /// The scalar fields a snapshot and its delta both carry (as the snapshot's).
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        pub struct Header {
            $($(#[$attr])* pub $field: $ty,)*
        }

        macro_rules! with_header {
            ($d(#[$d meta:meta])* pub struct $d name:ident { $d($d body:tt)* }) => {
                $d(#[$d meta])*
                pub struct $d name {
                    $($(#[$attr])* pub $field: $ty,)*
                    $d($d body)*
                }

                impl $d name {
                    /// Its header fields.
                    pub fn header(&self) -> Header {
                        Header {
                            $($field: self.$field.clone(),)*
                        }
                    }

                    /// Takes `header`'s fields as its own.
                    pub fn set_header(&mut self, header: Header) {
                        $(self.$field = header.$field;)*
                    }
                }
            };
        }
    };
}

snapshot_header! { $
    /// Must be 1.
    schema_version: u32,
    /// When the snapshot was taken, Unix seconds (the plugin's clock).
    time: i64,
    /// Seconds Slurm keeps a requeued job from starting again: the site's credential lifetime
    /// (`AuthInfo=cred_expire`) + 1, what a requeue costs besides the job's restart. Absent:
    /// Slurm's default, 121.
    #[serde(default = "crate::wire::snapshot::default_requeue_delay_s")]
    requeue_delay_s: u32,
    /// The plugin's agent, as it reports itself for the optimizer's /metrics (absent from
    /// simulated and hand-made snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<crate::wire::snapshot::AgentStatus>,
    /// When a running job's GPUs count as idle, as cinch.conf says (absent: from an agent
    /// before idle GPUs, or a simulation without them; no job is flagged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle: Option<crate::wire::idle::IdleRules>,
}

pub(crate) use with_header;

with_header! {
    // `Default`: empty, and invalid until given a header (schema version 0).
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Snapshot {
        #[serde(default)]
        pub nodes: Vec<Node>,
        #[serde(default)]
        pub running: Vec<RunningJob>,
        #[serde(default)]
        pub pending: Vec<PendingJob>,
    }
}

/// The shortest requeue delay Slurm has: its least credential lifetime, 5 s, + 1.
pub const MIN_REQUEUE_DELAY_S: u32 = 6;
/// The longest a snapshot may state: a day's credential lifetime + 1 (far past any site's).
pub const MAX_REQUEUE_DELAY_S: u32 = 86_401;

pub(crate) fn default_requeue_delay_s() -> u32 {
    crate::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S
}

/// What the plugin's agent reports of itself with each snapshot (docs/metrics.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentStatus {
    /// cinch.conf's `Mode` (what the plugin allows, whatever the optimizer says).
    pub mode: crate::Mode,
    /// Whether the agent's breaker was open before this round (it had stood aside after
    /// repeated failures; this snapshot is its probe).
    pub breaker_open: bool,
    /// Jobs carrying each change cinch applied and still holds: `pin`, `delay`, `hold`,
    /// `priority`, `nice`, `gpus`.
    #[serde(default)]
    pub applied: BTreeMap<String, u32>,
    /// Wall time of the agent's previous round, seconds.
    pub last_round_s: f64,
    /// Rounds whose exchange with the optimizer failed since slurmctld started.
    pub failed_rounds: u64,
    /// The agent's round as cinch.conf sets it (absent: from an agent before it was sent): the
    /// portfolio replays the cluster's past with the site's own cadence and requeue bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<AgentRound>,
}

/// The settings of the agent's round that a replay of the cluster's past must share to be
/// faithful (docs/policies/portfolio.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentRound {
    /// cinch.conf's `IntervalSeconds`.
    pub interval_s: u32,
    /// cinch.conf's `MaxRequeuesPerJob`.
    pub max_requeues_per_job: u32,
    /// cinch.conf's `MaxRequeuesPerHour`.
    pub max_requeues_per_hour: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    #[default]
    Idle,
    Mixed,
    Allocated,
    Down,
    Drained,
    Unknown,
}

impl NodeState {
    /// Whether Slurm may start new work there.
    pub fn schedulable(self) -> bool {
        matches!(self, NodeState::Idle | NodeState::Mixed)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    pub gpus_total: u32,
    #[serde(default)]
    pub gpus_alloc: u32,
    #[serde(default)]
    pub state: NodeState,
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Leaf switch (rack) from topology.conf; `None` when the cluster has no topology.
    #[serde(default)]
    pub rack: Option<String>,
}

impl Node {
    /// GPUs free for new work: none on nodes Slurm would not schedule to.
    pub fn gpus_free(&self) -> u32 {
        if self.state.schedulable() {
            self.gpus_total.saturating_sub(self.gpus_alloc)
        } else {
            0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunningJob {
    pub job_id: u32,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub name: Option<String>,
    pub nodes: Vec<String>,
    pub gpus: u32,
    /// Unix seconds.
    pub start_time: i64,
    /// When it was submitted, unix seconds (what the record of the recent past keeps of a job
    /// that started before any snapshot showed it waiting); absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_time: Option<i64>,
    #[serde(default)]
    pub time_limit_min: Option<u32>,
    /// Whether Slurm may requeue the job (`--requeue`).
    #[serde(default)]
    pub requeue: bool,
    /// How often the job has been requeued already (Slurm's restart count).
    #[serde(default)]
    pub restarts: u32,
    /// cinch hints the user gave (e.g. `app=bert,ckpt=yes`), see docs/api.md.
    #[serde(default)]
    pub hints: crate::slurm::job_hints::Hints,
    /// The progress the job's output shows, as its watcher on the node last read it
    /// (docs/policies/progress.md). The agent never sends it: the optimizer adds the latest
    /// report it holds before it decides; the simulator sets it for the jobs that show progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,
    /// What cinch.conf's `IdleAction` says for the job's partition and QOS (absent: report).
    #[serde(default, skip_serializing_if = "is_report")]
    pub idle_action: crate::wire::idle::IdleAction,
}

fn is_report(action: &crate::wire::idle::IdleAction) -> bool {
    *action == crate::wire::idle::IdleAction::Report
}

/// Two readings of a running job's progress, in the steps its output counts (tqdm's `n/total`,
/// `step 1200/50000`, Keras's epochs and steps): the rate is measured between them, so what is
/// left and when it ends follow (`crate::models::progress`). Whole numbers, so that a snapshot
/// stays comparable and hashable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobProgress {
    /// Steps in the whole run, as the job printed them.
    pub total: u64,
    /// Steps done at `at` (Unix seconds).
    pub done: u64,
    pub at: i64,
    /// An earlier reading of the same run: `since_done` steps done at `since` (Unix seconds).
    pub since_done: u64,
    pub since: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PendingJob {
    pub job_id: u32,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The job's Slurm QOS (`--qos`), which admins may give a QoS class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Total GPUs the job needs.
    pub gpus: u32,
    /// Set for per-node requests (`--gres=gpu:N`, `--gpus-per-node=N`): every node gets N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    #[serde(default = "one")]
    pub min_nodes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_min: Option<u32>,
    /// Unix seconds.
    pub submit_time: i64,
    #[serde(default)]
    pub priority: u32,
    /// Slurm's priority of the job before any nice (`priority + nice`): the site's own order
    /// (multifactor's fair share, QOS, age; or priority/basic's submit order) that cinch's
    /// bounded nice adjustment adds to. Absent from older agents: cinch then plans in its own
    /// order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_priority: Option<u32>,
    /// Unix seconds (`--deadline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    /// The user's `--begin` (Unix seconds): the job cannot start before then. Delays cinch
    /// itself placed are not reported here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_time: Option<i64>,
    /// Nodes the user required (`--nodelist`); cinch never overrides them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_nodes: Vec<String>,
    /// Nodes the user excluded (`--exclude`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_nodes: Vec<String>,
    /// The user's `--constraint` expression, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// cinch hints the user gave (e.g. `app=bert`), see docs/api.md.
    #[serde(default, skip_serializing_if = "no_hints")]
    pub hints: crate::slurm::job_hints::Hints,
}

/// What is absent or empty in a pending job is left out of its JSON (the defaults read it
/// back): a round sends up to 10,000 of them.
fn no_hints(hints: &crate::slurm::job_hints::Hints) -> bool {
    hints.is_empty()
}

fn one() -> u32 {
    1
}

impl PendingJob {
    /// Its place in the order Slurm considers pending jobs ([`crate::slurm::order`]).
    pub fn slurm_order_key(&self) -> crate::slurm::order::OrderKey {
        crate::slurm::order::order_key(self.priority, self.submit_time, self.job_id)
    }

    /// A job of `user` asking for `gpus` GPUs on any nodes, submitted at `submit_time`, with
    /// nothing else set; callers set what they know with struct update syntax.
    pub fn new(job_id: u32, user: impl Into<String>, gpus: u32, submit_time: i64) -> PendingJob {
        PendingJob {
            job_id,
            user: user.into(),
            account: None,
            partition: None,
            qos: None,
            name: None,
            gpus,
            gpus_per_node: None,
            min_nodes: 1,
            max_nodes: None,
            time_limit_min: None,
            submit_time,
            priority: 0,
            site_priority: None,
            deadline: None,
            begin_time: None,
            required_nodes: Vec::new(),
            excluded_nodes: Vec::new(),
            constraint: None,
            hints: crate::slurm::job_hints::Hints::default(),
        }
    }
}

/// A snapshot that cannot be scheduled on, with the first reason found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("schema_version {0} is not supported (this optimizer speaks {SCHEMA_VERSION})")]
    SchemaVersion(u32),
    #[error("time {0} is negative")]
    NegativeTime(i64),
    #[error(
        "requeue_delay_s {0} is not a Slurm credential lifetime + 1 (from {MIN_REQUEUE_DELAY_S} \
         to {MAX_REQUEUE_DELAY_S})"
    )]
    RequeueDelay(u32),
    #[error("idle: {0}")]
    Idle(String),
    #[error("node #{0} has an empty name")]
    EmptyNodeName(usize),
    #[error("node '{0}' appears more than once")]
    DuplicateNode(String),
    #[error("node '{name}' has gpus_alloc {alloc} > gpus_total {total}")]
    OverAllocatedNode {
        name: String,
        alloc: u32,
        total: u32,
    },
    #[error("job {0} appears more than once")]
    DuplicateJob(u32),
    #[error("running job {job_id} is on unknown node '{node}'")]
    UnknownNodeOfRunningJob { job_id: u32, node: String },
    #[error("pending job {job_id}: {problem}")]
    BadPendingJob { job_id: u32, problem: String },
}

impl Snapshot {
    /// Checks what the policies rely on; a snapshot that fails is refused as a whole.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        if self.schema_version != SCHEMA_VERSION {
            return Err(SnapshotError::SchemaVersion(self.schema_version));
        }
        if self.time < 0 {
            return Err(SnapshotError::NegativeTime(self.time));
        }
        if !(MIN_REQUEUE_DELAY_S..=MAX_REQUEUE_DELAY_S).contains(&self.requeue_delay_s) {
            return Err(SnapshotError::RequeueDelay(self.requeue_delay_s));
        }
        if let Some(idle) = &self.idle {
            idle.validate().map_err(SnapshotError::Idle)?;
        }
        let mut names = HashSet::with_capacity(self.nodes.len());
        for (index, node) in self.nodes.iter().enumerate() {
            if node.name.is_empty() {
                return Err(SnapshotError::EmptyNodeName(index));
            }
            if !names.insert(node.name.as_str()) {
                return Err(SnapshotError::DuplicateNode(node.name.clone()));
            }
            if node.gpus_alloc > node.gpus_total {
                return Err(SnapshotError::OverAllocatedNode {
                    name: node.name.clone(),
                    alloc: node.gpus_alloc,
                    total: node.gpus_total,
                });
            }
        }
        let mut jobs = HashSet::with_capacity(self.running.len() + self.pending.len());
        for job in &self.running {
            if !jobs.insert(job.job_id) {
                return Err(SnapshotError::DuplicateJob(job.job_id));
            }
            if let Some(node) = job.nodes.iter().find(|n| !names.contains(n.as_str())) {
                return Err(SnapshotError::UnknownNodeOfRunningJob {
                    job_id: job.job_id,
                    node: node.clone(),
                });
            }
        }
        for job in &self.pending {
            if !jobs.insert(job.job_id) {
                return Err(SnapshotError::DuplicateJob(job.job_id));
            }
            let bad = |problem: String| SnapshotError::BadPendingJob {
                job_id: job.job_id,
                problem,
            };
            if job.min_nodes == 0 {
                return Err(bad("min_nodes must be at least 1".into()));
            }
            if let Some(max) = job.max_nodes {
                if max < job.min_nodes {
                    return Err(bad(format!(
                        "max_nodes {max} is below min_nodes {}",
                        job.min_nodes
                    )));
                }
            }
            if job.gpus_per_node == Some(0) {
                return Err(bad("gpus_per_node must be at least 1 when set".into()));
            }
        }
        Ok(())
    }

    /// Nodes by name.
    pub fn node_index(&self) -> HashMap<&str, &Node> {
        self.nodes.iter().map(|n| (n.name.as_str(), n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pending, snapshot};

    #[test]
    fn a_well_formed_snapshot_validates() {
        let snap = snapshot(vec![node("n1", 8, 0, "r1")], vec![pending(1, 4)]);
        assert_eq!(snap.validate(), Ok(()));
    }

    #[test]
    fn refuses_what_policies_cannot_trust() {
        let mut snap = snapshot(vec![node("n1", 8, 0, "r1")], vec![pending(1, 4)]);
        snap.schema_version = 2;
        assert_eq!(snap.validate(), Err(SnapshotError::SchemaVersion(2)));

        let mut snap = snapshot(vec![node("n1", 8, 0, "r1")], vec![]);
        for (delay, ok) in [(5, false), (6, true), (86_401, true), (86_402, false)] {
            snap.requeue_delay_s = delay;
            assert_eq!(snap.validate().is_ok(), ok, "{delay}");
        }
        assert_eq!(
            snap.validate().unwrap_err().to_string(),
            "requeue_delay_s 86402 is not a Slurm credential lifetime + 1 (from 6 to 86401)"
        );

        let snap = snapshot(vec![node("n1", 8, 0, "r1"), node("n1", 8, 0, "r1")], vec![]);
        assert_eq!(
            snap.validate(),
            Err(SnapshotError::DuplicateNode("n1".into()))
        );

        let snap = snapshot(vec![node("n1", 8, 9, "r1")], vec![]);
        assert!(matches!(
            snap.validate(),
            Err(SnapshotError::OverAllocatedNode { .. })
        ));

        let snap = snapshot(
            vec![node("n1", 8, 0, "r1")],
            vec![pending(1, 4), pending(1, 2)],
        );
        assert_eq!(snap.validate(), Err(SnapshotError::DuplicateJob(1)));

        let mut snap = snapshot(vec![node("n1", 8, 0, "r1")], vec![]);
        snap.running.push(RunningJob {
            job_id: 9,
            user: "u".into(),
            nodes: vec!["n7".into()],
            gpus: 1,
            ..RunningJob::default()
        });
        assert_eq!(
            snap.validate().unwrap_err().to_string(),
            "running job 9 is on unknown node 'n7'"
        );

        let mut job = pending(3, 4);
        job.max_nodes = Some(1);
        job.min_nodes = 2;
        let snap = snapshot(vec![node("n1", 8, 0, "r1")], vec![job]);
        assert_eq!(
            snap.validate().unwrap_err().to_string(),
            "pending job 3: max_nodes 1 is below min_nodes 2"
        );
    }

    #[test]
    fn a_snapshot_without_a_requeue_delay_has_slurms_default() {
        let snap: Snapshot =
            serde_json::from_str(r#"{"schema_version":1,"time":0,"nodes":[]}"#).unwrap();
        assert_eq!(snap.requeue_delay_s, 121);
    }

    #[test]
    fn unknown_fields_are_refused_by_the_schema() {
        let err = serde_json::from_str::<Snapshot>(
            r#"{"schema_version":1,"time":0,"nodes":[],"surprise":1}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown field `surprise`"),
            "{err}"
        );
    }

    #[test]
    fn free_gpus_only_on_schedulable_nodes() {
        let mut n = node("n1", 8, 3, "r1");
        assert_eq!(n.gpus_free(), 5);
        n.state = NodeState::Drained;
        assert_eq!(n.gpus_free(), 0);
    }
}
