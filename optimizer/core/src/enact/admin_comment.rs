//! The AdminComment cinch writes on a job (docs/operations.md): job_submit's `cinch:` record of
//! the request, and the `cinch-decision:` segment of what the apply path applied, beside any text
//! an admin keeps there (segments separated by ` | `). The plugin writes and reads it; `cinch
//! why` reads it for users.
//!
//! Times are written as `YYYY-MM-DDTHH:MM:SSZ` (UTC: exact, and readable without a time-zone
//! database in slurmctld); records from earlier versions with Unix seconds still parse.

use crate::enact::apply::Applied;
use crate::slurm::slurm_time::{format_time, parse_time};

pub use crate::slurm::job_hints::RECORD_PREFIX;
/// Separates cinch's record from an admin's own AdminComment text.
pub const SEPARATOR: &str = " | ";
/// Prefix of the AdminComment segment recording what cinch applied.
pub const DECISION_PREFIX: &str = "cinch-decision:";
/// Prefix of the AdminComment segment that keeps what cinch did to a job once it stopped, so
/// that `cinch why` still tells it whatever the mode now.
pub const PAST_PREFIX: &str = "cinch-past:";
/// Prefix of the AdminComment segment that warns a running job's user that its GPUs have been
/// idle, and what comes next (docs/policies/idle.md); gone once they are busy again.
pub const IDLE_PREFIX: &str = "cinch-idle:";
/// In the `cinch-decision:` segment: when cinch first changed the job (kept while it goes on
/// changing it).
const SINCE_KEY: &str = "since=";
/// Submit-time hold marker inside the `cinch:` record (written by job_submit).
pub const HOLD_KEY: &str = "hold_until=";
/// In the `cinch:` record: the user gave `--requeue` themselves.
pub const REQUEUE_OPT_IN: &str = "requeue=yes";

/// The `cinch-idle:` segment for a warning (the separator's `|` cannot appear in it).
pub fn format_idle(warning: &str) -> String {
    format!("{IDLE_PREFIX} {}", warning.replace('|', "/"))
}

/// The segment of an AdminComment that starts with `prefix`, if any.
pub fn segment<'a>(admin_comment: Option<&'a str>, prefix: &str) -> Option<&'a str> {
    let text = admin_comment?;
    // The usual AdminComment is cinch's record alone: one memchr instead of a substring search
    // (this runs for every job, every round).
    if !text.contains('|') {
        let text = text.trim();
        return text.starts_with(prefix).then_some(text);
    }
    text.split(SEPARATOR)
        .find_map(|piece| owned(piece, prefix))
        .map(|(_, segment)| segment)
}

/// A piece of an AdminComment split at ` | ` that is the segment starting with `prefix`: the
/// segment, and the pipes before it. An admin's text that ends in `|` (`note |`) makes the split
/// take that pipe for the separator, leaving `| cinch-decision: ...`; the pipe is the admin's.
fn owned<'a>(piece: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let t = piece.trim();
    let rest = t.trim_start_matches('|').trim_start();
    rest.starts_with(prefix)
        .then(|| (t[..t.len() - rest.len()].trim_end(), rest))
}

/// Replaces (or with `None` removes) the segment starting with `prefix` where it stands, keeping
/// every other segment — an admin's own text included, to the last character — in order; a new
/// segment goes last.
pub fn replace_segment(existing: Option<&str>, prefix: &str, new: Option<&str>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut placed = false;
    for piece in existing.unwrap_or("").split(SEPARATOR) {
        match owned(piece, prefix) {
            Some((pipes, _)) => {
                // The admin's trailing pipe goes back to the admin's text before it.
                if !pipes.is_empty() {
                    match out.last_mut() {
                        Some(last) => {
                            last.push(' ');
                            last.push_str(pipes);
                        }
                        None => out.push(pipes.to_string()),
                    }
                }
                if !placed {
                    out.extend(new.map(str::to_string));
                    placed = true;
                }
            }
            None => {
                let s = piece.trim();
                if !s.is_empty() {
                    out.push(s.to_string());
                }
            }
        }
    }
    if !placed {
        out.extend(new.map(str::to_string));
    }
    out.join(SEPARATOR)
}

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
    if let Some(n) = applied.max_nodes_was {
        out.push_str(&format!(" max_nodes_was={n}"));
    }
    if let Some(t) = applied.begin {
        out.push_str(&format!(" begin={}", format_time(t)));
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
    out.push_str(&format!(
        " until={} why={}",
        format_time(applied.until),
        why
    ));
    out
}

/// The decision segment for `applied`, with since when cinch has been changing the job.
pub fn format_applied_since(applied: &Applied, since: i64) -> String {
    let text = format_applied(applied);
    match text.find(" until=") {
        Some(i) => format!(
            "{} {SINCE_KEY}{}{}",
            &text[..i],
            format_time(since),
            &text[i..]
        ),
        None => text,
    }
}

/// Since when cinch has been changing the job, from its decision segment (`None`: a record
/// written before cinch kept it).
pub fn parse_since(segment: &str) -> Option<i64> {
    let rest = segment.strip_prefix(DECISION_PREFIX)?;
    let fields = rest.split(" why=").next().unwrap_or(rest);
    fields
        .split_whitespace()
        .find_map(|w| w.strip_prefix(SINCE_KEY))
        .and_then(|t| parse_time(t).ok())
}

/// What cinch did to a job, kept once it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Past {
    /// The kinds of change it had made, in words: `pin`, `delay`, `hold`, `priority`, `nice`,
    /// `gpus`.
    pub did: Vec<String>,
    /// When it first changed the job (`None`: not known, from a record before it was kept).
    pub since: Option<i64>,
    /// When it stopped.
    pub stopped: i64,
    /// Why it stopped.
    pub because: String,
    /// The reason of its last decision.
    pub why: String,
}

impl Past {
    /// What cinch stopped doing: the record it had applied, and why it stopped at `at`.
    pub fn of(old: &Applied, since: Option<i64>, at: i64, because: &str) -> Past {
        let mut did = Vec::new();
        for (kind, had) in [
            ("pin", old.pin.is_some()),
            ("delay", old.begin.is_some()),
            ("hold", old.hold),
            ("priority", old.prio.is_some()),
            ("nice", old.nice.is_some()),
            ("gpus", old.gpus.is_some()),
        ] {
            if had {
                did.push(kind.to_string());
            }
        }
        Past {
            did,
            since,
            stopped: at,
            because: because.to_string(),
            why: old.why.to_string(),
        }
    }
}

/// Text as it can stand inside a segment: no separator, no line breaks.
fn clean(text: &str) -> String {
    text.replace('|', "/").replace(['\n', '\r'], " ")
}

/// `cinch-past: did=pin,delay since=T stopped=T because=... why=...`.
pub fn format_past(past: &Past) -> String {
    let mut out = format!("{PAST_PREFIX} did={}", past.did.join(","));
    if let Some(since) = past.since {
        out.push_str(&format!(" {SINCE_KEY}{}", format_time(since)));
    }
    out.push_str(&format!(
        " stopped={} because={} why={}",
        format_time(past.stopped),
        // The key that ends it cannot stand inside it.
        clean(&past.because).replace(" why=", " "),
        clean(&past.why)
    ));
    out
}

/// What cinch did to a job once it stopped, from its `cinch-past:` segment.
pub fn parse_past(segment: &str) -> Option<Past> {
    let rest = segment.strip_prefix(PAST_PREFIX)?;
    let (head, why) = rest.split_once(" why=").unwrap_or((rest, ""));
    let (fields, because) = head.split_once(" because=").unwrap_or((head, ""));
    let mut past = Past {
        did: Vec::new(),
        since: None,
        stopped: 0,
        because: because.trim().to_string(),
        why: why.trim().to_string(),
    };
    for pair in fields.split_whitespace() {
        match pair.split_once('=')? {
            ("did", kinds) => {
                past.did = kinds
                    .split(',')
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            ("since", t) => past.since = Some(parse_time(t).ok()?),
            ("stopped", t) => past.stopped = parse_time(t).ok()?,
            _ => {} // written by a newer cinch: ignore
        }
    }
    Some(past)
}

/// What cinch applied, from its AdminComment segment (`None` if it is not one).
pub fn parse_applied(segment: &str) -> Option<Applied> {
    let rest = segment.strip_prefix(DECISION_PREFIX)?;
    let (fields, why) = match rest.find(" why=") {
        Some(i) => (&rest[..i], rest[i + 5..].trim().to_string()),
        None => (rest, String::new()),
    };
    let mut applied = Applied {
        why: why.into(),
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
            "max_nodes_was" => applied.max_nodes_was = Some(value.parse().ok()?),
            "begin" => applied.begin = Some(parse_time(value).ok()?),
            "hold" => applied.hold = value == "1",
            "prio" => applied.prio = Some(value.parse().ok()?),
            "nice_was" => nice_was = Some(value.parse().ok()?),
            "nice" => nice = Some(value.parse().ok()?),
            "gpus_was" => gpus_was = Some(value.parse().ok()?),
            "gpus" => gpus = Some(value.parse().ok()?),
            "until" => applied.until = parse_time(value).ok()?,
            _ => {} // written by a newer cinch: ignore
        }
    }
    applied.nice = nice_was.zip(nice);
    applied.gpus = gpus_was.zip(gpus);
    Some(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admins_text_ending_in_a_pipe_keeps_it_and_cinch_finds_its_segment() {
        let once = replace_segment(
            Some("0 |"),
            DECISION_PREFIX,
            Some("cinch-decision: until=1 why="),
        );
        assert_eq!(once, "0 | | cinch-decision: until=1 why=");
        assert_eq!(
            segment(Some(&once), DECISION_PREFIX),
            Some("cinch-decision: until=1 why=")
        );
        let twice = replace_segment(
            Some(&once),
            DECISION_PREFIX,
            Some("cinch-decision: until=2 why=x"),
        );
        assert_eq!(twice, "0 | | cinch-decision: until=2 why=x");
        assert_eq!(replace_segment(Some(&twice), DECISION_PREFIX, None), "0 |");
        assert_eq!(
            replace_segment(Some("a | cinch: x | b"), RECORD_PREFIX, None),
            "a | b"
        );
    }

    #[test]
    fn what_cinch_did_is_kept_once_it_stopped_and_reads_back() {
        let applied = Applied {
            pin: Some(vec!["n1".into()].into()),
            begin: Some(1_795_543_200),
            until: 1_795_543_500,
            why: "waits | for its shape".into(),
            ..Applied::default()
        };
        let decision = format_applied_since(&applied, 1_795_543_000);
        assert_eq!(
            decision,
            "cinch-decision: pin=n1 begin=2026-11-24T18:00:00Z since=2026-11-24T17:56:40Z \
             until=2026-11-24T18:05:00Z why=waits / for its shape"
        );
        assert_eq!(parse_since(&decision), Some(1_795_543_000));
        assert_eq!(parse_applied(&decision).unwrap().begin, applied.begin);
        assert_eq!(parse_since(&format_applied(&applied)), None);
        let past = Past::of(
            &applied,
            parse_since(&decision),
            1_795_543_100,
            "cinch's mode is off now | why= not",
        );
        let text = format_past(&past);
        assert_eq!(
            text,
            "cinch-past: did=pin,delay since=2026-11-24T17:56:40Z stopped=2026-11-24T17:58:20Z \
             because=cinch's mode is off now /  not why=waits / for its shape"
        );
        let back = parse_past(&text).unwrap();
        assert_eq!(back.did, ["pin", "delay"]);
        assert_eq!(
            (back.since, back.stopped),
            (Some(1_795_543_000), 1_795_543_100)
        );
        assert_eq!(back.because, "cinch's mode is off now /  not");
        assert_eq!(back.why, "waits / for its shape");
        assert!(parse_past("cinch-past: stopped=soon why=x").is_none());
    }

    #[test]
    fn decisions_are_written_with_readable_times_and_old_records_still_parse() {
        let applied = Applied {
            pin: Some(vec!["n1".into(), "n2".into()].into()),
            nodes_was: Some(1),
            begin: Some(1_795_543_200),
            until: 1_795_543_500,
            why: "consolidated | now".into(),
            ..Applied::default()
        };
        let text = format_applied(&applied);
        assert_eq!(
            text,
            "cinch-decision: pin=n1,n2 nodes_was=1 begin=2026-11-24T18:00:00Z \
             until=2026-11-24T18:05:00Z why=consolidated / now"
        );
        let back = parse_applied(&text).unwrap();
        assert_eq!(
            (back.begin, back.until),
            (Some(1_795_543_200), 1_795_543_500)
        );
        let old = parse_applied("cinch-decision: begin=123 until=999 why=x").unwrap();
        assert_eq!((old.begin, old.until), (Some(123), 999));
        assert!(parse_applied("cinch-decision: until=soon why=x").is_none());
    }
}
