//! Explain: the clauses of the reasons cinch gives, where they take more than one value
//! (their words are in `wire::reason`).

use super::*;
use crate::wire::reason::{QosStance, QosTarget};

/// A job's QoS targets, predicted finish and slack, and what cinch does about them.
pub(super) fn describe_qos(out: &mut Reason, q: &QosRank, r: &Ranked, now: i64) {
    for problem in &q.targets.problems {
        out.push(Clause::QosProblem(problem.clone()));
    }
    if q.targets.is_empty() {
        return;
    }
    let run_s = r.remaining_s.ceil() as i64;
    out.push(Clause::QosTarget(QosTarget {
        targets: q.targets.describe(),
        finish: now.saturating_add(run_s),
        run_s,
        source: r.prediction.source.describe(),
        allowance_s: q.allowance_s,
        stance: if q.urgent {
            QosStance::Urgent
        } else if !q.trusted {
            QosStance::Untrusted
        } else if q.allowance_s < 0.0 {
            QosStance::Missed
        } else {
            QosStance::Slack
        },
    }));
}
