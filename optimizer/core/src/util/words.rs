//! Numbers in the words reasons are written in, so that every reason agrees in number: `1 GPU`,
//! `8 GPUs`, `12 min` rather than `0.2 h`.

use std::fmt;

/// A number shown with one decimal, without the float formatter's exact-digit machinery (this
/// runs for every pending job every round).
pub struct OneDecimal(pub f64);

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

/// `n` things, singular or plural: `1 GPU`, `2 GPUs`, `1 node`.
#[derive(Debug, Clone, Copy)]
pub struct Count(pub u64, pub &'static str);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Count(n, noun) = *self;
        write!(f, "{n} {noun}{}", if n == 1 { "" } else { "s" })
    }
}

/// `n` GPUs.
pub fn gpus(n: impl Into<u64>) -> Count {
    Count(n.into(), "GPU")
}

/// `n` nodes.
pub fn nodes(n: impl Into<u64>) -> Count {
    Count(n.into(), "node")
}

/// A duration given in seconds, as people read one in a reason: hours with one decimal from
/// 0.1 h, minutes below (`0.0 h` says nothing).
#[derive(Debug, Clone, Copy)]
pub struct Hours(pub f64);

impl fmt::Display for Hours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if !s.is_finite() {
            return write!(f, "{s} h");
        }
        if s >= 360.0 {
            return write!(f, "{} h", OneDecimal(s / 3600.0));
        }
        match (s / 60.0).round() as i64 {
            m if m >= 1 => write!(f, "{m} min"),
            _ => f.write_str("under a minute"),
        }
    }
}

/// GPU time given in GPU-seconds: GPU-hours with one decimal from 0.1, GPU-minutes below.
#[derive(Debug, Clone, Copy)]
pub struct GpuHours(pub f64);

impl fmt::Display for GpuHours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if !s.is_finite() || s >= 360.0 {
            return write!(f, "{} GPU-hours", OneDecimal(s / 3600.0));
        }
        match (s / 60.0).round() as i64 {
            1 => f.write_str("1 GPU-minute"),
            m if m > 1 => write!(f, "{m} GPU-minutes"),
            _ => f.write_str("under a GPU-minute"),
        }
    }
}

/// What is wrong with a reason as its reader sees it, if anything: a number that disagrees
/// with its noun (`1 GPUs`), a time that says nothing (`0.0 h`), a gap left by a broken line,
/// a sentence cut off before its object, an empty clause. Checked over every reason the
/// policies give in the tests (core, simulator and live).
pub fn reason_problems(reason: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let words: Vec<&str> = reason.split_whitespace().collect();
    for pair in words.windows(2) {
        let number = pair[0].trim_start_matches(['(', '~']);
        let noun = pair[1].trim_end_matches([',', ';', ':', ')', '.']);
        if number == "1" && ["GPUs", "nodes", "jobs", "racks", "GPU-hours"].contains(&noun) {
            problems.push(format!("'1 {noun}'"));
        }
        if matches!(number, "0.0" | "-0.0") && ["h", "GPU-hours"].contains(&noun)
            || number == "0" && noun == "min"
        {
            problems.push(format!("'{number} {noun}' says nothing"));
        }
    }
    for word in &words {
        let bare = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        if matches!(bare, "inf" | "NaN") {
            problems.push(format!("'{word}' is not a number a reader can use"));
        }
    }
    if reason.contains("  ") {
        problems.push("a run of spaces (a broken line in the source?)".into());
    }
    for cut in [" to;", " to,", " the;", " a;", " of;", " and;", " for;"] {
        if reason.contains(cut) {
            problems.push(format!(
                "a clause cut off at '{}'",
                cut.trim().trim_end_matches([';', ','])
            ));
        }
    }
    let trimmed = reason.trim_end();
    for end in [" to", " the", " a", " of", " and", " for", ";", ","] {
        if trimmed.ends_with(end) {
            problems.push(format!("ends with '{}'", end.trim()));
        }
    }
    if reason.contains(";;") || reason.contains("; ;") || reason.starts_with(';') {
        problems.push("an empty clause".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_agree_with_their_nouns_and_short_times_are_minutes() {
        assert_eq!(gpus(1u32).to_string(), "1 GPU");
        assert_eq!(gpus(0u32).to_string(), "0 GPUs");
        assert_eq!(gpus(32u32).to_string(), "32 GPUs");
        assert_eq!(nodes(1u32).to_string(), "1 node");
        assert_eq!(Hours(7200.0).to_string(), "2.0 h");
        assert_eq!(Hours(180.0).to_string(), "3 min");
        assert_eq!(Hours(20.0).to_string(), "under a minute");
        assert_eq!(Hours(360.0).to_string(), "0.1 h");
        assert_eq!(Hours(340.0).to_string(), "6 min");
        assert_eq!(GpuHours(7200.0).to_string(), "2.0 GPU-hours");
        assert_eq!(GpuHours(60.0).to_string(), "1 GPU-minute");
        assert_eq!(GpuHours(10.0).to_string(), "under a GPU-minute");
    }

    #[test]
    fn the_reason_lint_finds_what_users_reported() {
        for (reason, problem) in [
            ("consolidated: 1 GPUs on 1 node", "'1 GPUs'"),
            ("predicted 0.0 h on 32 GPUs", "'0.0 h' says nothing"),
            (
                "expected free on n1 at          2026 by",
                "a run of spaces (a broken line in the source?)",
            ),
            (
                "waits for its best shape, the first in cinch's order to; reserved: x",
                "a clause cut off at 'to'",
            ),
            ("waits;; left", "an empty clause"),
            (
                "spread would cost it ~inf s",
                "'~inf' is not a number a reader can use",
            ),
        ] {
            assert!(
                reason_problems(reason).iter().any(|p| p == problem),
                "{reason}: {:?}",
                reason_problems(reason)
            );
        }
        assert!(reason_problems(
            "consolidated: 8 GPUs on 2 nodes in rack rack1, the fewest that have them free now"
        )
        .is_empty());
    }
}
