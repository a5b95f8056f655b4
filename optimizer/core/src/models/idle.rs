//! Idle GPUs (docs/policies/idle.md): from the readings of each running job's GPUs (its
//! watcher's, live; the simulated jobs' in the simulator), since when they have been idle, and
//! what cinch says of it: a warning once the grace has run, then the admin's `IdleAction`.
//!
//! Only fresh evidence counts: a job whose last reading is older than [`MAX_READING_AGE_S`] (its
//! watcher stopped, or the job has none) is never flagged, and any reading at or over the
//! threshold clears the flag. The GPU-hours each user held idle are kept for `cinch idle`.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::wire::decision::{Decision, IdleDecision};
use crate::wire::idle::{IdleAction, IdleRules};
use crate::wire::reason::IdleNote;
use crate::wire::snapshot::Snapshot;
use crate::wire::watch::GpuUse;

/// A job whose GPUs were last read longer ago than this is not judged (the watcher reports every
/// minute by default; 10 minutes is several missed reports).
pub const MAX_READING_AGE_S: i64 = 600;
/// The longest gap between two readings that is counted as held (idle or busy) GPU time.
pub const MAX_GAP_S: i64 = 600;

/// One running job's GPUs as its readings show them.
#[derive(Debug, Clone, PartialEq)]
pub struct JobIdle {
    pub user: String,
    pub gpus: u32,
    /// The last reading: when, and how busy.
    pub last_at: i64,
    pub last_busy: u32,
    /// Since when every reading was idle (`None`: the last was busy).
    pub idle_since: Option<i64>,
    /// Whether any reading was idle.
    pub ever_idle: bool,
    /// GPU-seconds its readings showed idle, and in all.
    pub idle_gpu_s: f64,
    pub read_gpu_s: f64,
}

/// A user's GPUs over every job of theirs read since the optimizer started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UserIdle {
    pub idle_gpu_s: f64,
    pub read_gpu_s: f64,
    /// Their jobs with at least one idle reading.
    pub idle_jobs: u32,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleState {
    /// Its last reading was busy.
    Busy,
    /// Idle since `since`, within its grace.
    Idle { since: i64 },
    /// Idle past its grace: warned; its action comes at `act_at`.
    Flagged { since: i64, act_at: i64 },
    /// Idle past its grace and warning: its action is due.
    Due { since: i64 },
}

impl IdleState {
    pub fn since(self) -> Option<i64> {
        match self {
            IdleState::Busy => None,
            IdleState::Idle { since }
            | IdleState::Flagged { since, .. }
            | IdleState::Due { since } => Some(since),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IdleState::Busy => "busy",
            IdleState::Idle { .. } => "idle",
            IdleState::Flagged { .. } => "flagged",
            IdleState::Due { .. } => "due",
        }
    }
}

/// The running jobs' GPU readings, and each user's idle GPU time.
#[derive(Debug, Clone, Default)]
pub struct IdleTracker {
    jobs: FxHashMap<u32, JobIdle>,
    users: BTreeMap<String, UserIdle>,
}

impl IdleTracker {
    /// Folds in a reading of job `job_id`'s GPUs taken at `at`: `gpu` is their mean over the
    /// interval since the previous reading, which counts as idle or busy by it. A reading that is
    /// not later than the last is ignored.
    pub fn reading(&mut self, job_id: u32, user: &str, at: i64, gpu: GpuUse, rules: &IdleRules) {
        let idle = rules.is_idle(gpu.busy_percent);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            // The first reading: idle from now on, its interval unknown.
            let totals = self.users.entry(user.to_string()).or_default();
            totals.idle_jobs += u32::from(idle);
            self.jobs.insert(
                job_id,
                JobIdle {
                    user: user.to_string(),
                    gpus: gpu.gpus,
                    last_at: at,
                    last_busy: gpu.busy_percent,
                    idle_since: idle.then_some(at),
                    ever_idle: idle,
                    idle_gpu_s: 0.0,
                    read_gpu_s: 0.0,
                },
            );
            return;
        };
        if at <= job.last_at {
            return;
        }
        let span = (at - job.last_at).min(MAX_GAP_S) as f64 * f64::from(gpu.gpus);
        let totals = self.users.entry(job.user.clone()).or_default();
        totals.read_gpu_s += span;
        job.read_gpu_s += span;
        if idle {
            totals.idle_jobs += u32::from(!job.ever_idle);
            job.ever_idle = true;
            totals.idle_gpu_s += span;
            job.idle_gpu_s += span;
            // The reading covers the interval since the last one, unless the watcher missed
            // reports: then only its own moment counts (a job is never taken for idle longer
            // than its readings show).
            let from = if at - job.last_at > MAX_GAP_S {
                at
            } else {
                job.last_at
            };
            job.idle_since.get_or_insert(from);
        } else {
            job.idle_since = None;
        }
        job.gpus = gpu.gpus;
        job.last_at = at;
        job.last_busy = gpu.busy_percent;
    }

    /// Forgets the jobs that no longer run (their users' totals stay).
    pub fn retain_running(&mut self, running: impl Fn(u32) -> bool) {
        self.jobs.retain(|id, _| running(*id));
    }

    pub fn job(&self, job_id: u32) -> Option<&JobIdle> {
        self.jobs.get(&job_id)
    }

    pub fn jobs(&self) -> impl Iterator<Item = (u32, &JobIdle)> {
        self.jobs.iter().map(|(id, j)| (*id, j))
    }

    pub fn users(&self) -> &BTreeMap<String, UserIdle> {
        &self.users
    }

    /// Where job `job_id` stands at `now` under `rules`; `None` without a fresh reading.
    pub fn state(&self, job_id: u32, rules: &IdleRules, now: i64) -> Option<IdleState> {
        let job = self.jobs.get(&job_id)?;
        if now - job.last_at > MAX_READING_AGE_S || rules.gpu_percent == 0 {
            return None;
        }
        Some(match job.idle_since {
            None => IdleState::Busy,
            Some(since) if now - since < i64::from(rules.grace_s) => IdleState::Idle { since },
            Some(since) if now < rules.act_at(since) => IdleState::Flagged {
                since,
                act_at: rules.act_at(since),
            },
            Some(since) => IdleState::Due { since },
        })
    }

    /// A number that changes when any job turns flagged or due at `now` (or stops being so):
    /// what the optimizer's idle decisions depend on. 0 while none is.
    pub fn epoch(&self, rules: &IdleRules, now: i64) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut acting: Vec<(u32, &'static str)> = self
            .jobs
            .keys()
            .filter_map(|&id| match self.state(id, rules, now)? {
                s @ (IdleState::Flagged { .. } | IdleState::Due { .. }) => Some((id, s.name())),
                _ => None,
            })
            .collect();
        if acting.is_empty() {
            return 0;
        }
        acting.sort_unstable();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        acting.hash(&mut hasher);
        hasher.finish() | 1
    }

    /// GPUs of running jobs idle now (any state but busy), and those jobs.
    pub fn idle_now(&self, rules: &IdleRules, now: i64) -> (u32, u32) {
        self.jobs
            .iter()
            .filter(|(id, _)| {
                self.state(**id, rules, now)
                    .is_some_and(|s| s != IdleState::Busy)
            })
            .fold((0, 0), |(gpus, jobs), (_, j)| (gpus + j.gpus, jobs + 1))
    }
}

/// What cinch says of the snapshot's running jobs whose GPUs stayed idle past their grace, added
/// to `decided` (the policy's decisions; a job it already decided on, e.g. requeued, keeps
/// that): a warning while the warning runs; then, due, a requeue where the admin's
/// `IdleAction` is `requeue` and the user opted in to requeues, a cancel where it is `cancel`,
/// and a warning that says it is reported otherwise. Nothing without the snapshot's rules.
pub fn add_decisions(
    snapshot: &Snapshot,
    tracker: &IdleTracker,
    decided: &mut Vec<Decision>,
    ttl_s: u32,
) {
    let Some(rules) = snapshot.idle else {
        return;
    };
    let now = snapshot.time;
    for job in &snapshot.running {
        let Some(state) = tracker.state(job.job_id, &rules, now) else {
            continue;
        };
        let (since, due) = match state {
            IdleState::Flagged { since, .. } => (since, false),
            IdleState::Due { since } => (since, true),
            IdleState::Busy | IdleState::Idle { .. } => continue,
        };
        if decided.iter().any(|d| d.job_id == job.job_id) {
            continue;
        }
        let busy = tracker.job(job.job_id).map_or(0, |j| j.last_busy);
        let opted_in = job.requeue && job.hints.checkpoints();
        let mut decision = Decision::explain(
            job.job_id,
            IdleNote {
                since,
                busy,
                threshold: rules.gpu_percent,
                action: job.idle_action,
                due,
                opted_in,
                act_at: rules.act_at(since),
            },
            ttl_s,
        );
        decision.idle = Some(IdleDecision {
            since,
            cancel: due && job.idle_action == IdleAction::Cancel,
        });
        if due && job.idle_action == IdleAction::Requeue && opted_in {
            decision.requeue = Some(true);
        }
        decided.push(decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::reason::Clause;
    use crate::wire::snapshot::RunningJob;

    fn rules() -> IdleRules {
        IdleRules {
            gpu_percent: 5,
            grace_s: 600,
            warn_s: 300,
        }
    }

    fn gpu(busy: u32) -> GpuUse {
        GpuUse {
            gpus: 2,
            busy_percent: busy,
            memory_mib: 100,
        }
    }

    #[test]
    fn idle_readings_flag_a_job_after_its_grace_and_one_busy_reading_clears_it() {
        let mut t = IdleTracker::default();
        let r = rules();
        t.reading(1, "ann", 1000, gpu(0), &r);
        assert_eq!(t.state(1, &r, 1000), Some(IdleState::Idle { since: 1000 }));
        for at in (1060..=1600).step_by(60) {
            t.reading(1, "ann", at, gpu(3), &r);
        }
        assert_eq!(
            t.state(1, &r, 1600),
            Some(IdleState::Flagged {
                since: 1000,
                act_at: 1900
            })
        );
        for at in (1660..=1900).step_by(60) {
            t.reading(1, "ann", at, gpu(1), &r);
        }
        assert_eq!(t.state(1, &r, 1900), Some(IdleState::Due { since: 1000 }));
        // The epoch changes as the job turns flagged, then due.
        assert_eq!(t.epoch(&r, 1500), 0);
        assert_ne!(t.epoch(&r, 1600), 0);
        assert_ne!(t.epoch(&r, 1600), t.epoch(&r, 1900));
        // 900 s on 2 GPUs idle.
        assert_eq!(t.job(1).unwrap().idle_gpu_s, 1800.0);
        assert_eq!(t.users()["ann"].idle_jobs, 1);
        // One busy reading: busy again, and a new idle run starts from the last reading.
        t.reading(1, "ann", 1960, gpu(5), &r);
        assert_eq!(t.state(1, &r, 1960), Some(IdleState::Busy));
        t.reading(1, "ann", 2020, gpu(0), &r);
        assert_eq!(t.state(1, &r, 2020), Some(IdleState::Idle { since: 1960 }));
        assert_eq!(t.users()["ann"].idle_jobs, 1, "the same job");
        assert_eq!(t.users()["ann"].read_gpu_s, 2040.0);
    }

    #[test]
    fn a_job_without_a_fresh_reading_is_never_judged_and_a_zero_threshold_flags_nothing() {
        let mut t = IdleTracker::default();
        let r = rules();
        t.reading(1, "ann", 1000, gpu(0), &r);
        t.reading(1, "ann", 1700, gpu(0), &r);
        assert!(matches!(
            t.state(1, &r, 1700),
            Some(IdleState::Flagged { .. })
        ));
        assert_eq!(t.state(1, &r, 1700 + MAX_READING_AGE_S + 1), None);
        assert_eq!(t.state(2, &r, 1700), None);
        let off = IdleRules {
            gpu_percent: 0,
            ..r
        };
        assert_eq!(t.state(1, &off, 1700), None);
        // After a gap in the readings, an idle run starts at the reading, not before the gap.
        t.reading(3, "bob", 1000, gpu(50), &r);
        t.reading(3, "bob", 5000, gpu(0), &r);
        assert_eq!(t.state(3, &r, 5000), Some(IdleState::Idle { since: 5000 }));
        // Readings out of order change nothing; ended jobs go, their user's totals stay.
        let before = t.job(1).cloned();
        t.reading(1, "ann", 1500, gpu(90), &r);
        assert_eq!(t.job(1).cloned(), before);
        t.retain_running(|_| false);
        assert!(t.job(1).is_none());
        assert_eq!(t.users()["ann"].idle_gpu_s, 1200.0);
    }

    fn snapshot(action: IdleAction, opted_in: bool, now: i64) -> Snapshot {
        let mut snap = crate::testing::snapshot(Vec::new(), Vec::new());
        snap.time = now;
        snap.idle = Some(rules());
        snap.running = vec![RunningJob {
            job_id: 1,
            user: "ann".into(),
            gpus: 2,
            requeue: opted_in,
            hints: crate::slurm::job_hints::Hints::from_comment(
                opted_in.then_some("cinch:ckpt=yes"),
            ),
            idle_action: action,
            ..RunningJob::default()
        }];
        snap
    }

    #[test]
    fn a_flagged_job_is_warned_then_requeued_cancelled_or_reported_as_the_admin_said() {
        let mut t = IdleTracker::default();
        let r = rules();
        for at in (1000..=2000).step_by(100) {
            t.reading(1, "ann", at, gpu(0), &r);
        }
        let decide = |action, opted_in, now| {
            let mut out = Vec::new();
            add_decisions(&snapshot(action, opted_in, now), &t, &mut out, 60);
            out
        };
        // Within the grace: nothing.
        assert!(decide(IdleAction::Requeue, true, 1500).is_empty());
        // Flagged: a warning, no action.
        let warned = decide(IdleAction::Requeue, true, 1700);
        assert_eq!(
            warned[0].idle,
            Some(IdleDecision {
                since: 1000,
                cancel: false
            })
        );
        assert_eq!(warned[0].requeue, None);
        let note = |d: &Decision| match d.reason.clauses() {
            [Clause::Idle(note)] => *note,
            other => panic!("not an idle note: {other:?}"),
        };
        let warning = note(&warned[0]);
        assert_eq!(
            (warning.action, warning.due, warning.opted_in),
            (IdleAction::Requeue, false, true)
        );
        assert_eq!(warning.act_at, rules().act_at(1000));
        // Due: requeued if opted in, cancelled where the admin said so, reported otherwise.
        let due = decide(IdleAction::Requeue, true, 1950);
        assert_eq!(due[0].requeue, Some(true));
        assert!(note(&due[0]).due);
        let not_opted = decide(IdleAction::Requeue, false, 1950);
        assert_eq!(not_opted[0].requeue, None);
        assert!(!note(&not_opted[0]).opted_in);
        let cancel = decide(IdleAction::Cancel, false, 1950);
        assert_eq!(cancel[0].idle.map(|i| i.cancel), Some(true));
        let report = decide(IdleAction::Report, true, 1950);
        assert_eq!(report[0].requeue, None);
        assert_eq!(report[0].idle.map(|i| i.cancel), Some(false));
        // The policy's own decision on the job stands.
        let mut out = vec![Decision::explain(1, "consolidate", 60)];
        add_decisions(&snapshot(IdleAction::Cancel, false, 1950), &t, &mut out, 60);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].idle, None);
        // Without the agent's rules: nothing.
        let mut snap = snapshot(IdleAction::Cancel, false, 1950);
        snap.idle = None;
        let mut out = Vec::new();
        add_decisions(&snap, &t, &mut out, 60);
        assert!(out.is_empty());
    }
}
