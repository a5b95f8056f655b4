//! The symbols slurmctld looks up in `job_submit_cinch.so`, and nothing else.
//!
//! Every function here runs its work inside [`guarded`]: no panic crosses into C, an internal
//! error lets the job pass unchanged, and a deliberate rejection reaches the user via `err_msg`.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Arc, RwLock};

use cinch_slurm_ffi::{job_desc_msg_t, SLURM_SUCCESS, SLURM_VERSION, SLURM_VERSION_NUMBER};

use crate::config::{self, Config, LogLevel, Mode};
use crate::guard::{self, EntryError, Outcome};
use crate::job_desc::JobDesc;
use crate::record::merge_admin_comment;
use crate::slurm::{self, log};

// Slurm reads these three as data: NUL-terminated char arrays (a pointer would log garbage) and
// the exact version slurmctld was built as (a mismatch makes slurmctld refuse the plugin).
#[no_mangle]
pub static plugin_name: [u8; 42] = *b"cinch: deep-learning-aware GPU scheduling\0";
#[no_mangle]
pub static plugin_type: [u8; 17] = *b"job_submit/cinch\0";
#[no_mangle]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

/// The settings in force; replaced as a whole on (re)load, read per job.
static CONFIG: RwLock<Option<Arc<Config>>> = RwLock::new(None);

fn current_config() -> Arc<Config> {
    // A poisoned lock only means a panic happened while it was held; the value is still whole.
    let slot = CONFIG.read().unwrap_or_else(|e| e.into_inner());
    slot.clone().unwrap_or_default()
}

fn install_config(config: Config) {
    slurm::set_log_level(config.log_level);
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(config));
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
    let config = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let (config, problems) = config::parse(&text);
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
        Ok(SLURM_SUCCESS as c_int)
    })
}

/// Called when slurmctld unloads the plugin (on reconfigure with a changed plugin list; 22.05
/// does not call it on SIGTERM).
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guarded("fini", SLURM_SUCCESS as c_int, std::ptr::null_mut(), || {
        log(LogLevel::Info, "unloaded");
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
    guarded("job_submit", SLURM_SUCCESS as c_int, err_msg, || {
        let config = current_config();
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
        let record = request.record();
        let admin_comment = merge_admin_comment(desc.admin_comment().as_deref(), &record);
        log(
            LogLevel::Verbose,
            &format!(
                "job_submit: name={} uid={submit_uid}: {record}",
                request.name.as_deref().unwrap_or("")
            ),
        );
        // SAFETY: job_desc is valid (checked above); admin_comment is a Slurm-owned string.
        unsafe { slurm::replace_string(&mut (*job_desc).admin_comment, &admin_comment) };
        Ok(SLURM_SUCCESS as c_int)
    })
}

/// Called when a job is modified (scontrol update, and cinch's own updates later). cinch does
/// not change modifications yet; it only must never fail them.
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
        if job_desc.is_null() {
            return Err(EntryError::Internal("NULL job descriptor".into()));
        }
        log(
            LogLevel::Debug,
            &format!("job_modify: update by uid {submit_uid} passed through"),
        );
        Ok(SLURM_SUCCESS as c_int)
    })
}
