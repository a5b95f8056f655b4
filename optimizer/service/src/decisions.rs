//! `GET /v1/decisions`: the most recent decisions with their reasons, newest first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{AdminToken, AppError, AppState};
use cinch_core::decision::Decision;
use cinch_core::policy::Mode;

/// One decision as it was made.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecisionRecord {
    /// The snapshot's time (Unix seconds).
    pub time: i64,
    pub policy: String,
    pub mode: Mode,
    pub user: String,
    pub decision: Decision,
}

/// A bounded ring of recent decisions: the oldest go first when it is full.
pub struct DecisionLog {
    capacity: usize,
    records: Mutex<VecDeque<DecisionRecord>>,
}

impl DecisionLog {
    pub fn new(capacity: usize) -> Self {
        DecisionLog {
            capacity,
            records: Mutex::new(VecDeque::with_capacity(capacity.min(65_536))),
        }
    }

    pub fn extend(&self, new: impl IntoIterator<Item = DecisionRecord>) {
        if self.capacity == 0 {
            return;
        }
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        for record in new {
            if records.len() == self.capacity {
                records.pop_front();
            }
            records.push_back(record);
        }
    }

    /// Newest first, filtered.
    pub fn query(
        &self,
        job_id: Option<u32>,
        user: Option<&str>,
        limit: usize,
    ) -> Vec<DecisionRecord> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .iter()
            .rev()
            .filter(|r| job_id.is_none_or(|id| r.decision.job_id == id))
            .filter(|r| user.is_none_or(|u| r.user == u))
            .take(limit)
            .cloned()
            .collect()
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DecisionQuery {
    /// Only this job's decisions.
    pub job_id: Option<u32>,
    /// Only decisions about this user's jobs.
    pub user: Option<String>,
    /// At most this many (default 100, at most 10000).
    pub limit: Option<usize>,
}

pub const MAX_LIMIT: usize = 10_000;

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/v1/decisions", get(list))
}

/// Recent decisions with their reasons, newest first.
#[utoipa::path(
    get, path = "/v1/decisions", tag = "decisions",
    params(DecisionQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = Vec<DecisionRecord>),
        (status = 401, body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn list(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
    query: Result<Query<DecisionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<DecisionRecord>>, AppError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::Unprocessable(format!(
            "limit must be from 1 to {MAX_LIMIT}, not {limit}"
        )));
    }
    Ok(Json(state.decisions.query(
        query.job_id,
        query.user.as_deref(),
        limit,
    )))
}
