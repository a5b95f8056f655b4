//! `cinch-watch` as a job's node runs it: what it reads from the job's output, what it sends the
//! optimizer (a stand-in server), how it proves itself (a stand-in `munge`), and that it ends
//! with the job.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cinch-watch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn watch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cinch-watch"))
}

#[test]
fn once_prints_the_progress_the_output_shows() {
    let d = dir("once");
    let (out, err) = (d.join("slurm-7.out"), d.join("slurm-7.err"));
    std::fs::write(&out, "loading data\nmodel ready\n").unwrap();
    std::fs::write(
        &err,
        "\r 12%|#         | 600/5000 [02:01<14:50,  4.94it/s]\r 13%|#         | 650/5000 [02:11<14:40]",
    )
    .unwrap();
    let run = watch()
        .args(["--job-id", "7", "--once", "--output"])
        .arg(&out)
        .arg("--output")
        .arg(&err)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        r#"{"done":650,"total":5000}"#
    );
    // Output that shows no progress.
    let run = watch()
        .args(["--job-id", "7", "--once", "--output"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "null");
    let _ = std::fs::remove_dir_all(&d);
}

/// `--once --sample-gpus-s N`: the job's GPUs sampled through NVML for N seconds and printed
/// with the progress (what plugin/watch/check-gpu.sh runs on a real GPU); here the stand-in
/// NVML's GPUs 1 and 3 at 37% and 1,000 MiB each.
#[test]
fn once_samples_the_jobs_gpus_where_asked() {
    let d = dir("once-gpu");
    let out = d.join("slurm-8.out");
    std::fs::write(&out, "step 3/10\n").unwrap();
    let run = watch()
        .env("FAKE_NVML_BUSY", "37")
        .env("FAKE_NVML_USED_MIB", "1000")
        .args([
            "--job-id",
            "8",
            "--once",
            "--sample-gpus-s",
            "2",
            "--gpus",
            "1,3",
        ])
        .arg("--nvml-lib")
        .arg(fake_nvml(&d))
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        r#"{"gpu":{"busy_percent":37,"gpus":2,"memory_mib":2000},"progress":{"done":3,"total":10}}"#
    );
    // Without a driver it says so and fails: the check is of the driver.
    let run = watch()
        .args([
            "--job-id",
            "8",
            "--once",
            "--sample-gpus-s",
            "1",
            "--gpus",
            "0",
        ])
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--output"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("--sample-gpus-s: NVML: "),
        "{run:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A `munge` that prints a credential naming its payload and notes its arguments.
fn fake_munge(d: &Path) -> PathBuf {
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join("munge");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$@\" >>{}\nshift_next=0\nfor a in \"$@\"; do [ $shift_next = 1 ] && p=$a; [ \"$a\" = -s ] && shift_next=1 || shift_next=0; done\necho \"CRED[$p]\"\n",
            d.join("munge-args").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The stand-in NVML library (tests/fake_nvml.c), built once per test process.
fn fake_nvml(d: &Path) -> PathBuf {
    fake_nvml_built(d, "libfake-nvml.so", &[])
}

fn fake_nvml_built(d: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let lib = d.join(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_nvml.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .args(defines)
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(built.success(), "cc {}", source.display());
    lib
}

/// `--set-cap-mib`, as cinch's SPANK plugin runs it for a shared job's task: the driver's limit
/// (soft = hard = the cap, in bytes) on the task's cgroup for each of its GPUs, found by minor
/// number; on the nearest ancestor that takes it, never above the job's cgroup; a notice in the
/// job's standard error; and, where the driver cannot, one line saying why and exit status 2.
#[test]
fn set_cap_asks_the_driver_to_hold_a_shared_jobs_cgroup_to_its_cap() {
    let d = dir("cap");
    let nvml = fake_nvml(&d);
    let log = d.join("limits.log");
    let stderr = d.join("slurm-12.err");
    std::fs::write(&stderr, "").unwrap();
    let job = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_12";
    let task = format!("{job}/step_batch/user/task_0");
    let run = |at: &str, lib: &Path, cgroup: &str| {
        watch()
            .args(["--job-id", "12", "--set-cap-mib", "10240", "--gpus", "3"])
            .args(["--cgroup", cgroup, "--job-cgroup", job])
            .arg("--nvml-lib")
            .arg(lib)
            .arg("--notify")
            .arg(&stderr)
            .env("FAKE_NVML_LIMITS_LOG", &log)
            .env("FAKE_NVML_LIMITS_AT", at)
            .output()
            .unwrap()
    };
    // The task's own cgroup takes it.
    let out = run(&task, &nvml, &task);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("job 12: GPU memory capped at 10240 MiB by the driver: GPU 3 on {task}")
    );
    let bytes = 10240u64 << 20;
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!("3 {task} {bytes} {bytes}\n")
    );
    let told = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        told.starts_with("cinch: job 12 shares its GPU: the driver holds it to 10240 MiB")
            && told.contains("fails with CUDA out of memory in this job alone"),
        "{told}"
    );
    // Only the job's cgroup has limit files: tried from the task's up to it.
    std::fs::remove_file(&log).unwrap();
    let out = run(job, &nvml, &task);
    assert!(out.status.success(), "{out:?}");
    let tried: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(
        tried,
        [
            task.clone(),
            format!("{job}/step_batch/user"),
            format!("{job}/step_batch"),
            job.to_string()
        ]
    );
    // None up to the job's: nothing set above it, and said.
    std::fs::remove_file(&log).unwrap();
    let out = run("/sys/fs/cgroup", &nvml, &task);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("no GPU memory cap by the driver (10240 MiB asked): NVML refused the limit"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 4);
    // A cgroup outside the job's is refused before NVML is asked.
    let out = run(job, &nvml, "/sys/fs/cgroup/user.slice");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is not inside the job's cgroup"),
        "{out:?}"
    );
    // A driver without per-cgroup limits, and a node without a driver: said, nothing set.
    let old = fake_nvml_built(&d, "libfake-nvml-old.so", &["-DNO_MEMORY_LIMITS"]);
    let out = run(&task, &old, &task);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "driver 615.00.00-fake has no per-cgroup GPU memory limits (nvmlDeviceSetMemoryLimits_v1"
        ),
        "{out:?}"
    );
    let out = run(&task, &d.join("no-such-libnvidia-ml.so"), &task);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no NVML on this node"),
        "{out:?}"
    );
    // No GPU named (a job on shards): every GPU of the node (the stand-in's 16).
    std::fs::remove_file(&log).unwrap();
    let out = watch()
        .args(["--job-id", "12", "--set-cap-mib", "512", "--cgroup", &task])
        .args(["--job-cgroup", job, "--nvml-lib"])
        .arg(&nvml)
        .env("FAKE_NVML_LIMITS_LOG", &log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let minors: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(minors, (0..16).map(|m| m.to_string()).collect::<Vec<_>>());
    // The job was told each time the cap was set (twice here), never when it was not.
    assert_eq!(std::fs::read_to_string(&stderr).unwrap().lines().count(), 2);
    let _ = std::fs::remove_dir_all(&d);
}

/// Reads one request from the watcher and answers 204.
fn answer_one(server: &TcpListener) -> String {
    let (mut conn, _) = server.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = conn.read(&mut buf) {
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request);
        let complete = text.split_once("\r\n\r\n").is_some_and(|(head, body)| {
            head.lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .is_some_and(|length| body.len() >= length)
        });
        if n == 0 || complete {
            break;
        }
    }
    conn.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
    String::from_utf8_lossy(&request).into_owned()
}

#[test]
fn reports_progress_and_gpu_use_with_a_credential_for_the_job_and_ends_with_its_step() {
    let d = dir("report");
    let bin = fake_munge(&d);
    let nvml = fake_nvml(&d);
    let out = d.join("slurm-9.out");
    std::fs::write(&out, "step 100/1000\n").unwrap();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.local_addr().unwrap());
    // The job's step: ends after a few seconds.
    let mut step = Command::new("sleep").arg("8").spawn().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut watcher = watch()
        .env("PATH", path)
        .env("FAKE_NVML_BUSY", "40")
        .env("FAKE_NVML_USED_MIB", "2048")
        .args([
            "--job-id",
            "9",
            "--interval-s",
            "5",
            "--munge-socket",
            "/run/m.sock",
        ])
        .args(["--gpus", "1,3", "--nvml-lib"])
        .arg(&nvml)
        .args([
            "--optimizer",
            &url,
            "--parent-pid",
            &step.id().to_string(),
            "--output",
        ])
        .arg(&out)
        .spawn()
        .unwrap();
    // The first report: GPU use alone (one reading of the steps gives no rate yet).
    let first = answer_one(&server);
    std::fs::write(&out, "step 100/1000\nstep 150/1000\n").unwrap();
    let second = answer_one(&server);
    for request in [&first, &second] {
        assert!(
            request.starts_with("POST /v1/jobs/9/progress HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("Authorization: Munge CRED[cinch-progress 9]\r\n"),
            "{request}"
        );
    }
    let body = |request: &str| -> serde_json::Value {
        serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    };
    let (first, second) = (body(&first), body(&second));
    assert_eq!(first.get("progress"), None, "{first}");
    assert_eq!(
        first["gpu"],
        serde_json::json!({"gpus": 2, "busy_percent": 40, "memory_mib": 4096})
    );
    let p = &second["progress"];
    assert_eq!(
        (&p["total"], &p["done"], &p["since_done"]),
        (&1000.into(), &150.into(), &100.into())
    );
    assert!(
        p["at"].as_i64().unwrap() > p["since"].as_i64().unwrap(),
        "{second}"
    );
    assert_eq!(second["gpu"]["busy_percent"], 40);
    let args = std::fs::read_to_string(d.join("munge-args")).unwrap();
    assert!(
        args.contains("--socket=/run/m.sock -s cinch-progress 9"),
        "{args}"
    );
    // The step ends; so does the watcher, within an interval.
    step.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = watcher.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher outlived the job's step"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Where there is no driver, the watcher says so once and goes on with the output alone.
#[test]
fn without_a_driver_the_watcher_says_so_and_goes_on() {
    let d = dir("nodriver");
    let out = d.join("slurm-5.out");
    std::fs::write(&out, "step 1/10\n").unwrap();
    let mut step = Command::new("sleep").arg("2").spawn().unwrap();
    let step_pid = step.id().to_string();
    // Reaped as it ends: a zombie still answers kill(pid, 0).
    let reaper = std::thread::spawn(move || step.wait());
    let run = watch()
        .args(["--job-id", "5", "--interval-s", "5", "--gpus", "0"])
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
        .args(["--parent-pid", &step_pid, "--output"])
        .arg(&out)
        .output()
        .unwrap();
    reaper.join().unwrap().unwrap();
    assert!(run.status.success(), "{run:?}");
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.starts_with("cinch-watch: job 5: no GPU use: NVML: "),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    let _ = std::fs::remove_dir_all(&d);
}
