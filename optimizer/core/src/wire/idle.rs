//! Idle GPUs as cinch.conf defines them (docs/policies/idle.md): when a running job's GPUs
//! count as idle, and what cinch does about it.

use serde::{Deserialize, Serialize};

/// What cinch does with a running job whose GPUs stay idle (cinch.conf `IdleAction`, per
/// partition or QOS; docs/policies/idle.md). Resolved by the plugin for each job, which enforces
/// it whatever the optimizer asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    /// Flag the job (`cinch idle`, `cinch why`, metrics, the admin's mail command): nothing more.
    #[default]
    Report,
    /// Requeue it, if its user opted in to requeues (`--requeue`, `ckpt=yes`) as for every
    /// requeue cinch makes; otherwise report it.
    Requeue,
    /// Cancel it: the admin's choice for a partition or QOS, after the warnings.
    Cancel,
}

impl IdleAction {
    pub fn name(self) -> &'static str {
        match self {
            IdleAction::Report => "report",
            IdleAction::Requeue => "requeue",
            IdleAction::Cancel => "cancel",
        }
    }

    pub fn parse(text: &str) -> Option<IdleAction> {
        match text.trim().to_ascii_lowercase().as_str() {
            "report" => Some(IdleAction::Report),
            "requeue" => Some(IdleAction::Requeue),
            "cancel" => Some(IdleAction::Cancel),
            _ => None,
        }
    }
}

/// When a running job's GPUs count as idle, as the site's cinch.conf says (`IdleGpuPercent`,
/// `IdleGraceMinutes`, `IdleWarnMinutes`): the plugin sends them with each snapshot and enforces
/// them on every idle requeue or cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct IdleRules {
    /// A reading under this share of busy time (0-100) is idle; 0: no job is ever idle.
    pub gpu_percent: u32,
    /// A job is flagged (warned) once its GPUs were idle this long without a busy reading.
    pub grace_s: u32,
    /// Its action comes this long after the flag, if its GPUs stay idle.
    pub warn_s: u32,
}

/// The longest grace or warning cinch.conf may set: a week.
pub const MAX_IDLE_WAIT_S: u32 = 7 * 86_400;

impl Default for IdleRules {
    /// Busy under 5% of the time for two hours (Princeton's rule for GPU jobs at 0%), then 30
    /// minutes' warning.
    fn default() -> Self {
        IdleRules {
            gpu_percent: 5,
            grace_s: 2 * 3600,
            warn_s: 30 * 60,
        }
    }
}

impl IdleRules {
    pub fn validate(&self) -> Result<(), String> {
        if self.gpu_percent > 100 {
            return Err(format!(
                "gpu_percent {} is over 100 (a share of busy time)",
                self.gpu_percent
            ));
        }
        for (name, value) in [("grace_s", self.grace_s), ("warn_s", self.warn_s)] {
            if value > MAX_IDLE_WAIT_S {
                return Err(format!(
                    "{name} {value} is over a week ({MAX_IDLE_WAIT_S} s)"
                ));
            }
        }
        Ok(())
    }

    /// Whether a reading of `busy_percent` is idle.
    pub fn is_idle(&self, busy_percent: u32) -> bool {
        busy_percent < self.gpu_percent
    }

    /// The earliest a job idle since `since` may be requeued or cancelled for it: after the
    /// grace and the warning.
    pub fn act_at(&self, since: i64) -> i64 {
        since + i64::from(self.grace_s) + i64::from(self.warn_s)
    }
}
