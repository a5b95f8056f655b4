//! `cinch-watch`: the watcher of one running job, on its node (docs/policies/progress.md). It
//! reads the job's output from where it left off, recognises the progress deep-learning jobs
//! print, and every interval sends the optimizer two readings of it (numbers only), proven by a
//! MUNGE credential of the job's user. It never slows the job: it reads files and sleeps, a
//! report the optimizer does not take at once is dropped, and it ends with the job.

mod cap;
mod gpu;
mod lines;
mod readings;
mod schedule;
mod tail;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;

use cinch_core::wire::watch::WatchReport;
use lines::{Mark, Recognizer};
use readings::Readings;
use schedule::Schedule;
use tail::Tail;

#[derive(Parser, Debug)]
#[command(
    name = "cinch-watch",
    version,
    about = "Reads a running job's progress from its output and reports it to cinch's optimizer"
)]
struct Args {
    /// The job watched.
    #[arg(long, env = "SLURM_JOB_ID")]
    job_id: u32,
    /// A file the job writes its output to (repeat for stdout and stderr); by default the job's
    /// StdOut and StdErr as `scontrol show job` gives them.
    #[arg(long = "output")]
    outputs: Vec<PathBuf>,
    /// The optimizer's URL (cinch.conf's OptimizerUrl); without it nothing is sent.
    #[arg(long, env = "CINCH_OPTIMIZER_URL")]
    optimizer: Option<String>,
    /// What an https optimizer's certificate must chain to (cinch.conf's OptimizerCaFile).
    #[arg(long)]
    ca_file: Option<String>,
    /// munged's socket (Slurm's AuthInfo=socket=); by default as `scontrol show config` says.
    #[arg(long)]
    munge_socket: Option<String>,
    /// Seconds between two reads of the output and reports.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=3600))]
    interval_s: u64,
    /// The rate is measured over at most this many seconds of readings.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(i64).range(60..=86_400))]
    window_s: i64,
    /// The job's GPUs, as Slurm numbers them (`SLURM_JOB_GPUS`: the minor numbers of their
    /// `/dev/nvidiaN`); sampled through NVML where the driver has it.
    #[arg(long, env = "SLURM_JOB_GPUS", value_delimiter = ',')]
    gpus: Vec<u32>,
    /// The NVML library (default: the driver's libnvidia-ml.so.1).
    #[arg(long)]
    nvml_lib: Option<PathBuf>,
    /// Stop once this process (the job's step) has ended.
    #[arg(long)]
    parent_pid: Option<i32>,
    /// Read the outputs once, print the progress they show as JSON and exit: nothing is sent.
    #[arg(long)]
    once: bool,
    /// With `--once`: also sample `--gpus` through NVML every second for this many seconds and
    /// print their use (`{"progress": ..., "gpu": ...}`): the check of the NVML path on a
    /// node's real GPUs (plugin/watch/check-gpu.sh).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
    sample_gpus_s: u64,
    /// Set this GPU memory cap, MiB, on `--cgroup` for `--gpus` through the driver's
    /// per-cgroup limit, print one line saying where (or why not) and exit: run as root by
    /// cinch's SPANK plugin for each task of a shared job (docs/policies/sharing.md).
    #[arg(long, requires_all = ["cgroup", "job_cgroup"], value_parser = clap::value_parser!(u64).range(1..))]
    set_cap_mib: Option<u64>,
    /// With `--set-cap-mib`: the task's cgroup directory (under /sys/fs/cgroup).
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// With `--set-cap-mib`: the job's own cgroup directory, above which nothing is set.
    #[arg(long)]
    job_cgroup: Option<PathBuf>,
    /// With `--set-cap-mib`: a file to write the job's notice to once the cap is set (the
    /// SPANK plugin's, which the task prints to the job's standard error as it starts).
    #[arg(long)]
    notify: Option<PathBuf>,
}

/// One output file and what it showed.
struct Output {
    tail: Tail,
    recognizer: Recognizer,
}

fn main() {
    close_inherited_fds();
    if let Err(e) = run(Args::parse()) {
        eprintln!("cinch-watch: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    if let Some(cap_mib) = args.set_cap_mib {
        return set_cap(&args, cap_mib);
    }
    let paths = if args.outputs.is_empty() {
        job_outputs(args.job_id)?
    } else {
        args.outputs.clone()
    };
    let mut outputs: Vec<Output> = paths
        .into_iter()
        .map(|p| Output {
            tail: Tail::new(p),
            recognizer: Recognizer::default(),
        })
        .collect();
    if args.once {
        let mark = read_all(&mut outputs);
        let progress = match mark {
            Some(m) => serde_json::json!({"done": m.done, "total": m.total}),
            None => serde_json::Value::Null,
        };
        if args.sample_gpus_s == 0 {
            println!("{progress}");
            return Ok(());
        }
        let lib = args.nvml_lib.as_deref().map(|p| p.as_os_str());
        let mut sampler = gpu::GpuSampler::open(lib, &args.gpus)
            .map_err(|e| anyhow::anyhow!("--sample-gpus-s: {e}"))?;
        for _ in 0..args.sample_gpus_s {
            sampler.sample();
            std::thread::sleep(Duration::from_secs(1));
        }
        println!(
            "{}",
            serde_json::json!({"progress": progress, "gpu": sampler.take()})
        );
        return Ok(());
    }
    let socket = match (&args.munge_socket, &args.optimizer) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(_)) => Command::new("scontrol")
            .args(["show", "config"])
            .output()
            .ok()
            .and_then(|o| {
                cinch_core::slurm::scontrol::munge_socket(&String::from_utf8_lossy(&o.stdout))
            }),
        (None, None) => None,
    };
    let mut readings = Readings::default();
    let mut gpus = if args.gpus.is_empty() {
        None
    } else {
        let lib = args.nvml_lib.as_deref().map(|p| p.as_os_str());
        match gpu::GpuSampler::open(lib, &args.gpus) {
            Ok(sampler) => Some(sampler),
            Err(e) => {
                eprintln!("cinch-watch: job {}: no GPU use: {e}", args.job_id);
                None
            }
        }
    };
    // The last failure said, so a missing optimizer is said once, not every minute.
    let mut last_error = String::new();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut schedule = Schedule::new(
        std::time::Instant::now(),
        started_unix_s,
        Duration::from_secs(args.interval_s),
        Duration::from_secs(GPU_SAMPLE_S),
    );
    loop {
        if let Some(pid) = args.parent_pid {
            // SAFETY: kill with signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return Ok(());
            }
        }
        if let Some(sampler) = &mut gpus {
            sampler.sample();
        }
        let woke = std::time::Instant::now();
        if schedule.report_due(woke) {
            let now = schedule.stamp(woke);
            if let Some(mark) = read_all(&mut outputs) {
                readings.push(now, mark, args.window_s);
            }
            let report = WatchReport {
                progress: readings.report(),
                gpu: gpus.as_mut().and_then(gpu::GpuSampler::take),
            };
            let something = report.progress.is_some() || report.gpu.is_some();
            if let (Some(url), true) = (&args.optimizer, something) {
                let ca = args.ca_file.as_deref();
                match send(args.job_id, url, ca, socket.as_deref(), report) {
                    Ok(()) => last_error.clear(),
                    Err(e) => {
                        let said = format!("{e:#}");
                        if said != last_error {
                            eprintln!("cinch-watch: job {}: report dropped: {said}", args.job_id);
                            last_error = said;
                        }
                    }
                }
            }
            schedule.report_ended(std::time::Instant::now());
        }
        std::thread::sleep(schedule.sleep_from(std::time::Instant::now()));
    }
}

/// `--set-cap-mib`: the driver's cap on the task's cgroup, one line on stdout (what the SPANK
/// plugin logs); exit status 0 when set, 2 when not (why on the line), 1 on bad arguments.
fn set_cap(args: &Args, cap_mib: u64) -> Result<()> {
    let (Some(cgroup), Some(job_cgroup)) = (&args.cgroup, &args.job_cgroup) else {
        bail!("--set-cap-mib needs --cgroup and --job-cgroup");
    };
    let lib = args.nvml_lib.as_deref().map(|p| p.as_os_str());
    match cap::set_caps(lib, &args.gpus, cgroup, job_cgroup, cap_mib) {
        cap::CapOutcome::Set(on) => {
            let minors: Vec<u32> = on.iter().map(|(minor, _)| *minor).collect();
            let on: Vec<String> = on
                .iter()
                .map(|(minor, dir)| format!("GPU {minor} on {}", dir.display()))
                .collect();
            println!(
                "job {}: GPU memory capped at {cap_mib} MiB by the driver: {}",
                args.job_id,
                on.join(", ")
            );
            if let Some(path) = &args.notify {
                // The notice the task prints to the job's standard error as it starts.
                let line = cap::notice(args.job_id, cap_mib, &minors);
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| {
                        std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes())
                    });
            }
            Ok(())
        }
        cap::CapOutcome::NotSet(why) => {
            println!(
                "job {}: no GPU memory cap by the driver ({cap_mib} MiB asked): {why}",
                args.job_id
            );
            std::process::exit(2);
        }
    }
}

/// Seconds between two samples of the GPUs (at most the interval).
const GPU_SAMPLE_S: u64 = 5;

/// Closes every descriptor but stdin, stdout and stderr: started from a job's task (the SPANK
/// plugin), the watcher may inherit slurmstepd's own, and holding them open must not keep the
/// step from seeing its task's end.
fn close_inherited_fds() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: closing a descriptor this process does not use; the one read_dir held is
        // closed already (a failed close of it is harmless).
        unsafe { libc::close(fd) };
    }
}

/// What the outputs show now: of those that show progress, the one with the largest total.
fn read_all(outputs: &mut [Output]) -> Option<Mark> {
    outputs
        .iter_mut()
        .filter_map(|o| {
            // A file that cannot be read this time is read again next time.
            if let Ok(bytes) = o.tail.read_new() {
                o.recognizer.feed(&bytes);
            }
            o.recognizer.latest()
        })
        .max_by_key(|m| m.total)
}

/// The job's StdOut and StdErr, as Slurm reports them.
fn job_outputs(job_id: u32) -> Result<Vec<PathBuf>> {
    let out = Command::new("scontrol")
        .args(["show", "job", &job_id.to_string()])
        .output()
        .context("running scontrol show job")?;
    if !out.status.success() {
        bail!(
            "scontrol show job {job_id}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let job = cinch_core::slurm::scontrol::parse_show_job(&String::from_utf8_lossy(&out.stdout));
    let mut paths: Vec<PathBuf> = ["StdOut", "StdErr"]
        .iter()
        .filter_map(|k| job.get(*k))
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    paths.dedup();
    if paths.is_empty() {
        bail!("scontrol show job {job_id} names no output file (StdOut, StdErr)");
    }
    Ok(paths)
}

/// Sends one report, within 5 s; the credential is made for it (munged refuses one used twice).
fn send(
    job_id: u32,
    url: &str,
    ca_file: Option<&str>,
    socket: Option<&str>,
    report: WatchReport,
) -> Result<()> {
    let mut munge = Command::new("munge");
    if let Some(socket) = socket {
        munge.arg(format!("--socket={socket}"));
    }
    let out = munge
        .args(["-s", &cinch_core::net::progress_payload(job_id)])
        .output()
        .context("running munge")?;
    if !out.status.success() {
        bail!("munge: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let credential = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let body = serde_json::to_vec(&report).context("encoding the report")?;
    let response = cinch_http::post_json_authorized(
        url,
        &format!("/v1/jobs/{job_id}/progress"),
        &format!("Munge {credential}"),
        &body,
        cinch_http::Limits {
            connect: Duration::from_secs(2),
            total: Duration::from_secs(5),
            max_body: 64 * 1024,
        },
        ca_file,
    )?;
    if response.status != 204 {
        bail!(
            "the optimizer answered {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body).trim()
        );
    }
    Ok(())
}
