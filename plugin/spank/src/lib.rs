//! cinch's SPANK plugin (`spank_cinch.so`, named in plugstack.conf): the `--cinch-*` options of
//! sbatch, salloc and srun (`cinch_core::models::hints::OPTIONS`), listed in their `--help` and checked
//! when the command line is read, so a bad value stops the submission with the reason before it
//! reaches Slurm. Slurm itself passes each option to the job's SPANK environment
//! (`_SLURM_SPANK_OPTION_cinch_<option>`), where the job_submit plugin reads it as the hint of the
//! same meaning. In the remote context (slurmstepd) the options are accepted as given.
//!
//! Same safety rules as the job_submit plugin: every entry point runs inside the same guard
//! (`cinch_guard`), so no panic crosses into Slurm's commands or daemons, and one that happens
//! is printed with its message and place.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::OnceLock;

use cinch_core::models::hints::{check_option, OPTIONS};
use cinch_guard::{EntryError, Outcome};
use cinch_slurm_ffi as ffi;

#[no_mangle]
pub static plugin_name: [u8; 6] = *b"cinch\0";
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
pub static plugin_version: u32 = ffi::SLURM_VERSION_NUMBER;
#[no_mangle]
pub static spank_plugin_version: u32 = 1;

/// The option names, argument words and usage texts as C strings, made once and kept for the
/// life of the process (Slurm copies the table but not necessarily the strings).
struct CTexts {
    names: Vec<CString>,
    args: Vec<Option<CString>>,
    usages: Vec<CString>,
}

fn texts() -> &'static CTexts {
    static TEXTS: OnceLock<CTexts> = OnceLock::new();
    TEXTS.get_or_init(|| {
        let c = |s: &str| CString::new(s).expect("option texts have no NUL");
        CTexts {
            names: OPTIONS.iter().map(|o| c(o.name)).collect(),
            args: OPTIONS.iter().map(|o| o.arg.map(c)).collect(),
            usages: OPTIONS
                .iter()
                .map(|o| c(&format!("[cinch] {}", o.usage)))
                .collect(),
        }
    })
}

/// Runs a SPANK entry point inside cinch's guard. A refusal is printed through `say` and returns
/// its code; cinch's own failure or panic is printed with its message and returns `fallback`:
/// cinch never stops a command for a fault of its own.
fn guarded(
    entry: &str,
    fallback: c_int,
    say: impl Fn(&str),
    body: impl FnOnce() -> Result<c_int, EntryError>,
) -> c_int {
    cinch_guard::install_panic_hook();
    // The outer catch covers the printing too: nothing may unwind into Slurm.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        match cinch_guard::run(body) {
            Outcome::Done(rc) => rc,
            Outcome::Rejected { code, user_message } => {
                say(&user_message);
                code
            }
            Outcome::Failed(message) => {
                say(&format!(
                    "cinch: {entry}: {message}; continuing without cinch for this call"
                ));
                fallback
            }
            Outcome::Panicked(message) => {
                say(&format!(
                    "cinch: {entry}: internal error (panic: {message}); continuing without \
                     cinch for this call"
                ));
                fallback
            }
        }
    }))
    .unwrap_or(fallback)
}

/// Slurm's callback for `--cinch-*`: 0 accepts, anything else stops the command with the error
/// printed here.
extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guarded("option", 0, say_error, || {
        if remote != 0 {
            return Ok(0);
        }
        let Some(option) = usize::try_from(val).ok().and_then(|i| OPTIONS.get(i)) else {
            return Ok(0);
        };
        let value = if optarg.is_null() {
            None
        } else {
            // SAFETY: Slurm passes the option's argument as a NUL-terminated string.
            Some(
                unsafe { CStr::from_ptr(optarg) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        check_option(option, value.as_deref())
            .map(|()| 0)
            .map_err(|why| EntryError::Reject {
                code: -1,
                user_message: format!("cinch: {why}"),
            })
    })
}

/// Prints an error the way the command prints its own (`sbatch: error: ...`).
#[cfg(not(test))]
fn say_error(text: &str) {
    let line = CString::new(text.replace('\0', " ")).expect("NULs were replaced");
    // SAFETY: a constant "%s" format with one NUL-terminated argument.
    unsafe { ffi::slurm_error(c"%s".as_ptr(), line.as_ptr()) };
}

/// Unit tests run outside Slurm, where its logger does not exist.
#[cfg(test)]
fn say_error(text: &str) {
    eprintln!("{text}");
}

/// The option table entries, handed one by one to `register` (Slurm's `spank_option_register`;
/// a test double in tests); the first failure stops it.
fn register_options(mut register: impl FnMut(&mut ffi::spank_option) -> c_int) -> c_int {
    let t = texts();
    for (i, option) in OPTIONS.iter().enumerate() {
        let mut entry = ffi::spank_option {
            name: t.names[i].as_ptr() as *mut c_char,
            arginfo: t.args[i]
                .as_ref()
                .map_or(std::ptr::null_mut(), |a| a.as_ptr() as *mut c_char),
            usage: t.usages[i].as_ptr() as *mut c_char,
            has_arg: c_int::from(option.arg.is_some()),
            val: i as c_int,
            cb: Some(option_cb),
        };
        let rc = register(&mut entry);
        if rc != 0 {
            return rc;
        }
    }
    0
}

/// Registers the options (every context: the remote side must know them too).
///
/// # Safety
/// Called by Slurm's plugin stack with its SPANK handle.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(
    sp: ffi::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guarded("init", -1, say_error, || {
        Ok(register_options(|entry| {
            // SAFETY: `sp` is Slurm's handle for this call; Slurm copies the entry, and its
            // strings live for the whole process.
            unsafe { ffi::spank_option_register(sp, entry) as c_int }
        }))
    })
}

/// What plugstack.conf's arguments to this plugin say about the job watcher
/// (docs/policies/progress.md): `watch=PATH` (cinch-watch; without it no watcher starts),
/// `optimizer=URL`, `ca_file=PATH`, `interval=SECONDS`, `nvml=PATH` (the driver's NVML library
/// where it is not `libnvidia-ml.so.1` on the loader's path). Unknown arguments are left for
/// later releases.
#[derive(Debug, Default, PartialEq, Eq)]
struct WatchArgs {
    watch: Option<String>,
    optimizer: Option<String>,
    ca_file: Option<String>,
    interval: Option<String>,
    nvml: Option<String>,
}

impl WatchArgs {
    fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> WatchArgs {
        let mut out = WatchArgs::default();
        for arg in args {
            let Some((key, value)) = arg.split_once('=') else {
                continue;
            };
            let value = Some(value.to_string()).filter(|v| !v.is_empty());
            match key {
                "watch" => out.watch = value,
                "optimizer" => out.optimizer = value,
                "ca_file" => out.ca_file = value,
                "interval" => out.interval = value.filter(|v| v.parse::<u32>().is_ok()),
                "nvml" => out.nvml = value,
                _ => {}
            }
        }
        out
    }

    /// The watcher's command line for `job`, whose batch script is process `pid` writing to
    /// `outputs` on `gpus` (Slurm's `SLURM_JOB_GPUS`); `None` unless both the watcher and the
    /// optimizer are named.
    fn command(
        &self,
        job: u32,
        pid: u32,
        outputs: &[String],
        gpus: Option<&str>,
    ) -> Option<Vec<String>> {
        let (watch, optimizer) = (self.watch.as_ref()?, self.optimizer.as_ref()?);
        let mut argv = vec![
            watch.clone(),
            "--job-id".into(),
            job.to_string(),
            "--optimizer".into(),
            optimizer.clone(),
            "--parent-pid".into(),
            pid.to_string(),
        ];
        if let Some(ca) = &self.ca_file {
            argv.extend(["--ca-file".into(), ca.clone()]);
        }
        if let Some(interval) = &self.interval {
            argv.extend(["--interval-s".into(), interval.clone()]);
        }
        if let Some(nvml) = &self.nvml {
            argv.extend(["--nvml-lib".into(), nvml.clone()]);
        }
        for output in outputs {
            argv.extend(["--output".into(), output.clone()]);
        }
        if let Some(gpus) =
            gpus.filter(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit() || b == b','))
        {
            argv.extend(["--gpus".into(), gpus.to_string()]);
        }
        Some(argv)
    }
}

/// Where this process writes its output: fd 1 and 2 when they are files (the job's StdOut and
/// StdErr, which slurmstepd opened before the task's plugins run).
#[cfg(not(test))]
fn output_files() -> Vec<String> {
    let mut out: Vec<String> = ["/proc/self/fd/1", "/proc/self/fd/2"]
        .iter()
        .filter_map(|fd| std::fs::read_link(fd).ok())
        .filter(|p| p.is_absolute() && p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    out.dedup();
    out
}

/// A variable of the job's environment (what its tasks get), if set and short.
#[cfg(not(test))]
fn job_env(sp: ffi::spank_t, name: &std::ffi::CStr) -> Option<String> {
    let mut buf = [0 as c_char; 1024];
    // SAFETY: `sp` is Slurm's handle for this call; `buf` is writable for its whole length,
    // which is passed, and Slurm NUL-terminates what it writes there.
    let rc = unsafe { ffi::spank_getenv(sp, name.as_ptr(), buf.as_mut_ptr(), buf.len() as c_int) };
    if rc != 0 {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated string.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The task's process id, in a task's hooks in slurmstepd.
#[cfg(not(test))]
fn task_pid(sp: ffi::spank_t) -> Option<i32> {
    let mut pid: i32 = 0;
    // SAFETY: `sp` is Slurm's handle for this call; S_TASK_PID takes one `pid_t *`.
    let rc = unsafe { ffi::spank_get_item(sp, ffi::spank_item::S_TASK_PID, &mut pid as *mut i32) };
    (rc == 0 && pid > 0).then_some(pid)
}

/// One item of `spank_get_item` that is a `uint32_t`.
#[cfg(not(test))]
fn item_u32(sp: ffi::spank_t, item: ffi::spank_item_t) -> Option<u32> {
    let mut value: u32 = 0;
    // SAFETY: `sp` is Slurm's handle for this call; the items asked for (job id, step id,
    // global task id) each take one `uint32_t *`.
    let rc = unsafe { ffi::spank_get_item(sp, item, &mut value as *mut u32) };
    (rc == 0).then_some(value)
}

/// This plugin's arguments in plugstack.conf, as Slurm passes them.
///
/// # Safety
/// `av` holds `ac` pointers, each null or a NUL-terminated string.
#[cfg(not(test))]
unsafe fn plugin_args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    (0..usize::try_from(ac).unwrap_or(0))
        .filter_map(|i| {
            // SAFETY: Slurm passes `ac` NUL-terminated strings in `av`.
            let arg = unsafe { *av.add(i) };
            (!arg.is_null()).then(|| {
                // SAFETY: a non-null argument of Slurm's is a NUL-terminated string.
                unsafe { CStr::from_ptr(arg) }
                    .to_string_lossy()
                    .into_owned()
            })
        })
        .collect()
}

/// An informational line in the daemon's log (slurmstepd's, with the node's slurmd log).
#[cfg(not(test))]
fn say_info(text: &str) {
    let line = CString::new(text.replace('\0', " ")).expect("NULs were replaced");
    // SAFETY: a constant "%s" format with one NUL-terminated argument.
    unsafe { ffi::slurm_info(c"%s".as_ptr(), line.as_ptr()) };
}

/// Where the cap's notice for task `pid` waits for the task to print it (made by the cap's
/// command, as root; read by the task as it starts; removed when it ends).
fn notice_path(pid: impl std::fmt::Display) -> String {
    format!("/run/cinch/gpu-cap/{pid}")
}

/// Where cgroup v2 is mounted (the driver's per-cgroup limits need it there).
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The command that asks the driver to hold one task of a shared job to its GPU memory cap
/// (`cinch-watch --set-cap-mib`, run as root), or why none is asked. `cap_mib` is the job's
/// cap from its environment (job_submit's `CINCH_GPU_MEM_CAP_MIB`), shared by its `local_tasks`
/// tasks on this node; `gpus` Slurm's GPU numbers for the job (none on shards: every GPU of the
/// node); `proc_cgroup` the task's `/proc/PID/cgroup`.
fn cap_command(
    watch: &WatchArgs,
    job: u32,
    pid: i32,
    local_tasks: u32,
    cap_mib: &str,
    gpus: Option<&str>,
    proc_cgroup: &str,
) -> Result<Vec<String>, String> {
    let cap: u64 = cap_mib
        .trim()
        .parse()
        .map_err(|_| format!("CINCH_GPU_MEM_CAP_MIB={cap_mib} is not a number of MiB"))?;
    let per_task = cap / u64::from(local_tasks.max(1));
    if per_task == 0 {
        return Err(format!(
            "a cap of {cap} MiB is too small for {local_tasks} tasks"
        ));
    }
    let Some(helper) = &watch.watch else {
        return Err("plugstack.conf names no cinch-watch (watch=) to set it".into());
    };
    // cgroup v2's one line: "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0".
    let Some(path) = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Err("the task is in no cgroup v2 (the driver's limits need cgroup v2)".into());
    };
    let parts: Vec<&str> = path.trim().split('/').collect();
    let job_part = format!("job_{job}");
    let Some(at) = parts.iter().position(|p| *p == job_part) else {
        return Err(format!(
            "the task's cgroup {} is not the job's (Slurm's proctrack/cgroup and task/cgroup \
             give each job its own)",
            path.trim()
        ));
    };
    let mut argv = vec![
        helper.clone(),
        "--job-id".into(),
        job.to_string(),
        "--set-cap-mib".into(),
        per_task.to_string(),
        "--cgroup".into(),
        format!("{CGROUP_ROOT}{}", parts.join("/")),
        "--job-cgroup".into(),
        format!("{CGROUP_ROOT}{}", parts[..=at].join("/")),
        "--notify".into(),
        notice_path(pid),
    ];
    if let Some(gpus) =
        gpus.filter(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit() || b == b','))
    {
        argv.extend(["--gpus".into(), gpus.to_string()]);
    }
    if let Some(nvml) = &watch.nvml {
        argv.extend(["--nvml-lib".into(), nvml.clone()]);
    }
    Ok(argv)
}

/// How long slurmstepd waits for the driver's cap before the task goes on without it.
#[cfg(not(test))]
const CAP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the cap's command and returns the line it printed; a helper that does not answer in
/// time is killed, and the task goes on.
#[cfg(not(test))]
fn run_cap(argv: &[String]) -> String {
    use std::io::Read;
    let mut child = match std::process::Command::new(&argv[0])
        .args(&argv[1..])
        // The GPUs are on its command line or none (every GPU of the node); never what
        // slurmstepd's own environment might hold.
        .env_remove("SLURM_JOB_GPUS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return format!("cannot run {}: {e}", argv[0]),
    };
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < CAP_TIMEOUT => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return format!("{} gave no answer in {} s", argv[0], CAP_TIMEOUT.as_secs());
            }
        }
    }
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut said);
    }
    if said.trim().is_empty() {
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
    }
    said.trim().to_string()
}

/// In slurmstepd (root), each task of a shared job once it is in its cgroup and before it
/// starts: the driver holds the task's cgroup to the job's GPU memory cap, where it can
/// (docs/policies/sharing.md, "Memory caps by the driver"); one log line says what was set or
/// why not. Nothing is done for other jobs, and the task starts whatever happens here.
///
/// # Safety
/// Called by Slurm's plugin stack with its SPANK handle and this plugin's arguments.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_post_fork(
    sp: ffi::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guarded("task_post_fork", 0, say_error, || {
        // SAFETY: `sp` is Slurm's handle for this call.
        if unsafe { ffi::spank_remote(sp) } != 1 {
            return Ok(0);
        }
        let Some(cap) = job_env(sp, c"CINCH_GPU_MEM_CAP_MIB") else {
            return Ok(0);
        };
        let (Some(pid), Some(job)) = (task_pid(sp), item_u32(sp, ffi::spank_item::S_JOB_ID)) else {
            return Ok(0);
        };
        let tasks = item_u32(sp, ffi::spank_item::S_JOB_LOCAL_TASK_COUNT).unwrap_or(1);
        let gpus = job_env(sp, c"SLURM_JOB_GPUS").or_else(|| job_env(sp, c"SLURM_STEP_GPUS"));
        let proc_cgroup =
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        // SAFETY: Slurm passes this plugin's `ac` arguments in `av`.
        let args = unsafe { plugin_args(ac, av) };
        let watch = WatchArgs::parse(args.iter().map(String::as_str));
        match cap_command(&watch, job, pid, tasks, &cap, gpus.as_deref(), &proc_cgroup) {
            Ok(argv) => say_info(&format!("cinch: {}", run_cap(&argv))),
            Err(why) => say_info(&format!(
                "cinch: job {job}: no GPU memory cap by the driver ({cap} MiB asked): {why}"
            )),
        }
        Ok(0)
    })
}

/// In slurmstepd (root), each task as it ends: the cap's notice for it, if any, is removed.
///
/// # Safety
/// Called by Slurm's plugin stack with its SPANK handle.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_exit(
    sp: ffi::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guarded("task_exit", 0, say_error, || {
        // SAFETY: `sp` is Slurm's handle for this call.
        if unsafe { ffi::spank_remote(sp) } != 1 {
            return Ok(0);
        }
        if let Some(pid) = task_pid(sp) {
            let _ = std::fs::remove_file(notice_path(pid));
        }
        Ok(0)
    })
}

/// In slurmstepd, each task just before it runs, as the job's user and in the job's cgroup: the
/// batch script's task starts the job watcher beside it, where plugstack.conf names one
/// (`watch=` and `optimizer=`). The watcher is left running on its own (it ends with the script,
/// and Slurm ends it with the job); a watcher that cannot start costs the job nothing.
///
/// # Safety
/// Called by Slurm's plugin stack with its SPANK handle and this plugin's arguments.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: ffi::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guarded("task_init", 0, say_error, || {
        // SAFETY: `sp` is Slurm's handle for this call.
        if unsafe { ffi::spank_remote(sp) } != 1 {
            return Ok(0);
        }
        // A shared job whose cap the driver holds says so on its standard error, once per
        // task, as it starts (the notice `slurm_spank_task_post_fork` left).
        if job_env(sp, c"CINCH_GPU_MEM_CAP_MIB").is_some() {
            if let Ok(notice) = std::fs::read_to_string(notice_path(std::process::id())) {
                eprint!("{notice}");
            }
        }
        // SAFETY: Slurm passes this plugin's `ac` arguments in `av`.
        let args = unsafe { plugin_args(ac, av) };
        let watch = WatchArgs::parse(args.iter().map(String::as_str));
        if watch.watch.is_none() {
            return Ok(0);
        }
        let (Some(job), Some(step), Some(task)) = (
            item_u32(sp, ffi::spank_item::S_JOB_ID),
            item_u32(sp, ffi::spank_item::S_JOB_STEPID),
            item_u32(sp, ffi::spank_item::S_TASK_GLOBAL_ID),
        ) else {
            return Ok(0);
        };
        if step != ffi::SLURM_BATCH_SCRIPT || task != 0 {
            return Ok(0);
        }
        let gpus = job_env(sp, c"SLURM_JOB_GPUS");
        let Some(argv) = watch.command(job, std::process::id(), &output_files(), gpus.as_deref())
        else {
            return Ok(0);
        };
        // Through a shell that puts it in the background and returns at once: the watcher is
        // nobody's child in the task, so the script never has to reap it.
        let _ = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("\"$0\" \"$@\" </dev/null >/dev/null 2>&1 &")
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watcher_starts_only_where_plugstack_names_it_and_the_optimizer() {
        let none = WatchArgs::parse([]);
        assert_eq!(none.command(7, 100, &[], None), None);
        let no_optimizer = WatchArgs::parse(["watch=/usr/bin/cinch-watch"]);
        assert_eq!(no_optimizer.command(7, 100, &[], None), None);
        let args = WatchArgs::parse([
            "watch=/usr/bin/cinch-watch",
            "optimizer=https://opt:8787",
            "interval=30",
            "ca_file=/etc/cinch/ca.pem",
            "nvml=/opt/nvidia/lib/libnvidia-ml.so.1",
            "future=1",
            "interval-not=x",
        ]);
        assert_eq!(
            args.command(7, 100, &["/home/ann/slurm-7.out".into()], Some("0,3"))
                .unwrap()
                .join(" "),
            "/usr/bin/cinch-watch --job-id 7 --optimizer https://opt:8787 --parent-pid 100 \
             --ca-file /etc/cinch/ca.pem --interval-s 30 --nvml-lib \
             /opt/nvidia/lib/libnvidia-ml.so.1 --output /home/ann/slurm-7.out --gpus 0,3"
        );
        // An interval that is not a number is left out (the watcher's default).
        let bad = WatchArgs::parse(["watch=w", "optimizer=u", "interval=soon"]);
        assert_eq!(bad.interval, None);
        // A GPU list that is not Slurm's numbers is left out.
        let argv = bad.command(7, 100, &[], Some("0;rm -rf")).unwrap();
        assert!(!argv.contains(&"--gpus".to_string()), "{argv:?}");
    }

    #[test]
    fn a_shared_jobs_task_asks_the_driver_for_its_cap_on_its_own_cgroup() {
        let watch = WatchArgs::parse(["watch=/usr/bin/cinch-watch", "nvml=/opt/nvml.so"]);
        let task = "0::/system.slice/slurmstepd.scope/job_12/step_batch/user/task_0\n";
        assert_eq!(
            cap_command(&watch, 12, 4242, 1, "10240", Some("3"), task)
                .unwrap()
                .join(" "),
            "/usr/bin/cinch-watch --job-id 12 --set-cap-mib 10240 --cgroup \
             /sys/fs/cgroup/system.slice/slurmstepd.scope/job_12/step_batch/user/task_0 \
             --job-cgroup /sys/fs/cgroup/system.slice/slurmstepd.scope/job_12 --notify \
             /run/cinch/gpu-cap/4242 --gpus 3 --nvml-lib /opt/nvml.so"
        );
        // Two tasks on the node share the job's cap; no GPU named (shards): none passed.
        let argv = cap_command(&watch, 12, 4242, 2, "10240", None, task).unwrap();
        assert!(argv.join(" ").contains("--set-cap-mib 5120"), "{argv:?}");
        assert!(!argv.contains(&"--gpus".to_string()), "{argv:?}");
        // Why not, in words for the log.
        let why = |w: &WatchArgs, cap: &str, cgroup: &str| {
            cap_command(w, 12, 4242, 1, cap, Some("0"), cgroup).unwrap_err()
        };
        assert!(why(&watch, "lots", task).contains("not a number of MiB"));
        assert!(why(&WatchArgs::default(), "10240", task).contains("names no cinch-watch"));
        assert!(why(&watch, "10240", "").contains("no cgroup v2"));
        assert!(why(&watch, "10240", "0::/user.slice/user-1000.slice\n")
            .contains("is not the job's (Slurm's proctrack/cgroup and task/cgroup"));
        assert!(why(&watch, "10240", "0::/slurm/job_120/step_0\n").contains("is not the job's"));
        let tiny = cap_command(&watch, 12, 4242, 4, "3", Some("0"), task).unwrap_err();
        assert!(tiny.contains("too small for 4 tasks"), "{tiny}");
    }

    #[test]
    fn every_option_is_registered_with_its_argument_word_and_usage() {
        let mut seen = Vec::new();
        let rc = register_options(|entry| {
            // SAFETY: the entry's strings are the NUL-terminated texts made once above.
            let name = unsafe { CStr::from_ptr(entry.name) }
                .to_string_lossy()
                .into_owned();
            seen.push((name, entry.has_arg, entry.val));
            0
        });
        assert_eq!(rc, 0);
        assert_eq!(seen.len(), OPTIONS.len());
        assert_eq!(seen[0], ("cinch-app".to_string(), 1, 0));
        assert!(seen
            .iter()
            .any(|(n, has_arg, _)| n == "cinch-share" && *has_arg == 0));
        assert_eq!(register_options(|_| -1), -1);
    }

    #[test]
    fn the_callback_accepts_good_values_and_refuses_bad_ones_locally_only() {
        let gpu_mem = OPTIONS
            .iter()
            .position(|o| o.name == "cinch-gpu-mem")
            .unwrap() as c_int;
        assert_eq!(option_cb(gpu_mem, c"12G".as_ptr(), 0), 0);
        assert_eq!(option_cb(gpu_mem, c"x".as_ptr(), 1), 0, "remote: as given");
        assert_eq!(option_cb(gpu_mem, c"x".as_ptr(), 0), -1);
        let share = OPTIONS
            .iter()
            .position(|o| o.name == "cinch-share")
            .unwrap() as c_int;
        assert_eq!(option_cb(share, std::ptr::null(), 0), 0);
        assert_eq!(option_cb(99, std::ptr::null(), 0), 0);
    }

    #[test]
    fn a_panic_in_an_entry_point_is_told_with_its_message_and_the_command_goes_on() {
        let said = std::cell::RefCell::new(Vec::new());
        let say = |text: &str| said.borrow_mut().push(text.to_string());
        let rc = guarded("option", 0, say, || panic!("deliberate {}", 7));
        assert_eq!(rc, 0, "the fallback: the option is accepted as given");
        let said = said.into_inner();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("cinch: option: internal error (panic: ")
                && said[0].contains("deliberate 7")
                && said[0].contains("lib.rs"),
            "{said:?}"
        );
        // A refusal is said as it is and keeps its code.
        let said = std::cell::RefCell::new(Vec::new());
        let say = |text: &str| said.borrow_mut().push(text.to_string());
        let rc = guarded("option", 0, say, || {
            Err(EntryError::Reject {
                code: -1,
                user_message: "cinch: bad".into(),
            })
        });
        assert_eq!(rc, -1);
        assert_eq!(said.into_inner(), ["cinch: bad"]);
    }
}
