//! The golden words of cinch's reasons, held against what live jobs carry.
//!
//! cinch-core's golden files (`optimizer/core/tests/golden/`) hold every kind of clause a reason
//! is made of, and every registered policy's reasons on hand-sized busy clusters; a change of
//! wording shows there as a diff. A live job's reason is the same words with other numbers, times
//! and names, in combinations no hand-sized cluster shows. So each "; "-separated fragment of a
//! live reason, as a template (numbers, times, node and rack names, applications, users,
//! prediction sources, where a target comes from and Dally's levels masked; units, plurals and
//! signs, which follow the numbers, evened out), must be a fragment of some golden
//! reason: a sentence cut off, words the plugin garbled on the way into the AdminComment, or a
//! clause the golden files do not show fails the test that read the job.

use std::collections::HashSet;
use std::sync::OnceLock;

use cinch_core::learn::history::RunSource;

/// What the fake optimizer's scripts give as reasons (the tests' words, not cinch's).
pub const SCRIPTED_REASONS: [&str; 5] = [
    "?",
    "not mine",
    "scripted",
    "scripted delay",
    "scripted tier",
];

/// The golden files the vocabulary is read from, relative to the repository root.
const GOLDEN_FILES: [&str; 2] = [
    "optimizer/core/tests/golden/clauses.txt",
    "optimizer/core/tests/golden/policies.txt",
];

/// Every fragment template of every golden reason.
fn vocabulary() -> &'static HashSet<String> {
    static WORDS: OnceLock<HashSet<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let mut words = HashSet::new();
        for file in GOLDEN_FILES {
            let path = crate::repo_root().join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("the golden reasons {}: {e}", path.display()));
            for line in text.lines() {
                // policies.txt: "POLICY CLUSTER job ID: REASON".
                let reason = match line.split_once(": ") {
                    Some((head, reason))
                        if file.ends_with("policies.txt") && head.contains(" job ") =>
                    {
                        reason
                    }
                    _ => line,
                };
                words.extend(fragments(reason));
            }
        }
        words
    })
}

/// The fragments of `reason` that no golden reason has, as templates (empty: it reads as the
/// golden words do). The fake optimizer's scripted reasons are the tests' own words.
pub fn unknown_fragments(reason: &str) -> Vec<String> {
    if SCRIPTED_REASONS.contains(&reason.trim()) {
        return Vec::new();
    }
    let known = vocabulary();
    fragments(reason)
        .into_iter()
        .filter(|f| !known.contains(f))
        .collect()
}

/// A reason's "; "-separated fragments as templates.
fn fragments(reason: &str) -> Vec<String> {
    reason
        .split("; ")
        .map(|f| template(f.trim()))
        .filter(|f| !f.is_empty())
        .collect()
}

/// A fragment with what differs between jobs masked: prediction sources as `SOURCE`,
/// applications as `app=APP`, times and numbers as `N`, node and rack names and host lists as
/// `NODES`, and a plural right after a number made singular ("N GPUs" reads as "N GPU").
pub fn template(fragment: &str) -> String {
    let mut text = fragment.to_string();
    for source in [
        RunSource::Limit,
        RunSource::Similar,
        RunSource::UserGpus,
        RunSource::Default,
        RunSource::Profile,
    ] {
        text = text.replace(source.describe(), "SOURCE");
    }
    // Dally's placement levels.
    for level in cinch_core::wire::reason::LEVEL {
        text = text
            .replace(&format!("{level} placement"), "LEVEL placement")
            .replace(&format!("only {level} free"), "only LEVEL free");
    }
    // Where a QoS target comes from: a hint (which one), a class, --deadline.
    for open in ["(hint ", "(class "] {
        text = mask_after(&text, open, ')', "(TARGET)");
    }
    text = text.replace("(--deadline)", "(TARGET)");
    text = mask_after(&text, "QoS hint ", ' ', "QoS hint NAME ");
    // A value the user gave ('friday'), and the user whose targets do not count.
    text = mask_after(&text, " '", '\'', " 'VALUE'");
    for (before, after) in [("not counted: ", " has "), ("not counted: ", "'s recent")] {
        if let Some(at) = text.find(before) {
            let from = at + before.len();
            if let Some(user) = text[from..]
                .find(after)
                .filter(|&u| !text[from..from + u].contains(' '))
            {
                text.replace_range(from..from + user, "USER");
            }
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let at = |k: usize| chars.get(k).copied().unwrap_or(' ');
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let word_start = i == 0 || !at(i - 1).is_ascii_alphanumeric();
        if c.is_ascii_digit() {
            // A number, a time (12:00:00, 1-02:00:00, 1970-01-01T00:08:30Z) or a decimal.
            while at(i).is_ascii_digit()
                || (":.-T".contains(at(i)) && at(i + 1).is_ascii_digit())
                || (at(i) == 'Z' && i > 0 && at(i - 1).is_ascii_digit())
            {
                i += 1;
            }
            out.push('N');
        } else if let Some(end) = word_start.then(|| node_list_end(&chars, i)).flatten() {
            out.push_str("NODES");
            i = end;
        } else if word_start && chars[i..].starts_with(&['a', 'p', 'p', '=']) {
            i += 4;
            while at(i).is_ascii_alphanumeric() || "-_.".contains(at(i)) {
                i += 1;
            }
            out.push_str("app=APP");
        } else {
            out.push(c);
            i += 1;
        }
    }
    number_words(&out)
}

/// `text` with each `open` ... `close` (both included) replaced by `with`.
fn mask_after(text: &str, open: &str, close: char, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        out.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        match after.find(close) {
            Some(end) => {
                out.push_str(with);
                rest = &after[end + close.len_utf8()..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where a node or rack name with a number (n1, rack2), a host list (n[1-2,4]) or a
/// comma-separated list of them starting at `i` ends; `None` if none starts there.
fn node_list_end(chars: &[char], i: usize) -> Option<usize> {
    let at = |k: usize| chars.get(k).copied().unwrap_or(' ');
    let name_end = |mut k: usize| -> Option<usize> {
        let letters = k;
        while at(k).is_ascii_lowercase() {
            k += 1;
        }
        if k == letters {
            return None;
        }
        if at(k).is_ascii_digit() {
            while at(k).is_ascii_digit() {
                k += 1;
            }
        } else if at(k) == '[' && at(k + 1).is_ascii_digit() {
            while k < chars.len() && at(k) != ']' {
                k += 1;
            }
            k += 1;
        } else {
            return None;
        }
        Some(k)
    };
    let mut end = name_end(i)?;
    while at(end) == ',' {
        match name_end(end + 1) {
            Some(next) => end = next,
            None => break,
        }
    }
    Some(end)
}

/// Words whose form follows the numbers: a unit after a number (h, min, s; GPU-hours or
/// GPU-minutes) as `UNIT`, a word's plural as its singular ("N GPUs" and "1 elastic job" read
/// as "N GPU", "N elastic job"), "under a minute" as a number of units, a minus sign dropped.
fn number_words(text: &str) -> String {
    let text = text.replace("under a minute", "N min").replace(" -N", " N");
    let mut words: Vec<String> = text.split(' ').map(str::to_string).collect();
    for k in 0..words.len() {
        let letters = words[k].trim_end_matches(|c: char| !c.is_ascii_alphabetic() && c != '-');
        let (word, rest) = (letters.to_string(), words[k][letters.len()..].to_string());
        let after_number = k > 0 && words[k - 1].ends_with('N') && !words[k - 1].ends_with("NODES");
        words[k] = if after_number && ["h", "min", "s"].contains(&word.as_str()) {
            format!("UNIT{rest}")
        } else if word.starts_with("GPU-") {
            format!("GPU-UNIT{rest}")
        } else if word.len() > 3
            && word.ends_with('s')
            && word.chars().all(|c| c.is_ascii_alphabetic())
        {
            format!("{}{rest}", &word[..word.len() - 1])
        } else {
            words[k].clone()
        };
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_mask_what_differs_between_jobs() {
        assert_eq!(
            template("consolidated: 12 GPUs on 2 nodes in rack rack1, the fewest that have them free now"),
            "consolidated: N GPU on N node in rack NODES, the fewest that have them free now"
        );
        assert_eq!(
            template("consolidated: 1 GPU on 1 node, the fewest that have them free now"),
            template("consolidated: 4 GPUs on 3 nodes, the fewest that have them free now")
        );
        assert_eq!(
            template("reserved: pinned to n[1-2,4] (expected free at 1970-01-12T20:31:10Z)"),
            "reserved: pinned to NODES (expected free at N)"
        );
        assert_eq!(template("pinned to n1,n12"), template("pinned to n3"));
        assert_eq!(
            template("spread would cost it ~968 s (slowdown 0.49, app=bert)"),
            "spread would cost it ~N UNIT (slowdown N, app=APP)"
        );
        assert_eq!(
            template("predicted 1.5 h (from similar earlier jobs)"),
            template("predicted 20 h (from default)")
        );
        assert_eq!(
            template("Slurm's priority 1074 with cinch's nice -9365"),
            "Slurm's priority N with cinch's nice N"
        );
        assert_eq!(template("slack 1-02:00:00"), "slack N");
        // Units and plurals follow the numbers.
        assert_eq!(
            template("predicted 3 min (from default)"),
            template("predicted 1.5 h (from similar earlier jobs)")
        );
        assert_eq!(
            template("predicted 0.1 GPU-hours left (under a minute on 16 GPUs"),
            template("predicted 3 GPU-minutes left (2 min on 1 GPU")
        );
        assert_eq!(
            template("elastic 2-16: 4 GPUs (ONES search over 1 elastic job and 4 GPUs"),
            template("elastic 2-8: 8 GPUs (ONES search over 3 elastic jobs and 16 GPUs")
        );
        assert_eq!(
            template("rank correlation -0.62"),
            template("rank correlation 0.61")
        );
        assert_eq!(
            template("hint due ignored: 'friday' is not a time"),
            "hint due ignored: 'VALUE' is not a time"
        );
        assert_eq!(
            template("not counted: bob has 3 earlier pending jobs"),
            template("not counted: alice has 1 earlier pending job")
        );
        assert_eq!(
            template("earliest deadline first: target 1970-01-12T23:46:40Z (hint due)"),
            template("earliest deadline first: target 1970-01-01T10:00:00Z (--deadline)")
        );
        assert_eq!(
            template("QoS hint due not counted: this site does not count targets"),
            template("QoS hint turnaround not counted: this site does not count targets")
        );
    }

    /// Busy clusters of other shapes and seeds than the golden files': every policy's reasons
    /// there are in the golden words (so the live tests, whose reasons are made the same way,
    /// do not meet a clause the golden files leave out).
    #[test]
    fn the_golden_words_cover_every_policys_reasons_on_other_clusters() {
        use cinch_core::policy::{PolicyConfig, POLICY_NAMES};
        use cinch_core::testing::{busy_snapshot, hints};
        use cinch_core::{History, SeededRng};
        let mut unknown = std::collections::BTreeMap::new();
        let mut checked = 0;
        for name in POLICY_NAMES {
            let config = PolicyConfig::defaults_for(name).unwrap();
            let mut history = History::default();
            for seed in 100..124u64 {
                let (nodes, gpus, racks) =
                    [(4, 8, 2), (16, 8, 2), (12, 4, 3), (2, 8, 1)][seed as usize % 4];
                let mut snap = busy_snapshot(nodes, gpus, racks, 40, seed);
                for (k, job) in snap.pending.iter_mut().enumerate() {
                    if seed % 2 == 0 {
                        job.site_priority = Some(1_000 + 37 * k as u32);
                    }
                    if k % 3 == 0 {
                        job.hints = hints(&[("app", "resnet50"), ("ckpt", "yes")]);
                    }
                    if k % 5 == 0 {
                        job.hints
                            .insert("due".into(), (snap.time + 3_600 * k as i64).to_string());
                    }
                }
                history.observe(&snap);
                let mut rng = SeededRng::new(seed);
                for d in config.decide(&snap, snap.time, &mut rng, &history) {
                    checked += 1;
                    for f in unknown_fragments(&d.reason.to_string()) {
                        unknown
                            .entry(f)
                            .or_insert_with(|| format!("{name}: {}", d.reason));
                    }
                }
            }
        }
        assert!(checked > 2_000, "only {checked} reasons");
        assert!(unknown.is_empty(), "{unknown:#?}");
    }

    #[test]
    fn live_reasons_must_read_as_the_golden_ones() {
        // A reason of the golden file, with other numbers and names: known.
        let live = "predicted 3.0 GPU-hours left (3.0 h on 1 GPU, from time limit x what jobs \
                    really ran of theirs here): shorter first; consolidated: 8 GPUs on 1 node in \
                    rack rack2, the fewest that have them free now";
        assert_eq!(unknown_fragments(live), Vec::<String>::new());
        // A sentence cut off, or words nobody wrote: unknown.
        let cut = "waits for its best shape, the first in cinch's order to; Slurm places it";
        assert_eq!(
            unknown_fragments(cut),
            ["wait for its best shape, the first in cinch's order to"]
        );
        assert_eq!(unknown_fragments("because"), ["because"]);
        // The fake optimizer's scripts are the tests' words.
        assert!(unknown_fragments("scripted delay").is_empty());
    }
}
