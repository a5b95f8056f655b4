//! Operations endpoints: `/healthz`, `/metrics` and `/openapi.json` (no token: they expose no
//! cluster data or policy).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::AppState;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    pub status: &'static str,
    pub version: &'static str,
    /// Version of the policy in force.
    pub policy_version: u64,
    /// Changes whenever the optimizer's answer to an unchanged cluster may change: a new policy
    /// version, or a running job's GPUs turning flagged or due (docs/policies/idle.md). The
    /// plugin's agent asks again when it changes, rather than at its next minute.
    pub answer_epoch: u64,
}

/// Liveness: the service answers and its policy store is loaded.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = Health)))]
async fn health(State(state): State<Arc<AppState>>) -> Json<Health> {
    let policy_version = state.store.current().version;
    let idle = {
        let store = super::lock(&state.progress);
        store.idle.epoch(&store.rules, super::unix_now())
    };
    Json(Health {
        status: "ok",
        version: crate::VERSION,
        policy_version,
        answer_epoch: policy_version ^ idle.rotate_left(17),
    })
}

/// Metrics in the OpenMetrics text format (docs/metrics.md), which Prometheus scrapes as is.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String)))]
async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// This API's OpenAPI description, generated from the code.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, content_type = "application/json", body = Object)))]
async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["admin_token", "plugin_token"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
        // A user's own MUNGE credential (`munge -s "cinch-why JOBID"`), as `cinch why` sends it.
        components.add_security_scheme(
            "munge",
            SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Header(
                utoipa::openapi::security::ApiKeyValue::with_description(
                    "Authorization",
                    "Munge <credential>: the credential from munge -s \"cinch-why JOBID\" \
                     (cinch why) or munge -s \"cinch-progress JOBID\" (the job's watcher)",
                ),
            )),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "cinch optimizer", description = "Snapshot in, decisions out; admin policy API. See docs/api.md."),
    paths(
        super::schedule::schedule,
        super::schedule::schedule_delta,
        super::policy_api::show,
        super::policy_api::replace,
        super::policy_api::patch,
        super::policy_api::history,
        super::portfolio::show,
        super::portfolio::evaluate_now,
        super::decisions::list,
        super::job_decision::latest,
        super::progress::report,
        super::progress::show,
        super::idle::report,
        super::progress::share_table,
        health,
        metrics,
        openapi,
    ),
    modifiers(&BearerTokens)
)]
pub struct ApiDoc;

impl ApiDoc {
    /// The OpenAPI document as committed in docs/openapi.json.
    pub fn openapi_json() -> String {
        let mut json = ApiDoc::openapi()
            .to_pretty_json()
            .expect("the OpenAPI document serialises");
        json.push('\n');
        json
    }
}
