//! The symbols slurmctld looks up in `job_submit_cinch.so`, and nothing else.
//!
//! Every function here runs its work inside [`guarded`]: no panic crosses into C, an internal
//! error lets the job pass unchanged, and a deliberate rejection reaches the user via `err_msg`.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use cinch_slurm_ffi::{job_desc_msg_t, SLURM_SUCCESS, SLURM_VERSION, SLURM_VERSION_NUMBER};

use crate::agent::reconcile::Fields;
use crate::agent::thread as agent;
use crate::config::{self, Config, LogLevel, Mode};
use crate::guard::{self, EntryError, Outcome};
use crate::job_desc::JobDesc;
use crate::slurm::{self, log};
use crate::state::{self, unix_ms, SHARED};
use crate::submit::{self, Submission, When};

// Slurm reads these three as data: NUL-terminated char arrays (a pointer would log garbage) and
// the exact version slurmctld was built as (a mismatch makes slurmctld refuse the plugin).
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
        let submission = Submission {
            request,
            comment: desc.comment(),
            spank_env: desc.spank_env(),
            admin_comment: desc.admin_comment(),
            begin_time: desc.begin_time(),
            req_nodes: desc.req_nodes(),
            batch: desc.is_batch(),
        };
        let now_ms = unix_ms();
        let stated_targets = state::stated_targets();
        let when = When {
            now_ms,
            local: crate::local_time::now(),
            enforcing_until_ms: SHARED.enforcing_until_ms.load(Ordering::Relaxed),
            stated_targets: stated_targets.as_deref(),
        };
        let edit = submit::decide(&submission, &config, when, |ask| {
            // Not numbered yet: no report of its own can exist (job id 0).
            crate::share::decide_at_submit(&config, now_ms, 0, ask)
        })
        .map_err(|refused| EntryError::Reject {
            code: refused.code,
            user_message: refused.user_message,
        })?;
        log(
            LogLevel::Debug,
            &format!(
                "job_submit: name={} uid={submit_uid}: {}",
                submission.request.name.as_deref().unwrap_or(""),
                edit.record
            ),
        );
        // SAFETY: job_desc is valid (checked above); every string is a Slurm-owned copy.
        unsafe {
            slurm::replace_string(&mut (*job_desc).admin_comment, &edit.admin_comment);
            if let Some(t) = edit.begin_time {
                (*job_desc).begin_time = t;
            }
            if let Some(comment) = &edit.comment {
                slurm::replace_string(&mut (*job_desc).comment, comment);
            }
            if let Some(shards) = &edit.shards {
                // The environment first: under MPS a shared job must not run without its memory
                // cap, so a job whose cap could not be set keeps its GPU request.
                let env_set = shards.env.iter().all(|(name, value)| {
                    slurm::set_env(
                        &mut (*job_desc).environment,
                        &mut (*job_desc).env_size,
                        name,
                        value,
                    )
                });
                if env_set {
                    slurm::replace_string(&mut (*job_desc).partition, &shards.partition);
                    slurm::clear_string(&mut (*job_desc).tres_per_job);
                    slurm::clear_string(&mut (*job_desc).tres_per_task);
                    slurm::replace_string(&mut (*job_desc).tres_per_node, &shards.tres_per_node);
                    slurm::replace_string(&mut (*job_desc).req_nodes, &shards.node);
                } else {
                    log(
                        LogLevel::Error,
                        "job_submit: could not set the job's environment; it keeps its GPU request",
                    );
                }
            }
            if !edit.told.is_empty() {
                // sbatch prints this to the user.
                slurm::set_err_msg(err_msg, &edit.told.join("\n"));
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
        // Every update, cinch's own too: the agent's next delta read loads this job again.
        SHARED.report_modified(desc.job_id());
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
