//! job_submit/cinch inside a real slurmctld: it loads, records what it sees of real sbatch
//! submissions, survives a broken cinch.conf and its own panics, and never stops jobs.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use cinch_e2e::{cinch_record, plugin_path, run_ok, CinchConf, Cluster, ClusterSpec};

const JOB_TIMEOUT: Duration = Duration::from_secs(60);
/// Prints what Slurm gave the job, for assertions on the real allocation.
const REPORT: &str = "echo \"node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES\"";

fn conf(text: &str) -> ClusterSpec {
    ClusterSpec {
        cinch_conf: CinchConf::Text(text.to_string()),
        ..ClusterSpec::default()
    }
}

/// Number of GPUs in the job's CUDA_VISIBLE_DEVICES, as the job itself printed it.
fn visible_gpus(output: &str) -> usize {
    let list = output
        .split_whitespace()
        .find_map(|word| word.strip_prefix("gpus="))
        .unwrap_or_else(|| panic!("job printed no gpus= line: {output:?}"));
    list.split(',').filter(|g| !g.is_empty()).count()
}

#[test]
fn plugin_exports_exactly_the_plugin_symbols() {
    let symbols = run_ok(
        Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(plugin_path()),
    );
    let names: BTreeSet<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    let expected: BTreeSet<&str> = [
        "fini",
        "init",
        "job_modify",
        "job_submit",
        "plugin_name",
        "plugin_type",
        "plugin_version",
    ]
    .into();
    assert_eq!(names, expected, "nm -D --defined-only:\n{symbols}");
}

#[test]
fn the_spank_plugin_exports_exactly_the_spank_symbols() {
    let symbols = run_ok(
        Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&cinch_e2e::artifacts().spank),
    );
    let names: BTreeSet<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    let expected: BTreeSet<&str> = [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "slurm_spank_init",
        // Starts the job watcher in a batch job's task (docs/policies/progress.md), and prints
        // a shared job's notice of its driver-held GPU memory cap.
        "slurm_spank_task_init",
        // Asks the driver to hold a shared job's task cgroup to its GPU memory cap, and removes
        // the notice as the task ends (docs/policies/sharing.md).
        "slurm_spank_task_exit",
        "slurm_spank_task_post_fork",
        "spank_plugin_version",
    ]
    .into();
    assert_eq!(names, expected, "nm -D --defined-only:\n{symbols}");
}

/// One submission and what Slurm and cinch must report for it.
struct Case {
    args: &'static [&'static str],
    /// Fields of cinch's AdminComment record.
    record: &'static [(&'static str, &'static str)],
    /// Nodes Slurm must allocate.
    nodes: &'static str,
    /// GPUs the batch step must see in CUDA_VISIBLE_DEVICES.
    gpus_seen: Option<usize>,
}

#[test]
fn slurmctld_loads_cinch_and_gpu_jobs_run_to_completion() {
    let cluster = Cluster::up(ClusterSpec::default());
    let log = cluster.slurmctld_log();
    assert!(
        log.contains("job_submit/cinch: loaded cinch") && log.contains("mode=shadow"),
        "slurmctld.log does not show cinch loading:\n{log}"
    );

    let cases = [
        Case {
            args: &["-N1", "--gres=gpu:2"],
            record: &[("gpus", "2"), ("gpu_spec", "per_node:2"), ("nodes", "1")],
            nodes: "1",
            gpus_seen: Some(2),
        },
        Case {
            args: &["-N2", "--gres=gpu:4"],
            record: &[("gpus", "8"), ("gpu_spec", "per_node:4"), ("nodes", "2")],
            nodes: "2",
            gpus_seen: Some(4),
        },
        Case {
            args: &["-N1", "--gpus=8"],
            record: &[("gpus", "8"), ("gpu_spec", "per_job:8"), ("nodes", "1")],
            nodes: "1",
            gpus_seen: Some(8),
        },
        Case {
            args: &["-N2", "--gpus=16"],
            record: &[("gpus", "16"), ("gpu_spec", "per_job:16"), ("nodes", "2")],
            nodes: "2",
            gpus_seen: Some(8),
        },
        Case {
            args: &["-N1", "-n2", "--gpus-per-task=1"],
            record: &[("gpus", "2"), ("gpu_spec", "per_task:1"), ("tasks", "2")],
            nodes: "1",
            gpus_seen: Some(2),
        },
        Case {
            args: &["-N1", "--time=5"],
            record: &[("gpus", "0"), ("gpu_spec", "none"), ("time_limit", "5")],
            nodes: "1",
            gpus_seen: None,
        },
    ];
    let ids: Vec<u32> = cases
        .iter()
        .map(|case| cluster.sbatch(case.args, REPORT))
        .collect();

    for (
        Case {
            args,
            record: expected,
            nodes,
            gpus_seen,
        },
        id,
    ) in cases.iter().zip(&ids)
    {
        let job = cluster.wait_done(*id, JOB_TIMEOUT);
        assert_eq!(job.get("JobState"), "COMPLETED", "{args:?}: {job:?}");
        assert_eq!(job.get("NumNodes"), *nodes, "{args:?}: {job:?}");
        let record = cinch_record(job.get("AdminComment"));
        for (key, value) in *expected {
            assert_eq!(
                record.get(*key).map(String::as_str),
                Some(*value),
                "{args:?}: record {key} in AdminComment {:?}",
                job.get("AdminComment")
            );
        }
        if let Some(gpus) = gpus_seen {
            assert_eq!(
                visible_gpus(&cluster.job_output(*id)),
                *gpus,
                "{args:?}: GPUs visible to the batch step"
            );
        }
    }
}

/// Users are not root: a job an unprivileged user submits gets cinch's record (with the opt-in
/// only that user's own `--requeue` gives) and runs as that user.
#[test]
fn an_unprivileged_users_jobs_are_recorded_and_run_as_that_user() {
    let cluster = Cluster::up(ClusterSpec::default());
    let with = cluster.sbatch_as(
        "nobody",
        &[
            "--gres=gpu:1",
            "--requeue",
            "--comment",
            "cinch:app=bert,ckpt=yes",
        ],
        "id -u",
    );
    let without = cluster.sbatch_as("nobody", &["--gres=gpu:2"], "id -u");
    for (id, opted_in) in [(with, true), (without, false)] {
        let job = cluster.wait_done(id, JOB_TIMEOUT);
        assert_eq!(job.get("JobState"), "COMPLETED", "{job:?}");
        assert!(job.get("UserId").starts_with("nobody("), "{job:?}");
        assert_eq!(cluster.user_job_output(id).trim(), "65534");
        let record = cinch_record(job.get("AdminComment"));
        assert_eq!(
            record.get("gpus").map(String::as_str),
            Some(if opted_in { "1" } else { "2" })
        );
        assert_eq!(
            record.get("requeue").map(String::as_str),
            opted_in.then_some("yes"),
            "{:?}",
            job.get("AdminComment")
        );
    }
}

#[test]
fn what_the_user_set_is_kept() {
    let cluster = Cluster::up(ClusterSpec::default());
    let id = cluster.sbatch(
        &[
            "--gres=gpu:1",
            "--comment=user note: keep me",
            "-J",
            "named-by-user",
        ],
        REPORT,
    );
    let job = cluster.wait_done(id, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED");
    assert_eq!(job.get("Comment"), "user note: keep me");
    assert_eq!(job.get("JobName"), "named-by-user");
    assert_eq!(cinch_record(job.get("AdminComment"))["gpus"], "1");
    assert_eq!(
        job.tres("TresPerNode"),
        "gres:gpu:1",
        "the GPU request is untouched"
    );
}

#[test]
fn broken_cinch_conf_is_reported_and_slurmctld_runs_on_defaults() {
    let cluster = Cluster::up(conf(
        "Mode=enforse\nFrobnicate=yes\nConnectTimeoutMs=-1\nnot a setting\n\u{1}\u{2}==\n",
    ));
    assert!(cluster.slurmctld_responds(), "slurmctld must keep running");
    let log = cluster.slurmctld_log();
    for expected in [
        "cinch.conf line 1: Mode='enforse' is not one of off, shadow, enforce; using default shadow",
        "cinch.conf line 2: unknown key 'Frobnicate' ignored",
        "cinch.conf line 3: ConnectTimeoutMs='-1' is not a whole number",
        "cinch.conf line 4: expected Key=Value",
        "cinch.conf line 5: unknown key",
        "mode=shadow",
    ] {
        assert!(log.contains(expected), "missing {expected:?} in slurmctld.log:\n{log}");
    }
    let id = cluster.sbatch(&["--gres=gpu:2"], REPORT);
    let job = cluster.wait_done(id, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED");
    assert_eq!(cinch_record(job.get("AdminComment"))["gpus"], "2");
}

#[test]
fn missing_cinch_conf_means_built_in_defaults() {
    let cluster = Cluster::up(ClusterSpec {
        cinch_conf: CinchConf::Missing,
        ..ClusterSpec::default()
    });
    let log = cluster.slurmctld_log();
    assert!(
        log.contains("cinch.conf; using built-in defaults") && log.contains("mode=shadow"),
        "{log}"
    );
    let id = cluster.sbatch(&["--gres=gpu:1"], REPORT);
    assert_eq!(
        cluster.wait_done(id, JOB_TIMEOUT).get("JobState"),
        "COMPLETED"
    );
}

#[test]
fn mode_off_leaves_jobs_untouched() {
    let cluster = Cluster::up(conf("Mode=off\n"));
    assert!(cluster.slurmctld_log().contains("mode=off"));
    let id = cluster.sbatch(&["-N2", "--gres=gpu:4"], REPORT);
    let job = cluster.wait_done(id, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED");
    assert!(
        cinch_record(job.get("AdminComment")).is_empty(),
        "Mode=off must not record anything: {:?}",
        job.get("AdminComment")
    );
}

#[test]
fn a_panic_in_job_submit_leaves_slurmctld_alive_and_the_job_unmodified() {
    let cluster = Cluster::up(conf("Mode=shadow\nTestPanicJobName=cinch-boom\n"));
    let pid = cluster.slurmctld_pid().expect("slurmctld runs");

    let boom = cluster.sbatch(&["-J", "cinch-boom", "-N2", "--gres=gpu:4"], REPORT);
    let job = cluster.wait_done(boom, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED", "{job:?}");
    assert!(
        cinch_record(job.get("AdminComment")).is_empty(),
        "the panicking call must leave the job as submitted: {:?}",
        job.get("AdminComment")
    );
    assert_eq!(job.get("NumNodes"), "2");

    let log = cluster.slurmctld_log();
    assert!(
        log.contains("job_submit/cinch: job_submit: internal error (panic:")
            && log.contains("deliberate panic"),
        "the panic must be logged:\n{log}"
    );

    // The same slurmctld, still responsive, and cinch still works for the next job.
    assert_eq!(
        cluster.slurmctld_pid(),
        Some(pid),
        "slurmctld must not restart"
    );
    assert!(cluster.slurmctld_responds());
    let next = cluster.sbatch(&["-J", "after-the-panic", "--gres=gpu:1"], REPORT);
    let job = cluster.wait_done(next, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED");
    assert_eq!(cinch_record(job.get("AdminComment"))["gpus"], "1");
}

/// What Slurm 22.05 does with `gres/shard` on the local cluster (`--shards`), the facts cinch's
/// sharing builds on (docs/policies/sharing.md): shards are spread evenly over a node's GPUs; two
/// shard jobs run at once, each on one GPU's shards; a request for more shards than one GPU has
/// waits for ever (Reason=Resources); and Slurm does not keep a whole-GPU job off a GPU whose
/// shards are in use.
#[test]
fn shard_jobs_share_a_node_on_one_gpus_shards_each_and_slurm_does_not_fence_whole_gpus() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 1,
        racks: 1,
        gpus_per_node: 2,
        shards_per_node: 8,
        ..ClusterSpec::default()
    });
    let report = "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_SHARDS_ON_NODE)='; sleep 15";
    let shares: Vec<u32> = (0..2)
        .map(|_| cluster.sbatch(&["--gres=shard:3"], report))
        .collect();
    for &id in &shares {
        cluster.wait_for_job(id, JOB_TIMEOUT, "running", |j| {
            j.get("JobState") == "RUNNING"
        });
    }
    let too_big = cluster.sbatch(&["--gres=shard:5"], "true");
    let whole = cluster.sbatch(&["--gres=gpu:2"], report);
    cluster.wait_for_job(whole, JOB_TIMEOUT, "running beside the shards", |j| {
        j.get("JobState") == "RUNNING"
    });
    let mut devices = BTreeSet::new();
    for &id in &shares {
        let job = cluster.wait_done(id, JOB_TIMEOUT);
        assert_eq!(job.get("JobState"), "COMPLETED", "{job:?}");
        let out = cluster.job_output(id);
        assert!(out.contains("SLURM_SHARDS_ON_NODE=3"), "{out}");
        let device = out
            .lines()
            .find_map(|l| l.strip_prefix("CUDA_VISIBLE_DEVICES="))
            .unwrap_or("")
            .to_string();
        assert_eq!(device.split(',').count(), 1, "one GPU per shard job: {out}");
        devices.insert(device);
    }
    assert_eq!(devices.len(), 2, "4 shards per GPU: 3 + 3 take both GPUs");
    let job = cluster.job(too_big);
    assert_eq!(
        (job.get("JobState"), job.get("Reason")),
        ("PENDING", "Resources"),
        "{job:?}"
    );
    run_ok(cluster.slurm("scancel").arg(too_big.to_string()));
}

/// The SPANK plugin (docs/users.md): the `--cinch-*` options are in `sbatch --help`, a bad value
/// stops sbatch with the reason, and good ones become the job's hints (in its comment, beside
/// the user's own words, replacing a comment hint of the same name); srun runs with them too.
#[test]
fn cinch_options_are_in_sbatch_help_checked_at_submission_and_become_hints() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 1,
        racks: 1,
        gpus_per_node: 2,
        ..ClusterSpec::default()
    });
    let help = run_ok(cluster.slurm("sbatch").arg("--help"));
    for option in [
        "--cinch-app=NAME",
        "--cinch-ckpt",
        "--cinch-share",
        "--cinch-gpu-mem=SIZE",
    ] {
        assert!(
            help.contains(option),
            "{option} not in sbatch --help:\n{help}"
        );
    }
    for (args, why) in [
        (
            &["--cinch-gpu-mem=lots"][..],
            "--cinch-gpu-mem SIZE: 'lots' is not a memory size",
        ),
        (&["--cinch-turnaround=3h"][..], "not a Slurm duration"),
        (&["--cinch-elastic=16-2"][..], "--cinch-elastic"),
    ] {
        let err = cluster
            .try_sbatch(&[&["--gres=gpu:1"], args].concat(), "true")
            .expect_err("sbatch must refuse");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    // Due times are read as Slurm reads --begin; one that has passed is refused, with Slurm's
    // own error for a bad time, and the user is pointed at the installed guide.
    let err = cluster
        .try_sbatch(&["--gres=gpu:1", "--cinch-due=2020-01-01T00:00"], "true")
        .expect_err("a due time in the past is refused");
    for says in [
        "cinch hint due: '2020-01-01T00:00'",
        "has passed",
        "/usr/share/doc/cinch/users.md",
        "Invalid time specified",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    let err = cluster
        .try_sbatch(&["--gres=gpu:1", "--comment=cinch:turnaround=0"], "true")
        .expect_err("a target of no time is refused");
    assert!(err.contains("no time at all"), "{err}");
    let (id, told) = cluster
        .sbatch_told(&["--gres=gpu:1", "--cinch-due=tomorrow", "--hold"], "true")
        .expect("a due time in words is taken");
    let tomorrow = run_ok(Command::new("date").args(["-d", "tomorrow", "+%Y-%m-%dT00:00:00"]));
    let fixed = format!("due={}", tomorrow.trim());
    assert!(
        told.contains(&format!("cinch: due=tomorrow is kept as {fixed}")),
        "{told}"
    );
    let job = cluster.job(id);
    assert_eq!(job.get("Comment"), format!("cinch:{fixed}"), "{job:?}");
    run_ok(cluster.slurm("scancel").arg(id.to_string()));
    let id = cluster.sbatch(
        &[
            "--gres=gpu:1",
            "--cinch-app=bert",
            "--cinch-ckpt",
            "--comment=team-a cinch:app=cifar10,turnaround=6:00:00",
        ],
        "true",
    );
    let job = cluster.wait_done(id, JOB_TIMEOUT);
    assert_eq!(job.get("JobState"), "COMPLETED", "{job:?}");
    assert_eq!(
        job.get("Comment"),
        "team-a cinch:app=bert,turnaround=6:00:00,ckpt=yes",
        "{job:?}"
    );
    let out = run_ok(
        cluster
            .slurm("srun")
            .args(["--gres=gpu:1", "--cinch-app=ncf", "hostname"]),
    );
    assert!(!out.trim().is_empty());
}
