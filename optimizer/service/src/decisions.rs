//! `GET /v1/decisions`: the most recent decisions with their reasons, newest first.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{AdminToken, AppError, AppState};
use cinch_core::policy::Mode;
use cinch_core::wire::decision::Decision;

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

/// A bounded ring of recent decisions, the oldest going first when it is full. A decision the
/// same as the job's last one (its renewal, each round) is not recorded again: the log holds
/// changes. A delay that only moves later, the rest unchanged, is the same wait going on (a job
/// looked at again each round is delayed to the next look each round): it is not recorded
/// again either, but the job's latest record in memory takes the new time, so `cinch why`
/// tells the current one. With a file, every recorded decision is appended to it as a JSON line and the log
/// is read back from it at start, so it outlives restarts; the file is rewritten to the ring
/// once it holds twice the capacity.
pub struct DecisionLog {
    capacity: usize,
    file: Option<PathBuf>,
    inner: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    /// Each record with its sequence number.
    records: VecDeque<(u64, DecisionRecord)>,
    /// Each job's latest recorded decision and its sequence number.
    latest: HashMap<u32, (u64, Decision)>,
    next: u64,
    /// Lines in the file (recorded since it was last rewritten, plus those it was rewritten with).
    file_lines: usize,
}

/// Whether `b` asks for the same as `a`, their time to live aside and a delay that only moved
/// later: a renewal differs from the job's last decision only in those. (Every field named, so
/// a new one is not forgotten.)
fn same_action(a: &Decision, b: &Decision) -> bool {
    let Decision {
        job_id,
        pin_nodes,
        node_count,
        delay_until,
        hold,
        priority,
        nice,
        requeue,
        gpus,
        idle,
        reason,
        ttl_s: _,
    } = a;
    *job_id == b.job_id
        && *pin_nodes == b.pin_nodes
        && *node_count == b.node_count
        && match (*delay_until, b.delay_until) {
            (Some(was), Some(now)) => now >= was,
            (was, now) => was == now,
        }
        && *hold == b.hold
        && *priority == b.priority
        && *nice == b.nice
        && *requeue == b.requeue
        && *gpus == b.gpus
        && *idle == b.idle
        && *reason == b.reason
}

impl Ring {
    /// Whether `record` only renews its job's latest decision.
    fn renews(&self, record: &DecisionRecord) -> bool {
        self.latest
            .get(&record.decision.job_id)
            .is_some_and(|(_, last)| same_action(last, &record.decision))
    }

    /// Takes a renewal's delay into its job's latest record (in memory): a wait that goes on
    /// is told with its current time.
    fn renew(&mut self, record: &DecisionRecord) {
        let Some((seq, last)) = self.latest.get_mut(&record.decision.job_id) else {
            return;
        };
        if last.delay_until == record.decision.delay_until {
            return;
        }
        last.delay_until = record.decision.delay_until;
        let first = self.records.front().map_or(0, |(s, _)| *s);
        if let Some((_, kept)) = seq
            .checked_sub(first)
            .and_then(|i| self.records.get_mut(i as usize))
        {
            kept.decision.delay_until = record.decision.delay_until;
        }
    }

    /// Records `record`, the oldest going first when the ring is full.
    fn push(&mut self, capacity: usize, record: DecisionRecord) {
        if self.records.len() == capacity {
            if let Some((seq, old)) = self.records.pop_front() {
                let id = old.decision.job_id;
                if self.latest.get(&id).is_some_and(|(s, _)| *s == seq) {
                    self.latest.remove(&id);
                }
            }
        }
        let seq = self.next;
        self.next += 1;
        self.latest
            .insert(record.decision.job_id, (seq, record.decision.clone()));
        self.records.push_back((seq, record));
    }
}

impl DecisionLog {
    /// A log in memory only.
    pub fn new(capacity: usize) -> Self {
        DecisionLog {
            capacity,
            file: None,
            inner: Mutex::new(Ring::default()),
        }
    }

    /// A log kept in `path` too, read back from it (lines that do not parse are skipped and
    /// counted in the second value).
    pub fn open(path: PathBuf, capacity: usize) -> std::io::Result<(Self, usize)> {
        let mut ring = Ring::default();
        let mut skipped = 0;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    ring.file_lines += 1;
                    match serde_json::from_str::<DecisionRecord>(line) {
                        Ok(record) if capacity > 0 && !ring.renews(&record) => {
                            ring.push(capacity, record);
                        }
                        Ok(_) => {}
                        Err(_) => skipped += 1,
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // A log an earlier cinch wrote readable by all is made private.
        if let Ok(meta) = std::fs::metadata(&path) {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
        }
        Ok((
            DecisionLog {
                capacity,
                file: Some(path),
                inner: Mutex::new(ring),
            },
            skipped,
        ))
    }

    pub fn extend(&self, new: impl IntoIterator<Item = DecisionRecord>) {
        if self.capacity == 0 {
            return;
        }
        let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = String::new();
        for record in new {
            if ring.renews(&record) {
                ring.renew(&record);
                continue;
            }
            if let Some(line) = self
                .file
                .as_ref()
                .and_then(|_| serde_json::to_string(&record).ok())
            {
                lines.push_str(&line);
                lines.push('\n');
                ring.file_lines += 1;
            }
            ring.push(self.capacity, record);
        }
        if let (Some(path), false) = (&self.file, lines.is_empty()) {
            if let Err(e) = self.write(path, &mut ring, &lines) {
                // The log in memory goes on; the file catches up at its next rewrite.
                tracing::warn!(path = %path.display(), error = %e, "could not write the decision log");
            }
        }
    }

    /// Appends `lines`, or rewrites the file with the ring once it is twice the capacity.
    fn write(&self, path: &Path, ring: &mut Ring, lines: &str) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // Private: the log holds users' job names, comments and the reasons about their jobs.
        if ring.file_lines <= 2 * self.capacity {
            return std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)?
                .write_all(lines.as_bytes());
        }
        let mut text = String::new();
        for (_, record) in &ring.records {
            if let Ok(line) = serde_json::to_string(record) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        let tmp = path.with_extension("jsonl.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?
            .write_all(text.as_bytes())?;
        std::fs::rename(&tmp, path)?;
        ring.file_lines = ring.records.len();
        Ok(())
    }

    /// Newest first, filtered.
    pub fn query(
        &self,
        job_id: Option<u32>,
        user: Option<&str>,
        limit: usize,
    ) -> Vec<DecisionRecord> {
        let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        ring.records
            .iter()
            .rev()
            .map(|(_, r)| r)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(time: i64, job: u32, priority: u32, ttl_s: u32) -> DecisionRecord {
        DecisionRecord {
            time,
            policy: "cinch".into(),
            mode: Mode::Enforce,
            user: "ann".into(),
            decision: Decision {
                priority: Some(priority),
                ..Decision::explain(job, "shorter first", ttl_s)
            },
        }
    }

    #[test]
    fn a_delay_that_only_moves_later_is_the_same_wait_and_why_tells_its_current_time() {
        let delayed = |time: i64, until: i64, reason: &str| DecisionRecord {
            time,
            policy: "cinch".into(),
            mode: Mode::Enforce,
            user: "ann".into(),
            decision: Decision {
                delay_until: Some(until),
                ..Decision::explain(7, reason, 300)
            },
        };
        let log = DecisionLog::new(10);
        // Looked at again each round: delayed to the next look each time.
        for t in [0, 5, 10, 15] {
            log.extend([delayed(t, t + 60, "waits for its shape")]);
        }
        let kept = log.query(Some(7), None, 10);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].time, 0, "recorded once, when the wait began");
        assert_eq!(
            kept[0].decision.delay_until,
            Some(75),
            "with the current delay"
        );
        // Sooner, or for another reason, is a new decision.
        log.extend([delayed(20, 40, "waits for its shape")]);
        log.extend([delayed(25, 85, "waits for a reservation")]);
        let times: Vec<i64> = log
            .query(Some(7), None, 10)
            .iter()
            .map(|r| r.time)
            .collect();
        assert_eq!(times, [25, 20, 0]);
        // A delay dropped is a change too.
        log.extend([record(30, 7, 5, 300)]);
        assert_eq!(log.query(Some(7), None, 10).len(), 4);
    }

    #[test]
    fn renewals_are_not_recorded_again_and_the_log_outlives_a_restart() {
        let dir = std::env::temp_dir().join(format!("cinch-decisions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decisions.jsonl");
        let (log, skipped) = DecisionLog::open(path.clone(), 3).unwrap();
        assert_eq!(skipped, 0);
        // Job 1 decided, renewed twice (one with another TTL), then changed.
        log.extend([record(0, 1, 5, 300), record(0, 2, 4, 300)]);
        log.extend([record(5, 1, 5, 300), record(5, 2, 4, 300)]);
        log.extend([record(10, 1, 5, 60)]);
        log.extend([record(15, 1, 9, 300)]);
        let times: Vec<(i64, u32)> = log
            .query(None, None, 10)
            .iter()
            .map(|r| (r.time, r.decision.job_id))
            .collect();
        assert_eq!(times, [(15, 1), (0, 2), (0, 1)]);
        // Read back after a restart: the same log, and renewals still recognised.
        let (again, skipped) = DecisionLog::open(path.clone(), 3).unwrap();
        assert_eq!(skipped, 0);
        assert_eq!(again.query(None, None, 10).len(), 3);
        again.extend([record(20, 1, 9, 300)]);
        assert_eq!(again.query(Some(1), None, 10).len(), 2);
        // Bounded: past twice the capacity the file is rewritten to the ring.
        for t in 0..10 {
            again.extend([record(30 + t, 3, t as u32, 300)]);
        }
        assert_eq!(again.query(None, None, 10).len(), 3);
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 6, "{lines} lines");
        // Private, rewritten or appended to: it holds users' job names and comments.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        // A damaged line is skipped and said; a log left readable by all is made private.
        std::fs::write(&path, "not json\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, skipped) = DecisionLog::open(path.clone(), 3).unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(mode(&path), 0o600);
        let fresh = dir.join("fresh.jsonl");
        let (log, _) = DecisionLog::open(fresh.clone(), 3).unwrap();
        log.extend([record(0, 1, 5, 300)]);
        assert_eq!(mode(&fresh), 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
