//! The `Hints` type: the `key=value` hints a user gives a job in `--comment "cinch:..."` or with
//! `--cinch-*` options (docs/api.md), read from and written back into the comment in one place.
//! It sits below every module that reads a hint (`elastic`, `qos`, `sharing`, the policies) and
//! imports none of them; the options, their checks and the warnings users get live in `hints`.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};

/// Every cinch record starts with this (a job's hints in its comment, job_submit's record in
/// its AdminComment), so a later record replaces an earlier one.
pub const RECORD_PREFIX: &str = "cinch:";

/// Up to this many hints, a lookup scans them ([`Hints::get`]).
const SCANNED_HINTS: usize = 16;

// Read from a job's comment (`Hints::from_comment`) or its `--cinch-*` options
// (`Hints::from_spank_env`, in `hints`), written back into a comment
// (`Hints::merge_into_comment`). It reads as the map it holds; what a hint means has one rule:
// here (`checkpoints`), in `hints` (`warnings`) or in the module that owns the key (`elastic`,
// `qos`, `sharing`).
/// A job's cinch hints, each `key` to its value as the user wrote it (docs/api.md lists the
/// keys).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Hints(pub BTreeMap<String, String>);

impl Deref for Hints {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Hints {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<BTreeMap<String, String>> for Hints {
    fn from(map: BTreeMap<String, String>) -> Hints {
        Hints(map)
    }
}

impl<const N: usize> From<[(String, String); N]> for Hints {
    fn from(pairs: [(String, String); N]) -> Hints {
        Hints(pairs.into())
    }
}

impl<'a> IntoIterator for &'a Hints {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<(String, String)> for Hints {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Hints {
        Hints(pairs.into_iter().collect())
    }
}

impl Hints {
    /// The value of hint `key`, if the job gives it. Every round looks several hints up for
    /// every job, and most jobs give a few or none: the keys are told apart by their length
    /// before their bytes are read (each key's bytes lie in an allocation of their own, a cache
    /// miss away), where the map's own search reads the bytes of every key it passes. A long
    /// list is searched as the map it is.
    pub fn get(&self, key: &str) -> Option<&String> {
        if self.0.len() > SCANNED_HINTS {
            return self.0.get(key);
        }
        self.0
            .iter()
            .find(|(k, _)| k.len() == key.len() && k.as_str() == key)
            .map(|(_, value)| value)
    }

    /// Whether the job gives hint `key` ([`Hints::get`]).
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The hints as the user wrote them in the job's comment: `cinch:app=bert,ckpt=yes` anywhere in
    /// `--comment` (pairs with an empty name or value are not hints).
    /// [`Hints::merge_into_comment`] writes them back.
    pub fn from_comment(comment: Option<&str>) -> Hints {
        let Some(comment) = comment else {
            return Hints::default();
        };
        comment
            .split_whitespace()
            .filter_map(|word| word.strip_prefix(RECORD_PREFIX))
            .flat_map(|list| list.split(','))
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The job's comment with `hints` set in its `cinch:` word (added when it has none), every other
    /// word kept.
    pub fn merge_into_comment(&self, comment: Option<&str>) -> String {
        let hints = self;
        let mut current: Vec<(String, String)> = Vec::new();
        let mut rest: Vec<&str> = Vec::new();
        for word in comment.unwrap_or("").split_whitespace() {
            match word.strip_prefix(RECORD_PREFIX) {
                Some(list) => {
                    for pair in list.split(',') {
                        if let Some((k, v)) = pair.split_once('=') {
                            current.push((k.to_string(), v.to_string()));
                        }
                    }
                }
                None => rest.push(word),
            }
        }
        for (key, value) in hints {
            match current.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value.clone(),
                None => current.push((key.clone(), value.clone())),
            }
        }
        let cinch = current
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut words: Vec<String> = rest.iter().map(|w| w.to_string()).collect();
        words.push(format!("{}{cinch}", RECORD_PREFIX));
        words.join(" ")
    }

    /// Whether a job's user said it resumes from a checkpoint: `ckpt=yes` in any case, the one
    /// spelling every part of cinch reads (the policies' preemption, the apply path's requeue rule,
    /// job_submit's elastic check); anything else is no, as the hint checks' warnings tell the
    /// user at sbatch.
    pub fn checkpoints(&self) -> bool {
        self.get("ckpt")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup answers as the map's own search for every key: present, absent, of the same
    /// length as a present one, a prefix of one, empty; in a short list (scanned) and a long one.
    #[test]
    fn a_lookup_answers_as_the_map_whatever_the_keys() {
        let short = Hints::from_comment(Some("cinch:app=bert,ckpt=yes,elastic=2-8,iters=100"));
        let long: Hints = (0..SCANNED_HINTS + 4)
            .map(|i| (format!("key{i}"), format!("v{i}")))
            .chain([("app".to_string(), "gpt".to_string())])
            .collect();
        assert!(short.len() <= SCANNED_HINTS && long.len() > SCANNED_HINTS);
        for hints in [&short, &long, &Hints::default()] {
            for key in [
                "app",
                "ckpt",
                "elastic",
                "iters",
                "iter",
                "iters_done",
                "apq",
                "",
                "key3",
                "key19",
                "key23",
                "ap",
            ] {
                assert_eq!(hints.get(key), hints.0.get(key), "{key} in {hints:?}");
                assert_eq!(hints.contains_key(key), hints.0.contains_key(key), "{key}");
            }
        }
        assert_eq!(short.get("elastic").map(String::as_str), Some("2-8"));
        assert_eq!(long.get("key19").map(String::as_str), Some("v19"));
    }
}
