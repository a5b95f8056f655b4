//! The symbols slurmctld looks up in `job_submit_cinch.so`, and nothing else.
//!
//! Every function here runs its work inside [`guarded`]: no panic crosses into C, an internal
//! error lets the job pass unchanged, and a deliberate rejection reaches the user via `err_msg`.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use cinch_slurm_ffi::{job_desc_msg_t, SLURM_SUCCESS, SLURM_VERSION, SLURM_VERSION_NUMBER};

use cinch_core::hints::Refusal;
use cinch_core::sharing::Verdict;

use crate::agent::owned::HOLD_KEY;
use crate::agent::reconcile::Fields;
use crate::agent::thread as agent;
use crate::config::{self, Config, LogLevel, Mode};
use crate::guard::{self, EntryError, Outcome};
use crate::job_desc::JobDesc;
use crate::record::merge_admin_comment;
use crate::slurm::{self, log};
use crate::state::{self, unix_ms, SHARED};
use crate::submit_hold;

// Slurm reads these three as data: NUL-terminated char arrays (a pointer would log garbage) and
// the exact version slurmctld was built as (a mismatch makes slurmctld refuse the plugin).
/// Why an `elastic=` hint cannot be honoured for this request, if it cannot.
fn check_elastic(
    value: &str,
    hints: &std::collections::BTreeMap<String, String>,
    request: &crate::record::JobRequest,
) -> Result<(), Refusal> {
    let gpu_request = |m: String| Refusal::GpuRequest(format!("cinch hint elastic: {m}"));
    let hint = |m: String| Refusal::Hint(format!("cinch hint elastic: {m}"));
    let range = cinch_core::elastic::parse_range(value).map_err(hint)?;
    let gpus = request
        .gpus
        .as_ref()
        .map_err(|e| gpu_request(e.to_string()))?;
    let Some(per_job) = gpus.per_job.as_ref().filter(|_| {
        gpus.per_node.is_none() && gpus.per_task.is_none() && gpus.per_socket.is_none()
    }) else {
        return Err(gpu_request(
            "an elastic job asks for its GPUs in total (--gpus=N), not per node or task".into(),
        ));
    };
    if per_job.types.len() > 1 {
        return Err(gpu_request("an elastic job asks for one GPU type".into()));
    }
    if !range.contains(per_job.count.min(u64::from(u32::MAX)) as u32) {
        return Err(gpu_request(format!(
            "--gpus={} is outside the declared range {}-{}",
            per_job.count, range.min, range.max
        )));
    }
    if !cinch_core::hints::checkpoints(hints) {
        return Err(hint(
            "an elastic job must say it resumes from a checkpoint (ckpt=yes)".into(),
        ));
    }
    if request.requeue != Some(true) {
        return Err(hint(
            "an elastic job must be submitted with --requeue".into(),
        ));
    }
    Ok(())
}

/// How a QoS target is written, for refusals.
const DUE_EXAMPLE: &str = "due= as for --begin (2026-12-01T09:00, 16:00, tomorrow, now+2hours), \
     turnaround= and start_within= as Slurm durations such as 2:00:00";

/// The Slurm error code that names a refusal's cause; sbatch prints its text after cinch's
/// message ("Batch job submission failed: ...").
fn refusal_code(refusal: &Refusal) -> c_int {
    use cinch_slurm_ffi::slurm_err_t;
    match refusal {
        Refusal::Time(_) => slurm_err_t::ESLURM_INVALID_TIME_VALUE as c_int,
        Refusal::GpuRequest(_) => slurm_err_t::ESLURM_INVALID_GRES as c_int,
        Refusal::Hint(_) => cinch_slurm_ffi::SLURM_ERROR as c_int,
    }
}

/// Whether and where an opted-in job of one GPU shares, with the line its user is shown; `None`
/// when cinch does not decide (not enforcing, no sharing partition, or no fresh view of the
/// cluster): the job keeps its GPU request.
fn share_decision(
    config: &Config,
    desc: &JobDesc,
    request: &crate::record::JobRequest,
    hints: &std::collections::BTreeMap<String, String>,
    now_ms: i64,
) -> Option<(crate::share::SubmitShare, String)> {
    config.share_partition.as_ref()?;
    let live = SHARED.enforcing_until_ms.load(Ordering::Relaxed) > now_ms;
    if config.mode != Mode::Enforce || !live {
        return None;
    }
    let keep = |why: &str| crate::share::SubmitShare {
        verdict: Verdict::Whole(why.into()),
        prediction: None,
    };
    let typed = request.gpus.as_ref().is_ok_and(|g| !g.types().is_empty());
    let share = if typed {
        keep("a GPU type was asked for; shards have none")
    } else if desc.req_nodes().is_some() {
        keep("the job names its nodes (--nodelist)")
    } else {
        crate::share::decide_at_submit(
            config,
            now_ms,
            // Not numbered yet: no report of its own can exist.
            0,
            request.user_id.unwrap_or(u32::MAX),
            request.name.as_deref(),
            request.partition.as_deref(),
            request.time_limit_min,
            hints,
        )?
    };
    let message = match &share.verdict {
        Verdict::Share { why, .. } => format!("cinch: this job shares a GPU: {why}"),
        Verdict::Whole(why) => format!("cinch: this job keeps a whole GPU: {why}"),
    };
    Some((share, message))
}

#[no_mangle]
pub static plugin_name: [u8; 42] = *b"cinch: deep-learning-aware GPU scheduling\0";
#[no_mangle]
pub static plugin_type: [u8; 17] = *b"job_submit/cinch\0";
#[no_mangle]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

fn install_config(config: Config) {
    slurm::set_log_level(config.log_level);
    state::set_config(config);
}

/// Keeps this library mapped for the life of slurmctld, even if Slurm unloads the plugin on a
/// reconfigure: the agent thread may still be finishing a round in our code.
fn pin_library() {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr reads our own function's address; dlopen re-references the file it names.
    unsafe {
        if libc::dladdr(init as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NODELETE);
        }
    }
}

/// Runs one entry point's `body` inside the guard and turns its outcome into a return code:
/// `fallback` when cinch failed or panicked, so Slurm carries on as if cinch were absent.
fn guarded<F>(entry: &str, fallback: c_int, err_msg: *mut *mut c_char, body: F) -> c_int
where
    F: FnOnce() -> Result<c_int, EntryError>,
{
    // The outer catch covers the logging below too: nothing may unwind into slurmctld.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match guard::run(body) {
        Outcome::Done(rc) => rc,
        Outcome::Rejected { code, user_message } => {
            log(
                LogLevel::Info,
                &format!("{entry}: rejected: {user_message}"),
            );
            // SAFETY: err_msg is NULL or the err_msg slurmctld passed to this entry point.
            unsafe { slurm::set_err_msg(err_msg, &user_message) };
            code
        }
        Outcome::Failed(message) => {
            log(
                LogLevel::Error,
                &format!("{entry}: {message}; continuing without cinch for this call"),
            );
            fallback
        }
        Outcome::Panicked(message) => {
            log(
                LogLevel::Error,
                &format!(
                    "{entry}: internal error (panic: {message}); \
                     continuing without cinch for this call"
                ),
            );
            fallback
        }
    }))
    .unwrap_or(fallback)
}

/// Reads cinch.conf beside slurm.conf; every problem is logged, never fatal.
fn load_config() -> (Config, String) {
    let path = slurm::extra_conf_path(c"cinch.conf").unwrap_or_else(|| "cinch.conf".into());
    let config = match std::fs::read(&path) {
        Ok(bytes) => {
            // A stray non-UTF-8 byte costs its line only (parse reports it), not the whole file.
            let (config, problems) = config::parse(&String::from_utf8_lossy(&bytes));
            for problem in &problems {
                log(LogLevel::Error, &format!("{path} {problem}"));
            }
            config
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log(
                LogLevel::Info,
                &format!("no {path}; using built-in defaults"),
            );
            Config::default()
        }
        Err(e) => {
            log(
                LogLevel::Error,
                &format!("cannot read {path}: {e}; using built-in defaults"),
            );
            Config::default()
        }
    };
    (config, path)
}

/// Called once when slurmctld loads the plugin. Always succeeds: a cinch problem must never
/// keep slurmctld from starting.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    guarded("init", SLURM_SUCCESS as c_int, std::ptr::null_mut(), || {
        guard::install_panic_hook();
        let (config, path) = load_config();
        let (major, minor, micro) = SLURM_VERSION;
        log(
            LogLevel::Info,
            &format!(
                "loaded cinch {} (built for Slurm {major}.{minor:02}.{micro}): mode={} \
                 optimizer={} config={path}",
                env!("CARGO_PKG_VERSION"),
                config.mode,
                config.optimizer_url,
            ),
        );
        if let Some(name) = &config.test_panic_job_name {
            log(
                LogLevel::Error,
                &format!(
                    "TestPanicJobName={name} is set: jobs with that name trigger a deliberate \
                     panic (a test hook; remove it outside tests)"
                ),
            );
        }
        install_config(config);
        // Before the agent starts: its code and the exit handler must outlive any dlclose.
        pin_library();
        SHARED.stop.store(false, Ordering::Relaxed);
        agent::start(path);
        Ok(SLURM_SUCCESS as c_int)
    })
}

/// Called when slurmctld unloads the plugin (on reconfigure with a changed plugin list; 22.05
/// does not call it on SIGTERM).
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guarded("fini", SLURM_SUCCESS as c_int, std::ptr::null_mut(), || {
        // The agent finishes its current call and ends before Slurm unloads us. It may be
        // waiting on Slurm's own locks (held by the reconfigure that called fini), so the wait
        // is bounded; the library stays mapped (pin_library) for a thread that outlives it.
        if !agent::stop_and_join(std::time::Duration::from_millis(1_500)) {
            log(
                LogLevel::Info,
                "unloaded; the agent thread ends after its current call",
            );
        } else {
            log(LogLevel::Info, "unloaded");
        }
        Ok(SLURM_SUCCESS as c_int)
    })
}

/// Called for every submission, inside slurmctld's RPC handler with its locks held: local work
/// only, microseconds, no I/O.
///
/// # Safety
/// Called by slurmctld with a valid job descriptor and `err_msg` slot.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let started = std::time::Instant::now();
    let rc = guarded("job_submit", SLURM_SUCCESS as c_int, err_msg, || {
        let config = state::config();
        if config.mode == Mode::Off {
            return Ok(SLURM_SUCCESS as c_int);
        }
        // Decide everything first and write once at the end, so a failure part-way leaves the
        // job exactly as the user submitted it.
        // SAFETY: slurmctld passes a valid descriptor that it does not touch during this call.
        let desc = unsafe { JobDesc::from_ptr(job_desc) }
            .ok_or_else(|| EntryError::Internal("NULL job descriptor".into()))?;
        let request = desc.request();
        if config.test_panic_job_name.is_some() && request.name == config.test_panic_job_name {
            panic!(
                "TestPanicJobName matched job {:?}: deliberate panic",
                request.name
            );
        }
        // `--cinch-*` options (the SPANK plugin) are hints too: they go into the job's comment,
        // where the agent and users see every hint, replacing a comment hint of the same name.
        let mut option_hints =
            cinch_core::hints::from_spank_env(desc.spank_env().iter().map(String::as_str));
        let comment = desc.comment();
        let guide = &config.user_guide;
        let refuse = |refusal: Refusal, example: &str| EntryError::Reject {
            code: refusal_code(&refusal),
            user_message: format!("{refusal} (see {guide}: {example})"),
        };
        // A due time in words (`tomorrow`, `now+2hours`, `16:00`) means what it means now: the
        // job keeps the time it stood for at submission, and its user is told. One that has
        // passed cannot be met.
        let mut told: Vec<String> = Vec::new();
        // The comment's hints with the options' over them, as the merged comment will read.
        let mut hints = crate::agent::view::written_hints(comment.as_deref());
        hints.extend(option_hints.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(due) = hints.get(cinch_core::qos::HINT_DUE).cloned() {
            match crate::local_time::resolve_due(&due, crate::local_time::now()) {
                Ok((_, Some(fixed))) => {
                    told.push(format!("cinch: due={due} is kept as due={fixed}"));
                    option_hints.insert(cinch_core::qos::HINT_DUE.to_string(), fixed.clone());
                    hints.insert(cinch_core::qos::HINT_DUE.to_string(), fixed);
                }
                Ok((_, None)) => {}
                Err(problem) => {
                    return Err(refuse(
                        Refusal::Time(format!("cinch hint due: {problem}")),
                        DUE_EXAMPLE,
                    ))
                }
            }
        }
        let new_comment = (!option_hints.is_empty())
            .then(|| cinch_core::hints::merge_into_comment(comment.as_deref(), &option_hints));
        // A malformed QoS target or profile is the user's to fix, told now rather than ignored.
        if let Err(problem) = cinch_core::qos::check_hints(&hints) {
            return Err(refuse(Refusal::Time(problem), DUE_EXAMPLE));
        }
        // An elastic range must parse, name a total GPU request within it, and come with the
        // checkpoint and requeue consent every resize needs.
        if let Some(value) = hints.get(cinch_core::elastic::HINT_ELASTIC) {
            check_elastic(value, &hints, &request).map_err(|refusal| {
                refuse(
                    refusal,
                    "sbatch --gpus=N --requeue --comment cinch:elastic=MIN-MAX,ckpt=yes",
                )
            })?;
        }
        let now_ms = unix_ms();
        let gpus = request
            .gpus
            .as_ref()
            .ok()
            .and_then(|g| g.total(request.min_nodes, request.num_tasks))
            .unwrap_or(0);
        // GPU sharing: the hints must fit the request, and whole GPUs stay off the sharing
        // partition (Slurm 22.05 does not keep them off GPUs whose shards are in use).
        let one_gpu = gpus == 1 && request.min_nodes.unwrap_or(1) <= 1;
        let share_opt_in =
            cinch_core::sharing::check_hints(&hints, one_gpu).map_err(|refusal| {
                refuse(
                    refusal,
                    "sbatch --gpus=1 --comment cinch:share=yes,gpu_mem=10G",
                )
            })?;
        if let Some(part) = config.share_partition.as_deref() {
            let in_share_partition = request
                .partition
                .as_deref()
                .is_some_and(|p| p.split(',').any(|q| q == part));
            if in_share_partition && gpus > 0 {
                let instead = if share_opt_in {
                    ", where cinch itself places jobs that may share: submit with share=yes to \
                     your usual partition"
                } else {
                    ": ask for shards there (--gres=shard:K), or let cinch share a one-GPU job \
                     (--gpus=1 --comment cinch:share=yes,gpu_mem=10G)"
                };
                return Err(EntryError::Reject {
                    code: refusal_code(&Refusal::GpuRequest(String::new())),
                    user_message: format!("partition {part} holds shared GPUs{instead}"),
                });
            }
        }
        let sharing = if share_opt_in {
            share_decision(&config, &desc, &request, &hints, now_ms)
        } else {
            None
        };
        // What sbatch prints to the user: how a due time in words was read, the sharing
        // decision, and warnings about hints cinch would otherwise ignore in silence.
        told.extend(sharing.iter().map(|(_, m)| m.clone()));
        told.extend(
            cinch_core::hints::warnings(&hints)
                .into_iter()
                .map(|w| format!("cinch: warning: {w}")),
        );
        // Hold a new multi-GPU job for one agent round, so it can be placed before Slurm starts
        // it elsewhere — only while the agent is live and enforcing, and never over a user's
        // own --begin. The hold is a BeginTime: it lapses by itself if cinch goes away. Not for
        // a job the admin keeps cinch off by its partition (one kept off by its QOS, which is
        // not known here for jobs that name none, is released by the next round).
        let kept_off = config
            .hands_off(gpus, request.partition.as_deref(), None)
            .is_some();
        let hold_until = submit_hold::hold_until(
            &config,
            gpus,
            desc.begin_time(),
            now_ms,
            SHARED.enforcing_until_ms.load(Ordering::Relaxed),
        )
        .filter(|_| !kept_off);
        let mut record = request.record();
        if let Some(t) = hold_until {
            record.push_str(&format!(
                " {HOLD_KEY}{}",
                cinch_core::slurm_time::format_time(t)
            ));
        }
        if let Some((share, _)) = &sharing {
            record.push_str(&crate::share::record_words(share));
        }
        let admin_comment = merge_admin_comment(desc.admin_comment().as_deref(), &record);
        log(
            LogLevel::Debug,
            &format!(
                "job_submit: name={} uid={submit_uid}: {record}",
                request.name.as_deref().unwrap_or("")
            ),
        );
        // SAFETY: job_desc is valid (checked above); admin_comment is a Slurm-owned string.
        unsafe {
            slurm::replace_string(&mut (*job_desc).admin_comment, &admin_comment);
            if let Some(t) = hold_until {
                (*job_desc).begin_time = t;
            }
            if let Some(comment) = &new_comment {
                slurm::replace_string(&mut (*job_desc).comment, comment);
            }
            if let Some((share, _)) = &sharing {
                if let Verdict::Share { node, shards, .. } = &share.verdict {
                    let part = config.share_partition.as_deref().unwrap_or_default();
                    slurm::replace_string(&mut (*job_desc).partition, part);
                    slurm::clear_string(&mut (*job_desc).tres_per_job);
                    slurm::clear_string(&mut (*job_desc).tres_per_task);
                    slurm::replace_string(
                        &mut (*job_desc).tres_per_node,
                        &format!("{}shard:{shards}", cinch_slurm_ffi::GRES_TRES_PREFIX),
                    );
                    slurm::replace_string(&mut (*job_desc).req_nodes, node);
                }
            }
            if !told.is_empty() {
                // sbatch prints this to the user.
                slurm::set_err_msg(err_msg, &told.join("\n"));
            }
        }
        // Let the agent see the new job soon (one uncontended lock and a notify).
        SHARED.wake();
        Ok(SLURM_SUCCESS as c_int)
    });
    state::SUBMIT_LATENCY.record(started.elapsed());
    rc
}

/// Called when a job is modified (scontrol update, and cinch's own agent updates). cinch never
/// refuses a modification; it notes which scheduling settings a user or admin changed, so the
/// agent treats them as theirs from then on.
///
/// # Safety
/// Called by slurmctld with a valid job descriptor and job record.
#[cfg(not(slurm_job_modify_err_msg))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut c_void,
    submit_uid: u32,
) -> c_int {
    modify(job_desc, job_ptr, submit_uid, std::ptr::null_mut())
}

/// 23.02+ signature: as above, plus `err_msg` for the user.
///
/// # Safety
/// Called by slurmctld with a valid job descriptor, job record and `err_msg` slot.
#[cfg(slurm_job_modify_err_msg)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    modify(job_desc, job_ptr, submit_uid, err_msg)
}

fn modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guarded("job_modify", SLURM_SUCCESS as c_int, err_msg, || {
        // SAFETY: slurmctld passes a valid update descriptor for the duration of the call.
        let desc = unsafe { JobDesc::from_ptr(job_desc) }
            .ok_or_else(|| EntryError::Internal("NULL job descriptor".into()))?;
        if desc.job_id() == SHARED.in_flight.load(Ordering::SeqCst) {
            return Ok(SLURM_SUCCESS as c_int); // cinch's own update
        }
        let touched = desc.touched_fields();
        if touched != Fields::default() {
            SHARED.report_foreign(desc.job_id(), touched);
            log(
                LogLevel::Debug,
                &format!(
                    "job_modify: uid {submit_uid} changed job {} settings cinch will leave alone",
                    desc.job_id()
                ),
            );
        }
        Ok(SLURM_SUCCESS as c_int)
    })
}
