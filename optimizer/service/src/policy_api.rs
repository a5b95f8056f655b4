//! `/v1/policy`: the active policy, its parameters and mode; every change is a new version in the
//! persisted history. A rejected request changes nothing.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use super::store::{PolicyRecord, UpdateError};
use super::{unix_now, AdminToken, ApiJson, AppError, AppState};
use cinch_core::policy::{PolicyConfig, PolicySettings};

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/policy", get(show).put(replace).patch(patch))
        .route("/v1/policy/history", get(history))
}

/// The policy in force.
#[utoipa::path(
    get, path = "/v1/policy", tag = "policy",
    security(("admin_token" = [])),
    responses((status = 200, body = PolicyRecord), (status = 401, body = super::ErrorBody))
)]
async fn show(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
) -> Result<Json<PolicyRecord>, AppError> {
    Ok(Json(state.store.current()))
}

/// Replace mode and policy as a whole (omitted parameters take their defaults).
#[utoipa::path(
    put, path = "/v1/policy", tag = "policy",
    request_body = PolicySettings,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "the new version", body = PolicyRecord),
        (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn replace(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
    ApiJson(settings): ApiJson<PolicySettings>,
) -> Result<Json<PolicyRecord>, AppError> {
    store(state, "PUT /v1/policy".into(), move |_| Ok(settings)).await
}

/// Change some settings with a JSON merge patch (RFC 7386), e.g.
/// `{"mode": "enforce"}` or `{"policy": {"params": {"ttl_s": 120}}}`. Naming another policy
/// starts from that policy's defaults.
#[utoipa::path(
    patch, path = "/v1/policy", tag = "policy",
    request_body(content = Object, content_type = "application/merge-patch+json"),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "the new version", body = PolicyRecord),
        (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn patch(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
    ApiJson(patch): ApiJson<Value>,
) -> Result<Json<PolicyRecord>, AppError> {
    let Value::Object(fields) = &patch else {
        return Err(AppError::Unprocessable(
            "a policy patch must be a JSON object".into(),
        ));
    };
    // An empty patch asks for nothing: no new version in the history.
    if fields.is_empty() {
        return Ok(Json(state.store.current()));
    }
    let what = format!(
        "PATCH /v1/policy: {}",
        fields.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    store(state, what, move |current| apply_patch(current, &patch)).await
}

/// Merges `patch` into `current` and validates the result as a whole.
fn apply_patch(current: &PolicySettings, patch: &Value) -> Result<PolicySettings, String> {
    let mut base = current.clone();
    let new_name = patch
        .get("policy")
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str);
    if let Some(name) = new_name {
        if name != base.policy.name() {
            base.policy = PolicyConfig::defaults_for(name)?;
        }
    }
    let mut merged = serde_json::to_value(&base).expect("settings serialise");
    merge_patch(&mut merged, patch);
    serde_json::from_value(merged).map_err(|e| format!("invalid policy after patch: {e}"))
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let target_fields = target.as_object_mut().expect("made an object above");
    for (key, value) in patch_fields {
        if value.is_null() {
            target_fields.remove(key);
        } else {
            merge_patch(
                target_fields.entry(key.clone()).or_insert(Value::Null),
                value,
            );
        }
    }
}

/// Stores a change on the blocking pool: the file is fsynced before the answer, and that wait
/// must not hold an async worker that `/v1/schedule` requests need.
async fn store<F>(
    state: Arc<AppState>,
    what: String,
    change: F,
) -> Result<Json<PolicyRecord>, AppError>
where
    F: FnOnce(&PolicySettings) -> Result<PolicySettings, String> + Send + 'static,
{
    // A portfolio replays the record: refused where there is none, or it keeps too little.
    let record_window_s = state
        .record
        .as_ref()
        .map(|r| super::lock(&r.record).limits().window_s);
    let change = move |current: &PolicySettings| {
        let settings = change(current)?;
        fits_the_record(&settings, record_window_s)?;
        Ok(settings)
    };
    let updated = tokio::task::spawn_blocking(move || state.store.update(unix_now(), what, change))
        .await
        .map_err(|e| AppError::Internal(format!("policy update task failed: {e}")))?;
    match updated {
        Ok(record) => {
            tracing::info!(
                version = record.version,
                change = %record.change,
                mode = %record.settings.mode,
                policy = record.settings.policy.name(),
                "policy changed"
            );
            Ok(Json(record))
        }
        Err(UpdateError::Invalid(message)) => Err(AppError::Unprocessable(message)),
        Err(UpdateError::Store(e)) => Err(AppError::Internal(e.to_string())),
    }
}

/// Whether `settings` can run with the record the service keeps (`record_window_s`, none when
/// off): a portfolio replays its last `window_h`.
fn fits_the_record(settings: &PolicySettings, record_window_s: Option<i64>) -> Result<(), String> {
    let PolicyConfig::Portfolio(params) = &settings.policy else {
        return Ok(());
    };
    match record_window_s {
        None => Err(
            "the portfolio replays the optimizer's record, which is off \
                     (record_hours = 0): set record_hours to at least window_h"
                .into(),
        ),
        Some(kept) if (params.window_h * 3600.0).round() as i64 > kept => Err(format!(
            "the portfolio's window_h ({} h) is longer than the record keeps ({} h, \
             record_hours)",
            params.window_h,
            kept / 3600
        )),
        Some(_) => Ok(()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Only the newest this many versions (default: all).
    pub limit: Option<usize>,
}

/// Every version of the policy, oldest first.
#[utoipa::path(
    get, path = "/v1/policy/history", tag = "policy",
    params(HistoryQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = Vec<PolicyRecord>),
        (status = 401, body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn history(
    _: AdminToken,
    State(state): State<Arc<AppState>>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<PolicyRecord>>, AppError> {
    let Query(query) = query?;
    let history = state.store.history();
    let skip = query
        .limit
        .map_or(0, |limit| history.len().saturating_sub(limit));
    Ok(Json(history.into_iter().skip(skip).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::policy::{CinchParams, Mode};
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut doc, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(doc, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }

    #[test]
    fn patching_parameters_keeps_the_others() {
        let current = PolicySettings::default();
        let next = apply_patch(&current, &json!({"policy": {"params": {"ttl_s": 60}}})).unwrap();
        assert_eq!(
            next.policy,
            PolicyConfig::Cinch(CinchParams {
                ttl_s: 60,
                ..CinchParams::default()
            })
        );
        assert_eq!(next.mode, current.mode);
    }

    #[test]
    fn switching_policy_starts_from_its_defaults() {
        let next = apply_patch(
            &PolicySettings::default(),
            &json!({"mode": "enforce", "policy": {"name": "passthrough"}}),
        )
        .unwrap();
        assert_eq!(next.mode, Mode::Enforce);
        assert_eq!(next.policy.name(), "passthrough");
    }

    #[test]
    fn invalid_patches_say_why() {
        let current = PolicySettings::default();
        let err = apply_patch(&current, &json!({"policy": {"name": "nope"}})).unwrap_err();
        assert!(err.contains("unknown policy 'nope'"), "{err}");
        let err = apply_patch(&current, &json!({"policy": {"params": {"ttl_s": -1}}})).unwrap_err();
        assert!(err.contains("invalid policy after patch"), "{err}");
        let err = apply_patch(&current, &json!({"extra": 1})).unwrap_err();
        assert!(err.contains("unknown field `extra`"), "{err}");
    }
}
