//! Idle GPUs at the service (docs/policies/idle.md): `GET /v1/idle`, the admin's report of the
//! running jobs whose GPUs sit idle and of the users who held the most idle GPU-hours (`cinch
//! idle`); and the admin's mail command, run once when a job is flagged and once when its
//! action is taken.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{lock, unix_now, AdminToken, AppState};
use cinch_core::models::idle::IdleTracker;
use cinch_core::wire::decision::Decision;
use cinch_core::wire::idle::{IdleAction, IdleRules};

/// How long the admin's mail command may run before it is killed.
pub const MAIL_TIMEOUT: Duration = Duration::from_secs(30);

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/v1/idle", get(report))
}

/// The running jobs whose GPUs are idle now, and every user's idle GPU-hours.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IdleReport {
    /// The rules in force (cinch.conf's, as the latest snapshot said).
    pub rules: IdleRules,
    /// Idle jobs, most idle GPU-hours first.
    pub jobs: Vec<IdleJob>,
    /// Users with idle GPU time, most first: over their jobs read since the optimizer started.
    pub users: Vec<IdleUser>,
    /// The service's clock (Unix seconds).
    pub now: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IdleJob {
    pub job_id: u32,
    pub user: String,
    pub gpus: u32,
    /// Its GPUs' busy share at the last reading, 0-100.
    pub busy_percent: u32,
    /// `idle` (within its grace), `flagged` (warned) or `due` (its action is taken).
    pub state: String,
    pub idle_since: i64,
    /// When its action comes (grace and warning run out).
    pub act_at: i64,
    /// cinch.conf's `IdleAction` for it.
    pub action: IdleAction,
    /// GPU-hours its readings showed idle while it ran.
    pub idle_gpu_hours: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IdleUser {
    pub user: String,
    pub idle_gpu_hours: f64,
    /// GPU-hours of their jobs read in all (idle or busy).
    pub read_gpu_hours: f64,
    /// Their jobs with an idle reading.
    pub idle_jobs: u32,
}

/// The report at `now` from what the service holds.
pub fn report_of(
    tracker: &IdleTracker,
    rules: &IdleRules,
    actions: &HashMap<u32, IdleAction>,
    now: i64,
) -> IdleReport {
    let mut jobs: Vec<IdleJob> = tracker
        .jobs()
        .filter_map(|(id, job)| {
            let state = tracker.state(id, rules, now)?;
            let since = state.since()?;
            Some(IdleJob {
                job_id: id,
                user: job.user.clone(),
                gpus: job.gpus,
                busy_percent: job.last_busy,
                state: state.name().to_string(),
                idle_since: since,
                act_at: rules.act_at(since),
                action: actions.get(&id).copied().unwrap_or_default(),
                idle_gpu_hours: job.idle_gpu_s / 3600.0,
            })
        })
        .collect();
    jobs.sort_by(|a, b| {
        b.idle_gpu_hours
            .total_cmp(&a.idle_gpu_hours)
            .then(a.job_id.cmp(&b.job_id))
    });
    let mut users: Vec<IdleUser> = tracker
        .users()
        .iter()
        .filter(|(_, u)| u.idle_jobs > 0)
        .map(|(name, u)| IdleUser {
            user: name.clone(),
            idle_gpu_hours: u.idle_gpu_s / 3600.0,
            read_gpu_hours: u.read_gpu_s / 3600.0,
            idle_jobs: u.idle_jobs,
        })
        .collect();
    users.sort_by(|a, b| {
        b.idle_gpu_hours
            .total_cmp(&a.idle_gpu_hours)
            .then(a.user.cmp(&b.user))
    });
    IdleReport {
        rules: *rules,
        jobs,
        users,
        now,
    }
}

/// The admin's report of idle GPUs (`cinch idle`).
#[utoipa::path(
    get, path = "/v1/idle", tag = "jobs",
    security(("admin_token" = [])),
    responses(
        (status = 200, body = IdleReport),
        (status = 401, body = super::ErrorBody),
    )
)]
async fn report(_: AdminToken, State(state): State<Arc<AppState>>) -> Json<IdleReport> {
    let store = lock(&state.progress);
    Json(report_of(
        &store.idle,
        &store.rules,
        &store.idle_actions,
        unix_now(),
    ))
}

/// One message for the admin's mail command: `COMMAND USER JOBID MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub user: String,
    pub job_id: u32,
    pub message: String,
}

/// What was told of each job: once when flagged, once when acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    Warned,
    Acted,
}

/// The notices a round's idle decisions call for: the first warning of each job and the action
/// taken on it, each once (`told` remembers; jobs no longer idle are forgotten, so a job idle
/// again is warned again).
pub fn notices(
    decisions: &[Decision],
    users: &HashMap<u32, &str>,
    told: &mut HashMap<u32, Told>,
) -> Vec<Notice> {
    let mut out = Vec::new();
    let mut idle_now = Vec::new();
    for d in decisions {
        let Some(idle) = d.idle else {
            continue;
        };
        idle_now.push(d.job_id);
        let stage = if idle.cancel || d.requeue == Some(true) {
            Told::Acted
        } else {
            Told::Warned
        };
        if told.get(&d.job_id) == Some(&stage) {
            continue;
        }
        told.insert(d.job_id, stage);
        out.push(Notice {
            user: users
                .get(&d.job_id)
                .copied()
                .unwrap_or_default()
                .to_string(),
            job_id: d.job_id,
            message: format!("cinch: job {}: {}", d.job_id, d.reason),
        });
    }
    told.retain(|job, _| idle_now.contains(job));
    out
}

/// Runs the admin's mail command for each notice, on its own thread (never in a round's way),
/// killed after [`MAIL_TIMEOUT`]; a failure is logged.
pub fn send(command: &Path, notices: Vec<Notice>) {
    for notice in notices {
        let command = command.to_path_buf();
        std::thread::spawn(move || {
            let child = Command::new(&command)
                .arg(&notice.user)
                .arg(notice.job_id.to_string())
                .arg(&notice.message)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match child {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(
                        "idle mail command {} for job {}: {e}",
                        command.display(),
                        notice.job_id
                    );
                    return;
                }
            };
            let started = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(status)) if status.success() => return,
                    Ok(Some(status)) => {
                        tracing::warn!(
                            "idle mail command {} for job {} exited with {status}",
                            command.display(),
                            notice.job_id
                        );
                        return;
                    }
                    Ok(None) if started.elapsed() < MAIL_TIMEOUT => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        tracing::warn!(
                            "idle mail command {} for job {} killed after {} s",
                            command.display(),
                            notice.job_id,
                            MAIL_TIMEOUT.as_secs()
                        );
                        return;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::wire::decision::IdleDecision;
    use cinch_core::wire::watch::GpuUse;

    #[test]
    fn each_job_is_told_once_when_warned_and_once_when_acted_on() {
        let warn = |id| Decision {
            idle: Some(IdleDecision {
                since: 10,
                cancel: false,
            }),
            ..Decision::explain(id, "idle", 60)
        };
        let users = HashMap::from([(1, "ann"), (2, "bob")]);
        let mut told = HashMap::new();
        let first = notices(&[warn(1), warn(2)], &users, &mut told);
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].user, "ann");
        assert_eq!(first[0].message, "cinch: job 1: idle");
        assert!(notices(&[warn(1), warn(2)], &users, &mut told).is_empty());
        let cancel = Decision {
            idle: Some(IdleDecision {
                since: 10,
                cancel: true,
            }),
            ..warn(1)
        };
        assert_eq!(notices(&[cancel, warn(2)], &users, &mut told).len(), 1);
        // Job 2 got busy, then idle again: warned again.
        assert!(notices(&[], &users, &mut told).is_empty());
        assert_eq!(notices(&[warn(2)], &users, &mut told).len(), 1);
    }

    #[test]
    fn the_report_lists_idle_jobs_and_users_by_idle_gpu_hours() {
        let rules = IdleRules {
            gpu_percent: 5,
            grace_s: 600,
            warn_s: 300,
        };
        let mut t = IdleTracker::default();
        let gpu = |gpus, busy| GpuUse {
            gpus,
            busy_percent: busy,
            memory_mib: 0,
        };
        for at in (0..=3600).step_by(60) {
            t.reading(1, "ann", at, gpu(1, 0), &rules);
            t.reading(2, "bob", at, gpu(4, 0), &rules);
            t.reading(3, "cy", at, gpu(8, 90), &rules);
        }
        let actions = HashMap::from([(2, IdleAction::Cancel)]);
        let r = report_of(&t, &rules, &actions, 3600);
        let ids: Vec<u32> = r.jobs.iter().map(|j| j.job_id).collect();
        assert_eq!(ids, [2, 1]);
        assert_eq!(r.jobs[0].state, "due");
        assert_eq!(r.jobs[0].action, IdleAction::Cancel);
        assert_eq!(r.jobs[1].action, IdleAction::Report);
        assert!((r.jobs[0].idle_gpu_hours - 4.0).abs() < 1e-9);
        let users: Vec<&str> = r.users.iter().map(|u| u.user.as_str()).collect();
        assert_eq!(users, ["bob", "ann"], "cy's GPUs were busy");
    }
}
