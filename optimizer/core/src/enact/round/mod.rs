//! One round of cinch, the same for the plugin's agent inside slurmctld and for the simulator:
//! read the cluster, ask the optimizer, carry out the apply path's plan, and remember between
//! rounds what the rules need (renewed TTLs, fields users changed, the requeue limiter, the
//! breaker, the settled round that lets quiet rounds be skipped, the wait for nodes to register).
//!
//! It talks to the world only through two ports, [`Cluster`] (Slurm live, the simulated Slurm in
//! the simulator) and [`Optimizer`] (HTTP live, [`InProcess`] in the simulator), and takes the
//! clock as an argument, so its rules are unit-tested with a recording double (`tests` below).
//! What cinch applied to a job is the cluster's to keep (the AdminComment live): the round reads
//! it back with each [`PendingState`] and hands each change's new record to [`Cluster::change`].

pub mod breaker;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::enact::apply::{
    self, Applied, Fields, JobChange, PendingState, RequeueLimiter, RunningState,
};
use crate::learn::history::History;
use crate::policy::PolicyConfig;
use crate::util::rng::SeededRng;
use crate::{Decision, Decisions, Mode, Snapshot, SCHEMA_VERSION};
use breaker::{Breaker, Transition};

/// How much a log line matters (the plugin maps it onto cinch.conf's LogLevel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Info,
    Verbose,
    Debug,
}

/// The settings a round runs under (cinch.conf's, live).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// Seconds between rounds.
    pub interval_s: u32,
    pub max_requeues_per_hour: u32,
    pub max_requeues_per_job: u32,
    /// The most decisions an answer may carry.
    pub max_decisions: u32,
    /// When a running job's GPUs count as idle (cinch.conf's `Idle*`).
    pub idle: crate::wire::idle::IdleRules,
}

/// The cluster as one read shows it.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Pending jobs cinch may touch, with what cinch applied to each (array meta-records and
    /// heterogeneous jobs left out). `foreign` and `renewed_until` are the round's to fill.
    pub pending: Vec<PendingState>,
    pub running: Vec<RunningState>,
    /// The cluster's node names (shared: the simulator's do not change between rounds).
    pub nodes: Arc<HashSet<String>>,
    /// Nodes whose daemon has not registered since the controller started.
    pub unregistered: usize,
}

/// The cluster: Slurm's API live, the simulated Slurm in the simulator.
pub trait Cluster {
    /// Whether jobs and nodes are unchanged since the last [`Cluster::read`] (cheap: Slurm
    /// answers "no change" to a load with the last update time); false when unknown. Called
    /// only when a round may be skipped.
    fn unchanged(&mut self) -> bool;
    fn read(&mut self) -> Result<Reading, ClusterError>;
    /// What the last read saw, as the optimizer is shown it (what the admin keeps cinch off is
    /// left out of the pending jobs).
    fn snapshot(&mut self, now: i64) -> Snapshot;
    /// Hands the snapshot back once the optimizer was asked (the simulator keeps it to build
    /// the next one incrementally).
    fn snapshot_done(&mut self, _snapshot: Snapshot) {}
    /// Hands the round's reading back once the round is done with it (the simulator keeps it
    /// and hands it out again while nothing it was read from has changed).
    fn reading_done(&mut self, _reading: Reading) {}
    /// Carries out one change with its record.
    fn change(&mut self, change: &JobChange) -> Result<(), ClusterError>;
    fn requeue(&mut self, job_id: u32) -> Result<(), ClusterError>;
    /// Cancels a running job (`scancel`): only for a job whose GPUs stayed idle where the
    /// admin's `IdleAction` says cancel.
    fn cancel(&mut self, job_id: u32) -> Result<(), ClusterError>;
    /// Writes (`Some`) or takes off (`None`) a job's idle-GPU warning where its user reads it:
    /// the plugin keeps it in the job's AdminComment (`cinch-idle:`); the simulator has no
    /// users to tell.
    fn note_idle(&mut self, _job_id: u32, _warning: Option<&str>) -> Result<(), ClusterError> {
        Ok(())
    }
    fn log(&mut self, level: Level, message: &str);
    /// Whether what cinch says of each change is read: the words of the job's record and the
    /// change's log line. Live always (the AdminComment `cinch why` reads, slurmctld.log); the
    /// simulator only when its agent log is shown, as a simulated round that changes thousands
    /// of jobs would otherwise put every one's reason into words nobody reads.
    fn wants_words(&self) -> bool {
        true
    }
    /// After each read: whether the round will decide with it (`false`: the read failed or the
    /// round waits for nodes). The plugin hands job_submit its sharing view here.
    fn read_used(&mut self, _now_ms: i64, _used: bool) {}
}

/// Why the cluster did not do what the round asked, by kind: the round stops telling Slurm
/// anything more this round once it cannot be reached (each call would wait out its own
/// timeout), says a job that is gone at the level of news, and a refusal as an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// Slurm could not be asked: slurmctld down or not answering, or shutting down.
    #[error("{0}")]
    Unreachable(String),
    /// The job is no longer what the read saw (ended, started, or gone), so there is nothing
    /// to change; the next read shows it as it is.
    #[error("job {0} is no longer as the round read it (ended or started)")]
    Gone(u32),
    /// Slurm refused it (its validation, its permissions), in its words.
    #[error("{0}")]
    Refused(String),
}

/// Why the optimizer gave no usable answer, by where it failed: the round logs the kind, and
/// every kind counts against the breaker (each leaves the round without decisions; the breaker
/// then stands cinch aside and undoes what it applied), while a cluster that refuses a change
/// ([`Cluster::change`]) or an optimizer that cannot be asked at all ([`Optimizer::ready`])
/// never does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// No answer: it could not be reached, or did not answer in time.
    #[error("{0}")]
    Unreachable(String),
    /// It answered, and refused (an HTTP error status, a health check that failed).
    #[error("{0}")]
    Refused(String),
    /// It answered what cinch cannot use: malformed, another schema, more decisions than
    /// jobs, or mostly decisions the apply path refuses.
    #[error("{0}")]
    Invalid(String),
}

impl AskError {
    /// The kind, as the log names it.
    pub fn kind(&self) -> &'static str {
        match self {
            AskError::Unreachable(_) => "unreachable",
            AskError::Refused(_) => "refused",
            AskError::Invalid(_) => "invalid answer",
        }
    }
}

/// The optimizer: the service over HTTP live, [`InProcess`] in the simulator.
pub trait Optimizer {
    /// Whether it can be asked at all (live: a usable token; the port logs why not). `false`
    /// stands cinch aside without counting against the breaker.
    fn ready(&mut self) -> bool {
        true
    }
    /// Its answer to `snapshot`, `Err` with why there is no usable one.
    fn ask(&mut self, snapshot: &Snapshot) -> Result<Decisions, AskError>;
    /// Its policy version (live: its unauthenticated health check), a skipped round's proof that
    /// it is alive and its policy unchanged.
    fn policy_version(&mut self) -> Result<u64, AskError>;
    /// Hands back the answer [`Optimizer::ask`] gave, unchanged, once the round is done with it
    /// (live, the delta exchange builds the next answer on it).
    fn answer_done(&mut self, _answer: Decisions) {}
}

/// The optimizer run in-process, as the service runs it: each snapshot is first learned from,
/// then decided on with the policy's rng seeded by the service's seed and the snapshot's time.
pub struct InProcess {
    pub policy: PolicyConfig,
    pub mode: Mode,
    pub seed: u64,
    pub history: History,
    /// What the snapshots showed, kept as the service keeps it when set.
    pub record: Option<crate::learn::record::Record>,
    /// The running jobs' GPU readings (the simulator's), for idle decisions.
    pub idle: crate::models::idle::IdleTracker,
}

impl InProcess {
    pub fn new(policy: PolicyConfig, seed: u64) -> InProcess {
        InProcess {
            policy,
            mode: Mode::Enforce,
            seed,
            history: History::default(),
            record: None,
            idle: Default::default(),
        }
    }
}

/// The lifetime of an idle decision (a running job's: nothing it sets lapses).
pub const IDLE_DECISION_TTL_S: u32 = 300;

/// The service's step for one snapshot: learn from it, then decide (nothing when off).
pub fn decide_step(
    policy: &PolicyConfig,
    mode: Mode,
    seed: u64,
    history: &mut History,
    snapshot: &Snapshot,
) -> Vec<Decision> {
    history.observe(snapshot);
    match mode {
        Mode::Off => Vec::new(),
        Mode::Shadow | Mode::Enforce => {
            let mut rng = SeededRng::new(seed ^ snapshot.time as u64);
            policy.decide(snapshot, snapshot.time, &mut rng, history)
        }
    }
}

impl Optimizer for InProcess {
    fn ask(&mut self, snapshot: &Snapshot) -> Result<Decisions, AskError> {
        if let Some(record) = &mut self.record {
            record.observe(snapshot);
        }
        let mut decisions = decide_step(
            &self.policy,
            self.mode,
            self.seed,
            &mut self.history,
            snapshot,
        );
        if self.mode != Mode::Off {
            crate::models::idle::add_decisions(
                snapshot,
                &self.idle,
                &mut decisions,
                IDLE_DECISION_TTL_S,
            );
        }
        Ok(Decisions {
            observed: Default::default(),
            schema_version: SCHEMA_VERSION,
            policy: self.policy.name().to_string(),
            mode: self.mode,
            time: snapshot.time,
            stated_targets: Some(self.policy.stated_targets()),
            decisions,
        })
    }

    fn policy_version(&mut self) -> Result<u64, AskError> {
        Ok(0)
    }
}

/// What a round tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Until when (Unix ms) job_submit may hold new multi-GPU jobs for the next round; 0: not.
    pub enforcing_until_ms: i64,
    /// Nothing changed since the last good round: it was not repeated.
    pub skipped: bool,
}

/// Even with nothing changed in the cluster, the optimizer is asked at least this often
/// ([`crate::wire::snapshot::MAX_QUIET_S`]).
pub const IDLE_REFRESH_MS: i64 = 1000 * crate::wire::snapshot::MAX_QUIET_S;

/// How long after the first read of the cluster rounds wait for nodes whose daemon has not
/// registered since the controller started (for about 3 s on the local cluster; Slurm 24.11
/// shows idle nodes so): a round then would see their GPUs as unusable and undo pins or leave
/// new jobs to Slurm for want of free GPUs. Bounded, since a node whose slurmd never comes back
/// stays UNKNOWN until Slurm marks it DOWN (SlurmdTimeout, 300 s by default).
pub const NODE_REGISTRATION_WAIT_MS: i64 = 60_000;

/// cinch.conf's default `MaxDecisions`: the most decisions one answer may carry.
pub const DEFAULT_MAX_DECISIONS: u32 = 10_000;

/// Seconds between rounds unless cinch.conf's `IntervalSeconds` says otherwise.
pub const DEFAULT_INTERVAL_S: u32 = 5;

/// An answer with at least this many refused decisions, and more refused than not, is a failed
/// round (fewer can be a job that started between snapshot and answer).
const MOSTLY_REFUSED_MIN: usize = 3;

/// What a round remembers until the next.
#[derive(Default)]
pub struct Round {
    breaker: Breaker,
    /// Requeues of the last hour (created with the first round's limit).
    requeues: Option<RequeueLimiter>,
    /// TTLs renewed since the record was written (job -> until). (FxHash, as for the maps
    /// below: they can hold every pending job, and the plugin's rounds run inside slurmctld.)
    renewed: FxHashMap<u32, i64>,
    /// Fields of pending jobs that users or admins changed after cinch.
    foreign: FxHashMap<u32, Fields>,
    /// Last shadow line logged per job, so a decision is logged once, not every round.
    shadowed: FxHashMap<u32, String>,
    /// Last idle warning logged per job, likewise.
    warned_idle: FxHashMap<u32, String>,
    /// Whether the last round could read the cluster (logged on change only).
    read_ok: Option<bool>,
    /// The last round that asked the optimizer and used its answer, while nothing since needs a
    /// new one.
    settled: Option<Settled>,
    /// When the round first read the cluster (ms): the start of its wait for nodes.
    first_read_ms: Option<i64>,
    /// Whether the last round waited for nodes to register (logged on change only).
    awaiting_nodes: bool,
    /// Wall time of the previous round (set by the caller), and rounds whose exchange with the
    /// optimizer failed: reported with each snapshot.
    pub last_round_s: f64,
    failed_rounds: u64,
}

/// A round that may stand for the next ones while the cluster shows no change.
#[derive(Debug, Clone, Copy)]
struct Settled {
    at_ms: i64,
    /// When the first thing cinch applied expires or a delay it set ends (ms): a round must run
    /// before then.
    next_event_ms: i64,
    enforcing: bool,
    /// The optimizer's policy version after that round (`None`: unknown, so never skip).
    policy_version: Option<u64>,
}

impl Round {
    /// The breaker's state, for tests and status.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// One round at `now_ms`, with the fields users and admins changed since the last round.
    pub fn run<P: Cluster + Optimizer>(
        &mut self,
        settings: &Settings,
        ports: &mut P,
        now_ms: i64,
        foreign: Vec<(u32, Fields)>,
    ) -> Outcome {
        let now = now_ms / 1000;
        if let Some(outcome) = self.skip(settings, ports, now_ms, foreign.is_empty()) {
            return outcome;
        }
        self.settled = None;
        for (job, fields) in foreign {
            let entry = self.foreign.entry(job).or_default();
            *entry = entry.union(fields);
        }
        let Some(mut reading) = self.read(ports, now_ms) else {
            return Outcome {
                enforcing_until_ms: 0,
                skipped: false,
            };
        };
        if self.awaits_nodes(ports, now_ms, reading.unregistered) {
            // Nothing is applied or undone, and new multi-GPU jobs are held as usual: the first
            // round that sees the nodes places them (a hold lapses by itself).
            ports.read_used(now_ms, false);
            return Outcome {
                enforcing_until_ms: if settings.mode == Mode::Enforce {
                    hold_window_end(settings, now_ms)
                } else {
                    0
                },
                skipped: false,
            };
        }
        ports.read_used(now_ms, true);
        // Warnings on record that this round's memory does not hold (slurmctld restarted): the
        // next answer rewrites or takes them off.
        for job in reading.running.iter().filter(|j| j.idle_warned) {
            self.warned_idle.entry(job.job_id).or_default();
        }
        for job in &mut reading.pending {
            job.foreign = self.foreign.get(&job.job_id).copied().unwrap_or_default();
            job.renewed_until = self.renewed.get(&job.job_id).copied();
        }
        let answer = self.ask(settings, ports, now_ms, &reading);

        // The stricter of the settings' mode and the optimizer's.
        let mode = match &answer {
            Some(Ok(d)) => settings.mode.stricter(d.mode),
            _ => settings.mode,
        };
        let (plan, answered) = self.plan(settings, ports, now_ms, mode, &reading, &answer);
        let (records, changes_failed) = self.carry_out(ports, plan, now, answered);
        if let Some(Ok(d)) = answer {
            ports.answer_done(d);
        }

        // Forget jobs no longer pending.
        let pending: FxHashSet<u32> = reading.pending.iter().map(|j| j.job_id).collect();
        self.renewed.retain(|j, _| pending.contains(j));
        self.foreign.retain(|j, _| pending.contains(j));
        self.shadowed.retain(|j, _| pending.contains(j));

        let enforcing = mode == Mode::Enforce && answered;
        if answered && !changes_failed {
            self.settle(ports, now_ms, &reading, &records, enforcing);
        }
        ports.reading_done(reading);
        Outcome {
            enforcing_until_ms: if enforcing {
                hold_window_end(settings, now_ms)
            } else {
                0
            },
            skipped: false,
        }
    }

    /// The cluster as Slurm shows it now, or `None` (said once until it reads again).
    fn read(&mut self, ports: &mut impl Cluster, now_ms: i64) -> Option<Reading> {
        match ports.read() {
            Ok(r) => {
                if self.read_ok != Some(true) {
                    ports.log(
                        Level::Info,
                        "agent: reading the cluster through Slurm's API",
                    );
                    self.read_ok = Some(true);
                }
                Some(r)
            }
            Err(e) => {
                ports.read_used(now_ms, false);
                if self.read_ok != Some(false) {
                    ports.log(
                        Level::Error,
                        &format!("agent: cannot read the cluster ({e}); will retry"),
                    );
                    self.read_ok = Some(false);
                }
                None
            }
        }
    }

    /// What this round changes: the answer's decisions through the apply path, or (no answer,
    /// or one mostly refused) what a passing failure keeps or what is undone. Also whether the
    /// optimizer answered with something usable.
    fn plan<P: Cluster + Optimizer>(
        &mut self,
        settings: &Settings,
        ports: &mut P,
        now_ms: i64,
        mode: Mode,
        reading: &Reading,
        answer: &Option<Result<Decisions, ()>>,
    ) -> (apply::Plan, bool) {
        let now = now_ms / 1000;
        let limiter = self
            .requeues
            .get_or_insert_with(|| RequeueLimiter::new(settings.max_requeues_per_hour));
        let requeue_limits = apply::RequeueLimits {
            max_per_job: settings.max_requeues_per_job,
            budget: limiter.budget(now).min(settings.max_requeues_per_hour),
        };
        let words = ports.wants_words();
        let plan_with = |decisions: Option<&[Decision]>| {
            apply::plan(
                &reading.pending,
                &reading.running,
                &apply::Input {
                    now,
                    mode,
                    decisions,
                    nodes: &reading.nodes,
                    requeue_limits,
                    idle: settings.idle,
                    renew_within_s: apply::renewal_margin_s(settings.interval_s),
                    words,
                },
            )
        };
        // A passing failure keeps what was applied until its TTL (and releases submit holds);
        // no answer otherwise (cinch off, no token, breaker open) undoes it.
        let passing_failure = |breaker: &Breaker| (!breaker.is_open()).then_some(&[][..]);
        let d = match answer {
            Some(Ok(d)) => d,
            Some(Err(())) => return (plan_with(passing_failure(&self.breaker)), false),
            None => return (plan_with(None), false),
        };
        let plan = plan_with(Some(&d.decisions[..]));
        // An answer made mostly of decisions the apply path refuses is a broken optimizer, not
        // a few stale decisions: none of it is used, and it counts against the breaker.
        let refused = plan.refused.len();
        if refused >= MOSTLY_REFUSED_MIN && refused * 2 > d.decisions.len() {
            let why = format!(
                "{refused} of its {} decisions refused, e.g. {}",
                d.decisions.len(),
                plan.refused[0]
            );
            self.failed_rounds += 1;
            answer_failed(&mut self.breaker, ports, now_ms, &AskError::Invalid(why));
            return (plan_with(passing_failure(&self.breaker)), false);
        }
        if let Some(Transition::Closed) = self.breaker.success() {
            ports.log(
                Level::Info,
                "agent: the optimizer answers again; cinch resumes",
            );
        }
        (plan, true)
    }

    /// Notes a good round, so later ones may be skipped until something happens: what cinch
    /// applied expires, or a delay it set ends, first; the next round must not be skipped past
    /// it (the optimizer may decide anew then).
    fn settle(
        &mut self,
        ports: &mut impl Optimizer,
        now_ms: i64,
        reading: &Reading,
        records: &FxHashMap<u32, Applied>,
        enforcing: bool,
    ) {
        let next_event = reading
            .pending
            .iter()
            .filter_map(|j| {
                let applied = records.get(&j.job_id).unwrap_or(&j.applied);
                (!applied.is_empty()).then(|| {
                    let until = self
                        .renewed
                        .get(&j.job_id)
                        .copied()
                        .unwrap_or(applied.until);
                    applied.begin.map_or(until, |begin| begin.min(until))
                })
            })
            .min()
            .map_or(i64::MAX, |t| t.saturating_mul(1000));
        self.settled = Some(Settled {
            at_ms: now_ms,
            next_event_ms: next_event,
            enforcing,
            policy_version: ports.policy_version().ok(),
        });
    }

    /// The outcome to repeat when nothing new happened since a good round, at the cost of a
    /// "no change" read and a health check.
    fn skip<P: Cluster + Optimizer>(
        &self,
        settings: &Settings,
        ports: &mut P,
        now_ms: i64,
        no_foreign: bool,
    ) -> Option<Outcome> {
        let settled = self.settled?;
        let interval_ms = 1000 * i64::from(settings.interval_s);
        let quiet = no_foreign
            && now_ms - settled.at_ms < IDLE_REFRESH_MS
            && now_ms + interval_ms < settled.next_event_ms
            && settings.mode != Mode::Off
            && settled.policy_version.is_some();
        // The optimizer must still answer, with the same policy: a lost optimizer or an admin's
        // change (e.g. back to shadow) is acted on at once, not a minute later.
        (quiet && ports.unchanged() && ports.policy_version().ok() == settled.policy_version).then(
            || Outcome {
                enforcing_until_ms: if settled.enforcing {
                    hold_window_end(settings, now_ms)
                } else {
                    0
                },
                skipped: true,
            },
        )
    }

    /// Whether this round waits for nodes to register (logging when that changes).
    fn awaits_nodes(&mut self, ports: &mut impl Cluster, now_ms: i64, unregistered: usize) -> bool {
        let started_ms = *self.first_read_ms.get_or_insert(now_ms);
        let awaiting = unregistered > 0 && now_ms - started_ms < NODE_REGISTRATION_WAIT_MS;
        if awaiting != self.awaiting_nodes {
            ports.log(
                Level::Info,
                &if awaiting {
                    format!(
                        "agent: waiting for {unregistered} node(s) to register with slurmctld \
                         before deciding (at most {} s); nothing is changed meanwhile",
                        NODE_REGISTRATION_WAIT_MS / 1000
                    )
                } else if unregistered > 0 {
                    format!(
                        "agent: {unregistered} node(s) still not registered after {} s; \
                         deciding without them",
                        NODE_REGISTRATION_WAIT_MS / 1000
                    )
                } else {
                    "agent: nodes registered; deciding".to_string()
                },
            );
            self.awaiting_nodes = awaiting;
        }
        awaiting
    }

    /// Asks the optimizer unless cinch is off, it cannot be asked, or the breaker says wait:
    /// `None` when not asked, `Some(Err)` when asking failed this round.
    fn ask<P: Cluster + Optimizer>(
        &mut self,
        settings: &Settings,
        ports: &mut P,
        now_ms: i64,
        reading: &Reading,
    ) -> Option<Result<Decisions, ()>> {
        if settings.mode == Mode::Off {
            return None;
        }
        if !ports.ready() {
            self.breaker = Breaker::default();
            return None;
        }
        if !self.breaker.allow(now_ms) {
            return None;
        }
        let mut snapshot = ports.snapshot(now_ms / 1000);
        snapshot.agent = Some(crate::wire::snapshot::AgentStatus {
            mode: settings.mode,
            breaker_open: self.breaker.is_open(),
            applied: applied_counts(reading),
            last_round_s: self.last_round_s,
            failed_rounds: self.failed_rounds,
            round: Some(crate::wire::snapshot::AgentRound {
                interval_s: settings.interval_s,
                max_requeues_per_job: settings.max_requeues_per_job,
                max_requeues_per_hour: settings.max_requeues_per_hour,
            }),
        });
        // No more decisions than jobs it was shown: anything beyond is not about this cluster.
        let most =
            (snapshot.pending.len() + snapshot.running.len()).min(settings.max_decisions as usize);
        let answer = ports.ask(&snapshot);
        ports.snapshot_done(snapshot);
        let answer = answer.and_then(|d| {
            if d.decisions.len() > most {
                Err(AskError::Invalid(format!(
                    "answer carries {} decisions, more than the {most} allowed (one per job in \
                     the snapshot, at most MaxDecisions={})",
                    d.decisions.len(),
                    settings.max_decisions
                )))
            } else {
                Ok(d)
            }
        });
        match answer {
            // Counted as a success only once its decisions pass the apply path (`run`).
            Ok(d) => Some(Ok(d)),
            Err(e) => {
                self.failed_rounds += 1;
                answer_failed(&mut self.breaker, ports, now_ms, &e);
                Some(Err(()))
            }
        }
    }

    /// Carries out `plan`: its changes, requeues (each followed by its resize) and renewals,
    /// logging each. Returns the records written and whether the cluster refused any change.
    fn carry_out(
        &mut self,
        ports: &mut impl Cluster,
        plan: apply::Plan,
        now: i64,
        answered: bool,
    ) -> (FxHashMap<u32, Applied>, bool) {
        if !plan.refused.is_empty() {
            let shown: Vec<&str> = plan.refused.iter().take(3).map(String::as_str).collect();
            ports.log(
                Level::Error,
                &format!(
                    "agent: refused {} invalid decision(s) from the optimizer: {}",
                    plan.refused.len(),
                    shown.join("; ")
                ),
            );
        }
        for (job, line) in &plan.shadow {
            if self.shadowed.get(job) != Some(line) {
                ports.log(Level::Info, &format!("shadow: job {job}: would {line}"));
                self.shadowed.insert(*job, line.clone());
            }
        }
        let mut records = FxHashMap::default();
        let mut failed = false;
        let mut told = Telling::default();
        let words = ports.wants_words();
        for change in plan.changes {
            let what: std::borrow::Cow<str> = if words {
                format!("'{}'", change.summary).into()
            } else {
                "its change".into()
            };
            if told.call(ports, change.job_id, &what, |p| p.change(&change)) {
                if words {
                    ports.log(
                        Level::Info,
                        &format!("job {}: {}", change.job_id, change.summary),
                    );
                }
                records.insert(change.job_id, change.record);
            } else {
                failed = true;
            }
            self.renewed.remove(&change.job_id);
        }
        for (job, why) in &plan.requeues {
            let what = format!("the requeue ({why})");
            if !told.call(ports, *job, &what, |p| p.requeue(*job)) {
                continue;
            }
            // (The limiter exists: the round made it before planning.)
            if let Some(limiter) = &mut self.requeues {
                limiter.record(now, 1);
            }
            ports.log(Level::Info, &format!("job {job}: requeued: {why}"));
            // A refused resize leaves the old size; the next round sizes it as pending.
            for change in plan.after_requeue.iter().filter(|c| c.job_id == *job) {
                let what = format!("'{}'", change.summary);
                if told.call(ports, *job, &what, |p| p.change(change)) {
                    ports.log(Level::Info, &format!("job {job}: {}", change.summary))
                }
            }
        }
        // Warnings stand until an answer no longer gives them (busy again, requeued, ended):
        // then they come off the job's record.
        if answered {
            let gone: Vec<u32> = self
                .warned_idle
                .keys()
                .copied()
                .filter(|job| !plan.idle_warnings.iter().any(|(j, _)| j == job))
                .collect();
            for job in gone {
                self.warned_idle.remove(&job);
                let what = "taking off its idle warning";
                told.call(ports, job, what, |p| p.note_idle(job, None));
            }
        }
        for (job, why) in plan.idle_warnings {
            if self.warned_idle.get(&job) != Some(&why) {
                ports.log(Level::Info, &format!("job {job}: GPUs idle: {why}"));
                told.call(ports, job, "its idle warning", |p| {
                    p.note_idle(job, Some(&why))
                });
                self.warned_idle.insert(job, why);
            }
        }
        for (job, why) in &plan.cancels {
            let what = format!("the cancel ({why})");
            if told.call(ports, *job, &what, |p| p.cancel(*job)) {
                ports.log(Level::Info, &format!("job {job}: cancelled: {why}"));
            }
        }
        self.renewed.extend(plan.renewed);
        (records, failed)
    }
}

/// The round telling Slurm what it changes, call by call: each failure said by its kind, and
/// once Slurm cannot be reached, nothing more asked this round.
#[derive(Default)]
struct Telling {
    unreachable: bool,
}

impl Telling {
    /// Makes `call` about `job` (what it does in words: `what`) unless Slurm was found
    /// unreachable this round; whether it was done.
    fn call<P: Cluster>(
        &mut self,
        ports: &mut P,
        job: u32,
        what: &str,
        call: impl FnOnce(&mut P) -> Result<(), ClusterError>,
    ) -> bool {
        if self.unreachable {
            return false;
        }
        let Err(e) = call(ports) else {
            return true;
        };
        match e {
            ClusterError::Unreachable(e) => {
                self.unreachable = true;
                ports.log(
                    Level::Error,
                    &format!(
                        "agent: Slurm cannot be reached ({e}): {what} for job {job} and the rest \
                         of this round's changes wait for the next round"
                    ),
                );
            }
            ClusterError::Gone(_) => {
                ports.log(Level::Info, &format!("job {job}: {what} not made: {e}"))
            }
            ClusterError::Refused(e) => ports.log(
                Level::Error,
                &format!("job {job}: Slurm refused {what}: {e}"),
            ),
        }
        false
    }
}

/// How many jobs carry each kind of change cinch applied, for the snapshot's agent status.
pub fn applied_counts(reading: &Reading) -> BTreeMap<String, u32> {
    const CHANGES: [&str; 6] = ["pin", "delay", "hold", "priority", "nice", "gpus"];
    // Counted first, named after: every pending job is counted every round.
    let mut counts = [0u32; CHANGES.len()];
    let applied = reading
        .pending
        .iter()
        .map(|j| &j.applied)
        .chain(reading.running.iter().map(|j| &j.applied));
    for a in applied {
        let present = [
            a.pin.is_some(),
            a.begin.is_some(),
            a.hold,
            a.prio.is_some(),
            a.nice.is_some(),
            a.gpus.is_some(),
        ];
        for (count, present) in counts.iter_mut().zip(present) {
            *count += u32::from(present);
        }
    }
    CHANGES
        .iter()
        .zip(counts)
        .filter(|(_, count)| *count > 0)
        .map(|(change, count)| (change.to_string(), count))
        .collect()
}

/// Until when job_submit may hold new multi-GPU jobs after a round that enforces at `now_ms`:
/// three intervals, so one late round does not end the holds.
fn hold_window_end(settings: &Settings, now_ms: i64) -> i64 {
    now_ms + 1000 * apply::renewal_margin_s(settings.interval_s)
}

/// Counts a failed round against the breaker, logging when it opens.
fn answer_failed(breaker: &mut Breaker, ports: &mut impl Cluster, now_ms: i64, why: &AskError) {
    let why = format!("{}: {why}", why.kind());
    if let Some(Transition::Opened { failures, error }) = breaker.failure(now_ms, &why) {
        ports.log(
            Level::Error,
            &format!(
                "agent: optimizer unusable after {failures} tries ({error}); cinch stands \
                 aside and undoes its changes; Slurm schedules on its own"
            ),
        );
    } else if !breaker.is_open() {
        ports.log(
            Level::Verbose,
            &format!("agent: no usable answer this round: {why}"),
        );
    }
}

#[cfg(test)]
mod tests;
