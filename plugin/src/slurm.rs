//! The few calls cinch makes into slurmctld's own libslurmfull: logging, Slurm-allocated strings
//! and the path of a config file beside slurm.conf.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::sync::atomic::{AtomicU8, Ordering};

use cinch_slurm_ffi as ffi;

use crate::config::LogLevel;

/// Prefix of every cinch log line, as Slurm's own plugins prefix theirs with their plugin type.
pub const LOG_PREFIX: &str = "job_submit/cinch: ";

static LOG_LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Info as u8);

pub fn set_log_level(level: LogLevel) {
    LOG_LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Logs through slurmctld's logger. cinch's `LogLevel` decides what cinch says; everything but
/// errors goes out at Slurm's `info` level so it shows with slurmctld's default `SlurmctldDebug`.
pub fn log(level: LogLevel, message: &str) {
    if level as u8 > LOG_LEVEL.load(Ordering::Relaxed) {
        return;
    }
    let line = c_string(&format!("{LOG_PREFIX}{message}"));
    // SAFETY: a constant "%s" format with one NUL-terminated argument: user text never becomes a
    // format string.
    unsafe {
        match level {
            LogLevel::Error => ffi::slurm_error(c"%s".as_ptr(), line.as_ptr()),
            _ => ffi::slurm_info(c"%s".as_ptr(), line.as_ptr()),
        }
    }
}

/// Replaces a Slurm-owned string field with a copy of `value` made by Slurm's allocator, so
/// slurmctld can later `xfree` it.
///
/// # Safety
/// `*field` is NULL or a string allocated by Slurm's `xmalloc` family that nothing else frees.
pub unsafe fn replace_string(field: &mut *mut c_char, value: &str) {
    let value = c_string(value);
    // SAFETY: xstrdup copies a valid NUL-terminated string; xfree takes a Slurm-owned pointer (or
    // NULL) per this function's contract and NULLs it before we store the copy.
    unsafe {
        let copy = ffi::slurm_xstrdup(value.as_ptr());
        ffi::slurm_xfree(field as *mut *mut c_char as *mut *mut c_void);
        *field = copy;
    }
}

/// Frees a Slurm-owned string field and leaves it NULL (the request no longer has it).
///
/// # Safety
/// As for [`replace_string`].
pub unsafe fn clear_string(field: &mut *mut c_char) {
    // SAFETY: per the contract, `*field` is NULL or Slurm-owned; xfree NULLs it.
    unsafe { ffi::slurm_xfree(field as *mut *mut c_char as *mut *mut c_void) };
}

/// Sets `name=value` in a job descriptor's environment (`environment`, `env_size`), replacing a
/// variable of that name; returns whether Slurm's helper did.
///
/// # Safety
/// `environment` is NULL or a NULL-terminated array allocated by Slurm's `xmalloc` family (as
/// slurmctld unpacks a request's environment), holding `*env_size` entries.
pub unsafe fn set_env(
    environment: &mut *mut *mut c_char,
    env_size: &mut u32,
    name: &str,
    value: &str,
) -> bool {
    let (name, value) = (c_string(name), c_string(value));
    // SAFETY: per the contract the array is Slurm's and NULL-terminated; the helper replaces or
    // appends with Slurm's allocator and keeps it NULL-terminated.
    let done = unsafe {
        ffi::slurm_env_array_overwrite(
            environment as *mut *mut *mut c_char,
            name.as_ptr(),
            value.as_ptr(),
        )
    } == 1;
    if !environment.is_null() {
        let mut n = 0usize;
        // SAFETY: the array is NULL-terminated (above), so the walk stops inside it.
        while !unsafe { *(*environment).add(n) }.is_null() {
            n += 1;
        }
        *env_size = n as u32;
    }
    done
}

/// Sets `*err_msg` (which sbatch prints to the user) to a Slurm-allocated copy of `message`.
///
/// # Safety
/// `err_msg` is NULL or the `char **err_msg` slurmctld passed to this call.
pub unsafe fn set_err_msg(err_msg: *mut *mut c_char, message: &str) {
    // SAFETY: per the contract, a non-NULL err_msg points to a Slurm-owned (or NULL) string.
    if let Some(field) = unsafe { err_msg.as_mut() } {
        // SAFETY: `field` is slurmctld's err_msg slot: NULL or a Slurm-owned string.
        unsafe { replace_string(field, message) };
    }
}

/// The path Slurm uses for a file named `name` beside slurm.conf (configless setups included).
pub fn extra_conf_path(name: &CStr) -> Option<String> {
    // SAFETY: takes a NUL-terminated name; returns NULL or an xmalloc'd string we must xfree.
    let mut raw = unsafe { ffi::slurm_get_extra_conf_path(name.as_ptr()) };
    if raw.is_null() {
        return None;
    }
    // SAFETY: non-NULL result is a NUL-terminated string owned by us until the xfree below.
    let path = unsafe { CStr::from_ptr(raw) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: releases the string Slurm allocated for us, exactly once.
    unsafe { ffi::slurm_xfree(&mut raw as *mut *mut c_char as *mut *mut c_void) };
    Some(path)
}

/// A C string of `text`; interior NULs (impossible in Slurm's own strings) become spaces.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).expect("NULs were replaced")
}
