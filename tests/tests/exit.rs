//! slurmctld must exit cleanly however it is stopped, with cinch loaded: the exit-time crash
//! (SIGSEGV in `__call_tls_dtors`, in cinch's code) came from a thread-local destructor that
//! `std::thread::spawn` registered on slurmctld's main thread. Every cluster's teardown already
//! checks slurmctld's exit status and looks for core files (slurm-conf/local-cluster); this test
//! stops slurmctld 52 times in the states where an exit could meet the agent mid-work, and
//! preloads a probe that records any cinch destructor registered on the main thread.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cinch_e2e::fake_optimizer::{decisions, FakeOptimizer};
use cinch_e2e::{
    repo_root, run_ok, slurm_version, tls_probe, wait_until, CinchConf, Cluster, ClusterSpec,
};

/// The probe must see a destructor registered the way Rust's std registers one; otherwise an
/// empty report would prove nothing.
#[test]
fn the_destructor_probe_sees_a_registration_on_the_main_thread() {
    let dir = std::env::temp_dir().join(format!("cinch-e2e/probe-selftest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Named like the plugin: the probe records destructors of files whose name has it.
    let program = dir.join("job_submit_cinch-selftest");
    run_ok(
        Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&program)
            .arg(repo_root().join("tests/probe/probe_selftest.c")),
    );
    let report = dir.join("report.txt");
    let _ = std::fs::remove_file(&report);
    run_ok(
        Command::new(&program)
            .env("LD_PRELOAD", tls_probe())
            .env("CINCH_TLS_PROBE", &report),
    );
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    assert_eq!(text.lines().count(), 1, "probe report: {text:?}");
    assert!(text.contains("job_submit_cinch-selftest"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the fake optimizer does with each request.
const ANSWER: u8 = 0;
const HANG: u8 = 1;

#[test]
fn slurmctld_never_runs_a_cinch_destructor_and_survives_50_stops() {
    let behaviour = Arc::new(AtomicU8::new(ANSWER));
    let fake = {
        let behaviour = behaviour.clone();
        FakeOptimizer::start(move |snapshot, _| {
            if behaviour.load(Ordering::Relaxed) == HANG {
                // Longer than the plugin's request deadline: the agent is mid-call when the
                // stop comes.
                thread::sleep(Duration::from_secs(3));
            }
            decisions(snapshot, vec![])
        })
    };
    let cluster = Cluster::up(ClusterSpec {
        nodes: 2,
        gpus_per_node: 2,
        racks: 1,
        cinch_conf: CinchConf::Text(format!(
            "Mode=enforce\nOptimizerUrl={}\nIntervalSeconds=1\nRequestTimeoutMs=1000\n\
             LogLevel=verbose\n",
            fake.url
        )),
        tls_probe: true,
        ..ClusterSpec::default()
    });
    cluster.write_optimizer_token(&fake.token);
    // Pending jobs give every round a snapshot to build and send (held by --begin, so they
    // stay queued through every restart).
    for i in 0..200 {
        cluster.sbatch(
            &[
                "--begin=now+2hours",
                "-G",
                &(1 + i % 2).to_string(),
                "-J",
                "queued",
            ],
            "true",
        );
    }
    let started = Instant::now();
    let mut states = Vec::new();
    for stop in 0..52 {
        let state = match stop % 4 {
            0 => {
                // The agent mid-round: a moment inside its one-second cycle.
                thread::sleep(Duration::from_millis(1_000 + (stop as u64 * 137) % 1_000));
                "agent mid-round"
            }
            1 => {
                behaviour.store(HANG, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(1_500));
                "optimizer hanging"
            }
            2 => {
                let primary = "Running as primary controller";
                let before = cluster.slurmctld_log().matches(primary).count();
                run_ok(cluster.slurm("scontrol").arg("reconfigure"));
                // From 23.11 a foreground slurmctld reconfigures by re-executing itself (same
                // PID), after answering; a SIGTERM before the new image has set up its handlers
                // kills it by Slurm's own doing (status 143, seen on 24.11.5), so the stop comes
                // once the new image runs. 22.05 reconfigures in place.
                if slurm_version() >= (23, 11) {
                    cluster.wait_for_log(primary, before + 1, Duration::from_secs(20));
                }
                "just after a reconfigure"
            }
            _ => {
                // A submission burst from another thread while slurmctld stops (sbatch
                // retries and then fails once it is gone; either is fine here).
                let burst = Arc::new(AtomicBool::new(true));
                let submitter = {
                    let burst = burst.clone();
                    let conf = cluster.dir().join("etc/slurm.conf");
                    thread::spawn(move || {
                        while burst.load(Ordering::Relaxed) {
                            let _ = Command::new("sbatch")
                                .env("SLURM_CONF", &conf)
                                .args(["--begin=now+2hours", "-G", "1", "-J", "burst"])
                                .args(["-o", "/dev/null", "--wrap", "true"])
                                .output();
                        }
                    })
                };
                thread::sleep(Duration::from_millis(700));
                cluster.restart_slurmctld_checked(&format!("stop {stop} (submission burst)"));
                burst.store(false, Ordering::Relaxed);
                submitter.join().unwrap();
                states.push("submission burst");
                continue;
            }
        };
        cluster.restart_slurmctld_checked(&format!("stop {stop} ({state})"));
        behaviour.store(ANSWER, Ordering::Relaxed);
        states.push(state);
    }
    assert_eq!(states.len(), 52);
    // The loop kept working through it all: the optimizer still gets snapshots (once the nodes
    // registered with the last slurmctld: the agent waits for them first).
    let before = fake.requests();
    wait_until(
        Duration::from_secs(30),
        || (fake.requests() > before).then_some(()),
        || {
            format!(
                "no round after the last restart:\n{}",
                cluster.cinch_log_tail(20)
            )
        },
    );
    let report = cluster.tls_probe_report();
    assert!(
        report.is_empty(),
        "cinch left destructors on slurmctld's main thread:\n{report}"
    );
    eprintln!(
        "52 stops of slurmctld in {:.0} s, all with exit status 0 and no core file",
        started.elapsed().as_secs_f64()
    );
}
