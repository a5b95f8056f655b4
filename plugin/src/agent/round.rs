//! One round of the agent: read the cluster, ask the optimizer, carry out the apply path's plan.
//! It talks to Slurm, the optimizer and the log only through [`Ports`], and takes the clock as
//! an argument, so its rules (keeping decisions through a passing failure, the breaker, the mode
//! in force, the submit-hold window) are unit-tested with a recording double; the slurmctld-facing
//! implementation in `thread.rs` is a thin wrapper around Slurm's API and the HTTP client.

use std::collections::{HashMap, HashSet};

use cinch_core::apply::{RequeueLimiter, RequeueLimits};
use cinch_core::snapshot::NodeState;
use cinch_core::{Decision, Decisions, Mode, Snapshot};

use super::breaker::{Breaker, Transition};
use super::owned::applied_of;
use super::reconcile::{reconcile, Fields, Input, JobUpdate};
use super::view::{self, JobState, JobView, NodeView, TopologyView};
use crate::config::{Config, LogLevel};

/// What a round needs from the world outside it.
pub trait Ports {
    /// Whether Slurm's jobs and nodes are unchanged since the last `load_jobs`/`load_nodes`
    /// (cheap: Slurm answers "no change" to a load with the last update time); false when
    /// unknown. Called only when a round may be skipped.
    fn cluster_unchanged(&mut self) -> bool;
    fn load_jobs(&mut self) -> Result<Vec<JobView>, String>;
    fn load_nodes(&mut self) -> Result<Vec<NodeView>, String>;
    fn load_topology(&mut self) -> TopologyView;
    fn update_job(&mut self, update: &JobUpdate) -> Result<(), String>;
    fn requeue_job(&mut self, job_id: u32) -> Result<(), String>;
    /// The optimizer's plugin token, `None` when there is none usable (the port logs why).
    fn token(&mut self, config: &Config) -> Option<String>;
    /// The optimizer's answer to `snapshot`, `Err` with why there is no usable one.
    fn ask(
        &mut self,
        config: &Config,
        token: &str,
        snapshot: &Snapshot,
    ) -> Result<Decisions, String>;
    /// The optimizer's policy version, from its unauthenticated health check: a skipped round's
    /// proof that the optimizer is alive and its policy unchanged.
    fn policy_version(&mut self, config: &Config) -> Result<u64, String>;
    fn log(&mut self, level: LogLevel, message: &str);
    /// Hands job_submit the round's view of the sharing nodes, taken at `at_ms` (`None`
    /// withdraws it: job_submit then keeps opted-in jobs on whole GPUs).
    fn publish_sharing(&mut self, at_ms: i64, view: Option<cinch_core::sharing::ShareView>);
}

/// What the agent remembers between rounds.
#[derive(Default)]
pub struct Agent {
    breaker: Breaker,
    /// Requeues of the last hour (created with the first round's MaxRequeuesPerHour).
    requeues: Option<RequeueLimiter>,
    renewed: HashMap<u32, i64>,
    foreign: HashMap<u32, Fields>,
    /// Last shadow line logged per job, so a decision is logged once, not every round.
    shadowed: HashMap<u32, String>,
    /// Whether the last round could read Slurm (logged on change only).
    slurm_ok: Option<bool>,
    /// The last round that asked the optimizer and used its answer, while nothing since
    /// needs a new one: when (ms), when the first thing cinch applied expires (ms), and the
    /// outcome to repeat while rounds are skipped.
    settled: Option<Settled>,
    /// Peak GPU memory jobs reported of themselves, for sharing's predictions.
    peaks: cinch_core::sharing::PeakBook,
    /// Wall time of the previous round (set by the agent thread), and rounds whose exchange
    /// with the optimizer failed: reported with each snapshot.
    pub last_round_s: f64,
    failed_rounds: u64,
    /// The last sharing summary logged (logged again on change only).
    share_summary: Option<String>,
    /// When the agent first read the cluster (ms): the start of its wait for nodes to register.
    first_read_ms: Option<i64>,
    /// Whether the last round waited for nodes to register (logged on change only).
    awaiting_nodes: bool,
}

/// A round that may stand for the next ones while Slurm shows no change.
#[derive(Debug, Clone, Copy)]
struct Settled {
    at_ms: i64,
    /// When the first thing cinch applied expires or a delay it set ends (ms): a round must
    /// run before then.
    next_event_ms: i64,
    enforcing: bool,
    /// The optimizer's policy version after that round (`None`: unknown, so never skip).
    policy_version: Option<u64>,
}

/// Even with nothing changed in Slurm, the optimizer is asked at least this often: its answers
/// can depend on time (attained service, timers) and renew what cinch applied.
pub const IDLE_REFRESH_MS: i64 = 60_000;

/// How long after the agent's first read of the cluster its rounds wait for nodes that Slurm
/// shows as UNKNOWN. Such a node is one whose slurmd has not registered since slurmctld started
/// (for about 3 s on the local cluster; Slurm 24.11 shows idle nodes so): a round then would see
/// its GPUs as unusable and undo pins or leave new jobs to Slurm for want of free GPUs. Bounded,
/// since a node whose slurmd never comes back stays UNKNOWN until Slurm marks it DOWN
/// (SlurmdTimeout, 300 s by default).
pub const NODE_REGISTRATION_WAIT_MS: i64 = 60_000;

/// An answer with at least this many refused decisions, and more refused than not, is a failed
/// round (fewer can be a job that started between snapshot and answer).
const MOSTLY_REFUSED_MIN: usize = 3;

/// What a round tells job_submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundOutcome {
    /// Until when (Unix ms) job_submit may hold new multi-GPU jobs for the next round; 0: not.
    pub enforcing_until_ms: i64,
    /// Nothing changed since the last good round: it was not repeated.
    pub skipped: bool,
}

impl Agent {
    /// One round at `now_ms`, with the fields users and admins changed since the last round.
    pub fn round(
        &mut self,
        config: &Config,
        ports: &mut impl Ports,
        now_ms: i64,
        foreign: Vec<(u32, Fields)>,
    ) -> RoundOutcome {
        let now = now_ms / 1000;
        // Nothing new since a good round: skip it, at the cost of two "no change" loads.
        if let Some(settled) = self.settled {
            let interval_ms = 1000 * i64::from(config.interval_s);
            let quiet = foreign.is_empty()
                && now_ms - settled.at_ms < IDLE_REFRESH_MS
                && now_ms + interval_ms < settled.next_event_ms
                && config.mode != Mode::Off
                && settled.policy_version.is_some();
            // The optimizer must still answer, with the same policy: a lost optimizer or an
            // admin's change (e.g. back to shadow) is acted on at once, not a minute later.
            if quiet
                && ports.cluster_unchanged()
                && ports.policy_version(config).ok() == settled.policy_version
            {
                return RoundOutcome {
                    enforcing_until_ms: if settled.enforcing {
                        hold_window_end(config, now_ms)
                    } else {
                        0
                    },
                    skipped: true,
                };
            }
        }
        self.settled = None;
        for (job, fields) in foreign {
            let entry = self.foreign.entry(job).or_default();
            *entry = entry.union(fields);
        }
        let loaded = ports
            .load_jobs()
            .and_then(|jobs| Ok((jobs, ports.load_nodes()?)));
        let (jobs, nodes) = match loaded {
            Ok(x) => {
                if self.slurm_ok != Some(true) {
                    ports.log(
                        LogLevel::Info,
                        "agent: reading the cluster through Slurm's API",
                    );
                    self.slurm_ok = Some(true);
                }
                x
            }
            Err(e) => {
                ports.publish_sharing(now_ms, None);
                if self.slurm_ok != Some(false) {
                    ports.log(
                        LogLevel::Error,
                        &format!("agent: cannot read the cluster ({e}); will retry"),
                    );
                    self.slurm_ok = Some(false);
                }
                return RoundOutcome {
                    enforcing_until_ms: 0,
                    skipped: false,
                };
            }
        };
        let started_ms = *self.first_read_ms.get_or_insert(now_ms);
        let unregistered = nodes
            .iter()
            .filter(|n| n.state == NodeState::Unknown)
            .count();
        let awaiting = unregistered > 0 && now_ms - started_ms < NODE_REGISTRATION_WAIT_MS;
        if awaiting != self.awaiting_nodes {
            ports.log(
                LogLevel::Info,
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
        if awaiting {
            // Nothing is applied or undone, and new multi-GPU jobs are held as usual: the first
            // round that sees the nodes places them (a hold lapses by itself).
            ports.publish_sharing(now_ms, None);
            return RoundOutcome {
                enforcing_until_ms: if config.mode == Mode::Enforce {
                    hold_window_end(config, now_ms)
                } else {
                    0
                },
                skipped: false,
            };
        }
        let topology = ports.load_topology();
        // What job_submit's sharing decisions need, fresh from this load.
        let view = crate::share::build(config, now_ms, &jobs, &nodes, &mut self.peaks);
        let summary = view.as_ref().map(cinch_core::sharing::ShareView::summary);
        if summary != self.share_summary {
            if let Some(s) = &summary {
                ports.log(LogLevel::Verbose, &format!("agent: sharing: {s}"));
            }
            self.share_summary = summary;
        }
        ports.publish_sharing(now_ms, view);

        // The jobs cinch.conf keeps cinch off (CPU-only, excluded partitions and QOS).
        let hands_off: HashMap<u32, String> = jobs
            .iter()
            .filter(|j| j.state != JobState::Other)
            .filter_map(|j| view::hands_off(config, j).map(|why| (j.job_id, why)))
            .collect();
        let (answer, failed_now) = self.ask(config, ports, now_ms, &jobs, || {
            let mut snapshot = view::snapshot(now_ms / 1000, &jobs, &nodes, &topology);
            // What the admin keeps cinch off is not the optimizer's to order (running jobs
            // stay: they hold GPUs).
            snapshot
                .pending
                .retain(|j| !hands_off.contains_key(&j.job_id));
            snapshot
        });

        // The stricter of cinch.conf's mode and the optimizer's.
        let mode = match &answer {
            Some(d) => config.mode.stricter(d.mode),
            None => config.mode,
        };
        let empty: [Decision; 0] = [];
        let names: HashSet<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let limiter = self
            .requeues
            .get_or_insert_with(|| RequeueLimiter::new(config.max_requeues_per_hour));
        let requeue_limits = RequeueLimits {
            max_per_job: config.max_requeues_per_job,
            budget: limiter.budget(now).min(config.max_requeues_per_hour),
        };
        let plan_with = |decisions: Option<&[Decision]>, renewed: &HashMap<u32, i64>| {
            reconcile(
                &jobs,
                &Input {
                    now,
                    mode,
                    decisions,
                    nodes: &names,
                    foreign: &self.foreign,
                    renewed,
                    requeue_limits,
                    hands_off: &hands_off,
                },
            )
        };
        // A passing failure: keep what was applied until its TTL (and release submit holds).
        let passing_failure =
            |failed: bool, breaker: &Breaker| (failed && !breaker.is_open()).then_some(&empty[..]);
        let mut mostly_refused = false;
        let mut out = match &answer {
            Some(d) => plan_with(Some(&d.decisions[..]), &self.renewed),
            None => plan_with(passing_failure(failed_now, &self.breaker), &self.renewed),
        };
        // An answer made mostly of decisions the apply path refuses is a broken optimizer, not
        // a few stale decisions: none of it is used, and it counts against the breaker.
        if let Some(d) = &answer {
            let refused = out.refused.len();
            if refused >= MOSTLY_REFUSED_MIN && refused * 2 > d.decisions.len() {
                let why = format!(
                    "{refused} of its {} decisions refused, e.g. {}",
                    d.decisions.len(),
                    out.refused[0]
                );
                self.failed_rounds += 1;
                answer_failed(&mut self.breaker, ports, now_ms, &why);
                out = plan_with(passing_failure(true, &self.breaker), &self.renewed);
                mostly_refused = true;
            } else if let Some(Transition::Closed) = self.breaker.success() {
                ports.log(
                    LogLevel::Info,
                    "agent: the optimizer answers again; cinch resumes",
                );
            }
        }

        if !out.refused.is_empty() {
            let shown: Vec<&str> = out.refused.iter().take(3).map(String::as_str).collect();
            ports.log(
                LogLevel::Error,
                &format!(
                    "agent: refused {} invalid decision(s) from the optimizer: {}",
                    out.refused.len(),
                    shown.join("; ")
                ),
            );
        }
        for (job, line) in &out.shadow {
            if self.shadowed.get(job) != Some(line) {
                ports.log(LogLevel::Info, &format!("shadow: job {job}: would {line}"));
                self.shadowed.insert(*job, line.clone());
            }
        }
        // The AdminComment each updated job now carries, and whether Slurm refused any update.
        let mut written: HashMap<u32, String> = HashMap::new();
        let mut updates_failed = false;
        for update in &out.updates {
            match ports.update_job(update) {
                Ok(()) => {
                    if let Some(comment) = &update.admin_comment {
                        written.insert(update.job_id, comment.clone());
                    }
                    ports.log(
                        LogLevel::Info,
                        &format!("job {}: {}", update.job_id, update.summary),
                    )
                }
                Err(e) => {
                    updates_failed = true;
                    ports.log(
                        LogLevel::Error,
                        &format!(
                            "job {}: Slurm refused '{}': {e}",
                            update.job_id, update.summary
                        ),
                    )
                }
            }
            self.renewed.remove(&update.job_id);
        }
        for (job, why) in &out.requeues {
            match ports.requeue_job(*job) {
                Ok(()) => {
                    self.requeues
                        .get_or_insert_with(|| RequeueLimiter::new(config.max_requeues_per_hour))
                        .record(now, 1);
                    ports.log(LogLevel::Info, &format!("job {job}: requeued: {why}"));
                    // An elastic job's new size, set while it waits out Slurm's requeue delay
                    // (a refusal leaves the old size; the next round sizes it as pending).
                    for update in out.after_requeue.iter().filter(|u| u.job_id == *job) {
                        match ports.update_job(update) {
                            Ok(()) => {
                                ports.log(LogLevel::Info, &format!("job {job}: {}", update.summary))
                            }
                            Err(e) => ports.log(
                                LogLevel::Error,
                                &format!("job {job}: Slurm refused '{}': {e}", update.summary),
                            ),
                        }
                    }
                }
                Err(e) => ports.log(
                    LogLevel::Error,
                    &format!("job {job}: Slurm refused the requeue ({why}): {e}"),
                ),
            }
        }
        self.renewed.extend(out.renewed);
        // Forget jobs Slurm no longer has pending.
        let pending: HashSet<u32> = jobs
            .iter()
            .filter(|j| j.state == JobState::Pending)
            .map(|j| j.job_id)
            .collect();
        self.renewed.retain(|j, _| pending.contains(j));
        self.foreign.retain(|j, _| pending.contains(j));
        self.shadowed.retain(|j, _| pending.contains(j));

        let enforcing = mode == Mode::Enforce && answer.is_some() && !mostly_refused;
        if answer.is_some() && !mostly_refused && !updates_failed {
            // What cinch applied expires, or a delay it set ends, first: the next round must not
            // be skipped past it (the optimizer may decide anew then).
            let next_event = jobs
                .iter()
                .filter(|j| j.state == JobState::Pending)
                .filter_map(|j| {
                    let comment = written
                        .get(&j.job_id)
                        .map(String::as_str)
                        .or(j.admin_comment.as_deref());
                    let applied = applied_of(comment);
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
                policy_version: ports.policy_version(config).ok(),
            });
        }
        RoundOutcome {
            enforcing_until_ms: if enforcing {
                hold_window_end(config, now_ms)
            } else {
                0
            },
            skipped: false,
        }
    }

    /// Asks the optimizer unless cinch is off, has no token, or the breaker says wait: its
    /// answer, and whether asking failed this round.
    fn ask(
        &mut self,
        config: &Config,
        ports: &mut impl Ports,
        now_ms: i64,
        jobs: &[JobView],
        snapshot_of_cluster: impl FnOnce() -> Snapshot,
    ) -> (Option<Decisions>, bool) {
        if config.mode == Mode::Off {
            return (None, false);
        }
        let Some(token) = ports.token(config) else {
            self.breaker = Breaker::default();
            return (None, false);
        };
        if !self.breaker.allow(now_ms) {
            return (None, false);
        }
        let mut snapshot = snapshot_of_cluster();
        snapshot.agent = Some(cinch_core::snapshot::AgentStatus {
            mode: config.mode,
            breaker_open: self.breaker.is_open(),
            applied: view::applied_counts(jobs),
            last_round_s: self.last_round_s,
            failed_rounds: self.failed_rounds,
        });
        if config.log_level >= LogLevel::Debug {
            let free: Vec<String> = snapshot
                .nodes
                .iter()
                .map(|n| {
                    format!(
                        "{}:{}/{}/{:?}@{}",
                        n.name,
                        n.gpus_alloc,
                        n.gpus_total,
                        n.state,
                        n.rack.as_deref().unwrap_or("-")
                    )
                })
                .collect();
            ports.log(
                LogLevel::Debug,
                &format!(
                    "agent: snapshot {} pending, {} running; free GPUs {}",
                    snapshot.pending.len(),
                    snapshot.running.len(),
                    free.join(" ")
                ),
            );
        }
        // No more decisions than jobs it was shown: anything beyond is not about this cluster.
        let most =
            (snapshot.pending.len() + snapshot.running.len()).min(config.max_decisions as usize);
        let answer = ports.ask(config, &token, &snapshot).and_then(|d| {
            if d.decisions.len() > most {
                Err(format!(
                    "answer carries {} decisions, more than the {most} allowed (one per job in \
                     the snapshot, at most MaxDecisions={})",
                    d.decisions.len(),
                    config.max_decisions
                ))
            } else {
                Ok(d)
            }
        });
        match answer {
            // Counted as a success only once its decisions pass the apply path (`round`).
            Ok(d) => (Some(d), false),
            Err(e) => {
                self.failed_rounds += 1;
                answer_failed(&mut self.breaker, ports, now_ms, &e);
                (None, true)
            }
        }
    }
}

/// Until when job_submit may hold new multi-GPU jobs after a round that enforces at `now_ms`:
/// three intervals, so one late round does not end the holds.
fn hold_window_end(config: &Config, now_ms: i64) -> i64 {
    now_ms + 3 * 1000 * i64::from(config.interval_s)
}

/// Counts a failed round against the breaker, logging when it opens.
fn answer_failed(breaker: &mut Breaker, ports: &mut impl Ports, now_ms: i64, why: &str) {
    if let Some(Transition::Opened { failures, error }) = breaker.failure(now_ms, why) {
        ports.log(
            LogLevel::Error,
            &format!(
                "agent: optimizer unusable after {failures} tries ({error}); cinch stands \
                 aside and undoes its changes; Slurm schedules on its own"
            ),
        );
    } else if !breaker.is_open() {
        ports.log(
            LogLevel::Verbose,
            &format!("agent: no usable answer this round: {why}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::{job, node};
    use cinch_core::SCHEMA_VERSION;

    /// A cluster of two 8-GPU nodes, scripted optimizer answers, and every call recorded.
    struct Double {
        jobs: Vec<JobView>,
        nodes: Vec<NodeView>,
        answers: Vec<Result<Decisions, String>>,
        updates: Vec<JobUpdate>,
        requeues: Vec<u32>,
        asked: usize,
        logs: Vec<String>,
        /// Whether Slurm can say "no change" at all (off: every round sees a changed cluster).
        quiet: bool,
        /// Slurm changed since the last load (set by tests; read once).
        changed: bool,
        unchanged_checks: usize,
        loads: usize,
        /// What the optimizer's health check says (`None`: it does not answer).
        policy_version: Option<u64>,
        /// The pending jobs of each snapshot the optimizer was sent.
        sent_pending: Vec<Vec<u32>>,
        /// Each sharing view published, as whether there was one.
        published: Vec<bool>,
    }

    impl Double {
        fn new(jobs: Vec<JobView>) -> Double {
            Double {
                jobs,
                nodes: vec![node("n1", "gpu:0"), node("n2", "gpu:0")],
                answers: Vec::new(),
                updates: Vec::new(),
                requeues: Vec::new(),
                sent_pending: Vec::new(),
                asked: 0,
                logs: Vec::new(),
                quiet: false,
                changed: false,
                unchanged_checks: 0,
                loads: 0,
                policy_version: Some(1),
                published: Vec::new(),
            }
        }

        /// The next answer the optimizer gives.
        fn answers(&mut self, answer: Result<Decisions, String>) -> &mut Self {
            self.answers.push(answer);
            self
        }

        /// Slurm applies the recorded updates to its jobs, as slurm_update_job would.
        fn apply_updates(&mut self) {
            for u in &self.updates {
                let j = self.jobs.iter_mut().find(|j| j.job_id == u.job_id).unwrap();
                if let Some(nodes) = &u.req_nodes {
                    j.req_nodes = (!nodes.is_empty()).then(|| nodes.clone());
                }
                if let Some(t) = u.begin_time {
                    j.eligible_time = t;
                }
                if let Some(c) = &u.admin_comment {
                    j.admin_comment = Some(c.clone());
                }
            }
        }
    }

    impl Ports for Double {
        fn cluster_unchanged(&mut self) -> bool {
            self.unchanged_checks += 1;
            self.quiet && !std::mem::take(&mut self.changed)
        }
        fn load_jobs(&mut self) -> Result<Vec<JobView>, String> {
            self.loads += 1;
            Ok(self.jobs.clone())
        }
        fn load_nodes(&mut self) -> Result<Vec<NodeView>, String> {
            Ok(self.nodes.clone())
        }
        fn load_topology(&mut self) -> TopologyView {
            TopologyView::default()
        }
        fn update_job(&mut self, update: &JobUpdate) -> Result<(), String> {
            self.updates.push(update.clone());
            Ok(())
        }
        fn requeue_job(&mut self, job_id: u32) -> Result<(), String> {
            self.requeues.push(job_id);
            Ok(())
        }
        fn token(&mut self, _config: &Config) -> Option<String> {
            Some("t".into())
        }
        fn ask(&mut self, _: &Config, _: &str, snap: &Snapshot) -> Result<Decisions, String> {
            self.asked += 1;
            self.sent_pending
                .push(snap.pending.iter().map(|j| j.job_id).collect());
            if self.answers.is_empty() {
                return Err("no answer scripted".into());
            }
            self.answers.remove(0)
        }
        fn policy_version(&mut self, _: &Config) -> Result<u64, String> {
            self.policy_version
                .ok_or_else(|| "optimizer down".to_string())
        }
        fn log(&mut self, _level: LogLevel, message: &str) {
            self.logs.push(message.to_string());
        }
        fn publish_sharing(&mut self, _: i64, view: Option<cinch_core::sharing::ShareView>) {
            self.published.push(view.is_some());
        }
    }

    fn answer(mode: Mode, decisions: Vec<Decision>) -> Result<Decisions, String> {
        Ok(Decisions {
            schema_version: SCHEMA_VERSION,
            policy: "consolidate".into(),
            mode,
            time: 0,
            decisions,
        })
    }

    fn pin_job_1() -> Decision {
        Decision {
            pin_nodes: Some(vec!["n1".into(), "n2".into()]),
            ..Decision::explain(1, "consolidated", 300)
        }
    }

    fn enforce() -> Config {
        Config {
            mode: Mode::Enforce,
            interval_s: 10,
            ..Config::default()
        }
    }

    const T0: i64 = 1_000_000_000;

    #[test]
    fn a_passing_failure_keeps_decisions_until_the_breaker_opens() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        let mut agent = Agent::default();
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        let out = agent.round(&enforce(), &mut slurm, T0, Vec::new());
        assert_eq!(slurm.updates.len(), 1, "pinned");
        assert_eq!(
            out.enforcing_until_ms,
            T0 + 30_000,
            "3 intervals of hold window"
        );
        slurm.apply_updates();
        slurm.updates.clear();

        // Two failures: the pin stands (its TTL runs), no hold window while there is no answer.
        for i in 1..=2 {
            let out = agent.round(&enforce(), &mut slurm, T0 + i * 10_000, Vec::new());
            assert!(slurm.updates.is_empty(), "round {i}: {:?}", slurm.updates);
            assert_eq!(out.enforcing_until_ms, 0);
        }
        // The third opens the breaker: cinch stands aside and undoes its pin.
        agent.round(&enforce(), &mut slurm, T0 + 30_000, Vec::new());
        assert_eq!(slurm.updates.len(), 1);
        assert_eq!(slurm.updates[0].req_nodes.as_deref(), Some(""));
        assert!(slurm
            .logs
            .iter()
            .any(|l| l.contains("unusable after 3 tries")));

        // While open the optimizer is not asked; after the back-off one answer closes it.
        let asked = slurm.asked;
        agent.round(&enforce(), &mut slurm, T0 + 30_500, Vec::new());
        assert_eq!(slurm.asked, asked, "backing off");
        slurm.answers(answer(Mode::Enforce, vec![]));
        let out = agent.round(&enforce(), &mut slurm, T0 + 40_000, Vec::new());
        assert_eq!(slurm.asked, asked + 1);
        assert!(slurm.logs.iter().any(|l| l.contains("answers again")));
        assert_eq!(out.enforcing_until_ms, T0 + 70_000);
    }

    /// cinch.conf keeps cinch off CPU-only jobs (by default) and excluded partitions: they are not
    /// sent to the optimizer, a decision for one is refused, and a priority cinch set before the
    /// admin excluded it is undone.
    #[test]
    fn jobs_the_admin_excludes_are_not_sent_and_not_touched() {
        let gpu = job(1, JobState::Pending);
        let cpu = JobView {
            tres_per_node: None,
            ..job(2, JobState::Pending)
        };
        let debug = JobView {
            partition: Some("debug".into()),
            priority: 5_000,
            admin_comment: Some(cinch_core::admin_comment::format_applied(
                &cinch_core::apply::Applied {
                    prio: Some(5_000),
                    until: T0 / 1000 + 300,
                    why: "ordered".into(),
                    ..Default::default()
                },
            )),
            ..job(3, JobState::Pending)
        };
        let gpu_too = job(4, JobState::Pending);
        let mut slurm = Double::new(vec![gpu, cpu, debug, gpu_too]);
        let prio = |id| Decision {
            priority: Some(9_000),
            ..Decision::explain(id, "shorter first", 300)
        };
        // (An answer with more decisions than jobs sent, or mostly refused ones, would be a
        // broken optimizer's and not used at all: one job kept off per answer here.)
        slurm.answers(answer(Mode::Enforce, vec![prio(1), prio(2)]));
        slurm.answers(answer(Mode::Enforce, vec![prio(4), prio(3)]));
        let config = Config {
            exclude_partitions: vec!["debug".into()],
            ..enforce()
        };
        let updated = |slurm: &mut Double| -> Vec<(u32, Option<u32>)> {
            std::mem::take(&mut slurm.updates)
                .iter()
                .map(|u| (u.job_id, u.priority))
                .collect()
        };
        let automatic = Some(cinch_core::apply::PRIORITY_AUTOMATIC);
        agent_round(&config, &mut slurm);
        assert_eq!(updated(&mut slurm), [(1, Some(9_000)), (3, automatic)]);
        agent_round(&config, &mut slurm);
        assert_eq!(updated(&mut slurm), [(3, automatic), (4, Some(9_000))]);
        assert_eq!(
            slurm.sent_pending,
            [vec![1, 4], vec![1, 4]],
            "only the GPU jobs of partition gpu"
        );
        for (id, why) in [
            (2, "a CPU-only job (OrderCpuJobs=no)"),
            (3, "partition debug (ExcludePartitions)"),
        ] {
            let refused = format!("job {id}: {why}, which cinch leaves alone");
            assert!(
                slurm.logs.iter().any(|l| l.contains(&refused)),
                "{refused} in {:?}",
                slurm.logs
            );
        }
    }

    fn agent_round(config: &Config, slurm: &mut Double) {
        Agent::default().round(config, slurm, T0, Vec::new());
    }

    #[test]
    fn rounds_wait_for_nodes_to_register_after_a_start_but_not_for_ever() {
        // After slurmctld restarts, a node reads UNKNOWN until its slurmd registers: the pin
        // cinch applied before must not be undone for want of free GPUs.
        let mut pinned = job(1, JobState::Pending);
        pinned.req_nodes = Some("n1,n2".into());
        pinned.admin_comment = Some(format!(
            "cinch-decision: pin=n1,n2 nodes_was=none until={} why=consolidated",
            T0 / 1000 + 300
        ));
        let mut slurm = Double::new(vec![pinned]);
        slurm.nodes[1].state = NodeState::Unknown;
        let mut agent = Agent::default();
        for t in [T0, T0 + 10_000] {
            let out = agent.round(&enforce(), &mut slurm, t, Vec::new());
            assert!(slurm.updates.is_empty(), "{:?}", slurm.updates);
            assert_eq!(slurm.asked, 0, "not asked while nodes register");
            assert_eq!(
                out.enforcing_until_ms,
                t + 30_000,
                "new jobs are still held"
            );
        }
        assert_eq!(
            slurm
                .logs
                .iter()
                .filter(|l| l.contains("waiting for 1 node(s) to register"))
                .count(),
            1,
            "{:?}",
            slurm.logs
        );
        // Registered: the round decides again.
        slurm.nodes[1].state = NodeState::Idle;
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        agent.round(&enforce(), &mut slurm, T0 + 20_000, Vec::new());
        assert_eq!(slurm.asked, 1);
        assert!(slurm.logs.iter().any(|l| l.contains("nodes registered")));

        // A node that never registers is waited for at most NODE_REGISTRATION_WAIT_MS.
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        slurm.nodes[1].state = NodeState::Unknown;
        let mut agent = Agent::default();
        agent.round(&enforce(), &mut slurm, T0, Vec::new());
        assert_eq!(slurm.asked, 0);
        slurm.answers(answer(Mode::Enforce, vec![]));
        agent.round(
            &enforce(),
            &mut slurm,
            T0 + NODE_REGISTRATION_WAIT_MS,
            Vec::new(),
        );
        assert_eq!(slurm.asked, 1, "decides without it after the wait");
        assert!(
            slurm
                .logs
                .iter()
                .any(|l| l.contains("1 node(s) still not registered after 60 s")),
            "{:?}",
            slurm.logs
        );
    }

    #[test]
    fn the_stricter_mode_wins() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        let mut agent = Agent::default();
        // cinch.conf says enforce, the optimizer shadow: shadow it is, logged once.
        slurm.answers(answer(Mode::Shadow, vec![pin_job_1()]));
        slurm.answers(answer(Mode::Shadow, vec![pin_job_1()]));
        let out = agent.round(&enforce(), &mut slurm, T0, Vec::new());
        agent.round(&enforce(), &mut slurm, T0 + 10_000, Vec::new());
        assert!(slurm.updates.is_empty());
        assert_eq!(out.enforcing_until_ms, 0);
        let shadow_lines = slurm
            .logs
            .iter()
            .filter(|l| l.starts_with("shadow:"))
            .count();
        assert_eq!(shadow_lines, 1, "{:?}", slurm.logs);

        // cinch.conf says off: the optimizer is not even asked.
        let off = Config {
            mode: Mode::Off,
            ..enforce()
        };
        let asked = slurm.asked;
        agent.round(&off, &mut slurm, T0 + 20_000, Vec::new());
        assert_eq!(slurm.asked, asked);
    }

    #[test]
    fn what_a_user_changed_is_left_alone_and_requeues_go_to_slurm() {
        let mut running = job(2, JobState::Running);
        running.requeue = true;
        running.admin_comment = Some("cinch: gpus=8 requeue=yes".into());
        running.comment = Some("cinch:ckpt=yes".into());
        let mut slurm = Double::new(vec![job(1, JobState::Pending), running]);
        let mut agent = Agent::default();
        slurm.answers(answer(
            Mode::Enforce,
            vec![
                pin_job_1(),
                Decision {
                    requeue: Some(true),
                    ..Decision::explain(2, "frees a rack", 300)
                },
            ],
        ));
        // The user changed job 1's node list before this round: the pin is not applied.
        agent.round(&enforce(), &mut slurm, T0, vec![(1, Fields::NODES)]);
        assert!(slurm.updates.is_empty(), "{:?}", slurm.updates);
        assert_eq!(slurm.requeues, vec![2]);
    }

    #[test]
    fn a_slurm_that_cannot_be_read_ends_the_round_with_no_hold_window() {
        #[derive(Default)]
        struct Down {
            published: Vec<bool>,
        }
        impl Ports for Down {
            fn cluster_unchanged(&mut self) -> bool {
                false
            }
            fn load_jobs(&mut self) -> Result<Vec<JobView>, String> {
                Err("Unable to contact slurm controller".into())
            }
            fn load_nodes(&mut self) -> Result<Vec<NodeView>, String> {
                unreachable!("jobs failed first")
            }
            fn load_topology(&mut self) -> TopologyView {
                unreachable!()
            }
            fn update_job(&mut self, _: &JobUpdate) -> Result<(), String> {
                unreachable!()
            }
            fn requeue_job(&mut self, _: u32) -> Result<(), String> {
                unreachable!()
            }
            fn token(&mut self, _: &Config) -> Option<String> {
                unreachable!()
            }
            fn ask(&mut self, _: &Config, _: &str, _: &Snapshot) -> Result<Decisions, String> {
                unreachable!()
            }
            fn policy_version(&mut self, _: &Config) -> Result<u64, String> {
                unreachable!()
            }
            fn log(&mut self, _: LogLevel, _: &str) {}
            fn publish_sharing(&mut self, _: i64, view: Option<cinch_core::sharing::ShareView>) {
                self.published.push(view.is_some());
            }
        }
        let mut down = Down::default();
        let out = Agent::default().round(&enforce(), &mut down, T0, Vec::new());
        assert_eq!(out.enforcing_until_ms, 0);
        // job_submit's sharing view is withdrawn: no decision on a cluster cinch cannot see.
        assert_eq!(down.published, [false]);
    }

    /// Three rounds answered with `decisions` apply nothing, hold no new jobs, and open the
    /// breaker with a line that says `why`.
    fn three_answers_open_the_breaker(mut slurm: Double, decisions: Vec<Decision>, why: &str) {
        let mut agent = Agent::default();
        for i in 0..3 {
            slurm.answers(answer(Mode::Enforce, decisions.clone()));
            let out = agent.round(&enforce(), &mut slurm, T0 + i * 10_000, Vec::new());
            assert!(slurm.updates.is_empty(), "round {i}: {:?}", slurm.updates);
            assert_eq!(out.enforcing_until_ms, 0);
        }
        assert!(
            slurm
                .logs
                .iter()
                .any(|l| l.contains("unusable after 3 tries") && l.contains(why)),
            "{:?}",
            slurm.logs
        );
    }

    #[test]
    fn an_answer_with_more_decisions_than_jobs_is_a_failed_round() {
        // One job in the snapshot, two decisions: nothing of it is applied.
        three_answers_open_the_breaker(
            Double::new(vec![job(1, JobState::Pending)]),
            vec![pin_job_1(), Decision::explain(99, "unknown", 300)],
            "more than the 1 allowed",
        );
    }

    #[test]
    fn an_answer_made_mostly_of_refused_decisions_counts_against_the_breaker() {
        // Job 1 pinned validly, three pins to nodes that do not exist.
        let bad = |id| Decision {
            pin_nodes: Some(vec!["nowhere".into()]),
            ..Decision::explain(id, "bogus", 300)
        };
        three_answers_open_the_breaker(
            Double::new((1..=4).map(|id| job(id, JobState::Pending)).collect()),
            vec![pin_job_1(), bad(2), bad(3), bad(4)],
            "3 of its 4 decisions refused",
        );
        // A few refusals among good decisions are only logged: job 1's pin applies.
        let mut slurm = Double::new((1..=4).map(|id| job(id, JobState::Pending)).collect());
        let mut agent = Agent::default();
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1(), bad(2)]));
        agent.round(&enforce(), &mut slurm, T0, Vec::new());
        assert_eq!(slurm.updates.len(), 1);
    }

    #[test]
    fn requeues_stay_within_the_hourly_limit_across_rounds() {
        let jobs: Vec<JobView> = (1..=5)
            .map(|id| {
                let mut j = job(id, JobState::Running);
                j.requeue = true;
                j.admin_comment = Some("cinch: gpus=8 requeue=yes".into());
                j.comment = Some("cinch:ckpt=yes".into());
                j
            })
            .collect();
        let mut slurm = Double::new(jobs);
        let mut agent = Agent::default();
        let config = Config {
            max_requeues_per_hour: 3,
            ..enforce()
        };
        let requeue_all = || {
            answer(
                Mode::Enforce,
                (1..=5)
                    .map(|id| Decision {
                        requeue: Some(true),
                        ..Decision::explain(id, "make room", 300)
                    })
                    .collect(),
            )
        };
        slurm.answers(requeue_all());
        agent.round(&config, &mut slurm, T0, Vec::new());
        assert_eq!(slurm.requeues, vec![1, 2, 3]);
        // Ten minutes later the hour's budget is spent.
        slurm.answers(requeue_all());
        agent.round(&config, &mut slurm, T0 + 600_000, Vec::new());
        assert_eq!(slurm.requeues.len(), 3);
        // An hour after the first ones, the budget is back.
        slurm.answers(requeue_all());
        agent.round(&config, &mut slurm, T0 + 3_600_000, Vec::new());
        assert_eq!(slurm.requeues, vec![1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn rounds_are_skipped_while_slurm_shows_no_change_but_not_past_a_refresh_or_an_expiry() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending), job(2, JobState::Pending)]);
        let mut agent = Agent::default();
        // Job 1 pinned for 300 s.
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        let first = agent.round(&enforce(), &mut slurm, T0, Vec::new());
        assert!(!first.skipped);
        slurm.apply_updates();
        slurm.quiet = true;
        let (asked, loads) = (slurm.asked, slurm.loads);

        // Nothing changes: rounds are skipped, and new jobs are still held for the next one.
        for i in 1..=5 {
            let out = agent.round(&enforce(), &mut slurm, T0 + i * 10_000 - 5_000, Vec::new());
            assert!(out.skipped, "round {i}");
            assert_eq!(out.enforcing_until_ms, T0 + i * 10_000 - 5_000 + 30_000);
        }
        assert_eq!((slurm.asked, slurm.loads), (asked, loads));
        assert_eq!(slurm.unchanged_checks, 5);

        // A user's change reported by job_modify: a full round.
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        let out = agent.round(&enforce(), &mut slurm, T0 + 50_000, vec![(2, Fields::NICE)]);
        assert!(!out.skipped);
        assert_eq!(slurm.asked, asked + 1);

        // Slurm changed: a full round.
        slurm.changed = true;
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        assert!(
            !agent
                .round(&enforce(), &mut slurm, T0 + 55_000, Vec::new())
                .skipped
        );

        // A minute without change: asked anyway (answers can depend on time).
        assert!(
            agent
                .round(&enforce(), &mut slurm, T0 + 100_000, Vec::new())
                .skipped
        );
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        assert!(
            !agent
                .round(&enforce(), &mut slurm, T0 + 115_000, Vec::new())
                .skipped
        );
    }

    #[test]
    fn no_round_is_skipped_past_the_end_of_a_delay_cinch_set() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        let mut agent = Agent::default();
        let delay = Decision {
            delay_until: Some(T0 / 1000 + 30),
            ..Decision::explain(1, "waits for a better placement", 300)
        };
        slurm.answers(answer(Mode::Enforce, vec![delay]));
        agent.round(&enforce(), &mut slurm, T0, Vec::new());
        slurm.apply_updates();
        slurm.quiet = true;
        assert!(
            agent
                .round(&enforce(), &mut slurm, T0 + 10_000, Vec::new())
                .skipped
        );
        // The next round would come after the delay ends: this one asks.
        slurm.answers(answer(Mode::Enforce, vec![]));
        assert!(
            !agent
                .round(&enforce(), &mut slurm, T0 + 21_000, Vec::new())
                .skipped
        );
    }

    #[test]
    fn no_round_is_skipped_past_the_expiry_of_what_cinch_applied() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        let mut agent = Agent::default();
        let short = Decision {
            ttl_s: 20,
            ..pin_job_1()
        };
        slurm.answers(answer(Mode::Enforce, vec![short]));
        agent.round(&enforce(), &mut slurm, T0, Vec::new());
        slurm.apply_updates();
        slurm.quiet = true;
        assert!(
            agent
                .round(&enforce(), &mut slurm, T0 + 5_000, Vec::new())
                .skipped
        );
        // The next round would come after the pin's 20 s: this one asks (and keeps the pin,
        // not yet expired, though the answer no longer mentions it).
        slurm.updates.clear();
        slurm.answers(answer(Mode::Enforce, vec![]));
        assert!(
            !agent
                .round(&enforce(), &mut slurm, T0 + 11_000, Vec::new())
                .skipped
        );
        assert!(slurm.updates.is_empty(), "{:?}", slurm.updates);
        // Past the pin's 20 s: the round runs, and with no answer mentioning it, undoes it.
        slurm.answers(answer(Mode::Enforce, vec![]));
        let out = agent.round(&enforce(), &mut slurm, T0 + 21_000, Vec::new());
        assert!(!out.skipped);
        assert_eq!(slurm.updates.len(), 1, "{:?}", slurm.updates);
        assert_eq!(slurm.updates[0].req_nodes.as_deref(), Some(""));
    }
}
