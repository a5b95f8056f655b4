//! What the optimizer answers: per pending job, what to change and why.

use serde::{Deserialize, Serialize};

use crate::wire::mode::Mode;
use crate::wire::reason::Reason;

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
    /// A running job's GPUs have been idle (docs/policies/idle.md): since when, and whether to
    /// cancel it for that. Alone, a warning; with `requeue`, an idle requeue; each checked by the
    /// plugin against its own cinch.conf (`IdleAction`, the grace and the warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleDecision>,
    /// Why, in words an admin or user can read.
    // Typed clauses here, put into words on the wire (`wire::reason`).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub reason: Reason,
    /// How long the decision stays valid without being renewed, in seconds; after that the plugin
    /// undoes it.
    pub ttl_s: u32,
}

impl Decision {
    /// A decision that changes nothing and only records why.
    pub fn explain(job_id: u32, reason: impl Into<Reason>, ttl_s: u32) -> Self {
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
            idle: None,
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
            || self.idle.is_some_and(|i| i.cancel)
    }
}

/// What the optimizer says of a running job whose GPUs stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct IdleDecision {
    /// Since when (Unix seconds) every reading of its GPUs was idle.
    pub since: i64,
    /// Cancel the job (only where the admin's `IdleAction` for it is `cancel`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
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
    /// Whose stated QoS targets the policy deciding counts, so that the plugin can tell users
    /// at submission when theirs will not (absent: not said, as from a cinch before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stated_targets: Option<StatedTargets>,
    /// What the job watchers measured of running jobs alone on one GPU, new since the last
    /// answer: the plugin counts it with what jobs report of themselves for its sharing
    /// decisions (docs/policies/sharing.md). Absent: nothing new.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<ObservedUse>,
}

/// A running job of one whole GPU, as its watcher read it: the most GPU memory in use at any
/// reading, and its mean busy share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ObservedUse {
    pub job_id: u32,
    pub peak_mib: u64,
    /// 0-100.
    pub busy_percent: u32,
}

/// Whose QoS targets stated in hints (`due`, `turnaround`, `start_within`: `--cinch-due` and
/// the like) the policy deciding counts. Slurm's own `--deadline` is not a stated target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "count", rename_all = "snake_case", deny_unknown_fields)]
pub enum StatedTargets {
    /// Every user's.
    Everyone,
    /// Only those of jobs in these Slurm accounts or QOS (both empty: nobody's).
    Listed {
        #[serde(default)]
        accounts: Vec<String>,
        #[serde(default)]
        qos: Vec<String>,
    },
    /// The policy deciding (named) does not use QoS targets.
    Unused { policy: String },
}

impl StatedTargets {
    /// Whether a job in `account` and `qos` has its stated targets counted: `Err` with why not,
    /// in words for its user, naming the admin's setting.
    pub fn counted_for(&self, account: Option<&str>, qos: Option<&str>) -> Result<(), String> {
        match self {
            StatedTargets::Everyone => Ok(()),
            StatedTargets::Listed {
                accounts,
                qos: listed_qos,
            } => {
                let listed = |list: &[String], name: Option<&str>| {
                    name.is_some_and(|n| list.iter().any(|l| l == n))
                };
                if listed(accounts, account) || listed(listed_qos, qos) {
                    return Ok(());
                }
                if accounts.is_empty() && listed_qos.is_empty() {
                    return Err("this site does not count targets users state (admin: \
                                user_targets)"
                        .into());
                }
                let mut only = Vec::new();
                if !accounts.is_empty() {
                    only.push(format!("account {}", accounts.join(", ")));
                }
                if !listed_qos.is_empty() {
                    only.push(format!("QOS {}", listed_qos.join(", ")));
                }
                Err(format!(
                    "this site counts stated targets only in {}, not this job's (admin: \
                     user_target_accounts, user_target_qos)",
                    only.join(" and ")
                ))
            }
            StatedTargets::Unused { policy } => Err(format!(
                "the policy in force ({policy}) does not use QoS targets"
            )),
        }
    }
}
