//! The service's `/metrics`, on the Prometheus project's own Rust client (`prometheus-client`,
//! OpenMetrics text): what the optimizer decides and how fast, and what the plugin's agent
//! reports of itself with each snapshot (docs/metrics.md; the Grafana dashboard in
//! slurm-conf/examples/grafana-cinch.json reads these names).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use cinch_core::wire::decision::Decision;
use cinch_core::wire::reason::Reason;
use cinch_core::wire::snapshot::Snapshot;
use cinch_core::Mode;

/// Upper bounds of the decision-latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    action: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    change: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

pub struct Metrics {
    registry: Registry,
    snapshots: Counter,
    decisions: Family<DecisionLabels, Counter>,
    latency: Histogram,
    errors: Family<StatusLabels, Counter>,
    policy: Family<PolicyLabels, Gauge>,
    gpus: Family<StateLabels, Gauge>,
    jobs: Family<StateLabels, Gauge>,
    agent_mode: Family<ModeLabels, Gauge>,
    agent_breaker_open: Gauge,
    agent_jobs_changed: Family<ChangeLabels, Gauge>,
    agent_round_seconds: Gauge<f64, AtomicU64>,
    agent_failed_rounds: Gauge,
    agent_last_report: Gauge,
    portfolio_member: Family<MemberLabels, Gauge>,
    portfolio_evaluations: Family<OutcomeLabels, Counter>,
    portfolio_evaluation_seconds: Gauge<f64, AtomicU64>,
    idle_gpus: Family<StateLabels, Gauge>,
    idle_jobs: Family<StateLabels, Gauge>,
    idle_gpu_hours: Gauge<f64, AtomicU64>,
    /// Serialises the clear-and-set of the families that hold one current value.
    current: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("cinch");
        registry.register(
            "build",
            "The running cinch's version",
            Info::new(VersionLabels {
                version: crate::VERSION,
            }),
        );
        let mut m = Metrics {
            registry,
            snapshots: Counter::default(),
            decisions: Family::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
            errors: Family::default(),
            policy: Family::default(),
            gpus: Family::default(),
            jobs: Family::default(),
            agent_mode: Family::default(),
            agent_breaker_open: Gauge::default(),
            agent_jobs_changed: Family::default(),
            agent_round_seconds: Gauge::default(),
            agent_failed_rounds: Gauge::default(),
            agent_last_report: Gauge::default(),
            portfolio_member: Family::default(),
            portfolio_evaluations: Family::default(),
            portfolio_evaluation_seconds: Gauge::default(),
            idle_gpus: Family::default(),
            idle_jobs: Family::default(),
            idle_gpu_hours: Gauge::default(),
            current: Mutex::new(()),
        };
        let r = &mut m.registry;
        r.register(
            "snapshots_received",
            "Snapshots scheduled via POST /v1/schedule",
            m.snapshots.clone(),
        );
        r.register(
            "decisions",
            "Decisions returned, by their main action and the first word of their reason",
            m.decisions.clone(),
        );
        r.register(
            "decision_latency_seconds",
            "Time to parse a snapshot, decide and encode the answer",
            m.latency.clone(),
        );
        r.register(
            "http_errors",
            "Error responses, by HTTP status",
            m.errors.clone(),
        );
        r.register(
            "policy_in_force",
            "1 for the policy and mode in force at the optimizer",
            m.policy.clone(),
        );
        r.register(
            "cluster_gpus",
            "GPUs in the latest snapshot: total and allocated",
            m.gpus.clone(),
        );
        r.register(
            "cluster_jobs",
            "Jobs in the latest snapshot: pending and running",
            m.jobs.clone(),
        );
        r.register(
            "agent_mode",
            "1 for the mode cinch.conf gives the plugin",
            m.agent_mode.clone(),
        );
        r.register(
            "agent_breaker_open",
            "1 while the plugin's agent stands aside after repeated failures (its reports are probes)",
            m.agent_breaker_open.clone(),
        );
        r.register(
            "agent_jobs_changed",
            "Jobs carrying each change cinch applied and still holds",
            m.agent_jobs_changed.clone(),
        );
        r.register(
            "agent_round_seconds",
            "Wall time of the agent's latest round inside slurmctld",
            m.agent_round_seconds.clone(),
        );
        r.register(
            "agent_failed_rounds",
            "Rounds whose exchange with the optimizer failed since slurmctld started",
            m.agent_failed_rounds.clone(),
        );
        r.register(
            "agent_last_report_timestamp_seconds",
            "When the agent last reported (the snapshot's time): a stale value means no plugin",
            m.agent_last_report.clone(),
        );
        r.register(
            "portfolio_member_in_force",
            "1 for the member that decides under the portfolio policy (none under another policy)",
            m.portfolio_member.clone(),
        );
        r.register(
            "portfolio_evaluations",
            "Portfolio evaluations, by outcome: switched, kept, or too few jobs to decide",
            m.portfolio_evaluations.clone(),
        );
        r.register(
            "portfolio_evaluation_seconds",
            "Wall time of the latest portfolio evaluation (every member's replays)",
            m.portfolio_evaluation_seconds.clone(),
        );
        r.register(
            "idle_gpus",
            "GPUs of running jobs whose watcher reads them idle: within the grace, flagged (warned), due (acted on)",
            m.idle_gpus.clone(),
        );
        r.register(
            "idle_jobs",
            "Running jobs whose GPUs read idle, by the same states",
            m.idle_jobs.clone(),
        );
        r.register(
            "idle_gpu_hours",
            "GPU-hours read idle since the optimizer started, over every user's jobs",
            m.idle_gpu_hours.clone(),
        );
        m
    }
}

/// The main action of a decision, as in `cinch_decisions_total{action}`.
fn action(d: &Decision) -> &'static str {
    if d.idle.is_some_and(|i| i.cancel) {
        "cancel"
    } else if d.requeue == Some(true) {
        "requeue"
    } else if d.gpus.is_some() {
        "resize"
    } else if d.pin_nodes.is_some() {
        "pin"
    } else if d.delay_until.is_some() {
        "delay"
    } else if d.hold.is_some() {
        "hold"
    } else if d.priority.is_some() || d.nice.is_some() {
        "reprioritize"
    } else if d.idle.is_some() {
        "idle"
    } else {
        "explain"
    }
}

/// A reason's kind for a label: its first word (`consolidated: ...` -> `consolidated`),
/// lowercase letters and `_` only, at most 24 characters, so that labels stay few. Only the
/// first clause is put into words.
fn reason_kind(reason: &Reason) -> String {
    let first = reason
        .clauses()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    let word: String = first
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|w| !w.is_empty())
        .unwrap_or("none")
        .to_ascii_lowercase()
        .chars()
        .take(24)
        .collect();
    word
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Off => "off",
        Mode::Shadow => "shadow",
        Mode::Enforce => "enforce",
    }
}

impl Metrics {
    pub fn record_schedule(&self, elapsed: Duration, decisions: &[Decision]) {
        self.snapshots.inc();
        self.latency.observe(elapsed.as_secs_f64());
        for d in decisions {
            self.decisions
                .get_or_create(&DecisionLabels {
                    action: action(d),
                    reason: reason_kind(&d.reason),
                })
                .inc();
        }
    }

    /// What one snapshot says of the cluster and of the plugin's agent, and the policy that
    /// decided on it.
    pub fn record_snapshot(&self, snapshot: &Snapshot, policy: &str, mode: Mode) {
        let _current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        self.policy.clear();
        self.policy
            .get_or_create(&PolicyLabels {
                policy: policy.to_string(),
                mode: mode_name(mode),
            })
            .set(1);
        let total: u32 = snapshot.nodes.iter().map(|n| n.gpus_total).sum();
        let allocated: u32 = snapshot.nodes.iter().map(|n| n.gpus_alloc).sum();
        self.gpus
            .get_or_create(&StateLabels { state: "total" })
            .set(i64::from(total));
        self.gpus
            .get_or_create(&StateLabels { state: "allocated" })
            .set(i64::from(allocated));
        self.jobs
            .get_or_create(&StateLabels { state: "pending" })
            .set(snapshot.pending.len() as i64);
        self.jobs
            .get_or_create(&StateLabels { state: "running" })
            .set(snapshot.running.len() as i64);
        let Some(agent) = &snapshot.agent else {
            return;
        };
        self.agent_mode.clear();
        self.agent_mode
            .get_or_create(&ModeLabels {
                mode: mode_name(agent.mode),
            })
            .set(1);
        self.agent_breaker_open.set(i64::from(agent.breaker_open));
        self.agent_jobs_changed.clear();
        for change in ["pin", "delay", "hold", "priority", "nice", "gpus"] {
            let n = agent.applied.get(change).copied().unwrap_or(0);
            self.agent_jobs_changed
                .get_or_create(&ChangeLabels {
                    change: change.to_string(),
                })
                .set(i64::from(n));
        }
        self.agent_round_seconds.set(agent.last_round_s.max(0.0));
        self.agent_failed_rounds
            .set(agent.failed_rounds.min(i64::MAX as u64) as i64);
        self.agent_last_report.set(snapshot.time);
    }

    /// The running jobs' idle GPUs at `now`, by state, and the idle GPU-hours read so far.
    pub fn record_idle(
        &self,
        tracker: &cinch_core::models::idle::IdleTracker,
        rules: &cinch_core::wire::idle::IdleRules,
        now: i64,
    ) {
        let mut by_state: [(&'static str, i64, i64); 3] =
            [("idle", 0, 0), ("flagged", 0, 0), ("due", 0, 0)];
        for (id, job) in tracker.jobs() {
            let Some(state) = tracker.state(id, rules, now) else {
                continue;
            };
            if let Some(row) = by_state.iter_mut().find(|(s, _, _)| *s == state.name()) {
                row.1 += i64::from(job.gpus);
                row.2 += 1;
            }
        }
        for (state, gpus, jobs) in by_state {
            self.idle_gpus
                .get_or_create(&StateLabels { state })
                .set(gpus);
            self.idle_jobs
                .get_or_create(&StateLabels { state })
                .set(jobs);
        }
        let hours: f64 = tracker.users().values().map(|u| u.idle_gpu_s).sum::<f64>() / 3600.0;
        self.idle_gpu_hours.set(hours);
    }

    pub fn count_error(&self, status: u16) {
        self.errors.get_or_create(&StatusLabels { status }).inc();
    }

    /// The OpenMetrics exposition text.
    /// The member deciding under the portfolio (`member`), or none under another policy.
    pub fn record_member(&self, member: Option<&str>) {
        let _current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        self.portfolio_member.clear();
        if let Some(member) = member {
            self.portfolio_member
                .get_or_create(&MemberLabels {
                    member: member.to_string(),
                })
                .set(1);
        }
    }

    /// A portfolio evaluation: `switched`, `kept` or `too_few_jobs`, and how long it took.
    pub fn record_evaluation(&self, outcome: &'static str, took: Duration) {
        self.portfolio_evaluations
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.portfolio_evaluation_seconds.set(took.as_secs_f64());
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_become_a_few_short_labels() {
        use cinch_core::wire::reason::{Clause, Order, Placed};
        let placed = Reason::from(Placed::Consolidated {
            gpus: 12,
            nodes: 2,
            rack: None,
        });
        assert_eq!(reason_kind(&placed), "consolidated");
        // The first clause names it.
        let ordered = Reason::from(Clause::Order(Order::Slurm)).and(placed.clauses()[0].clone());
        assert_eq!(reason_kind(&ordered), "slurm");
        assert_eq!(reason_kind(&Reason::from("  --  ")), "none");
        assert_eq!(reason_kind(&Reason::default()), "none");
        assert_eq!(reason_kind(&Reason::from("x".repeat(100))).len(), 24);
    }
}
