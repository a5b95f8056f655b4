//! `POST /v1/jobs/{job_id}/progress`: what the watcher on a running job's node read of its
//! progress (docs/policies/progress.md). The service keeps each running job's latest reading and
//! adds it to the snapshot it decides on (`running[].progress`); the agent never sends it.
//!
//! The watcher runs as the job's user and proves it with a MUNGE credential, as `cinch why`
//! does: `munge -s "cinch-progress JOBID"`, sent as `Authorization: Munge <credential>`. Only the
//! job's own user (or root, or the admin token) may report on it, only while the latest snapshot
//! shows it running, and only numbers are taken.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Json;
use axum::Router;
use std::collections::HashMap;

use super::job_decision::{asker, Asker, MungeUser};
use super::{lock, parse_json, unix_now, AppError, AppState, RawBody};
use cinch_core::models::idle::IdleTracker;
use cinch_core::models::share_table::TableBuilder;
use cinch_core::slurm::job_hints::Hints;
use cinch_core::wire::decision::ObservedUse;
use cinch_core::wire::idle::{IdleAction, IdleRules};
use cinch_core::wire::snapshot::{JobProgress, Snapshot};
use cinch_core::wire::watch::{GpuUse, WatchReport};

/// How far a reading's time may be from the service's clock: node clocks are kept in step for
/// MUNGE, which refuses credentials across a larger skew anyway.
pub const MAX_SKEW_S: i64 = 300;
/// A reading older than this is not taken: the watcher reports every minute.
pub const MAX_AGE_S: i64 = 3600;

pub use cinch_core::net::progress_payload;

/// The running jobs of the latest snapshot (and their users) and the latest reading of each
/// that has one: bounded by the running jobs.
#[derive(Debug, Default)]
pub struct ProgressStore {
    running: HashMap<u32, String>,
    latest: HashMap<u32, Watched>,
    /// The running jobs' GPU readings over time, for idle GPUs (docs/policies/idle.md).
    pub idle: IdleTracker,
    /// When GPUs count as idle, as the latest snapshot said (cinch.conf's; the default until
    /// one did).
    pub rules: IdleRules,
    /// The running jobs whose `IdleAction` is not report, as the latest snapshot said.
    pub idle_actions: HashMap<u32, IdleAction>,
    /// What the admin's mail command was told of each idle job.
    pub told: HashMap<u32, crate::idle::Told>,
    /// The admin's mail command (`--idle-mail-command`), if any.
    pub mail_command: Option<std::path::PathBuf>,
    /// The running jobs of one whole GPU, with their hints.
    one_gpu: HashMap<u32, Hints>,
    /// What was last told the plugin of each (peak MiB, busy %).
    sent: HashMap<u32, (u64, u32)>,
    /// What the watchers read of those jobs' GPUs so far.
    used: HashMap<u32, Used>,
    /// The site's model table from what ended jobs used (`GET /v1/share-table`).
    pub table: TableBuilder,
}

/// What a one-GPU job's watcher read of its GPU while it ran.
#[derive(Debug, Clone, Default, PartialEq)]
struct Used {
    peak_mib: u64,
    busy_sum: f64,
    readings: u32,
}

/// What a job's watcher last reported: its progress, and its GPUs' use with when it was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watched {
    pub progress: Option<JobProgress>,
    pub gpu: Option<(i64, GpuUse)>,
}

/// Why a reading was not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("job {0} is not running (as the latest snapshot shows)")]
    NotRunning(u32),
    #[error("job {0} is not a job of user {1}")]
    NotTheirs(u32, String),
    #[error("the reading does not make sense: {0}")]
    Invalid(String),
}

impl ProgressStore {
    /// An empty store that runs `command` for idle notices.
    pub fn with_mail_command(command: Option<std::path::PathBuf>) -> ProgressStore {
        ProgressStore {
            mail_command: command,
            ..ProgressStore::default()
        }
    }

    /// Takes the running jobs of a new snapshot; readings of jobs no longer running go.
    pub fn observe(&mut self, snapshot: &Snapshot) {
        self.running.clear();
        self.running
            .extend(snapshot.running.iter().map(|j| (j.job_id, j.user.clone())));
        let running = &self.running;
        self.latest.retain(|id, _| running.contains_key(id));
        self.idle.retain_running(|id| running.contains_key(&id));
        if let Some(rules) = snapshot.idle {
            self.rules = rules;
        }
        // One-GPU jobs that ended: what their watchers read goes into the site's table.
        let ended: Vec<u32> = self
            .used
            .keys()
            .copied()
            .filter(|id| !running.contains_key(id))
            .collect();
        for id in ended {
            let used = self.used.remove(&id).unwrap_or_default();
            if let Some(hints) = self.one_gpu.get(&id) {
                self.table.add(
                    Some(1),
                    hints,
                    (used.peak_mib > 0).then_some(used.peak_mib as f64 * 1024.0 * 1024.0),
                    (used.readings > 0).then_some(used.busy_sum / f64::from(used.readings.max(1))),
                );
            }
        }
        self.one_gpu.retain(|id, _| running.contains_key(id));
        self.sent.retain(|id, _| running.contains_key(id));
        for job in &snapshot.running {
            if job.gpus == 1 && !self.one_gpu.contains_key(&job.job_id) {
                self.one_gpu.insert(job.job_id, job.hints.clone());
            }
        }
        self.idle_actions.clear();
        self.idle_actions.extend(
            snapshot
                .running
                .iter()
                .filter(|j| j.idle_action != IdleAction::Report)
                .map(|j| (j.job_id, j.idle_action)),
        );
    }

    /// Keeps `report` as job `job_id`'s latest, if `who` may report it and it makes sense at
    /// `now` (each part replaces its own: a report without progress keeps the last reading).
    pub fn report(
        &mut self,
        job_id: u32,
        who: &Asker,
        report: WatchReport,
        now: i64,
    ) -> Result<(), ReportError> {
        let owner = self
            .running
            .get(&job_id)
            .ok_or(ReportError::NotRunning(job_id))?;
        if let Asker::User(MungeUser { name, uid }) = who {
            if *uid != 0 && name != owner {
                // The same answer as for a job that is not running would tell a user which
                // job ids run; the watcher only ever reports its own job.
                return Err(ReportError::NotTheirs(job_id, name.clone()));
            }
        }
        if let Some(progress) = &report.progress {
            if !progress.is_consistent() {
                return Err(ReportError::Invalid(format!(
                    "{progress:?}: steps must be within the total, the earlier reading before \
                     the later"
                )));
            }
            if progress.at > now + MAX_SKEW_S || progress.at < now - MAX_AGE_S {
                return Err(ReportError::Invalid(format!(
                    "read at {}, the service's clock says {now} (within {MAX_SKEW_S} s ahead \
                     and {MAX_AGE_S} s behind)",
                    progress.at
                )));
            }
        }
        if let Some(gpu) = &report.gpu {
            if gpu.busy_percent > 100 || gpu.gpus == 0 {
                return Err(ReportError::Invalid(format!(
                    "{gpu:?}: busy_percent is 0-100 of at least one GPU"
                )));
            }
        }
        if report.progress.is_none() && report.gpu.is_none() {
            return Err(ReportError::Invalid("an empty report".into()));
        }
        let kept = self.latest.entry(job_id).or_default();
        if let Some(p) = report.progress {
            kept.progress = Some(p);
        }
        if let Some(g) = report.gpu {
            kept.gpu = Some((now, g));
            self.idle.reading(job_id, owner, now, g, &self.rules);
            if self.one_gpu.contains_key(&job_id) {
                let used = self.used.entry(job_id).or_default();
                used.peak_mib = used.peak_mib.max(g.memory_mib);
                used.busy_sum += f64::from(g.busy_percent);
                used.readings += 1;
            }
        }
        Ok(())
    }

    /// Puts each running job's latest reading into `snapshot` (what the policy decides on).
    pub fn attach(&self, snapshot: &mut Snapshot) {
        if self.latest.is_empty() {
            return;
        }
        for job in &mut snapshot.running {
            if let Some(p) = self.latest.get(&job.job_id).and_then(|w| w.progress) {
                job.progress = Some(p);
            }
        }
    }

    /// What the watchers measured of running one-GPU jobs that is new since the last call: a
    /// peak 5% above the one told, or a mean busy share 5 points off (after two readings).
    pub fn observed(&mut self) -> Vec<ObservedUse> {
        let mut out = Vec::new();
        for (&job_id, used) in &self.used {
            if used.readings < 2 {
                continue;
            }
            let busy = (used.busy_sum / f64::from(used.readings)).round() as u32;
            let new = match self.sent.get(&job_id) {
                None => true,
                Some(&(peak, told)) => {
                    used.peak_mib as f64 > peak as f64 * 1.05 || busy.abs_diff(told) >= 5
                }
            };
            if new {
                self.sent.insert(job_id, (used.peak_mib, busy));
                out.push(ObservedUse {
                    job_id,
                    peak_mib: used.peak_mib,
                    busy_percent: busy,
                });
            }
        }
        out.sort_by_key(|o| o.job_id);
        out
    }

    /// Jobs with a reading.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/jobs/{job_id}/progress", post(report).get(show))
        .route("/v1/share-table", axum::routing::get(share_table))
}

/// The site's sharing model table from what the watchers read of ended jobs of one GPU.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ShareTableNow {
    /// cinch.conf's `ShareModelMemory` and `ShareModelBusy` lines, with a comment saying what
    /// went in (empty tables: the comment alone).
    pub conf_lines: String,
    /// Jobs that went in.
    pub jobs: usize,
    /// Jobs left out, by why.
    pub skipped: std::collections::BTreeMap<String, usize>,
}

/// The sharing model table from the watchers' readings (`cinch share-table --from-optimizer`):
/// per application and batch size (`app=`, `batch=` hints of jobs of one GPU), the largest peak
/// GPU memory and average busy share any ended job showed since the service started.
#[utoipa::path(
    get, path = "/v1/share-table", tag = "jobs",
    security(("admin_token" = [])),
    responses(
        (status = 200, body = ShareTableNow),
        (status = 401, body = super::ErrorBody),
    )
)]
async fn share_table(
    _: super::AdminToken,
    State(state): State<Arc<AppState>>,
) -> Json<ShareTableNow> {
    let table = lock(&state.progress).table.table();
    let conf_lines = table.conf_lines().replace(
        "# cinch share-table:",
        "# cinch share-table --from-optimizer (the watchers' readings):",
    );
    Json(ShareTableNow {
        conf_lines,
        jobs: table.jobs,
        skipped: table
            .skipped
            .iter()
            .map(|(why, n)| (why.to_string(), *n))
            .collect(),
    })
}

/// A running job's latest progress reading and GPU use, as `cinch why` tells them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ProgressNow {
    pub job_id: u32,
    pub user: String,
    pub progress: Option<JobProgress>,
    /// Its GPUs over the watcher's last interval.
    pub gpu: Option<GpuUse>,
    /// When that GPU use was reported (Unix seconds).
    pub gpu_at: Option<i64>,
    /// Run seconds left by the reading, at `now`; none before 2% of the steps or once the job
    /// has run past the end its progress gave.
    pub left_s: Option<i64>,
    /// The service's clock when it answered (Unix seconds).
    pub now: i64,
}

impl ProgressStore {
    /// Job `job_id`'s latest report and its user, if it runs and has one.
    pub fn get(&self, job_id: u32) -> Option<(&str, Watched)> {
        Some((
            self.running.get(&job_id)?.as_str(),
            *self.latest.get(&job_id)?,
        ))
    }
}

/// The latest progress reading of a running job, to the job's owner (`cinch why`'s MUNGE
/// credential) or the admin.
#[utoipa::path(
    get, path = "/v1/jobs/{job_id}/progress", tag = "jobs",
    params(("job_id" = u32, Path, description = "The Slurm job id")),
    security(("admin_token" = []), ("munge" = [])),
    responses(
        (status = 200, body = ProgressNow),
        (status = 401, body = super::ErrorBody),
        (status = 404, description = "No reading of a running job of the caller's", body = super::ErrorBody),
        (status = 422, body = super::ErrorBody),
    )
)]
async fn show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    job_id: Result<Path<u32>, axum::extract::rejection::PathRejection>,
) -> Result<Json<ProgressNow>, AppError> {
    let Path(job_id) = job_id.map_err(|e| AppError::Unprocessable(e.body_text()))?;
    let asking = asker(&state, &headers, &super::job_decision::why_payload(job_id)).await?;
    let now = unix_now();
    let store = lock(&state.progress);
    let found = store.get(job_id).filter(|(user, _)| match &asking {
        Asker::Admin => true,
        Asker::User(u) => u.uid == 0 || u.name == *user,
    });
    match found {
        Some((user, watched)) => Ok(Json(ProgressNow {
            job_id,
            user: user.to_string(),
            progress: watched.progress,
            gpu: watched.gpu.map(|(_, g)| g),
            gpu_at: watched.gpu.map(|(at, _)| at),
            left_s: watched
                .progress
                .and_then(|p| p.remaining_s(now))
                .map(|s| s.round() as i64),
            now,
        })),
        // The same answer for another user's job as for one with no reading.
        None => Err(AppError::NotFound(format!(
            "the optimizer holds no progress reading of job {job_id}{}",
            match asking {
                Asker::Admin => String::new(),
                Asker::User(u) => format!(" of user {}", u.name),
            }
        ))),
    }
}

/// A running job's progress as its watcher read it: two readings of its steps.
#[utoipa::path(
    post, path = "/v1/jobs/{job_id}/progress", tag = "jobs",
    params(("job_id" = u32, Path, description = "The Slurm job id")),
    request_body = WatchReport,
    security(("munge" = []), ("admin_token" = [])),
    responses(
        (status = 204, description = "Taken: the next round decides with it"),
        (status = 400, description = "not JSON", body = super::ErrorBody),
        (status = 401, body = super::ErrorBody),
        (status = 404, description = "Not a running job of the caller's", body = super::ErrorBody),
        (status = 413, body = super::ErrorBody),
        (status = 422, description = "A reading that does not make sense", body = super::ErrorBody),
    )
)]
async fn report(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    job_id: Result<Path<u32>, axum::extract::rejection::PathRejection>,
    RawBody(bytes): RawBody,
) -> Result<StatusCode, AppError> {
    let Path(job_id) = job_id.map_err(|e| AppError::Unprocessable(e.body_text()))?;
    let who = asker(&state, &headers, &progress_payload(job_id)).await?;
    let report: WatchReport = parse_json(&bytes)?;
    let now = unix_now();
    lock(&state.progress)
        .report(job_id, &who, report, now)
        .map_err(|e| match e {
            ReportError::NotRunning(_) | ReportError::NotTheirs(..) => {
                AppError::NotFound(e.to_string())
            }
            ReportError::Invalid(_) => AppError::Unprocessable(e.to_string()),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::wire::snapshot::RunningJob;

    fn snapshot_running(jobs: &[(u32, &str)]) -> Snapshot {
        let mut snap = cinch_core::testing::snapshot(Vec::new(), Vec::new());
        snap.running = jobs
            .iter()
            .map(|&(id, user)| RunningJob {
                job_id: id,
                user: user.into(),
                ..RunningJob::default()
            })
            .collect();
        snap
    }

    fn reading(at: i64) -> JobProgress {
        JobProgress {
            total: 1000,
            done: 400,
            at,
            since_done: 300,
            since: at - 60,
        }
    }

    fn with(progress: JobProgress) -> WatchReport {
        WatchReport {
            progress: Some(progress),
            gpu: None,
        }
    }

    fn ann() -> Asker {
        Asker::User(MungeUser {
            name: "ann".into(),
            uid: 1000,
        })
    }

    #[test]
    fn a_running_jobs_own_user_reports_and_the_next_snapshot_carries_it() {
        let mut store = ProgressStore::default();
        store.observe(&snapshot_running(&[(7, "ann"), (8, "bob")]));
        let now = 10_000;
        assert_eq!(store.report(7, &ann(), with(reading(now)), now), Ok(()));
        let mut snap = snapshot_running(&[(7, "ann"), (8, "bob")]);
        store.attach(&mut snap);
        assert_eq!(snap.running[0].progress, Some(reading(now)));
        assert_eq!(snap.running[1].progress, None);
        // Job 7 ended: its reading goes with it.
        store.observe(&snapshot_running(&[(8, "bob")]));
        assert!(store.is_empty());
    }

    /// What the watchers read of ended one-GPU jobs that name their application becomes the
    /// site's sharing table: the largest peak and average busy share per application and batch.
    #[test]
    fn ended_one_gpu_jobs_readings_make_the_sharing_table() {
        let mut store = ProgressStore::default();
        let mut snap = snapshot_running(&[(7, "ann"), (8, "ann"), (9, "ann")]);
        let hinted = |comment: &str| Hints::from_comment(Some(comment));
        snap.running[0].gpus = 1;
        snap.running[0].hints = hinted("cinch:app=bert,batch=32");
        snap.running[1].gpus = 2;
        snap.running[1].hints = hinted("cinch:app=bert,batch=32");
        snap.running[2].gpus = 1;
        store.observe(&snap);
        let reading = |busy, mib| WatchReport {
            progress: None,
            gpu: Some(GpuUse {
                gpus: 1,
                busy_percent: busy,
                memory_mib: mib,
            }),
        };
        let now = 10_000;
        for (busy, mib) in [(40, 6_000), (60, 7_168), (50, 5_000)] {
            for job in [7, 8, 9] {
                store.report(job, &ann(), reading(busy, mib), now).unwrap();
            }
        }
        assert_eq!(store.table.jobs(), 0, "still running");
        // What the plugin is told while they run: each one-GPU job once, then only what grew.
        let told = store.observed();
        assert_eq!(
            told.iter()
                .map(|o| (o.job_id, o.peak_mib, o.busy_percent))
                .collect::<Vec<_>>(),
            [(7, 7_168, 50), (9, 7_168, 50)]
        );
        assert!(store.observed().is_empty());
        store
            .report(7, &ann(), reading(90, 9_000), now + 60)
            .unwrap();
        assert_eq!(store.observed().len(), 1);
        store.observe(&snapshot_running(&[]));
        let table = store.table.table();
        assert_eq!(table.jobs, 1, "one GPU and an app= hint: job 7 only");
        let lines = table.conf_lines();
        assert!(lines.contains("ShareModelMemory=bert:32=8.8G"), "{lines}");
        assert!(lines.contains("ShareModelBusy=bert:32=60%"), "{lines}");
    }

    #[test]
    fn readings_of_others_jobs_of_jobs_not_running_or_that_make_no_sense_change_nothing() {
        let mut store = ProgressStore::default();
        store.observe(&snapshot_running(&[(7, "ann"), (8, "bob")]));
        let now = 10_000;
        assert_eq!(
            store.report(8, &ann(), with(reading(now)), now),
            Err(ReportError::NotTheirs(8, "ann".into()))
        );
        assert_eq!(
            store.report(9, &ann(), with(reading(now)), now),
            Err(ReportError::NotRunning(9))
        );
        let mut backwards = reading(now);
        backwards.since_done = 500;
        for bad in [backwards, reading(now + 1_000), reading(now - 7_200)] {
            assert!(
                matches!(
                    store.report(7, &ann(), with(bad), now),
                    Err(ReportError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        assert!(store.is_empty());
        // Root and the admin may report on any running job.
        let root = Asker::User(MungeUser {
            name: "root".into(),
            uid: 0,
        });
        assert_eq!(store.report(8, &root, with(reading(now)), now), Ok(()));
        assert_eq!(
            store.report(7, &Asker::Admin, with(reading(now)), now),
            Ok(())
        );
        assert_eq!(store.len(), 2);
        // GPU use alone keeps the last progress; nonsense and empty reports change nothing.
        let gpu = GpuUse {
            gpus: 2,
            busy_percent: 3,
            memory_mib: 1024,
        };
        let only_gpu = WatchReport {
            progress: None,
            gpu: Some(gpu),
        };
        assert_eq!(store.report(7, &ann(), only_gpu, now + 60), Ok(()));
        let kept = store.get(7).unwrap().1;
        assert_eq!(kept.progress, Some(reading(now)));
        assert_eq!(kept.gpu, Some((now + 60, gpu)));
        let over = WatchReport {
            progress: None,
            gpu: Some(GpuUse {
                busy_percent: 101,
                ..gpu
            }),
        };
        assert!(matches!(
            store.report(7, &ann(), over, now),
            Err(ReportError::Invalid(_))
        ));
        assert!(matches!(
            store.report(7, &ann(), WatchReport::default(), now),
            Err(ReportError::Invalid(_))
        ));
        assert_eq!(store.get(7).unwrap().1, kept);
    }
}
