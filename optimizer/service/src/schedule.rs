//! `POST /v1/schedule`: a snapshot in, decisions out; `POST /v1/schedule/delta`: the same
//! exchange told as what changed since the last (cinch_core::wire::exchange). The plugin's endpoints:
//! they must answer fast, so the policy runs on a blocking thread under the request time limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};

use super::{lock, parse_json, AppError, AppState, DecisionRecord, PluginToken, RawBody};
use cinch_core::wire::decision::{Decisions, StatedTargets};
use cinch_core::wire::exchange::{DecisionsDelta, DeltaError, SnapshotDelta, DELTA_PATH};
use cinch_core::wire::snapshot::{Snapshot, SCHEMA_VERSION};
use cinch_core::Mode;
use cinch_core::PolicySettings;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/schedule", post(schedule))
        .route(DELTA_PATH, post(schedule_delta))
}

/// Decide for a snapshot's pending jobs under the active policy. In `shadow` mode the decisions
/// are returned for logging only; in `off` mode there are none.
#[utoipa::path(
    post, path = "/v1/schedule", tag = "schedule",
    request_body = Snapshot,
    security(("plugin_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, body = Decisions),
        (status = 400, description = "not JSON", body = super::ErrorBody),
        (status = 401, body = super::ErrorBody),
        (status = 413, body = super::ErrorBody),
        (status = 422, description = "JSON that is not a valid snapshot", body = super::ErrorBody),
    )
)]
async fn schedule(
    _: PluginToken,
    State(state): State<Arc<AppState>>,
    RawBody(bytes): RawBody,
) -> Result<Json<Decisions>, AppError> {
    let started = Instant::now();
    let settings = state.store.current().settings;
    let worker = state.clone();
    // Parsing and deciding are CPU work: keep them off the async workers.
    let decisions = tokio::task::spawn_blocking(move || -> Result<Decisions, AppError> {
        let mut snapshot: Snapshot = parse_json(&bytes)?;
        decide(&worker, &settings, &mut snapshot)
    })
    .await
    .map_err(|e| AppError::Internal(format!("policy task failed: {e}")))??;
    state
        .metrics
        .record_schedule(started.elapsed(), &decisions.decisions);
    Ok(Json(decisions))
}

/// `/v1/schedule` told in deltas: the snapshot as what changed since exchange `base`, the
/// answer as the decisions that changed since that exchange's. Decided exactly as the whole
/// snapshot would be. A base this service does not keep (it restarted, or it keeps only the
/// last few exchanges) is answered 409: send the whole snapshot, with no base.
#[utoipa::path(
    post, path = "/v1/schedule/delta", tag = "schedule",
    request_body = SnapshotDelta,
    security(("plugin_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, body = DecisionsDelta),
        (status = 400, description = "not JSON", body = super::ErrorBody),
        (status = 401, body = super::ErrorBody),
        (status = 409, description = "a base this service does not keep", body = super::ErrorBody),
        (status = 413, body = super::ErrorBody),
        (status = 422, description = "JSON that does not make a valid snapshot", body = super::ErrorBody),
    )
)]
async fn schedule_delta(
    _: PluginToken,
    State(state): State<Arc<AppState>>,
    RawBody(bytes): RawBody,
) -> Result<Json<DecisionsDelta>, AppError> {
    let started = Instant::now();
    let settings = state.store.current().settings;
    let worker = state.clone();
    let (answer, decisions) =
        tokio::task::spawn_blocking(move || -> Result<(DecisionsDelta, Decisions), AppError> {
            let delta: SnapshotDelta = parse_json(&bytes)?;
            let base = delta.base;
            let mut snapshot = lock(&worker.exchanges)
                .snapshot(delta)
                .map_err(|e| match e {
                    DeltaError::UnknownBase(_) => AppError::Conflict(e.to_string()),
                    _ => AppError::Unprocessable(format!("invalid delta: {e}")),
                })?;
            let decisions = decide(&worker, &settings, &mut snapshot)?;
            let answer = lock(&worker.exchanges).answer(base, &snapshot, &decisions);
            Ok((answer, decisions))
        })
        .await
        .map_err(|e| AppError::Internal(format!("policy task failed: {e}")))??;
    // Counted as the whole answer: /metrics does not depend on how the plugin asks.
    state
        .metrics
        .record_schedule(started.elapsed(), &decisions.decisions);
    Ok(Json(answer))
}

/// Validates `snapshot`, learns from it and decides, recording the decisions in the log. The
/// running jobs' progress readings are added for the round and taken out again after, so the
/// snapshot stays as the agent sent it (the base of its next delta, the record).
fn decide(
    worker: &AppState,
    settings: &PolicySettings,
    snapshot: &mut Snapshot,
) -> Result<Decisions, AppError> {
    snapshot
        .validate()
        .map_err(|e| AppError::Unprocessable(format!("invalid snapshot: {e}")))?;
    let mut progress = lock(&worker.progress);
    progress.observe(snapshot);
    let read = !progress.is_empty();
    progress.attach(snapshot);
    drop(progress);
    let decided = decide_on(worker, settings, snapshot);
    if read {
        for job in &mut snapshot.running {
            job.progress = None;
        }
    }
    decided
}

/// [`decide`] on the snapshot with its progress readings.
fn decide_on(
    worker: &AppState,
    settings: &PolicySettings,
    snapshot: &Snapshot,
) -> Result<Decisions, AppError> {
    // One snapshot at a time learns and decides, in arrival order: the core's step, which
    // the simulator's in-process optimizer takes too.
    let mut history = lock(&worker.history);
    worker
        .metrics
        .record_snapshot(snapshot, settings.policy.name(), settings.mode);
    // A portfolio decides as its member in force.
    let (deciding, label) = {
        let mut portfolio = lock(&worker.portfolio);
        portfolio.note_agent(snapshot.agent.as_ref());
        portfolio.deciding(&settings.policy, snapshot.time)
    };
    worker
        .metrics
        .record_member(label.strip_prefix("portfolio/"));
    let mut decisions = cinch_core::enact::round::decide_step(
        &deciding,
        settings.mode,
        worker.seed,
        &mut history,
        snapshot,
    );
    drop(history);

    let stated_targets = match settings.mode {
        Mode::Off => StatedTargets::Unused {
            policy: format!("{label}, with mode off"),
        },
        Mode::Shadow | Mode::Enforce => deciding.stated_targets(),
    };
    if let Some(store) = &worker.record {
        lock(&store.record).observe(snapshot);
    }
    let users: HashMap<u32, &str> = snapshot
        .pending
        .iter()
        .map(|j| (j.job_id, j.user.as_str()))
        .chain(snapshot.running.iter().map(|j| (j.job_id, j.user.as_str())))
        .collect();
    if settings.mode != Mode::Off {
        let mut progress = lock(&worker.progress);
        cinch_core::models::idle::add_decisions(
            snapshot,
            &progress.idle,
            &mut decisions,
            cinch_core::enact::round::IDLE_DECISION_TTL_S,
        );
        worker
            .metrics
            .record_idle(&progress.idle, &progress.rules, snapshot.time);
        if let Some(command) = progress.mail_command.clone() {
            let told = crate::idle::notices(&decisions, &users, &mut progress.told);
            crate::idle::send(&command, told);
        }
    }
    let policy = label;
    worker.decisions.extend(decisions.iter().map(|d| {
        DecisionRecord {
            time: snapshot.time,
            policy: policy.clone(),
            mode: settings.mode,
            user: users
                .get(&d.job_id)
                .copied()
                .unwrap_or_default()
                .to_string(),
            decision: d.clone(),
        }
    }));
    let observed = lock(&worker.progress).observed();
    Ok(Decisions {
        observed,
        schema_version: SCHEMA_VERSION,
        policy,
        mode: settings.mode,
        time: snapshot.time,
        stated_targets: Some(stated_targets),
        decisions,
    })
}
