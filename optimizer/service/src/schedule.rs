//! `POST /v1/schedule`: a snapshot in, decisions out. The plugin's endpoint: it must answer fast,
//! so the policy runs on a blocking thread under the request time limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};

use super::{parse_json, AppError, AppState, DecisionRecord, PluginToken, RawBody};
use cinch_core::decision::Decisions;
use cinch_core::snapshot::{Snapshot, SCHEMA_VERSION};

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/v1/schedule", post(schedule))
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
        let snapshot: Snapshot = parse_json(&bytes)?;
        snapshot
            .validate()
            .map_err(|e| AppError::Unprocessable(format!("invalid snapshot: {e}")))?;
        // One snapshot at a time learns and decides, in arrival order: the core's step, which
        // the simulator's in-process optimizer takes too.
        let mut history = worker
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        worker
            .metrics
            .record_snapshot(&snapshot, settings.policy.name(), settings.mode);
        let decisions = cinch_core::round::decide_step(
            &settings.policy,
            settings.mode,
            worker.seed,
            &mut history,
            &snapshot,
        );
        drop(history);
        let users: HashMap<u32, &str> = snapshot
            .pending
            .iter()
            .map(|j| (j.job_id, j.user.as_str()))
            .collect();
        let policy = settings.policy.name().to_string();
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
        Ok(Decisions {
            schema_version: SCHEMA_VERSION,
            policy,
            mode: settings.mode,
            time: snapshot.time,
            decisions,
        })
    })
    .await
    .map_err(|e| AppError::Internal(format!("policy task failed: {e}")))??;
    state
        .metrics
        .record_schedule(started.elapsed(), &decisions.decisions);
    Ok(Json(decisions))
}
