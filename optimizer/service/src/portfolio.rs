//! The `portfolio` policy live (docs/policies/portfolio.md): which member is in force, and the
//! evaluations that choose it, by self-simulation on the optimizer's own record with the
//! simulator's code (`cinch_sim::portfolio`, the same choice `cinch sim` makes).
//!
//! An evaluation runs every `every_h` on a blocking thread, never under the lock the rounds
//! take: the state is cloned, evaluated, and put back unless the policy changed meanwhile.
//! `GET /v1/portfolio` shows the latest; `POST /v1/portfolio/evaluate` runs one now.
//!
//! What an evaluation chose outlives the process: after each one the state is written to
//! `portfolio.json` in the state directory (the parameters it ran under, the member in force and
//! since when, the variants the search keeps, the latest evaluations), and read back at
//! start-up, so a restart neither resets the member in force (and with it the hysteresis) nor
//! loses what admins see. A file that cannot be read stops the start, as the record's does.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use cinch_core::enact::apply::RequeueLimits;
use cinch_core::policy::{PolicyConfig, PortfolioParams};
use cinch_core::wire::snapshot::{AgentRound, AgentStatus};
use cinch_sim::engine::SimConfig;
use cinch_sim::portfolio::{Carried, Evaluation, Portfolio, PortfolioSettings};

use super::{lock, AdminToken, AppError, AppState};

/// Evaluations kept for `GET /v1/portfolio`.
const KEPT: usize = 48;

/// Mixed with each evaluation's time to seed its draws.
const SEED: u64 = 0x9047_F011;

/// The file in the state directory that keeps the state over restarts.
pub const FILE_NAME: &str = "portfolio.json";

/// The layout of [`FILE_NAME`], for future migrations.
const FORMAT: u32 = 1;

/// The member in force and what chose it.
#[derive(Default)]
pub struct PortfolioState {
    /// The parameters it runs under; another set starts over from the first member.
    params: Option<PortfolioParams>,
    portfolio: Option<Portfolio>,
    /// Since when the member in force decides (Unix seconds).
    since: i64,
    evaluations: VecDeque<EvaluationView>,
    /// Where it is kept ([`FILE_NAME`]); none: not kept (tests).
    path: Option<PathBuf>,
    /// Taken before the state's lock is let go and held while the file is written, so that two
    /// evaluations write in the order they were made, without the rounds waiting on the disk.
    writing: Arc<std::sync::Mutex<()>>,
    /// The agent's round as its latest snapshot reported it (cinch.conf's cadence and requeue
    /// bounds), which the replays run with; none before an agent reported it.
    site_round: Option<AgentRound>,
}

/// The state as `portfolio.json` holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedState {
    format: u32,
    params: PortfolioParams,
    since: i64,
    carried: Carried,
    /// Oldest first.
    evaluations: Vec<EvaluationView>,
}

#[derive(Debug, thiserror::Error)]
pub enum PortfolioFileError {
    #[error(
        "{path} is not a valid cinch portfolio state ({reason}); refusing to start rather than \
         lose which member is in force — move it away (the portfolio starts over from its first \
         member)"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// One member's result on a window.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberView {
    pub member: String,
    /// Mean hours a job of the window spent in the system within it (the objective).
    pub mean_h: f64,
    pub p99_h: f64,
    /// Jain's index over the users' mean hours in the system (1: alike).
    pub fairness: f64,
    /// The window's jobs whose stated finish (`due`, `turnaround`) falls within it.
    pub qos_targeted: usize,
    /// The share of those that missed it.
    pub qos_missed: f64,
    pub jobs: usize,
    /// Wall-clock seconds its replays took.
    pub wall_s: f64,
}

/// One evaluation.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EvaluationView {
    /// Unix seconds.
    pub at: i64,
    pub window_start: i64,
    pub window_end: i64,
    pub results: Vec<MemberView>,
    /// The member in force before and after.
    pub before: String,
    pub after: String,
    pub why: String,
    /// The round the replays ran with: the agent's cinch.conf settings, or the defaults where
    /// no agent had reported them (empty in evaluations kept before it was said).
    #[serde(default)]
    pub replayed_with: String,
}

/// The portfolio as admins see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PortfolioView {
    /// Whether the policy in force is `portfolio`.
    pub enabled: bool,
    pub members: Vec<String>,
    /// The variants of cinch the parameter search keeps (`search`), named as `cinch sim
    /// --policies` takes them; empty without a search.
    pub variants: Vec<String>,
    /// The member that decides now, and since when (Unix seconds).
    pub in_force: Option<String>,
    pub since: Option<i64>,
    /// The latest evaluations, newest first.
    pub evaluations: Vec<EvaluationView>,
}

impl PortfolioState {
    /// The state kept in `state_dir`, or none yet (the first member decides until an
    /// evaluation).
    pub fn open(state_dir: &Path) -> Result<PortfolioState, PortfolioFileError> {
        let path = state_dir.join(FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(PortfolioState {
                    path: Some(path),
                    ..PortfolioState::default()
                })
            }
            Err(cause) => return Err(PortfolioFileError::Read { path, cause }),
        };
        let corrupt = |reason: String| PortfolioFileError::Corrupt {
            path: path.clone(),
            reason,
        };
        let saved: SavedState =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if saved.format != FORMAT {
            return Err(corrupt(format!(
                "format {}, this cinch reads {FORMAT}",
                saved.format
            )));
        }
        let settings = PortfolioSettings::from_params(&saved.params).map_err(&corrupt)?;
        let mut portfolio = Portfolio::new(settings, saved.params.members.clone(), SEED);
        portfolio.carry_on(saved.carried).map_err(&corrupt)?;
        Ok(PortfolioState {
            params: Some(saved.params),
            portfolio: Some(portfolio),
            since: saved.since,
            evaluations: saved.evaluations.into(),
            path: Some(path),
            writing: Arc::default(),
            site_round: None,
        })
    }

    /// The state as the file holds it; none before a portfolio ran.
    fn to_bytes(&self) -> Option<Vec<u8>> {
        let saved = SavedState {
            format: FORMAT,
            params: self.params.clone()?,
            since: self.since,
            carried: self.portfolio.as_ref()?.carried(),
            evaluations: self.evaluations.iter().cloned().collect(),
        };
        Some(serde_json::to_vec_pretty(&saved).expect("the portfolio state serialises"))
    }

    /// Notes the agent's round from a snapshot's report of it, for the replays.
    pub fn note_agent(&mut self, agent: Option<&AgentStatus>) {
        if let Some(round) = agent.and_then(|a| a.round) {
            self.site_round = Some(round);
        }
    }

    /// The policy to run for `policy`, and how decisions name it: the member in force when it
    /// is a portfolio (`portfolio/tiresias`), else itself.
    pub fn deciding(&mut self, policy: &PolicyConfig, now: i64) -> (PolicyConfig, String) {
        let PolicyConfig::Portfolio(params) = policy else {
            return (policy.clone(), policy.name().to_string());
        };
        let portfolio = self.under(params, now);
        let member = portfolio.active_config();
        let label = format!("portfolio/{}", portfolio.active_name());
        (member, label)
    }

    /// The portfolio for `params`, started over (first member in force) if they changed.
    fn under(&mut self, params: &PortfolioParams, now: i64) -> &mut Portfolio {
        if self.params.as_ref() != Some(params) || self.portfolio.is_none() {
            let settings =
                PortfolioSettings::from_params(params).expect("stored parameters are valid");
            let names = params.members.clone();
            self.portfolio = Some(Portfolio::new(settings, names, SEED));
            self.params = Some(params.clone());
            self.since = now;
            self.evaluations.clear();
        }
        self.portfolio.as_mut().expect("set above")
    }

    pub fn view(&self, policy: &PolicyConfig) -> PortfolioView {
        let params = match policy {
            PolicyConfig::Portfolio(p) => Some(p),
            _ => None,
        };
        let enabled = params.is_some();
        let members = params.map(|p| p.members.clone()).unwrap_or_default();
        // Chosen under other parameters than these (or not yet): their first member decides.
        let current = self
            .portfolio
            .as_ref()
            .filter(|_| params.is_some() && self.params.as_ref() == params);
        PortfolioView {
            enabled,
            in_force: match current {
                Some(p) => Some(p.active_name()),
                None => members.first().cloned(),
            },
            since: current.map(|_| self.since),
            variants: current
                .map(|p| p.variants.iter().map(|(n, _)| n.clone()).collect())
                .unwrap_or_default(),
            members,
            evaluations: self.evaluations.iter().rev().cloned().collect(),
        }
    }
}

/// Evaluates now if the policy in force is a portfolio, the record is kept and (unless `force`)
/// an evaluation is due; the evaluation made, if any. Blocking: call it off the async workers.
pub fn evaluate_if_due(
    state: &AppState,
    now: i64,
    force: bool,
) -> Result<Option<EvaluationView>, String> {
    let policy = state.store.current().settings.policy;
    let PolicyConfig::Portfolio(params) = &policy else {
        return Ok(None);
    };
    let Some(store) = &state.record else {
        return Err(
            "the record is off (record_hours = 0): the portfolio has nothing to replay".into(),
        );
    };
    // Whether one is due is told under the locks; the record and the portfolio are cloned only
    // then, so rounds go on while the replays run.
    let (record, mut portfolio, site_round) = {
        let mut live = lock(&state.portfolio);
        let portfolio = live.under(params, now);
        let record = lock(&store.record);
        let Some((from, _)) = record.span() else {
            return Err("the record has seen no snapshot yet".into());
        };
        if !force && !portfolio.due(now, from) {
            return Ok(None);
        }
        (record.clone(), portfolio.clone(), live.site_round)
    };
    let (config, replayed_with) = replay_config(site_round);
    let started = std::time::Instant::now();
    let evaluation = portfolio
        .evaluate(&record, now, config)
        .map_err(|e| format!("evaluation failed: {e}"))?
        .clone();
    let outcome = if evaluation.results.is_empty() {
        "too_few_jobs"
    } else if evaluation.after != evaluation.before {
        "switched"
    } else {
        "kept"
    };
    state.metrics.record_evaluation(outcome, started.elapsed());
    let view = view_of(&evaluation, replayed_with);
    let mut live = lock(&state.portfolio);
    // The admin may have changed the policy while the replays ran: theirs stands.
    if live.params.as_ref() != Some(params) {
        return Ok(None);
    }
    if evaluation.after != evaluation.before {
        live.since = now;
        tracing::info!(
            from = %view.before, to = %view.after, why = %view.why,
            "portfolio: switched member"
        );
    } else {
        tracing::info!(member = %view.after, why = %view.why, "portfolio: evaluated");
    }
    // Its own list would grow by one an evaluation for as long as the service runs.
    portfolio.forget_old_evaluations();
    live.portfolio = Some(portfolio);
    live.evaluations.push_back(view.clone());
    while live.evaluations.len() > KEPT {
        live.evaluations.pop_front();
    }
    // Written outside the lock the rounds take; a failure leaves the evaluation in force and is
    // said (the next evaluation tries again).
    let saved = live.path.clone().zip(live.to_bytes());
    let writing = live.writing.clone();
    let _in_order = lock(&writing);
    drop(live);
    if let Some((path, bytes)) = saved {
        if let Err(e) = super::state_file::write_atomically(&path, &bytes) {
            tracing::warn!(path = %path.display(), error = %e, "portfolio: cannot write its state");
        }
    }
    Ok(Some(view))
}

/// The replays' settings: the site's round as its agent reported it, else cinch.conf's
/// defaults; and how an evaluation says which. A replay at another cadence than the agent's
/// holds and releases jobs at other times than live, and one with other requeue bounds requeues
/// what the plugin would refuse.
fn replay_config(site: Option<AgentRound>) -> (SimConfig, String) {
    let (round, whose) = match site {
        Some(round) => (round, "the agent's cinch.conf"),
        None => (
            AgentRound {
                interval_s: cinch_core::enact::round::DEFAULT_INTERVAL_S,
                max_requeues_per_job: RequeueLimits::DEFAULT_MAX_PER_JOB,
                max_requeues_per_hour: RequeueLimits::DEFAULT_MAX_PER_HOUR,
            },
            "cinch.conf's defaults: no agent has reported its settings",
        ),
    };
    let config = SimConfig {
        round_interval_s: f64::from(round.interval_s),
        max_requeues_per_job: round.max_requeues_per_job,
        max_requeues_per_hour: round.max_requeues_per_hour,
        ..SimConfig::default()
    };
    let said = format!(
        "IntervalSeconds={} MaxRequeuesPerJob={} MaxRequeuesPerHour={} ({whose})",
        round.interval_s, round.max_requeues_per_job, round.max_requeues_per_hour
    );
    (config, said)
}

/// How admins see evaluation `e`, its replays run with `replayed_with`.
fn view_of(e: &Evaluation, replayed_with: String) -> EvaluationView {
    EvaluationView {
        at: e.at,
        window_start: e.window.0,
        window_end: e.window.1,
        results: e
            .results
            .iter()
            .map(|r| MemberView {
                member: r.member.clone(),
                mean_h: r.mean_h,
                p99_h: r.p99_h,
                fairness: r.fairness,
                qos_targeted: r.qos_targeted,
                qos_missed: r.qos_missed,
                jobs: r.jobs,
                wall_s: r.wall_s,
            })
            .collect(),
        before: e.before_name().to_string(),
        after: e.after_name().to_string(),
        why: e.why.clone(),
        replayed_with,
    }
}

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/portfolio", get(show))
        .route("/v1/portfolio/evaluate", post(evaluate_now))
}

/// The portfolio: its members, the member in force since when, and the latest evaluations.
#[utoipa::path(
    get, path = "/v1/portfolio", tag = "policy",
    security(("admin_token" = [])),
    responses((status = 200, body = PortfolioView), (status = 401, body = super::ErrorBody))
)]
async fn show(_: AdminToken, State(state): State<Arc<AppState>>) -> Json<PortfolioView> {
    let policy = state.store.current().settings.policy;
    Json(lock(&state.portfolio).view(&policy))
}

/// Evaluates the portfolio now (its replays take seconds) and answers with the evaluation;
/// 409 when the policy in force is not `portfolio` or the record is off.
#[utoipa::path(
    post, path = "/v1/portfolio/evaluate", tag = "policy",
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EvaluationView),
        (status = 401, body = super::ErrorBody),
        (status = 409, description = "no portfolio in force, or nothing to replay", body = super::ErrorBody),
    )
)]
async fn evaluate_now(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
) -> Result<Json<EvaluationView>, AppError> {
    let worker = state.clone();
    let now = super::unix_now();
    let evaluated = tokio::task::spawn_blocking(move || evaluate_if_due(&worker, now, true))
        .await
        .map_err(|e| AppError::Internal(format!("evaluation task failed: {e}")))?;
    match evaluated {
        Ok(Some(view)) => Ok(Json(view)),
        Ok(None) => Err(AppError::Conflict(
            "the policy in force is not portfolio (cinch policy set portfolio)".into(),
        )),
        Err(why) => Err(AppError::Conflict(why)),
    }
}
