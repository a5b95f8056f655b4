//! `cinch serve`: the optimizer over HTTP. The plugin posts snapshots to `/v1/schedule`; admins
//! read and change the policy under `/v1/policy`. One router per resource; [`app`] assembles them
//! so tests drive the whole service without a socket.

pub mod client;
pub mod config;
mod decisions;
pub mod idle;
pub mod job_decision;
pub mod metrics;
mod ops;
mod policy_api;
pub mod portfolio;
pub mod progress;
pub mod record_file;
mod schedule;
pub mod server;
mod state_file;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use decisions::{DecisionLog, DecisionRecord};
pub use ops::ApiDoc;

use metrics::Metrics;
use store::PolicyStore;

/// The cinch release, shared by the plugin, the service and the simulator.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything the handlers share.
pub struct AppState {
    pub store: PolicyStore,
    pub tokens: Tokens,
    pub decisions: DecisionLog,
    pub metrics: Metrics,
    pub limits: Limits,
    /// Mixed with each snapshot's time to seed policies: the same seed and snapshot give the same
    /// decisions.
    pub seed: u64,
    /// What earlier snapshots showed (run times, slowdowns), learned as snapshots arrive.
    pub history: std::sync::Mutex<cinch_core::learn::history::History>,
    /// The record of the recent past (the jobs as snapshots showed them), unless turned off.
    pub record: Option<record_file::RecordStore>,
    /// The `portfolio` policy's member in force and its evaluations.
    pub portfolio: std::sync::Mutex<portfolio::PortfolioState>,
    /// Decodes users' MUNGE credentials (`GET /v1/jobs/{id}/decision`).
    pub munge: job_decision::MungeCheck,
    /// The last exchanges, for the plugin's deltas (`POST /v1/schedule/delta`).
    pub exchanges: std::sync::Mutex<cinch_core::wire::exchange::Receiver>,
    /// The running jobs' latest progress readings (`POST /v1/jobs/{id}/progress`).
    pub progress: std::sync::Mutex<progress::ProgressStore>,
}

/// Where this process's exchange ids start: the clock's nanoseconds, so that a restarted
/// service does not take a plugin's old base for one of its own.
pub fn first_exchange_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Bearer tokens; each endpoint says which it accepts.
pub struct Tokens {
    pub admin: String,
    pub plugin: String,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

/// A lock whose holder panicked is taken as it is: what it guards (the history, the record, the
/// portfolio, the exchanges) stays usable, and a round must not fail for it.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Unix seconds now; the only clock the service reads (for history timestamps).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The whole service.
pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .merge(schedule::router())
        .merge(policy_api::router())
        .merge(portfolio::router())
        .merge(decisions::router())
        .merge(job_decision::router())
        .merge(progress::router())
        .merge(idle::router())
        .merge(ops::router())
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), guard_request))
        .with_state(state)
}

/// Bounds every request's time and counts every error response for /metrics.
async fn guard_request(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let response = match tokio::time::timeout(state.limits.request_timeout, next.run(request)).await
    {
        Ok(response) => response,
        Err(_) => AppError::Timeout(state.limits.request_timeout).into_response(),
    };
    if response.status().is_client_error() || response.status().is_server_error() {
        state.metrics.count_error(response.status().as_u16());
    }
    response
}

/// Every error the API returns: a status and `{"error": kind, "message": text}`.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    NotFound(String),
    /// The request builds on state the service no longer has (a delta's unknown base).
    #[error("{0}")]
    Conflict(String),
    /// The body is not JSON at all.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed JSON whose content is wrong (unknown fields, out-of-range values, ...).
    #[error("{0}")]
    Unprocessable(String),
    #[error("request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    #[error("request took longer than {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Internal(String),
}

/// A query string that does not parse (unknown parameter, `limit=lots`) is wrong content: 422.
impl From<axum::extract::rejection::QueryRejection> for AppError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        AppError::Unprocessable(rejection.body_text())
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// `unauthorized`, `not_found`, `conflict`, `bad_request`, `unprocessable`,
    /// `payload_too_large`, `timeout`, `internal`.
    pub error: &'static str,
    pub message: String,
}

impl AppError {
    fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AppError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            AppError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            AppError::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_kind();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut response = (
            status,
            Json(ErrorBody {
                error: kind,
                message: self.to_string(),
            }),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Which token an endpoint accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Admin,
    /// The plugin's token; the admin token is accepted too, for what-if requests.
    Plugin,
}

/// Checks `Authorization: Bearer <token>` against the tokens `caller` may use.
pub fn authorize(state: &AppState, headers: &HeaderMap, caller: Caller) -> Result<(), AppError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            AppError::Unauthorized("missing 'Authorization: Bearer <token>' header".into())
        })?;
    let admin = constant_time_eq(given.as_bytes(), state.tokens.admin.as_bytes());
    let plugin = constant_time_eq(given.as_bytes(), state.tokens.plugin.as_bytes());
    let ok = match caller {
        Caller::Admin => admin,
        Caller::Plugin => plugin || admin,
    };
    if ok {
        Ok(())
    } else {
        Err(AppError::Unauthorized(
            "wrong token for this endpoint".into(),
        ))
    }
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Extracted by handlers only the admin may call: the request carried the admin token.
pub struct AdminToken;

/// Extracted by the plugin's endpoint: the request carried the plugin token (or the admin's, for
/// what-if requests).
pub struct PluginToken;

impl FromRequestParts<Arc<AppState>> for AdminToken {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AppError> {
        authorize(state, &parts.headers, Caller::Admin).map(|()| AdminToken)
    }
}

impl FromRequestParts<Arc<AppState>> for PluginToken {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AppError> {
        authorize(state, &parts.headers, Caller::Plugin).map(|()| PluginToken)
    }
}

/// A request body read whole within [`DefaultBodyLimit`], or 413.
pub struct RawBody(pub Bytes);

impl FromRequest<Arc<AppState>> for RawBody {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, AppError> {
        Bytes::from_request(request, state)
            .await
            .map(RawBody)
            .map_err(|_| AppError::PayloadTooLarge(state.limits.max_body_bytes))
    }
}

/// A JSON body: 400 when it is not JSON, 422 when its content is wrong (with serde's precise
/// message), 413 over the body limit. Any content type is accepted, as `curl -d` sends.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, AppError> {
        let RawBody(bytes) = RawBody::from_request(request, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses JSON with a precise message: 400 when it is not JSON, 422 when the content is wrong.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => AppError::Unprocessable(format!("invalid request: {e}")),
            // serde_json reports a number or array where an enum is expected as a syntax error
            // ("expected value"); valid JSON of the wrong shape is still the content's fault.
            Category::Syntax if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() => {
                AppError::Unprocessable(format!("invalid request: wrong type ({e})"))
            }
            Category::Syntax | Category::Eof | Category::Io => {
                AppError::BadRequest(format!("malformed JSON: {e}"))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    fn state(dir: &std::path::Path, timeout: Duration) -> Arc<AppState> {
        let config = config::ServeConfig::resolve(config::ServeOptions {
            state_dir: Some(dir.to_path_buf()),
            ..Default::default()
        })
        .unwrap();
        let mut state = Arc::into_inner(server::build_state(&config).unwrap()).unwrap();
        state.limits.request_timeout = timeout;
        Arc::new(state)
    }

    #[tokio::test]
    async fn a_request_over_the_time_limit_gets_503_and_is_counted() {
        let dir = std::env::temp_dir().join(format!("cinch-timeout-{}", std::process::id()));
        let state = state(&dir, Duration::from_millis(20));
        let slow = Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "too late"
                }),
            )
            .layer(middleware::from_fn_with_state(state.clone(), guard_request))
            .with_state(state.clone());
        let response = slow
            .oneshot(Request::get("/slow").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(state
            .metrics
            .render()
            .contains("cinch_http_errors_total{status=\"503\"} 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
