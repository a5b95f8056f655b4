//! What cinch owns of a job, as its AdminComment records it: the `cinch-decision:` segment (what
//! the apply path applied, so it survives slurmctld restarts and can be undone) and job_submit's
//! submit-hold marker inside the `cinch:` record. See docs/operations.md.

use cinch_core::apply::Applied;

use crate::record::{segment, RECORD_PREFIX, REQUEUE_OPT_IN};

/// Prefix of the AdminComment segment recording what cinch applied.
pub const DECISION_PREFIX: &str = "cinch-decision:";
/// Submit-time hold marker inside the `cinch:` record (written by job_submit).
pub const HOLD_KEY: &str = "hold_until=";

/// The segment text of what cinch applied: `cinch-decision: pin=n1,n2 nodes_was=1 ... until=T
/// why=...`.
pub fn format_applied(applied: &Applied) -> String {
    let mut out = String::from(DECISION_PREFIX);
    if let Some(pin) = &applied.pin {
        out.push_str(&format!(" pin={}", pin.join(",")));
    }
    if let Some(n) = applied.nodes_was {
        out.push_str(&format!(" nodes_was={n}"));
    }
    if let Some(t) = applied.begin {
        out.push_str(&format!(" begin={t}"));
    }
    if applied.hold {
        out.push_str(" hold=1");
    }
    if let Some(p) = applied.prio {
        out.push_str(&format!(" prio={p}"));
    }
    if let Some((was, ours)) = applied.nice {
        out.push_str(&format!(" nice_was={was} nice={ours}"));
    }
    if let Some((was, ours)) = applied.gpus {
        out.push_str(&format!(" gpus_was={was} gpus={ours}"));
    }
    // The reason goes last and may hold spaces; '|' would split the AdminComment.
    let why = applied.why.replace('|', "/").replace(['\n', '\r'], " ");
    out.push_str(&format!(" until={} why={}", applied.until, why));
    out
}

/// What cinch applied, from its AdminComment segment (`None` if it is not one).
pub fn parse_applied(segment: &str) -> Option<Applied> {
    let rest = segment.strip_prefix(DECISION_PREFIX)?;
    let (fields, why) = match rest.find(" why=") {
        Some(i) => (&rest[..i], rest[i + 5..].trim().to_string()),
        None => (rest, String::new()),
    };
    let mut applied = Applied {
        why,
        ..Applied::default()
    };
    let mut nice_was = None;
    let mut nice = None;
    let mut gpus_was = None;
    let mut gpus = None;
    for pair in fields.split_whitespace() {
        let (key, value) = pair.split_once('=')?;
        match key {
            "pin" => applied.pin = Some(value.split(',').map(str::to_string).collect()),
            "nodes_was" => applied.nodes_was = Some(value.parse().ok()?),
            "begin" => applied.begin = Some(value.parse().ok()?),
            "hold" => applied.hold = value == "1",
            "prio" => applied.prio = Some(value.parse().ok()?),
            "nice_was" => nice_was = Some(value.parse().ok()?),
            "nice" => nice = Some(value.parse().ok()?),
            "gpus_was" => gpus_was = Some(value.parse().ok()?),
            "gpus" => gpus = Some(value.parse().ok()?),
            "until" => applied.until = value.parse().ok()?,
            _ => {} // written by a newer cinch: ignore
        }
    }
    applied.nice = nice_was.zip(nice);
    applied.gpus = gpus_was.zip(gpus);
    Some(applied)
}

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
        .and_then(|t| t.parse().ok())
}

/// Whether the user gave `--requeue` themselves, as job_submit recorded it. Slurm's own Requeue
/// flag is no consent: the cluster default `JobRequeue=1` sets it on every batch job.
pub fn requeue_opted_in(admin_comment: Option<&str>) -> bool {
    segment(admin_comment, RECORD_PREFIX)
        .is_some_and(|record| record.split_whitespace().any(|w| w == REQUEUE_OPT_IN))
}
