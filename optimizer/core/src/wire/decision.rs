//! What the optimizer answers: per pending job, what to change and why.

use serde::{Deserialize, Serialize};

use crate::wire::mode::Mode;

/// One job's decision (a pending job's, or a requeue of a running one). Every action is optional; a decision with none only explains
/// why the job is left to Slurm. The plugin applies actions through `slurm_update_job`, so Slurm
/// validates each of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub job_id: u32,
    /// Run the job on exactly these nodes (ReqNodeList).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_nodes: Option<Vec<String>>,
    /// Change the job's node count to match `pin_nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    /// Keep the job from starting before this Unix time (BeginTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_until: Option<i64>,
    /// `true`: hold the job; `false`: release a hold cinch placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    /// `true`: requeue this *running* job (`scontrol requeue`) so it can restart on a better
    /// placement. Only for jobs submitted with `--requeue` that said they checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    /// Run the job on this many GPUs in total: an elastic job's size (`elastic=MIN-MAX`), set
    /// on a pending job before it starts, or with `requeue` on a running one (it restarts from
    /// its checkpoint at the new size). Only within the range its user declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Why, in words an admin or user can read.
    pub reason: String,
    /// How long the decision stays valid without being renewed, in seconds; after that the plugin
    /// undoes it.
    pub ttl_s: u32,
}

impl Decision {
    /// A decision that changes nothing and only records why.
    pub fn explain(job_id: u32, reason: impl Into<String>, ttl_s: u32) -> Self {
        Decision {
            job_id,
            pin_nodes: None,
            node_count: None,
            delay_until: None,
            hold: None,
            priority: None,
            nice: None,
            requeue: None,
            gpus: None,
            reason: reason.into(),
            ttl_s,
        }
    }

    /// Whether the decision asks Slurm to change anything.
    pub fn is_action(&self) -> bool {
        self.pin_nodes.is_some()
            || self.node_count.is_some()
            || self.delay_until.is_some()
            || self.hold.is_some()
            || self.priority.is_some()
            || self.nice.is_some()
            || self.requeue == Some(true)
            || self.gpus.is_some()
    }
}

/// The answer to one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Decisions {
    pub schema_version: u32,
    /// The policy that decided.
    pub policy: String,
    /// `shadow`: log these, apply nothing. `off`: no decisions. `enforce`: apply.
    pub mode: Mode,
    /// The snapshot's time the decisions refer to (Unix seconds).
    pub time: i64,
    pub decisions: Vec<Decision>,
}
