//! Explain: the words of the reasons cinch gives, where they take more than a `format!`.

use super::*;

/// A number shown with one decimal, without the float formatter's exact-digit machinery (this
/// runs for every pending job every round).
pub(super) struct OneDecimal(pub(super) f64);

impl std::fmt::Display for OneDecimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tenths = (self.0 * 10.0).round();
        if !tenths.is_finite() || tenths.abs() >= 1e15 {
            return write!(f, "{:.1}", self.0);
        }
        // Digits written by hand: three of these go into every pending job's reason every
        // round, and the formatter's integer machinery was most of their cost.
        let tenths = tenths as i64;
        let mut buf = [0u8; 24];
        let mut at = buf.len();
        let mut push = |b: u8| {
            at -= 1;
            buf[at] = b;
        };
        let mut n = tenths.unsigned_abs();
        push(b'0' + (n % 10) as u8);
        push(b'.');
        n /= 10;
        loop {
            push(b'0' + (n % 10) as u8);
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if tenths < 0 {
            push(b'-');
        }
        f.write_str(std::str::from_utf8(&buf[at..]).map_err(|_| std::fmt::Error)?)
    }
}

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
