//! QoS targets (GENIE; docs/policies/qos.md): the start or finish time a job should meet, from
//! what its user said in its hints (`due`, `turnaround`, `start_within`), Slurm's own
//! `--deadline`, and the classes an admin defines for Slurm QOS names or partitions. A job may
//! have several: the earliest start and the earliest finish bound it.

use serde::{Deserialize, Serialize};

use crate::slurm::slurm_time::{format_duration, format_time, parse_duration, parse_time};
use crate::wire::snapshot::PendingJob;

/// Finish by this time (`YYYY-MM-DDTHH:MM[:SS]`, with an offset or the controller's local time,
/// or Unix seconds).
pub const HINT_DUE: &str = "due";
/// Finish within this long of submission (a Slurm duration).
pub const HINT_TURNAROUND: &str = "turnaround";
/// Start within this long of submission (a Slurm duration).
pub const HINT_START_WITHIN: &str = "start_within";
/// The job's own profile: iterations it runs in all, iterations per second measured after a
/// few steps, iterations done so far (running jobs update it with `scontrol update`).
pub const HINT_ITERS: &str = "iters";
pub const HINT_ITER_RATE: &str = "iter_rate";
pub const HINT_ITERS_DONE: &str = "iters_done";

/// A class of jobs an admin gives a target: the jobs of any of its Slurm QOS names or
/// partitions. Durations are Slurm's (`15:00` is 15 minutes, `2:00:00` two hours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QosClass {
    /// Shown in reasons (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Slurm QOS names whose jobs belong to the class.
    #[serde(default)]
    pub qos: Vec<String>,
    /// Partitions whose jobs belong to the class.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Start within this long of submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_within: Option<String>,
    /// Finish within this long of submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turnaround: Option<String>,
    /// Finish by this time (`YYYY-MM-DDTHH:MM[:SS]` with `Z` or an offset, else UTC; or Unix
    /// seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_by: Option<String>,
}

/// A class with its targets read.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    qos: Vec<String>,
    partitions: Vec<String>,
    start_within_s: Option<u64>,
    turnaround_s: Option<u64>,
    finish_by: Option<i64>,
}

impl QosClass {
    /// The class read, or what is wrong with it.
    pub fn parse(&self) -> Result<Class, String> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "QoS class name '{name}' must be 1 to 64 letters, digits, '-', '_' or '.'"
            ));
        }
        if self.qos.is_empty() && self.partitions.is_empty() {
            return Err(format!(
                "QoS class '{name}' names no Slurm QOS and no partition: it would match no job"
            ));
        }
        if self.start_within.is_none() && self.turnaround.is_none() && self.finish_by.is_none() {
            return Err(format!(
                "QoS class '{name}' sets no target (start_within, turnaround or finish_by)"
            ));
        }
        let duration = |what: &str, v: &Option<String>| {
            v.as_deref()
                .map(|s| parse_duration(s).map_err(|e| format!("QoS class '{name}' {what}: {e}")))
                .transpose()
        };
        Ok(Class {
            name: name.clone(),
            qos: self.qos.clone(),
            partitions: self.partitions.clone(),
            start_within_s: duration("start_within", &self.start_within)?,
            turnaround_s: duration("turnaround", &self.turnaround)?,
            finish_by: self
                .finish_by
                .as_deref()
                .map(|s| parse_time(s).map_err(|e| format!("QoS class '{name}' finish_by: {e}")))
                .transpose()?,
        })
    }
}

/// Every class read, or the first problem; two classes may not share a name.
pub fn parse_classes(classes: &[QosClass]) -> Result<Vec<Class>, String> {
    let mut parsed: Vec<Class> = Vec::with_capacity(classes.len());
    for class in classes {
        let c = class.parse()?;
        if parsed.iter().any(|p| p.name == c.name) {
            return Err(format!("QoS class '{}' is defined twice", c.name));
        }
        parsed.push(c);
    }
    Ok(parsed)
}

impl Class {
    fn matches(&self, job: &PendingJob) -> bool {
        job.qos.as_ref().is_some_and(|q| self.qos.contains(q))
            || job
                .partition
                .as_ref()
                .is_some_and(|p| self.partitions.contains(p))
    }
}

/// One bound on a job: a time and who set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub at: i64,
    /// `hint due`, `--deadline`, `class interactive`, ...
    pub source: String,
}

/// What a job should meet.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Targets {
    pub start_by: Option<Bound>,
    pub finish_by: Option<Bound>,
    /// Hints that could not be read (said in the job's reason, otherwise ignored).
    pub problems: Vec<String>,
}

impl Targets {
    pub fn is_empty(&self) -> bool {
        self.start_by.is_none() && self.finish_by.is_none()
    }

    /// The waiting allowance (GENIE's SWAF key): how long the job can still wait and meet its
    /// targets if it runs `run_s` once started.
    pub fn allowance_s(&self, now: i64, run_s: f64) -> Option<f64> {
        let start = self.start_by.as_ref().map(|b| (b.at - now) as f64);
        let finish = self.finish_by.as_ref().map(|b| (b.at - now) as f64 - run_s);
        match (start, finish) {
            (Some(s), Some(f)) => Some(s.min(f)),
            (s, f) => s.or(f),
        }
    }

    /// The targets in words: `finish by 2026-11-24T18:00:00Z (hint due)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = &self.start_by {
            parts.push(format!("start by {} ({})", format_time(b.at), b.source));
        }
        if let Some(b) = &self.finish_by {
            parts.push(format!("finish by {} ({})", format_time(b.at), b.source));
        }
        parts.join(", ")
    }
}

fn earliest(slot: &mut Option<Bound>, at: i64, source: impl FnOnce() -> String) {
    if slot.as_ref().is_none_or(|b| at < b.at) {
        *slot = Some(Bound {
            at,
            source: source(),
        });
    }
}

/// Checks the QoS and profile hints among `hints`, naming the first malformed one: the check the
/// plugin makes at submission (other hints are not its business here).
pub fn check_hints(hints: &crate::slurm::job_hints::Hints) -> Result<(), String> {
    for (key, value) in hints {
        let result = match key.as_str() {
            HINT_DUE => parse_time(value).map(|_| ()),
            HINT_TURNAROUND | HINT_START_WITHIN => match parse_duration(value) {
                Ok(0) => Err(format!(
                    "'{value}' is no time at all: a target must leave time to run"
                )),
                other => other.map(|_| ()),
            },
            HINT_ITERS | HINT_ITERS_DONE => value
                .parse::<u64>()
                .map(|_| ())
                .map_err(|_| format!("'{value}' is not a whole number")),
            HINT_ITER_RATE => value
                .parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && *r > 0.0)
                .map(|_| ())
                .ok_or_else(|| format!("'{value}' is not a positive number (iterations/s)")),
            _ => Ok(()),
        };
        result.map_err(|e| format!("cinch hint {key}: {e}"))?;
    }
    Ok(())
}

/// Whether the targets a job's user stated in hints count, as the admin's policy settings
/// decide for this job (docs/policies/qos.md, "Who may state targets").
#[derive(Debug, Clone, PartialEq)]
pub enum UserTargets {
    /// They count, none sooner than `floor_s` after submission (0: as written).
    Counted { floor_s: u64 },
    /// They do not count, for this reason (said in the job's reason).
    NotCounted(String),
}

/// Whether `hints` state a QoS target.
pub fn states_target(hints: &crate::slurm::job_hints::Hints) -> bool {
    [HINT_DUE, HINT_TURNAROUND, HINT_START_WITHIN]
        .iter()
        .any(|k| hints.contains_key(k))
}

/// A job's targets: its user's hints (as `user` decides), its `--deadline`, and every class it
/// belongs to; the earliest start and finish win.
pub fn targets(job: &PendingJob, classes: &[Class], user: &UserTargets) -> Targets {
    let mut t = Targets::default();
    let submit = job.submit_time;
    for (key, value) in &job.hints {
        let parsed = match key.as_str() {
            HINT_DUE => parse_time(value).map(|at| (false, at)),
            HINT_TURNAROUND => parse_duration(value).map(|s| (false, add(submit, s))),
            HINT_START_WITHIN => parse_duration(value).map(|s| (true, add(submit, s))),
            _ => continue,
        };
        let floor_s = match user {
            UserTargets::Counted { floor_s } => *floor_s,
            UserTargets::NotCounted(why) => {
                t.problems.push(format!("hint {key} not counted: {why}"));
                continue;
            }
        };
        let floor = add(submit, floor_s);
        let source = |at: i64| {
            if at < floor {
                format!(
                    "hint {key}, counted as no sooner than {} after submission (the site's limit)",
                    format_duration(floor_s as i64)
                )
            } else {
                format!("hint {key}")
            }
        };
        match parsed {
            Ok((true, at)) => earliest(&mut t.start_by, at.max(floor), || source(at)),
            Ok((false, at)) => earliest(&mut t.finish_by, at.max(floor), || source(at)),
            Err(e) => t.problems.push(format!("hint {key} ignored: {e}")),
        }
    }
    if let Some(deadline) = job.deadline {
        earliest(&mut t.finish_by, deadline, || "--deadline".into());
    }
    for class in classes.iter().filter(|c| c.matches(job)) {
        let source = || format!("class {}", class.name);
        if let Some(s) = class.start_within_s {
            earliest(&mut t.start_by, add(submit, s), source);
        }
        if let Some(s) = class.turnaround_s {
            earliest(&mut t.finish_by, add(submit, s), source);
        }
        if let Some(at) = class.finish_by {
            earliest(&mut t.finish_by, at, source);
        }
    }
    t
}

/// The earliest finish a job's own hints state (`due`, or `turnaround` after `submit`), as its
/// user wrote it: no site floor, no class, no `--deadline`; none when it states none that reads.
/// What a replay of the record holds the job to ([`targets`] decides what counts live).
pub fn stated_finish_by(hints: &crate::slurm::job_hints::Hints, submit: i64) -> Option<i64> {
    let due = hints.get(HINT_DUE).and_then(|v| parse_time(v).ok());
    let turnaround = hints
        .get(HINT_TURNAROUND)
        .and_then(|v| parse_duration(v).ok())
        .map(|s| add(submit, s));
    match (due, turnaround) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn add(t: i64, s: u64) -> i64 {
    t.saturating_add(i64::try_from(s).unwrap_or(i64::MAX))
}

/// A job's own profile (`iters`, `iter_rate`, `iters_done` hints): its run time on the placement
/// it measured, and what is left of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    pub run_s: f64,
    /// Iterations done so far, if it said.
    pub done_s: Option<f64>,
}

pub fn profile(hints: &crate::slurm::job_hints::Hints) -> Option<Profile> {
    let iters: f64 = hints.get(HINT_ITERS)?.parse::<u64>().ok()? as f64;
    let rate: f64 = hints
        .get(HINT_ITER_RATE)?
        .parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r > 0.0)?;
    let done = hints
        .get(HINT_ITERS_DONE)
        .and_then(|d| d.parse::<u64>().ok())
        .map(|d| (d as f64).min(iters) / rate);
    Some(Profile {
        run_s: iters / rate,
        done_s: done,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(hints: &[(&str, &str)]) -> PendingJob {
        PendingJob {
            hints: hints
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            qos: Some("interactive".into()),
            partition: Some("gpu".into()),
            ..PendingJob::new(1, "alice", 1, 1_000_000)
        }
    }

    #[test]
    fn the_finish_a_job_states_is_its_earliest_readable_hint() {
        let stated = |h: &[(&str, &str)]| stated_finish_by(&job(h).hints, 1_000);
        assert_eq!(stated(&[("due", "5000")]), Some(5_000));
        assert_eq!(stated(&[("turnaround", "1:00:00")]), Some(4_600));
        assert_eq!(
            stated(&[("due", "5000"), ("turnaround", "30:00")]),
            Some(2_800)
        );
        assert_eq!(
            stated(&[("due", "friday"), ("turnaround", "30:00")]),
            Some(2_800)
        );
        assert_eq!(stated(&[("start_within", "10:00")]), None, "a start target");
        assert_eq!(stated(&[("due", "friday")]), None);
    }

    fn class(name: &str, qos: &[&str], start_within: Option<&str>) -> QosClass {
        QosClass {
            name: name.into(),
            qos: qos.iter().map(|s| s.to_string()).collect(),
            partitions: Vec::new(),
            start_within: start_within.map(String::from),
            turnaround: None,
            finish_by: None,
        }
    }

    #[test]
    fn the_earliest_of_hints_deadline_and_classes_bounds_a_job() {
        let classes = parse_classes(&[
            class("interactive", &["interactive"], Some("15:00")),
            class("other", &["normal"], Some("1")),
        ])
        .unwrap();
        let mut j = job(&[("turnaround", "2:00:00"), ("start_within", "1:00:00")]);
        j.deadline = Some(1_000_000 + 3600);
        let t = targets(&j, &classes, &COUNTED);
        assert_eq!(
            t.start_by,
            Some(Bound {
                at: 1_000_900,
                source: "class interactive".into()
            })
        );
        assert_eq!(t.finish_by.as_ref().unwrap().at, 1_003_600);
        assert_eq!(t.finish_by.as_ref().unwrap().source, "--deadline");
        // Allowance: start by +900 s, finish by +3600 s minus a 3,000 s run: the finish binds.
        assert_eq!(t.allowance_s(1_000_000, 3000.0), Some(600.0));
        // Where the site does not count users' targets, only the deadline and the class do,
        // and the job's reason says so.
        let off = UserTargets::NotCounted("not this account".into());
        let t = targets(&job(&[("due", "1")]), &classes, &off);
        assert!(t.finish_by.is_none());
        assert_eq!(t.start_by.unwrap().at, 1_000_900);
        assert_eq!(t.problems, ["hint due not counted: not this account"]);
    }

    const COUNTED: UserTargets = UserTargets::Counted { floor_s: 0 };

    #[test]
    fn a_target_tighter_than_the_sites_floor_counts_as_the_floor() {
        let floor = UserTargets::Counted { floor_s: 3600 };
        let t = targets(&job(&[("turnaround", "5:00")]), &[], &floor);
        let bound = t.finish_by.unwrap();
        assert_eq!(bound.at, 1_000_000 + 3600);
        assert!(
            bound
                .source
                .contains("no sooner than 01:00:00 after submission"),
            "{}",
            bound.source
        );
        let t = targets(&job(&[("turnaround", "2:00:00")]), &[], &floor);
        assert_eq!(
            t.finish_by.unwrap(),
            Bound {
                at: 1_007_200,
                source: "hint turnaround".into()
            }
        );
        assert!(states_target(&job(&[("due", "1")]).hints));
        assert!(!states_target(&job(&[("app", "bert")]).hints));
    }

    #[test]
    fn malformed_hints_are_reported_and_ignored() {
        let t = targets(
            &job(&[("due", "tomorrow"), ("turnaround", "3h")]),
            &[],
            &COUNTED,
        );
        assert!(t.is_empty());
        assert_eq!(t.problems.len(), 2, "{:?}", t.problems);
        let hints: crate::slurm::job_hints::Hints =
            [("turnaround".to_string(), "3h".to_string())].into();
        let err = check_hints(&hints).unwrap_err();
        assert!(
            err.contains("cinch hint turnaround: '3h' is not a Slurm duration"),
            "{err}"
        );
        let hints: crate::slurm::job_hints::Hints = [("iter_rate".to_string(), "-1".into())].into();
        assert!(check_hints(&hints).unwrap_err().contains("iter_rate"));
        for key in ["turnaround", "start_within"] {
            let hints: crate::slurm::job_hints::Hints = [(key.to_string(), "0:00".into())].into();
            assert!(
                check_hints(&hints).unwrap_err().contains("no time at all"),
                "{key}"
            );
        }
        let fine: crate::slurm::job_hints::Hints = [
            ("app".to_string(), "bert".to_string()),
            ("due".to_string(), "2026-11-24T18:00:00Z".to_string()),
        ]
        .into();
        assert_eq!(check_hints(&fine), Ok(()));
    }

    #[test]
    fn bad_classes_are_refused_with_the_reason() {
        let err = parse_classes(&[class("x y", &["q"], Some("5"))]).unwrap_err();
        assert!(err.contains("must be 1 to 64"), "{err}");
        let err = parse_classes(&[class("x", &[], Some("5"))]).unwrap_err();
        assert!(err.contains("would match no job"), "{err}");
        let err = parse_classes(&[class("x", &["q"], None)]).unwrap_err();
        assert!(err.contains("sets no target"), "{err}");
        let err = parse_classes(&[class("x", &["q"], Some("soon"))]).unwrap_err();
        assert!(err.contains("QoS class 'x' start_within"), "{err}");
        let err = parse_classes(&[class("x", &["q"], Some("5")), class("x", &["r"], Some("5"))])
            .unwrap_err();
        assert!(err.contains("defined twice"), "{err}");
    }

    #[test]
    fn a_profile_gives_the_run_and_what_is_done() {
        let hints = |pairs: &[(&str, &str)]| -> crate::slurm::job_hints::Hints {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let p = profile(&hints(&[("iters", "10000"), ("iter_rate", "2.5")])).unwrap();
        assert_eq!(p.run_s, 4000.0);
        assert_eq!(p.done_s, None);
        let p = profile(&hints(&[
            ("iters", "100"),
            ("iter_rate", "1"),
            ("iters_done", "400"),
        ]));
        assert_eq!(p.unwrap().done_s, Some(100.0));
        assert!(profile(&hints(&[("iters", "100"), ("iter_rate", "0")])).is_none());
        assert!(profile(&hints(&[("iters", "100")])).is_none());
    }
}
