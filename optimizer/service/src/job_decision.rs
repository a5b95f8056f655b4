//! `GET /v1/jobs/{job_id}/decision`: the optimizer's latest decision about one job, for the
//! job's owner as well as the admin, so `cinch why` can tell a user what cinch decided in its
//! latest round rather than what the job's AdminComment recorded when an action last changed.
//!
//! Users have no token. They prove who they are the way Slurm's own clients do, with a MUNGE
//! credential: `munge -s "cinch-why JOBID"`, sent as `Authorization: Munge <credential>`. The
//! service decodes it with `unmunge` (so it needs the cluster's munged and key, as slurmctld's
//! host has), takes the user from it, and answers only about that user's own jobs (root's
//! credential, or the admin token, may ask about any). munged refuses a credential decoded twice,
//! and the payload names the job, so a credential seen on the way can be used for nothing else.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::routing::get;
use axum::{Json, Router};
use tokio::io::AsyncWriteExt;

use super::{authorize, AppError, AppState, Caller, DecisionRecord};

/// How the service decodes users' MUNGE credentials.
pub struct MungeCheck {
    /// The `unmunge` program.
    pub program: PathBuf,
    /// munged's socket (Slurm's `AuthInfo=socket=`), or munge's default.
    pub socket: Option<PathBuf>,
    /// At most this many `unmunge` at once: a flood of requests cannot fork without bound.
    permits: tokio::sync::Semaphore,
}

/// Who a credential says sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MungeUser {
    pub name: String,
    pub uid: u32,
}

/// The payload a `cinch why` credential carries for `job_id`.
pub fn why_payload(job_id: u32) -> String {
    format!("cinch-why {job_id}")
}

impl MungeCheck {
    pub fn new(program: PathBuf, socket: Option<PathBuf>) -> MungeCheck {
        MungeCheck {
            program,
            socket,
            permits: tokio::sync::Semaphore::new(4),
        }
    }

    /// The user `credential` was made by, if munged accepts it and it carries `payload`.
    pub async fn user(&self, credential: &str, payload: &str) -> Result<MungeUser, AppError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| AppError::Internal("the MUNGE check is closed".into()))?;
        let mut command = tokio::process::Command::new(&self.program);
        if let Some(socket) = &self.socket {
            command.arg(format!("--socket={}", socket.display()));
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                AppError::Internal(format!(
                    "cannot run {} to check a MUNGE credential: {e}",
                    self.program.display()
                ))
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            // A failed write shows as unmunge's own error below.
            let _ = stdin.write_all(credential.as_bytes()).await;
        }
        let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
            .await
            .map_err(|_| AppError::Internal(format!("{} took over 5 s", self.program.display())))?
            .map_err(|e| AppError::Internal(format!("{}: {e}", self.program.display())))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let decoded = parse_unmunge(&text);
        match decoded {
            Some(d) if output.status.success() && d.status_ok => {
                if d.payload != payload {
                    return Err(AppError::Unauthorized(format!(
                        "the MUNGE credential carries '{}', not '{payload}'",
                        d.payload.escape_debug()
                    )));
                }
                Ok(d.user)
            }
            Some(d) => Err(AppError::Unauthorized(format!(
                "munged refused the credential: {}",
                d.status
            ))),
            None => Err(AppError::Unauthorized(format!(
                "munged refused the credential: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }
}

/// What `unmunge` printed: its metadata lines, a blank line, then the payload.
#[derive(Debug, PartialEq, Eq)]
struct Unmunged {
    status: String,
    status_ok: bool,
    user: MungeUser,
    payload: String,
}

/// `STATUS: Success (0)`, ..., `UID: name (uid)`, ..., then an empty line and the payload.
fn parse_unmunge(text: &str) -> Option<Unmunged> {
    let (head, payload) = text.split_once("\n\n").unwrap_or((text, ""));
    let field = |key: &str| {
        head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let status = field("STATUS")?;
    let uid_field = field("UID")?;
    // "name (uid)", or just "uid" where the name is unknown on the service's host.
    let (name, uid) = match uid_field.rsplit_once(" (") {
        Some((name, rest)) => (name.to_string(), rest.strip_suffix(')')?.parse().ok()?),
        None => (uid_field.clone(), uid_field.parse().ok()?),
    };
    Some(Unmunged {
        status_ok: status.ends_with("(0)"),
        status,
        user: MungeUser { name, uid },
        payload: payload.to_string(),
    })
}

/// The optimizer's latest decision about a job, with the mode in force now: a decision made in
/// `enforce` is no longer renewed once the mode is `off`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct JobDecision {
    #[serde(flatten)]
    pub record: DecisionRecord,
    /// The mode in force now.
    pub mode_now: cinch_core::Mode,
    /// Since when that mode has been in force (Unix seconds).
    pub mode_since: i64,
}

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/v1/jobs/{job_id}/decision", get(latest))
}

/// Who asks: the admin, or a user known from a MUNGE credential.
pub enum Asker {
    Admin,
    User(MungeUser),
}

/// Who asks: the admin token, or a MUNGE credential carrying `payload` (which names the job:
/// `cinch-why JOBID` for `cinch why`, `cinch-progress JOBID` for a job's watcher).
pub(crate) async fn asker(
    state: &AppState,
    headers: &HeaderMap,
    payload: &str,
) -> Result<Asker, AppError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match value.strip_prefix("Munge ") {
        Some(credential) => {
            let user = state.munge.user(credential.trim(), payload).await?;
            Ok(Asker::User(user))
        }
        None => authorize(state, headers, Caller::Admin)
            .map(|()| Asker::Admin)
            .map_err(|_| {
                AppError::Unauthorized(format!(
                    "send 'Authorization: Munge <credential>' (munge -s '{payload}') or the admin \
                     token"
                ))
            }),
    }
}

/// The optimizer's latest recorded decision about a job (the log records changes, so each
/// round since has renewed it), to the job's owner or the admin.
#[utoipa::path(
    get, path = "/v1/jobs/{job_id}/decision", tag = "decisions",
    params(("job_id" = u32, Path, description = "The Slurm job id")),
    security(("admin_token" = []), ("munge" = [])),
    responses(
        (status = 200, body = JobDecision),
        (status = 401, body = super::ErrorBody),
        (status = 404, description = "No decision recorded about a job of the caller's", body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn latest(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    job_id: Result<Path<u32>, axum::extract::rejection::PathRejection>,
) -> Result<Json<JobDecision>, AppError> {
    let Path(job_id) = job_id.map_err(|e| AppError::Unprocessable(e.body_text()))?;
    let asker = asker(&state, &headers, &why_payload(job_id)).await?;
    let record = state.decisions.query(Some(job_id), None, 1).pop();
    let visible = match (&asker, &record) {
        (Asker::Admin, _) => true,
        (Asker::User(user), Some(r)) => user.uid == 0 || r.user == user.name,
        (Asker::User(_), None) => false,
    };
    match record {
        Some(record) if visible => {
            // The mode now, and the first version of the run of versions that kept it.
            let history = state.store.history();
            let mode_now = history.last().map_or(record.mode, |r| r.settings.mode);
            let mode_since = history
                .iter()
                .rev()
                .take_while(|r| r.settings.mode == mode_now)
                .last()
                .map_or(0, |r| r.changed_at);
            Ok(Json(JobDecision {
                record,
                mode_now,
                mode_since,
            }))
        }
        // The same answer whether there is no decision or it is another user's: a user learns
        // nothing about others' jobs here.
        _ => Err(AppError::NotFound(format!(
            "the optimizer has recorded no decision about job {job_id}{}",
            match asker {
                Asker::Admin => String::new(),
                Asker::User(user) => format!(" of user {}", user.name),
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUCCESS: &str = "STATUS:          Success (0)\nENCODE_HOST:     localhost (127.0.0.1)\n\
        TTL:             300\nUID:             bin (2)\nGID:             bin (2)\n\
        LENGTH:          12\n\ncinch-why 12";

    #[test]
    fn unmunge_output_gives_the_user_and_the_payload() {
        let d = parse_unmunge(SUCCESS).unwrap();
        assert!(d.status_ok);
        assert_eq!(
            d.user,
            MungeUser {
                name: "bin".into(),
                uid: 2
            }
        );
        assert_eq!(d.payload, "cinch-why 12");
        let replayed = SUCCESS.replace("Success (0)", "Replayed credential (17)");
        let d = parse_unmunge(&replayed).unwrap();
        assert!(!d.status_ok);
        assert_eq!(d.status, "Replayed credential (17)");
        // A uid the service's host cannot name.
        let numeric = SUCCESS.replace("bin (2)", "4242");
        assert_eq!(parse_unmunge(&numeric).unwrap().user.uid, 4242);
        assert_eq!(
            parse_unmunge("unmunge: Error: Failed to match armor prefix"),
            None
        );
    }
}
