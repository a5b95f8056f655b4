//! `cinch why JOBID`: what cinch decided about a job and why, for its user.
//!
//! It reads only what Slurm shows the caller (`scontrol show job`): cinch's record of the request
//! and its current decision live in the job's AdminComment, which users cannot set but can read
//! for their own jobs. So it needs no token and gives nobody more than Slurm already does: a
//! site's `PrivateData=jobs` hides other users' jobs here exactly as in `squeue`.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};

use cinch_core::enact::admin_comment::{
    parse_applied, parse_past, parse_since, segment, Past, DECISION_PREFIX, IDLE_PREFIX,
    PAST_PREFIX, RECORD_PREFIX,
};
use cinch_core::slurm::scontrol::parse_show_job;

/// Unix seconds as Slurm prints a time: `YYYY-MM-DDTHH:MM:SS` in this host's local time.
pub fn local_time(unix_s: i64) -> String {
    // SAFETY: localtime_r fills the struct we own from a time we own; it is thread-safe.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let t: libc::time_t = unix_s as libc::time_t;
        if libc::localtime_r(&t, &mut tm).is_null() {
            return unix_s.to_string();
        }
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

/// The explanation of one job, from its `scontrol show job` fields; `now` for "in N min".
pub fn explain(job: &BTreeMap<String, String>, now: i64) -> String {
    let get = |key: &str| job.get(key).map(String::as_str).unwrap_or("");
    let mut out = format!(
        "Job {} ({}), user {}: {}",
        get("JobId"),
        get("JobName"),
        get("UserId"),
        get("JobState")
    );
    if !get("Reason").is_empty() && get("Reason") != "None" {
        out.push_str(&format!(", Slurm's reason: {}", get("Reason")));
    }
    out.push('\n');
    let admin = job.get("AdminComment").map(String::as_str);
    let Some(record) = segment(admin, RECORD_PREFIX) else {
        out.push_str(
            "cinch has no record of this job: it was submitted while cinch was off or not \
             installed, and is left to Slurm.\n",
        );
        return out;
    };
    let words: BTreeMap<&str, &str> = record
        .trim_start_matches(RECORD_PREFIX)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let mut seen = format!(
        "At submission cinch saw: {} GPUs",
        words.get("gpus").unwrap_or(&"?")
    );
    if let Some(spec) = words.get("gpu_spec") {
        seen.push_str(&format!(" ({spec})"));
    }
    if let Some(n) = words.get("nodes") {
        seen.push_str(&format!(", {n} node(s)"));
    }
    if let Some(limit) = words.get("time_limit").and_then(|m| m.parse::<i64>().ok()) {
        seen.push_str(&format!(
            ", time limit {}",
            cinch_core::slurm::slurm_time::format_duration(60 * limit)
        ));
    }
    if words.contains_key("requeue") {
        seen.push_str(", requeue allowed (--requeue)");
    }
    out.push_str(&seen);
    out.push_str(".\n");
    match words.get("share") {
        Some(&"whole") => out.push_str("GPU sharing: asked for, but the job keeps a whole GPU"),
        Some(place) => out.push_str(&format!("GPU sharing: runs on shards: {place}")),
        None => {}
    }
    if let Some(share) = words.get("share") {
        if let (Some(gib), Some(src)) = (words.get("gpu_mem_pred"), words.get("gpu_mem_src")) {
            out.push_str(&format!(" (predicted peak {gib}, {src})"));
        } else if *share == "whole" {
            out.push_str(" (no peak GPU memory known)");
        }
        out.push_str(".\n");
    }
    if let Some(idle) = segment(admin, IDLE_PREFIX) {
        out.push_str(&format!(
            "cinch's warning: {}.\n",
            idle.trim_start_matches(IDLE_PREFIX).trim()
        ));
    }
    let past = segment(admin, PAST_PREFIX).and_then(parse_past);
    let decision = segment(admin, DECISION_PREFIX);
    let Some(applied) = decision.and_then(parse_applied) else {
        match &past {
            Some(past) => {
                out.push_str(&past_in_words(past));
                out.push_str("Slurm schedules it as submitted now.\n");
            }
            None => {
                out.push_str("cinch has not changed this job: Slurm schedules it as submitted.\n")
            }
        }
        return out;
    };
    let since = decision
        .and_then(parse_since)
        .map(|t| format!(" since {}", local_time(t)))
        .unwrap_or_default();
    let in_min = |t: i64| {
        let m = (t - now) / 60;
        if m >= 1 {
            format!("{} (in {m} min)", local_time(t))
        } else {
            local_time(t)
        }
    };
    // Only a pending job is still being decided about; for one that started or ended, the
    // record is what cinch had decided while it waited.
    let waiting = matches!(get("JobState"), "" | "PENDING");
    // A decision past its expiry but still on record has been renewed since: renewals live in
    // slurmctld's memory, and the record is rewritten only when the action changes.
    let renewed_since = waiting && applied.until < now;
    out.push_str(&if waiting {
        format!("What cinch has changed{since}, and keeps while its rounds renew it:\n")
    } else {
        format!("What cinch had changed{since} while it waited (Slurm started it so):\n")
    });
    if let Some(pin) = &applied.pin {
        out.push_str(&format!("  - runs on exactly {}", pin.join(",")));
        if let Some(n) = applied.nodes_was {
            out.push_str(&format!(" (asked for {n} node(s))"));
        }
        out.push('\n');
    }
    if let Some(begin) = applied.begin {
        out.push_str(&format!("  - may not start before {}\n", in_min(begin)));
    }
    if applied.hold {
        out.push_str("  - held\n");
    }
    if let Some(p) = applied.prio {
        out.push_str(&format!("  - priority set to {p}\n"));
    }
    if let Some((was, ours)) = applied.nice {
        // cinch expresses its order as a raise on top of Slurm's own priority.
        if ours < was {
            out.push_str(&format!(
                "  - priority raised by {} on top of Slurm's own (nice {ours}, was {was})\n",
                was - ours
            ));
        } else {
            out.push_str(&format!("  - nice {ours} (was {was})\n"));
        }
    }
    if let Some((was, ours)) = applied.gpus {
        out.push_str(&format!("  - runs on {ours} GPUs (asked for {was})\n"));
    }
    if !applied.why.is_empty() {
        let when = if !waiting {
            " (its last decision while it waited)"
        } else if renewed_since {
            " (as decided when this record was written; later rounds may word it otherwise)"
        } else {
            ""
        };
        out.push_str(&format!("Why{when}: {}\n", applied.why));
    }
    if renewed_since {
        out.push_str(&format!(
            "cinch has renewed this since {}: its rounds keep it in force and rewrite this record \
             only when the action changes. If cinch stops, Slurm's own settings come back within \
             a few minutes.\n",
            local_time(applied.until)
        ));
    } else if waiting {
        out.push_str(&format!(
            "Unless renewed, cinch undoes this at {}.\n",
            in_min(applied.until)
        ));
    }
    if let Some(past) = &past {
        out.push_str(&format!("Before that: {}", past_in_words(past)));
    }
    out
}

/// What cinch did to a job and stopped doing, in words.
fn past_in_words(past: &Past) -> String {
    let did: Vec<&str> = past
        .did
        .iter()
        .map(|kind| match kind.as_str() {
            "pin" => "chose its nodes",
            "delay" => "delayed its start",
            "hold" => "held it",
            "priority" => "set its priority",
            "nice" => "changed its nice value",
            "gpus" => "changed its GPU count",
            other => other,
        })
        .collect();
    let from = past
        .since
        .map(|t| format!(" from {}", local_time(t)))
        .unwrap_or_default();
    let mut out = format!(
        "cinch {}{from} until {}, and stopped: {}.\n",
        join_words(&did),
        local_time(past.stopped),
        past.because
    );
    if !past.why.is_empty() {
        out.push_str(&format!("  Its last reason then: {}\n", past.why));
    }
    out
}

/// `a`, `a and b`, `a, b and c`.
fn join_words(words: &[&str]) -> String {
    match words {
        [] => "changed it".to_string(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// A finished job's fields as `sacct` has them (`JobID|JobName|User|State|Reason|AdminComment`,
/// one line, `-X -n -P`), named as `scontrol show job` names them; `None` for no job.
pub fn fields_from_sacct(line: &str) -> Option<BTreeMap<String, String>> {
    let line = line.lines().find(|l| !l.trim().is_empty())?;
    // The AdminComment comes last: it may hold `|` itself (cinch's segments are joined by it).
    let parts: Vec<&str> = line.splitn(6, '|').collect();
    let [id, name, user, state, reason, admin] = parts[..] else {
        return None;
    };
    // sacct writes `CANCELLED by 1000`; Slurm's state is the first word.
    let state = state.split_whitespace().next().unwrap_or("");
    let mut fields: BTreeMap<String, String> = [
        ("JobId", id),
        ("JobName", name),
        ("UserId", user),
        ("JobState", state),
        ("Reason", reason),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if !admin.is_empty() {
        fields.insert("AdminComment".into(), admin.to_string());
    }
    Some(fields)
}

/// The job as `sacct` has it, for a job slurmctld no longer holds (it keeps ended jobs for
/// `MinJobAge`, 300 s by default).
fn from_accounting(job_id: &str) -> Result<BTreeMap<String, String>> {
    let out = Command::new("sacct")
        .args(["-j", job_id, "-X", "-n", "-P"])
        .args(["--format=JobID,JobName,User,State,Reason,AdminComment"])
        .output()
        .context("running sacct")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match fields_from_sacct(&text) {
        Some(fields) if out.status.success() => Ok(fields),
        _ => bail!(
            "sacct -j {job_id}: {}",
            match String::from_utf8_lossy(&out.stderr).trim() {
                "" => "no such job in Slurm's accounting".to_string(),
                err => err.to_string(),
            }
        ),
    }
}

/// A MUNGE credential proving the caller to the optimizer, for its latest decision about
/// `job_id`: made with the munged Slurm authenticates through (`AuthInfo=socket=`), so it works
/// wherever `sbatch` does.
pub fn munge_credential(job_id: u32) -> Result<String> {
    let config = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .context("running scontrol show config")?;
    let socket =
        cinch_core::slurm::scontrol::munge_socket(&String::from_utf8_lossy(&config.stdout));
    let mut munge = Command::new("munge");
    if let Some(socket) = &socket {
        munge.arg(format!("--socket={socket}"));
    }
    let out = munge
        .args(["-s", &cinch_service::job_decision::why_payload(job_id)])
        .output()
        .context("running munge")?;
    if !out.status.success() {
        bail!("munge: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// How busy a running job's GPUs were, as its watcher last reported (a `GET
/// /v1/jobs/{id}/progress` answer), in words; `None` without a GPU report.
pub fn gpu_in_words(answer: &serde_json::Value) -> Option<String> {
    let g = &answer["gpu"];
    let (gpus, busy, memory) = (
        g["gpus"].as_u64()?,
        g["busy_percent"].as_u64()?,
        g["memory_mib"].as_u64()?,
    );
    let at = answer["gpu_at"].as_i64().map_or("?".into(), local_time);
    Some(format!(
        "Its GPUs, as the driver showed them to cinch-watch (reported at {at}): {}, {busy}% busy \
         on average over the watcher's last interval, {:.1} GiB of GPU memory in use.",
        cinch_core::util::words::gpus(gpus),
        memory as f64 / 1024.0
    ))
}

/// What a running job's watcher last read of its progress (a `GET /v1/jobs/{id}/progress`
/// answer), in words; `None` for an answer that is not one.
pub fn progress_in_words(answer: &serde_json::Value) -> Option<String> {
    let p = &answer["progress"];
    let (done, total, at) = (p["done"].as_u64()?, p["total"].as_u64()?, p["at"].as_i64()?);
    let (since_done, since) = (p["since_done"].as_u64()?, p["since"].as_i64()?);
    let share = 100.0 * done as f64 / total.max(1) as f64;
    let mut text = format!(
        "Its progress, as its output shows it (read by cinch-watch at {}): {done} of {total} \
         steps ({share:.0}%)",
        local_time(at)
    );
    match answer["left_s"].as_i64() {
        Some(left) => text.push_str(&format!(
            ", about {} left at the rate of its last {}.",
            cinch_core::slurm::slurm_time::format_duration(left),
            cinch_core::slurm::slurm_time::format_duration(at - since)
        )),
        None if done == since_done => text.push_str(": no step since the reading before."),
        None => text.push_str(": too early, or past the end it gave, to say when it ends."),
    }
    Some(text)
}

/// The optimizer's latest recorded decision about a job (a `GET /v1/jobs/{id}/decision`
/// record), in words: when it was made and why. The log records changes, not renewals, so for a
/// pending job this is what every round since has decided too; a job that has left the queue is
/// no longer decided about, so for it this is the last word before it did.
pub fn latest(record: &serde_json::Value, job_state: &str) -> String {
    let d = &record["decision"];
    let when = record["time"].as_i64().map_or("?".into(), local_time);
    let made_in = record["mode"].as_str().unwrap_or("?");
    let mode_now = record["mode_now"].as_str();
    let mode_since = record["mode_since"].as_i64().map_or("?".into(), local_time);
    let since = match mode_now {
        _ if job_state != "PENDING" => {
            format!("its last while the job was queued (it is {job_state} now)")
        }
        // The optimizer decides nothing in mode off: this is history, not what holds now.
        Some("off") => format!(
            "its last: the optimizer has decided nothing since its mode was set off at \
             {mode_since}"
        ),
        Some(now) if now != made_in => format!(
            "renewed by every round since; the mode has been {now} since {mode_since}{}",
            if now == "shadow" {
                ", so cinch applies none of it"
            } else {
                ""
            }
        ),
        _ => "renewed unchanged by every round since".to_string(),
    };
    let mut out = format!(
        "The optimizer's latest decision ({} policy, {made_in} mode), made at {when}, {since}:\n",
        record["policy"].as_str().unwrap_or("?"),
    );
    if let Some(reason) = d["reason"].as_str().filter(|r| !r.is_empty()) {
        out.push_str(&format!("  {reason}\n"));
    }
    out
}

/// Runs `scontrol show job JOBID` and explains it, with the optimizer's latest decision about
/// it where the caller could get it.
pub fn run(
    job_id: &str,
    json: bool,
    latest_decision: Option<serde_json::Value>,
    progress: Option<serde_json::Value>,
) -> Result<()> {
    if job_id.is_empty() || !job_id.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        bail!("'{job_id}' is not a job id (e.g. 1234, or 1234_5 for an array task)");
    }
    let out = Command::new("scontrol")
        .args(["show", "job", job_id])
        .output()
        .context("running scontrol (is Slurm's client installed and SLURM_CONF set?)")?;
    let (fields, from_sacct) = if out.status.success() {
        (parse_show_job(&String::from_utf8_lossy(&out.stdout)), false)
    } else {
        // Gone from slurmctld (ended more than MinJobAge ago): Slurm's accounting, if kept.
        let scontrol = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match from_accounting(job_id) {
            Ok(fields) => (fields, true),
            Err(sacct) => bail!("scontrol show job {job_id}: {scontrol}; {sacct:#}"),
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if json {
        let admin = fields.get("AdminComment").map(String::as_str);
        let applied = segment(admin, DECISION_PREFIX).and_then(parse_applied);
        let value = serde_json::json!({
            "job_id": fields.get("JobId"),
            "state": fields.get("JobState"),
            "reason": fields.get("Reason"),
            "record": segment(admin, RECORD_PREFIX),
            "decision": applied.map(|a| serde_json::json!({
                "pin": a.pin.as_deref(),
                "nodes_was": a.nodes_was,
                "max_nodes_was": a.max_nodes_was,
                "begin": a.begin.map(local_time),
                "hold": a.hold,
                "priority": a.prio,
                "nice": a.nice.map(|(_, n)| n),
                "gpus": a.gpus.map(|(_, n)| n),
                "until": local_time(a.until),
                "why": &*a.why,
            })),
            "past": segment(admin, PAST_PREFIX).and_then(parse_past).map(|p| serde_json::json!({
                "did": p.did,
                "since": p.since.map(local_time),
                "stopped": local_time(p.stopped),
                "because": p.because,
                "why": p.why,
            })),
            "idle_warning": segment(admin, IDLE_PREFIX)
                .map(|w| w.trim_start_matches(IDLE_PREFIX).trim()),
            "latest": latest_decision,
            "progress": progress,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if from_sacct {
            println!("(from Slurm's accounting: the job has left slurmctld)");
        }
        print!("{}", explain(&fields, now));
        if let Some(record) = &latest_decision {
            let state = fields.get("JobState").map_or("", String::as_str);
            print!("{}", latest(record, state));
        }
        if let Some(answer) = &progress {
            for line in progress_in_words(answer)
                .into_iter()
                .chain(gpu_in_words(answer))
            {
                println!("{line}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOWN: &str = "JobId=42 JobName=train\n   UserId=ann(1000) GroupId=ann(1000)\n   \
        JobState=PENDING Reason=BeginTime Dependency=(null)\n   \
        AdminComment=site note | cinch: gpus=8 gpu_spec=per_job:8 nodes=1 time_limit=120 requeue=yes | \
        cinch-decision: pin=n1,n2 nodes_was=1 begin=2026-11-24T18:00:00Z until=2026-11-24T18:05:00Z \
        why=waits: needs 8 GPUs in one rack, 4 free\n   Comment=cinch:app=bert\n";

    #[test]
    fn explains_the_record_and_the_decision_in_words() {
        let text = explain(&parse_show_job(SHOWN), 1_795_542_000);
        assert!(
            text.starts_with("Job 42 (train), user ann(1000): PENDING, Slurm's reason: BeginTime"),
            "{text}"
        );
        assert!(
            text.contains("8 GPUs (per_job:8), 1 node(s), time limit 02:00:00, requeue allowed"),
            "{text}"
        );
        assert!(
            text.contains("runs on exactly n1,n2 (asked for 1 node(s))"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "may not start before {} (in 20 min)",
                local_time(1_795_543_200)
            )),
            "{text}"
        );
        assert!(
            text.contains("Why: waits: needs 8 GPUs in one rack, 4 free"),
            "{text}"
        );
    }

    #[test]
    fn tells_the_idle_gpu_warning_on_the_jobs_record() {
        let text = explain(
            &parse_show_job(
                "JobId=7 JobName=x\n JobState=RUNNING Reason=None\n   AdminComment=cinch: gpus=1 \
                 | cinch-idle: its GPUs have been idle since 2026-11-29T09:00:00Z (0% busy, under \
                 the site's 5%); it will be requeued at 2026-11-29T11:30:00Z unless they get busy\n",
            ),
            0,
        );
        assert!(
            text.contains("cinch's warning: its GPUs have been idle since 2026-11-29T09:00:00Z"),
            "{text}"
        );
    }

    #[test]
    fn says_when_cinch_never_saw_or_never_changed_the_job() {
        let text = explain(
            &parse_show_job("JobId=7 JobName=x\n JobState=RUNNING Reason=None\n"),
            0,
        );
        assert!(text.contains("no record of this job"), "{text}");
        let text = explain(
            &parse_show_job("JobId=7\n   AdminComment=cinch: gpus=1 gpu_spec=per_job:1 share=whole gpu_mem_pred=75.0G gpu_mem_src=stated\n"),
            0,
        );
        assert!(
            text.contains("keeps a whole GPU (predicted peak 75.0G, stated)"),
            "{text}"
        );
        assert!(text.contains("Slurm schedules it as submitted"), "{text}");
    }

    #[test]
    fn what_cinch_did_is_told_after_it_stopped_whatever_the_mode_now() {
        let shown = "JobId=14 JobName=later\n   JobState=PENDING Reason=Priority\n   \
            AdminComment=cinch: gpus=1 gpu_spec=per_job:1 | cinch-past: did=delay,priority \
            since=2026-11-24T17:00:00Z stopped=2026-11-24T17:01:00Z because=cinch's mode is off \
            now: it changes no job why=waits for a reservation\n";
        let text = explain(&parse_show_job(shown), 1_795_543_200);
        assert!(
            text.contains(&format!(
                "cinch delayed its start and set its priority from {} until {}, and stopped: \
                 cinch's mode is off now: it changes no job.\n  Its last reason then: waits for \
                 a reservation\nSlurm schedules it as submitted now.",
                local_time(1_795_539_600),
                local_time(1_795_539_660)
            )),
            "{text}"
        );
        assert!(!text.contains("has not changed"), "{text}");
        // Changing it again: the current decision since when, and the past after it.
        let again = shown.replace(
            " | cinch-past:",
            " | cinch-decision: prio=7 since=2026-11-24T17:30:00Z until=2026-11-24T18:05:00Z \
             why=shorter first | cinch-past:",
        );
        let text = explain(&parse_show_job(&again), 1_795_543_200);
        assert!(
            text.contains(&format!(
                "What cinch has changed since {}, and keeps",
                local_time(1_795_541_400)
            )) && text.contains("Before that: cinch delayed its start"),
            "{text}"
        );
    }

    #[test]
    fn a_started_or_renewed_job_is_not_told_an_expiry_that_no_longer_applies() {
        // Past its record's expiry and still pending: renewed since, said so.
        let late = explain(&parse_show_job(SHOWN), 1_795_544_000);
        assert!(late.contains("cinch has renewed this since"), "{late}");
        assert!(!late.contains("Unless renewed"), "{late}");
        assert!(
            late.contains("Why (as decided when this record was written"),
            "{late}"
        );
        // Running: what cinch had decided while it waited, no renewal, no expiry.
        let running = SHOWN.replace(
            "JobState=PENDING Reason=BeginTime",
            "JobState=RUNNING Reason=None",
        );
        let text = explain(&parse_show_job(&running), 1_795_542_000);
        assert!(
            text.contains("What cinch had changed while it waited"),
            "{text}"
        );
        assert!(!text.contains("renew"), "{text}");
        assert!(
            text.contains("Why (its last decision while it waited): waits"),
            "{text}"
        );
    }

    #[test]
    fn a_finished_job_is_read_from_sacct() {
        let line =
            "42|train|ann|CANCELLED by 1000|None|site note | cinch: gpus=8 gpu_spec=per_job:8 | \
                    cinch-decision: prio=7 until=2026-11-24T18:05:00Z why=shorter first\n";
        let fields = fields_from_sacct(line).unwrap();
        assert_eq!(fields["JobState"], "CANCELLED");
        assert_eq!(fields["UserId"], "ann");
        let text = explain(&fields, 0);
        assert!(text.contains("At submission cinch saw: 8 GPUs"), "{text}");
        assert!(text.contains("priority set to 7"), "{text}");
        assert!(
            text.contains("Why (its last decision while it waited): shorter first"),
            "{text}"
        );
        // cinch's default: a raise on top of Slurm's own priority, said as one.
        let raised = line.replace("prio=7", "nice_was=0 nice=-4200");
        let text = explain(&fields_from_sacct(&raised).unwrap(), 0);
        assert!(
            text.contains("priority raised by 4200 on top of Slurm's own (nice -4200, was 0)"),
            "{text}"
        );
        assert!(fields_from_sacct("").is_none());
        assert!(fields_from_sacct("42|x").is_none());
    }

    #[test]
    fn the_optimizers_latest_decision_is_told_with_its_time_and_reason() {
        let record = serde_json::json!({
            "time": 1_795_542_000, "policy": "cinch", "mode": "enforce", "user": "ann",
            "decision": {"job_id": 42, "nice": -4000, "reason": "Slurm's priority 60000 with \
                cinch's nice -4000 puts it at 64000; consolidated", "ttl_s": 300},
        });
        let text = latest(&record, "PENDING");
        assert!(
            text.starts_with(&format!(
                "The optimizer's latest decision (cinch policy, enforce mode), made at {}",
                local_time(1_795_542_000)
            )),
            "{text}"
        );
        assert!(
            text.contains("\n  Slurm's priority 60000 with cinch's nice -4000"),
            "{text}"
        );
        assert!(
            text.contains("renewed unchanged by every round since"),
            "{text}"
        );
        // A job that has left the queue is no longer decided about.
        let text = latest(&record, "RUNNING");
        assert!(
            text.contains("its last while the job was queued (it is RUNNING now)"),
            "{text}"
        );
        assert!(!text.contains("renewed"), "{text}");
        // Set off since: history, not what holds now; shadow: decided, not applied.
        let mut off = record.clone();
        off["mode_now"] = "off".into();
        off["mode_since"] = 1_795_542_060.into();
        let text = latest(&off, "PENDING");
        assert!(
            text.contains(&format!(
                "its last: the optimizer has decided nothing since its mode was set off at {}",
                local_time(1_795_542_060)
            )) && !text.contains("renewed"),
            "{text}"
        );
        off["mode_now"] = "shadow".into();
        let text = latest(&off, "PENDING");
        assert!(
            text.contains("the mode has been shadow since") && text.contains("applies none"),
            "{text}"
        );
    }

    #[test]
    fn a_watchers_reading_is_told_with_what_is_left() {
        let answer = serde_json::json!({
            "job_id": 7, "user": "ann", "now": 1_000_100, "left_s": 400,
            "progress": {"total": 1000, "done": 600, "at": 1_000_000,
                         "since_done": 500, "since": 999_400},
        });
        let told = progress_in_words(&answer).unwrap();
        assert!(
            told.contains(
                ": 600 of 1000 steps (60%), about 00:06:40 left at the rate of its \
                           last 00:10:00."
            ),
            "{told}"
        );
        let mut early = answer.clone();
        early["left_s"] = serde_json::Value::Null;
        assert!(progress_in_words(&early)
            .unwrap()
            .ends_with("to say when it ends."));
        assert_eq!(
            progress_in_words(&serde_json::json!({"message": "no"})),
            None
        );
        assert_eq!(gpu_in_words(&answer), None, "no GPU report");
        let mut with_gpu = answer.clone();
        with_gpu["gpu"] = serde_json::json!({"gpus": 2, "busy_percent": 3, "memory_mib": 2048});
        with_gpu["gpu_at"] = serde_json::json!(1_000_000);
        let told = gpu_in_words(&with_gpu).unwrap();
        assert!(
            told.ends_with(
                ": 2 GPUs, 3% busy on average over the watcher's last interval, 2.0 \
                            GiB of GPU memory in use."
            ),
            "{told}"
        );
    }

    #[test]
    fn local_times_are_slurms_style() {
        let t = local_time(1_795_543_200);
        assert_eq!(t.len(), 19, "{t}");
        assert_eq!(&t[10..11], "T");
    }
}
