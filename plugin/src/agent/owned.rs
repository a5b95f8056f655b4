//! What cinch owns of a job, as its AdminComment records it: the `cinch-decision:` segment (what
//! the apply path applied, so it survives slurmctld restarts and can be undone) and job_submit's
//! submit-hold marker inside the `cinch:` record. See docs/operations.md.

use cinch_core::enact::apply::Applied;

pub use cinch_core::enact::admin_comment::{
    format_applied, parse_applied, DECISION_PREFIX, HOLD_KEY,
};

use crate::record::{segment, RECORD_PREFIX, REQUEUE_OPT_IN};

/// What cinch applied to the job, from its AdminComment (empty when nothing).
pub fn applied_of(admin_comment: Option<&str>) -> Applied {
    segment(admin_comment, DECISION_PREFIX)
        .and_then(parse_applied)
        .unwrap_or_default()
}

/// The submit-time hold job_submit placed, if the job still carries it.
pub fn submit_hold(admin_comment: Option<&str>) -> Option<i64> {
    segment(admin_comment, RECORD_PREFIX)?
        .split_whitespace()
        .find_map(|w| w.strip_prefix(HOLD_KEY))
        .and_then(|t| cinch_core::slurm::slurm_time::parse_time(t).ok())
}

/// Whether the user gave `--requeue` themselves, as job_submit recorded it. Slurm's own Requeue
/// flag is no consent: the cluster default `JobRequeue=1` sets it on every batch job.
pub fn requeue_opted_in(admin_comment: Option<&str>) -> bool {
    segment(admin_comment, RECORD_PREFIX)
        .is_some_and(|record| record.split_whitespace().any(|w| w == REQUEUE_OPT_IN))
}
