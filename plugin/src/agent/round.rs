//! One round of the agent: the core's round ([`cinch_core::enact::round::Round`], which the simulator
//! runs too: its rules and their tests live there), with its ports on Slurm's view of the
//! cluster. This module only adapts: Slurm's jobs and nodes to the core's reading, the core's
//! changes to `slurm_update_job` calls with cinch's AdminComment record, the sharing view
//! handed to job_submit. It talks to Slurm, the optimizer and the log through [`Ports`], so the
//! adapter is tested with a recording double; the slurmctld-facing implementation in
//! `thread.rs` is a thin wrapper around Slurm's API and the HTTP client.

use std::collections::HashMap;
use std::sync::Arc;

use cinch_core::enact::apply::JobChange;
use cinch_core::enact::round::{self, AskError, ClusterError, Level, Reading, Round};
use cinch_core::{Decisions, Snapshot};

use super::job_memo::JobMemo;
use super::reconcile::{reading, update_of, Fields, JobUpdate};
use super::snapshot::snapshot_of;
use super::view::{self, JobView, NodeView, TopologyView};
use crate::config::{Config, LogLevel};

/// What a round needs from the world outside it.
pub trait Ports {
    /// Whether Slurm's jobs and nodes are unchanged since the last `load_jobs`/`load_nodes`
    /// (cheap: Slurm answers "no change" to a load with the last update time); false when
    /// unknown. Called only when a round may be skipped.
    fn cluster_unchanged(&mut self) -> bool;
    /// The jobs and nodes Slurm shows, shared with the port's cache (a load that Slurm answers
    /// "no change" hands out the last records without copying them).
    fn load_jobs(&mut self) -> Result<Arc<Vec<JobView>>, String>;
    fn load_nodes(&mut self) -> Result<Arc<Vec<NodeView>>, String>;
    fn load_topology(&mut self) -> TopologyView;
    /// Seconds Slurm keeps a requeued job from starting again (the site's credential lifetime
    /// + 1), for the optimizer's cost of a requeue.
    fn requeue_delay_s(&mut self) -> u32;
    fn update_job(&mut self, update: &JobUpdate) -> Result<(), ClusterError>;
    fn requeue_job(&mut self, job_id: u32) -> Result<(), ClusterError>;
    /// Cancels a running job (`scancel`): a job whose GPUs stayed idle where cinch.conf's
    /// `IdleAction` says cancel.
    fn cancel_job(&mut self, job_id: u32) -> Result<(), ClusterError>;
    /// The optimizer's plugin token, `None` when there is none usable (the port logs why).
    fn token(&mut self, config: &Config) -> Option<String>;
    /// The optimizer's answer to `snapshot`, `Err` with why there is no usable one.
    fn ask(
        &mut self,
        config: &Config,
        token: &str,
        snapshot: &Snapshot,
    ) -> Result<Decisions, AskError>;
    /// The optimizer's policy version, from its unauthenticated health check: a skipped round's
    /// proof that the optimizer is alive and its policy unchanged.
    fn policy_version(&mut self, config: &Config) -> Result<u64, AskError>;
    /// Hands back the answer `ask` gave, unchanged, once the round is done with it.
    fn answer_done(&mut self, _answer: Decisions) {}
    fn log(&mut self, level: LogLevel, message: &str);
    /// Hands job_submit the round's view of the sharing nodes, taken at `at_ms` (`None`
    /// withdraws it: job_submit then keeps opted-in jobs on whole GPUs).
    fn publish_sharing(&mut self, at_ms: i64, view: Option<cinch_core::models::sharing::ShareView>);
    /// Hands job_submit whose stated QoS targets the optimizer's policy counts, as its latest
    /// answer said (job_submit tells users whose do not).
    fn publish_stated_targets(&mut self, _targets: &cinch_core::wire::decision::StatedTargets) {}
}

/// What the agent remembers between rounds: the core's round, and what job_submit's sharing
/// view needs.
#[derive(Default)]
pub struct Agent {
    round: Round,
    /// What the rounds derive from each job, kept while the job is unchanged.
    memo: JobMemo,
    /// Peak GPU memory jobs reported of themselves, for sharing's predictions.
    peaks: cinch_core::models::sharing::ReportBook,
    /// The last sharing summary logged (logged again on change only).
    share_summary: Option<String>,
    /// Wall time of the previous round (set by the agent thread): reported with each snapshot.
    pub last_round_s: f64,
}

/// What a round tells job_submit.
pub type RoundOutcome = round::Outcome;

/// cinch.conf's settings for the core's round.
fn settings(config: &Config) -> round::Settings {
    round::Settings {
        idle: config.idle,
        mode: config.mode,
        interval_s: config.interval_s,
        max_requeues_per_hour: config.max_requeues_per_hour,
        max_requeues_per_job: config.max_requeues_per_job,
        max_decisions: config.max_decisions,
    }
}

impl Agent {
    /// One round at `now_ms`, with the fields users and admins changed since the last round:
    /// the core's round, with Slurm and the optimizer behind [`Ports`].
    pub fn round(
        &mut self,
        config: &Config,
        ports: &mut impl Ports,
        now_ms: i64,
        foreign: Vec<(u32, Fields)>,
    ) -> RoundOutcome {
        self.round.last_round_s = self.last_round_s;
        let mut live = Live {
            ports,
            config,
            jobs: Arc::default(),
            nodes: Arc::default(),
            memo: &mut self.memo,
            hands_off: HashMap::new(),
            token: None,
            peaks: &mut self.peaks,
            share_summary: &mut self.share_summary,
        };
        self.round
            .run(&settings(config), &mut live, now_ms, foreign)
    }
}

/// The core round's ports on Slurm's view: jobs as [`JobView`]s, changes as `slurm_update_job`
/// calls with cinch's AdminComment record, the optimizer through [`Ports`].
struct Live<'a, P> {
    ports: &'a mut P,
    config: &'a Config,
    /// What the last read saw.
    jobs: Arc<Vec<JobView>>,
    nodes: Arc<Vec<NodeView>>,
    /// The jobs of the last read with what the rounds derive from each.
    memo: &'a mut JobMemo,
    /// The jobs cinch.conf keeps cinch off (CPU-only, excluded partitions and QOS), with why.
    hands_off: HashMap<u32, String>,
    token: Option<String>,
    peaks: &'a mut cinch_core::models::sharing::ReportBook,
    share_summary: &'a mut Option<String>,
}

fn log_level(level: Level) -> LogLevel {
    match level {
        Level::Error => LogLevel::Error,
        Level::Info => LogLevel::Info,
        Level::Verbose => LogLevel::Verbose,
        Level::Debug => LogLevel::Debug,
    }
}

impl<P: Ports> round::Cluster for Live<'_, P> {
    fn unchanged(&mut self) -> bool {
        self.ports.cluster_unchanged()
    }

    fn read(&mut self) -> Result<Reading, ClusterError> {
        self.jobs = self.ports.load_jobs().map_err(ClusterError::Unreachable)?;
        self.nodes = self.ports.load_nodes().map_err(ClusterError::Unreachable)?;
        self.memo.update(&self.jobs);
        // cinch.conf may have changed since the last round: applied to the kept facts anew,
        // in the same walk over the jobs as the reading.
        let config = self.config;
        let read = reading(
            self.memo,
            &self.nodes,
            |j, facts| view::hands_off(config, j, &facts.request),
            |j| config.idle_action_for(j.partition.as_deref(), j.qos.as_deref()),
        );
        // The waiting ones, for the snapshot.
        self.hands_off = read
            .pending
            .iter()
            .filter_map(|p| p.hands_off.clone().map(|why| (p.job_id, why)))
            .collect();
        Ok(read)
    }

    fn snapshot(&mut self, now: i64) -> Snapshot {
        let topology = self.ports.load_topology();
        let requeue_delay_s = self.ports.requeue_delay_s();
        let mut snapshot = snapshot_of(now, self.memo, &self.nodes, &topology, requeue_delay_s);
        // What cinch.conf says of idle GPUs: the rules, and each running job's action where
        // the site sets any but report.
        snapshot.idle = Some(self.config.idle);
        if self.config.idle_actions_set() {
            for job in &mut snapshot.running {
                if let Some((view, _)) = self.memo.get(job.job_id) {
                    job.idle_action = self
                        .config
                        .idle_action_for(view.partition.as_deref(), view.qos.as_deref());
                }
            }
        }
        // What the admin keeps cinch off is not the optimizer's to order (running jobs stay:
        // they hold GPUs). (Most sites keep cinch off nothing: the 10,000 jobs a round can
        // lend are then not moved again.)
        if !self.hands_off.is_empty() {
            let (shown, kept_off): (Vec<_>, Vec<_>) = std::mem::take(&mut snapshot.pending)
                .into_iter()
                .partition(|j| !self.hands_off.contains_key(&j.job_id));
            snapshot.pending = shown;
            self.memo.give_back(kept_off);
        }
        if self.config.log_level >= LogLevel::Debug {
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
            self.ports.log(
                LogLevel::Debug,
                &format!(
                    "agent: snapshot {} pending, {} running; free GPUs {}",
                    snapshot.pending.len(),
                    snapshot.running.len(),
                    free.join(" ")
                ),
            );
        }
        snapshot
    }

    fn snapshot_done(&mut self, snapshot: Snapshot) {
        self.memo.give_back(snapshot.pending);
    }

    fn change(&mut self, change: &JobChange) -> Result<(), ClusterError> {
        let (job, _) = self
            .memo
            .get(change.job_id)
            .ok_or(ClusterError::Gone(change.job_id))?;
        let update = update_of(job, change);
        self.ports.update_job(&update)
    }

    fn requeue(&mut self, job_id: u32) -> Result<(), ClusterError> {
        self.ports.requeue_job(job_id)
    }

    fn cancel(&mut self, job_id: u32) -> Result<(), ClusterError> {
        self.ports.cancel_job(job_id)
    }

    fn note_idle(&mut self, job_id: u32, warning: Option<&str>) -> Result<(), ClusterError> {
        use cinch_core::enact::admin_comment::{format_idle, replace_segment, IDLE_PREFIX};
        // A job gone from the last read (ended) has no record left to change.
        let Some((job, _)) = self.memo.get(job_id) else {
            return Ok(());
        };
        let existing = job.admin_comment.as_deref();
        let segment = warning.map(format_idle);
        let comment = replace_segment(existing, IDLE_PREFIX, segment.as_deref());
        if comment == existing.unwrap_or("") {
            return Ok(());
        }
        self.ports.update_job(&JobUpdate {
            job_id,
            admin_comment: Some(comment),
            summary: match warning {
                Some(_) => "idle-GPU warning".into(),
                None => "idle-GPU warning taken off".into(),
            },
            ..JobUpdate::default()
        })
    }

    fn log(&mut self, level: Level, message: &str) {
        self.ports.log(log_level(level), message);
    }

    fn read_used(&mut self, now_ms: i64, used: bool) {
        if !used {
            self.ports.publish_sharing(now_ms, None);
            return;
        }
        // What job_submit's sharing decisions need, fresh from this read.
        let view = crate::share::build(self.config, now_ms, &self.jobs, &self.nodes, self.peaks);
        let summary = view
            .as_ref()
            .map(cinch_core::models::sharing::ShareView::summary);
        if summary != *self.share_summary {
            if let Some(s) = &summary {
                self.ports
                    .log(LogLevel::Verbose, &format!("agent: sharing: {s}"));
            }
            *self.share_summary = summary;
        }
        self.ports.publish_sharing(now_ms, view);
    }
}

impl<P: Ports> round::Optimizer for Live<'_, P> {
    fn ready(&mut self) -> bool {
        self.token = self.ports.token(self.config);
        self.token.is_some()
    }

    fn ask(&mut self, snapshot: &Snapshot) -> Result<Decisions, AskError> {
        let token = self.token.as_deref().unwrap_or_default();
        let answer = self.ports.ask(self.config, token, snapshot)?;
        if let Some(targets) = &answer.stated_targets {
            self.ports.publish_stated_targets(targets);
        }
        // What the job watchers measured of jobs alone on a GPU counts as those jobs' own
        // reports do for the sharing decisions (the largest known stands).
        for o in &answer.observed {
            let Some((job, _)) = self.memo.get(o.job_id) else {
                continue;
            };
            let h = view::hints(job.comment.as_deref());
            let uid = job.user_id.to_string();
            let Some(key) = cinch_core::models::sharing::similar_key(&uid, job.name.as_deref(), &h)
            else {
                continue;
            };
            if o.peak_mib > 0 {
                self.peaks
                    .record_peak(&key, o.job_id, o.peak_mib as f64 / 1024.0);
            }
            if o.busy_percent > 0 {
                self.peaks
                    .record_busy(&key, o.job_id, f64::from(o.busy_percent.min(100)) / 100.0);
            }
        }
        Ok(answer)
    }

    fn policy_version(&mut self) -> Result<u64, AskError> {
        self.ports.policy_version(self.config)
    }

    fn answer_done(&mut self, answer: Decisions) {
        self.ports.answer_done(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::{job, node};
    use crate::agent::view::JobState;
    use cinch_core::enact::round::NODE_REGISTRATION_WAIT_MS;
    use cinch_core::testing::{answer, pin_job_1};
    use cinch_core::wire::decision::IdleDecision;
    use cinch_core::wire::idle::{IdleAction, IdleRules};
    use cinch_core::wire::snapshot::NodeState;
    use cinch_core::{Decision, Mode};

    /// What a snapshot said of idle GPUs: the rules, each running job's action.
    type SentIdle = (Option<IdleRules>, Vec<(u32, IdleAction)>);

    /// A cluster of two 8-GPU nodes, scripted optimizer answers, and every call recorded.
    struct Double {
        jobs: Vec<JobView>,
        nodes: Vec<NodeView>,
        answers: Vec<Result<Decisions, AskError>>,
        updates: Vec<JobUpdate>,
        requeues: Vec<u32>,
        cancels: Vec<u32>,
        /// The idle rules and each running job's idle action, as each snapshot said.
        sent_idle: Vec<SentIdle>,
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
        /// The site's requeue delay, as Slurm's configuration gives it.
        requeue_delay_s: u32,
        /// The requeue delay of each snapshot the optimizer was sent.
        sent_delay: Vec<u32>,
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
                cancels: Vec::new(),
                sent_idle: Vec::new(),
                sent_pending: Vec::new(),
                requeue_delay_s: 121,
                sent_delay: Vec::new(),
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
        fn answers(&mut self, answer: Result<Decisions, AskError>) -> &mut Self {
            self.answers.push(answer);
            self
        }

        /// Slurm applies the recorded updates to its jobs, as slurm_update_job would.
        fn apply_updates(&mut self) {
            let updates = self.updates.clone();
            self.apply_updates_from(&updates);
        }

        fn apply_updates_from(&mut self, updates: &[JobUpdate]) {
            for u in updates {
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
        fn load_jobs(&mut self) -> Result<Arc<Vec<JobView>>, String> {
            self.loads += 1;
            Ok(Arc::new(self.jobs.clone()))
        }
        fn load_nodes(&mut self) -> Result<Arc<Vec<NodeView>>, String> {
            Ok(Arc::new(self.nodes.clone()))
        }
        fn load_topology(&mut self) -> TopologyView {
            TopologyView::default()
        }
        fn requeue_delay_s(&mut self) -> u32 {
            self.requeue_delay_s
        }
        fn update_job(&mut self, update: &JobUpdate) -> Result<(), ClusterError> {
            self.updates.push(update.clone());
            Ok(())
        }
        fn requeue_job(&mut self, job_id: u32) -> Result<(), ClusterError> {
            self.requeues.push(job_id);
            Ok(())
        }
        fn cancel_job(&mut self, job_id: u32) -> Result<(), ClusterError> {
            self.cancels.push(job_id);
            Ok(())
        }
        fn token(&mut self, _config: &Config) -> Option<String> {
            Some("t".into())
        }
        fn ask(&mut self, _: &Config, _: &str, snap: &Snapshot) -> Result<Decisions, AskError> {
            self.asked += 1;
            self.sent_pending
                .push(snap.pending.iter().map(|j| j.job_id).collect());
            self.sent_delay.push(snap.requeue_delay_s);
            self.sent_idle.push((
                snap.idle,
                snap.running
                    .iter()
                    .map(|j| (j.job_id, j.idle_action))
                    .collect(),
            ));
            if self.answers.is_empty() {
                return Err(AskError::Unreachable("no answer scripted".into()));
            }
            self.answers.remove(0)
        }
        fn policy_version(&mut self, _: &Config) -> Result<u64, AskError> {
            self.policy_version
                .ok_or_else(|| AskError::Unreachable("optimizer down".to_string()))
        }
        fn log(&mut self, _level: LogLevel, message: &str) {
            self.logs.push(message.to_string());
        }
        fn publish_sharing(
            &mut self,
            _: i64,
            view: Option<cinch_core::models::sharing::ShareView>,
        ) {
            self.published.push(view.is_some());
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
            admin_comment: Some(cinch_core::enact::admin_comment::format_applied(
                &cinch_core::enact::apply::Applied {
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
        let automatic = Some(cinch_core::enact::apply::PRIORITY_AUTOMATIC);
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
    fn the_optimizer_is_told_the_sites_requeue_delay() {
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        slurm.requeue_delay_s = 31;
        slurm.answers(answer(Mode::Enforce, vec![]));
        agent_round(&enforce(), &mut slurm);
        assert_eq!(slurm.sent_delay, [31]);
    }

    /// The snapshot carries cinch.conf's idle rules and each running job's action by its
    /// partition; a cancel goes to Slurm only for the job whose partition says cancel.
    #[test]
    fn idle_cancels_go_to_slurm_only_where_cinch_conf_says_cancel() {
        let in_partition = |id, partition: &str| JobView {
            partition: Some(partition.into()),
            ..job(id, JobState::Running)
        };
        let mut slurm = Double::new(vec![in_partition(2, "interactive"), in_partition(3, "gpu")]);
        let since = T0 / 1000 - 3_600;
        let cancel = |id| Decision {
            idle: Some(IdleDecision {
                since,
                cancel: true,
            }),
            ..Decision::explain(id, "idle for an hour", 300)
        };
        slurm.answers(answer(Mode::Enforce, vec![cancel(2), cancel(3)]));
        let rules = IdleRules {
            gpu_percent: 5,
            grace_s: 1_800,
            warn_s: 600,
        };
        let config = Config {
            idle: rules,
            idle_action_partitions: vec![("interactive".into(), IdleAction::Cancel)],
            ..enforce()
        };
        agent_round(&config, &mut slurm);
        assert_eq!(
            slurm.sent_idle,
            [(
                Some(rules),
                vec![(2, IdleAction::Cancel), (3, IdleAction::Report)]
            )]
        );
        assert_eq!(slurm.cancels, vec![2]);
        assert!(
            slurm
                .logs
                .iter()
                .any(|l| l.contains("job 3: idle cancel of a job whose IdleAction is report")),
            "{:?}",
            slurm.logs
        );
        assert!(
            slurm
                .logs
                .iter()
                .any(|l| l == "job 2: cancelled: idle for an hour"),
            "{:?}",
            slurm.logs
        );
    }

    /// An idle warning goes into the running job's AdminComment beside cinch's record (where
    /// `scontrol show job` and `cinch why` show it), once; an answer without it takes it off,
    /// even after a slurmctld restart (a new agent, with only the record to go by).
    #[test]
    fn an_idle_warning_is_written_to_the_jobs_record_and_taken_off_when_busy_again() {
        let mut running = job(2, JobState::Running);
        running.admin_comment = Some("site note | cinch: gpus=1".into());
        let mut slurm = Double::new(vec![running]);
        let warn = Decision {
            idle: Some(IdleDecision {
                since: T0 / 1000 - 600,
                cancel: false,
            }),
            ..Decision::explain(2, "its GPUs have been idle since 09:00 | or so", 300)
        };
        let warned =
            "site note | cinch: gpus=1 | cinch-idle: its GPUs have been idle since 09:00 / or so";
        let mut agent = Agent::default();
        let round = |agent: &mut Agent, slurm: &mut Double, at: i64, said: Vec<Decision>| {
            slurm.answers(answer(Mode::Enforce, said));
            agent.round(&enforce(), slurm, T0 + at, Vec::new());
            let updates = std::mem::take(&mut slurm.updates);
            slurm.apply_updates_from(&updates);
            updates
                .into_iter()
                .map(|u| u.admin_comment.unwrap_or_default())
                .collect::<Vec<String>>()
        };
        assert_eq!(
            round(&mut agent, &mut slurm, 0, vec![warn.clone()]),
            [warned]
        );
        // The same warning again: nothing to write.
        assert!(round(&mut agent, &mut slurm, 10_000, vec![warn.clone()]).is_empty());
        // No longer idle: the warning comes off, the rest stays.
        assert_eq!(
            round(&mut agent, &mut slurm, 20_000, vec![]),
            ["site note | cinch: gpus=1"]
        );
        // Warned again, then slurmctld restarts: the new agent finds the warning on record and
        // takes it off when the answer no longer gives it.
        assert_eq!(
            round(&mut agent, &mut slurm, 30_000, vec![warn.clone()]),
            [warned]
        );
        let mut restarted = Agent::default();
        assert_eq!(
            round(&mut restarted, &mut slurm, 40_000, vec![]),
            ["site note | cinch: gpus=1"]
        );
    }

    /// What the optimizer's watchers measured of a job alone on one GPU counts as the job's own
    /// report for the sharing decisions of similar jobs.
    #[test]
    fn what_the_watchers_measured_counts_as_the_jobs_own_reports_for_sharing() {
        let mut running = job(2, JobState::Running);
        running.comment = Some("cinch:app=bert,batch=32".into());
        let key = cinch_core::models::sharing::similar_key(
            &running.user_id.to_string(),
            running.name.as_deref(),
            &view::hints(running.comment.as_deref()),
        )
        .unwrap();
        let mut slurm = Double::new(vec![running]);
        let mut said = answer(Mode::Enforce, vec![]).unwrap();
        said.observed = vec![cinch_core::wire::decision::ObservedUse {
            job_id: 2,
            peak_mib: 7 * 1024,
            busy_percent: 60,
        }];
        slurm.answers(Ok(said));
        let mut agent = Agent::default();
        agent.round(&enforce(), &mut slurm, T0, Vec::new());
        assert_eq!(agent.peaks.observed_peak(&key, 99), Some((7.0, 1)));
        assert_eq!(agent.peaks.observed_busy(&key, 99), Some((0.6, 1)));
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
            fn load_jobs(&mut self) -> Result<Arc<Vec<JobView>>, String> {
                Err("Unable to contact slurm controller".into())
            }
            fn load_nodes(&mut self) -> Result<Arc<Vec<NodeView>>, String> {
                unreachable!("jobs failed first")
            }
            fn load_topology(&mut self) -> TopologyView {
                unreachable!()
            }
            fn requeue_delay_s(&mut self) -> u32 {
                unreachable!()
            }
            fn update_job(&mut self, _: &JobUpdate) -> Result<(), ClusterError> {
                unreachable!()
            }
            fn requeue_job(&mut self, _: u32) -> Result<(), ClusterError> {
                unreachable!()
            }
            fn cancel_job(&mut self, _: u32) -> Result<(), ClusterError> {
                unreachable!()
            }
            fn token(&mut self, _: &Config) -> Option<String> {
                unreachable!()
            }
            fn ask(&mut self, _: &Config, _: &str, _: &Snapshot) -> Result<Decisions, AskError> {
                unreachable!()
            }
            fn policy_version(&mut self, _: &Config) -> Result<u64, AskError> {
                unreachable!()
            }
            fn log(&mut self, _: LogLevel, _: &str) {}
            fn publish_sharing(
                &mut self,
                _: i64,
                view: Option<cinch_core::models::sharing::ShareView>,
            ) {
                self.published.push(view.is_some());
            }
        }
        let mut down = Down::default();
        let out = Agent::default().round(&enforce(), &mut down, T0, Vec::new());
        assert_eq!(out.enforcing_until_ms, 0);
        // job_submit's sharing view is withdrawn: no decision on a cluster cinch cannot see.
        assert_eq!(down.published, [false]);
    }

    /// The adapter: the core's change becomes a `slurm_update_job` call carrying cinch's
    /// AdminComment record, job_submit gets the sharing view of every read the round decides
    /// with (none while nodes register), and a quiet Slurm with the same policy skips rounds.
    #[test]
    fn changes_become_slurm_updates_and_slurms_quiet_skips_rounds() {
        let sharing = Config {
            share_partition: Some("shared".into()),
            ..enforce()
        };
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        let mut agent = Agent::default();
        slurm.answers(answer(Mode::Enforce, vec![pin_job_1()]));
        agent.round(&sharing, &mut slurm, T0, Vec::new());
        assert_eq!(slurm.updates.len(), 1);
        let update = &slurm.updates[0];
        assert_eq!(update.req_nodes.as_deref(), Some("n1,n2"));
        let record = update.admin_comment.as_deref().unwrap();
        assert!(
            record.contains("cinch-decision: pin=n1,n2") && record.contains("why=consolidated"),
            "{record}"
        );
        assert!(
            slurm.logs.iter().any(|l| l.starts_with("job 1: ")),
            "{:?}",
            slurm.logs
        );
        assert_eq!(slurm.published, [true]);
        slurm.apply_updates();
        slurm.quiet = true;
        let out = agent.round(&sharing, &mut slurm, T0 + 10_000, Vec::new());
        assert!(out.skipped);
        assert_eq!((slurm.asked, slurm.loads), (1, 1));

        // After a restart, an unregistered node: no decision, no sharing view.
        let mut slurm = Double::new(vec![job(1, JobState::Pending)]);
        slurm.nodes[1].state = NodeState::Unknown;
        let out = Agent::default().round(&sharing, &mut slurm, T0, Vec::new());
        assert_eq!(slurm.asked, 0);
        assert_eq!(out.enforcing_until_ms, T0 + 30_000);
        assert_eq!(slurm.published, [false]);
        assert!(slurm
            .logs
            .iter()
            .any(|l| l.contains(&format!("at most {} s", NODE_REGISTRATION_WAIT_MS / 1000))));
    }
}
