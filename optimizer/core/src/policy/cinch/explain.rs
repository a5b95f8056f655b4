//! Explain: the words of the reasons cinch gives, where they take more than a `format!`.

use super::*;

/// A job's QoS targets, predicted finish and slack, and what cinch does about them, in words.
pub(super) fn describe_qos(out: &mut String, q: &QosRank, r: &Ranked, now: i64) {
    for problem in &q.targets.problems {
        let _ = write!(out, "QoS {problem}; ");
    }
    if q.targets.is_empty() {
        return;
    }
    let finish = now.saturating_add(r.remaining_s.ceil() as i64);
    let _ = write!(
        out,
        "QoS target: {}; predicted finish {} if started now ({} to run, from {}), {}: ",
        q.targets.describe(),
        crate::slurm::slurm_time::format_time(finish),
        crate::slurm::slurm_time::format_duration(r.remaining_s.ceil() as i64),
        r.prediction.source.describe(),
        qos::describe_slack(q.allowance_s),
    );
    out.push_str(if q.urgent {
        "urgent, ahead of the jobs without a target (smallest slack first); "
    } else if !q.trusted {
        "run-time predictions here are off by more than 2x on average, too poor to order by \
         slack: usual order; "
    } else if q.allowance_s < 0.0 {
        "cannot be met any more, not chased (usual order); "
    } else {
        "enough slack, usual order for now; "
    });
}
