//! The closed loop inside real Slurm: the plugin's agent snapshots the cluster, the optimizer
//! decides, the agent applies through Slurm's own update path — and when the optimizer is lost,
//! wrong or in shadow mode, Slurm carries on by itself.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use cinch_e2e::fake_optimizer::{decisions, FakeOptimizer};
use cinch_e2e::{
    cinch_record, repo_root, run_ok, slurm_version, wait_until, CinchConf, Cluster, ClusterSpec,
    Job,
};

const SHORT: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(60);
/// Time for an idle action: the watcher's first report (5 s), the agent's next round, and room
/// for a loaded machine.
const IDLE_ACTION_WAIT: Duration = Duration::from_secs(90);

fn with_optimizer(nodes: u32) -> ClusterSpec {
    ClusterSpec {
        nodes,
        optimizer: true,
        ..ClusterSpec::default()
    }
}

/// A cluster whose plugin talks to `fake` in enforce mode, one round a second.
fn with_fake(nodes: u32, fake: &FakeOptimizer) -> Cluster {
    let cluster = Cluster::up(ClusterSpec {
        nodes,
        cinch_conf: CinchConf::Text(format!(
            "Mode=enforce\nOptimizerUrl={}\nIntervalSeconds=1\nRequestTimeoutMs=1000\nLogLevel=verbose\n",
            fake.url
        )),
        ..ClusterSpec::default()
    });
    cluster.write_optimizer_token(&fake.token);
    cluster
}

fn state(job: &Job) -> &str {
    job.get("JobState")
}

fn running(job: &Job) -> bool {
    state(job) == "RUNNING"
}

fn done(job: &Job) -> bool {
    matches!(state(job), "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT")
}

fn decision(job: &Job) -> &str {
    let comment = job.get("AdminComment");
    comment
        .split(" | ")
        .find(|s| s.starts_with("cinch-decision:"))
        .unwrap_or("")
}

/// `first` starts while `then` still waits (for `why`), and `then` completes after it.
fn runs_before(cluster: &Cluster, first: u32, then: u32, why: &str) {
    cluster.wait_for_job(first, LONG, "running", running);
    assert_eq!(state(&cluster.job(then)), "PENDING", "{why}");
    assert_eq!(
        state(&cluster.wait_for_job(then, LONG, "done", done)),
        "COMPLETED"
    );
}

/// Nodes of a NodeList like `n[2,4]` or `n1`.
fn nodes_of(list: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    if let Some((prefix, rest)) = list.split_once('[') {
        for part in rest.trim_end_matches(']').split(',') {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            for n in lo.parse::<u32>().unwrap()..=hi.parse::<u32>().unwrap() {
                out.insert(format!("{prefix}{n}"));
            }
        }
    } else if !list.is_empty() {
        out.extend(list.split(',').map(str::to_string));
    }
    out
}

/// Busy GPUs on n1 and n3 (4 each, in racks 1 and 2) for the rest of the test.
fn half_fill(cluster: &Cluster) -> Vec<u32> {
    ["n1", "n3"]
        .iter()
        .map(|n| {
            let id = cluster.sbatch(&["-w", n, "--gres=gpu:4", "-J", "filler"], "sleep 300");
            cluster.wait_for_job(id, SHORT, "running", running);
            id
        })
        .collect()
}

#[test]
fn consolidate_pins_a_job_that_slurm_alone_spreads_across_racks() {
    let cluster = Cluster::up(with_optimizer(4));
    half_fill(&cluster);

    // Slurm on its own (the optimizer decides nothing): 12 GPUs land in both racks.
    cluster.cinch_policy(&["set", "policy=passthrough"]);
    let alone = cluster.sbatch(&["--gpus=12", "-J", "alone"], "sleep 2");
    let job = cluster.wait_for_job(alone, LONG, "running", running);
    let placed = nodes_of(job.get("NodeList"));
    assert!(
        placed.iter().any(|n| n == "n1" || n == "n2")
            && placed.iter().any(|n| n == "n3" || n == "n4"),
        "premise: Slurm alone spreads this job over both racks, got {placed:?}"
    );
    assert_eq!(decision(&job), "", "passthrough decides nothing");
    cluster.wait_for_job(alone, LONG, "done", done);

    // With consolidate: the same request stays inside rack1.
    cluster.cinch_policy(&["set", "policy=consolidate"]);
    let id = cluster.sbatch(&["--gpus=12", "-J", "consolidated"], "sleep 2");
    let job = cluster.wait_for_job(id, LONG, "running", running);
    assert_eq!(job.get("NodeList"), "n[1-2]", "{job:?}");
    assert!(
        decision(&job).starts_with("cinch-decision: pin=n1,n2"),
        "{job:?}"
    );
    assert!(decision(&job).contains("why=consolidated: 12 GPUs on 2 nodes in rack rack1"));
    assert_eq!(
        state(&cluster.wait_for_job(id, LONG, "done", done)),
        "COMPLETED"
    );
    // The agent and the real optimizer speak in deltas: after the first exchange, rounds send
    // only the jobs that changed.
    let log = cluster.slurmctld_log();
    let exchanges: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("; sent ").nth(1))
        .collect();
    // "a/b pending, c/d running[, nodes], e/f decisions back": some round sent fewer running
    // jobs than were running (half_fill's jobs run throughout).
    let running_sent = |e: &str| -> Option<(u32, u32)> {
        let (sent, of) = e
            .split(", ")
            .nth(1)?
            .strip_suffix(" running")?
            .split_once('/')?;
        Some((sent.parse().ok()?, of.parse().ok()?))
    };
    assert!(
        exchanges
            .iter()
            .filter_map(|e| running_sent(e))
            .any(|(sent, of)| sent < of),
        "{exchanges:?}"
    );
    assert!(
        !log.contains("no delta exchange"),
        "{}",
        cluster.cinch_log_tail(30)
    );
}

/// topology/block (Slurm 23.11+, NVLink-domain racks): the agent reads the blocks as cinch's
/// racks, and a network-heavy job is kept inside one block. On an older Slurm the local cluster
/// refuses block topology, naming the release it needs.
#[test]
fn a_network_heavy_job_is_kept_inside_one_block() {
    if slurm_version() < (23, 11) {
        return local_cluster_refuses_topology("block", "needs Slurm 23.11 or later");
    }
    let cluster = Cluster::up(ClusterSpec {
        topology: "block",
        ..with_optimizer(4)
    });
    let topology = std::fs::read_to_string(cluster.dir().join("etc/topology.conf")).unwrap();
    assert!(
        topology.contains("BlockName=rack1 Nodes=n[1-2]"),
        "{topology}"
    );
    heavy_job_stays_in_block_rack1(&cluster);
}

/// On a release without the topology kind, local-cluster refuses it, naming what it needs.
fn local_cluster_refuses_topology(kind: &str, needs: &str) {
    let out = Command::new(repo_root().join("slurm-conf/local-cluster"))
        .args(["up", "--topology", kind, "--dir"])
        .arg(std::env::temp_dir().join(format!("cinch-e2e/{kind}-refused")))
        .output()
        .expect("run local-cluster");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(needs), "{stderr}");
}

/// With n1 and n3 half busy, a 12-GPU network-heavy job fits only in the block rack1 (n1, n2)
/// whole: consolidate pins it there, and says so.
fn heavy_job_stays_in_block_rack1(cluster: &Cluster) {
    half_fill(cluster);
    cluster.cinch_policy(&["set", "policy=consolidate"]);
    let id = cluster.sbatch(
        &["--gpus=12", "--comment=cinch:app=bert", "-J", "heavy"],
        "sleep 2",
    );
    let job = cluster.wait_for_job(id, LONG, "running", running);
    assert_eq!(job.get("NodeList"), "n[1-2]", "{job:?}");
    assert!(
        decision(&job).contains("consolidated: 12 GPUs on 2 nodes in rack rack1"),
        "the block is cinch's rack: {job:?}"
    );
    assert_eq!(
        state(&cluster.wait_for_job(id, LONG, "done", done)),
        "COMPLETED"
    );
}

/// topology.yaml (Slurm 25.05+): the cluster's default topology is flat, and partition gpu names
/// a block topology (`Topology=nvlink`). The agent reads the partition's own topology, so a
/// network-heavy job is still kept inside one block (through the default topology alone cinch
/// would see no racks at all). On an older Slurm the local cluster refuses topology.yaml, naming
/// the release it needs.
#[test]
fn a_partitions_own_topology_from_topology_yaml_keeps_a_heavy_job_in_one_block() {
    if slurm_version() < (25, 5) {
        return local_cluster_refuses_topology("yaml", "needs Slurm 25.05 or later");
    }
    let cluster = Cluster::up(ClusterSpec {
        topology: "yaml",
        ..with_optimizer(4)
    });
    let etc = cluster.dir().join("etc");
    let yaml = std::fs::read_to_string(etc.join("topology.yaml")).unwrap();
    assert!(
        yaml.contains("- block: rack1\n        nodes: n[1-2]"),
        "{yaml}"
    );
    assert!(!etc.join("topology.conf").exists());
    let partition = run_ok(cluster.slurm("scontrol").args(["show", "partition", "gpu"]));
    assert!(partition.contains("Topology=nvlink"), "{partition}");
    heavy_job_stays_in_block_rack1(&cluster);
}

#[test]
fn a_delay_decision_keeps_a_job_pending_until_released() {
    let release_at: Arc<Mutex<Option<i64>>> = Arc::new(Mutex::new(None));
    let script_release = release_at.clone();
    let fake = FakeOptimizer::start(move |snap, _| {
        let Some(job) = snap
            .pending
            .iter()
            .find(|j| j.name.as_deref() == Some("later"))
        else {
            return decisions(snap, vec![]);
        };
        let until = *script_release.lock().unwrap().get_or_insert(snap.time + 20);
        if snap.time < until {
            decisions(
                snap,
                vec![
                    json!({"job_id": job.job_id, "delay_until": until, "reason": "scripted delay", "ttl_s": 60}),
                ],
            )
        } else {
            decisions(snap, vec![])
        }
    });
    let cluster = with_fake(2, &fake);
    let id = cluster.sbatch_as("nobody", &["-J", "later", "--gres=gpu:1"], "sleep 1");
    let job = cluster.wait_for_job(id, SHORT, "delayed by cinch", |j| {
        decision(j).contains(" begin=")
    });
    assert_eq!(state(&job), "PENDING");
    assert!(decision(&job).contains("why=scripted delay"), "{job:?}");
    // Its user asks cinch why, with no token: the answer comes from what Slurm shows them.
    let told = cluster
        .cinch_why_as("nobody", &[&id.to_string()])
        .unwrap_or_else(|e| panic!("cinch why failed: {e}"));
    for expected in [
        format!("Job {id} (later), user nobody("),
        "may not start before 20".to_string(),
        "Why: scripted delay".to_string(),
        "Unless renewed, cinch undoes this at 20".to_string(),
    ] {
        assert!(told.contains(&expected), "{expected:?} in {told}");
    }
    let json = cluster
        .cinch_why_as("nobody", &[&id.to_string(), "--output", "json"])
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["decision"]["why"], "scripted delay", "{json}");
    let err = cluster.cinch_why_as("nobody", &["999999"]).unwrap_err();
    assert!(err.contains("Invalid job id"), "{err}");
    // Hints cinch would ignore are named at sbatch, and the job is accepted.
    let (_, told) = cluster
        .sbatch_told(
            &["--comment=cinch:app=bogus,chkpt=yes", "--gres=gpu:1"],
            "true",
        )
        .unwrap();
    assert!(
        told.contains("cinch: warning: unknown hint 'chkpt' ignored"),
        "{told}"
    );
    assert!(told.contains("cinch: warning: app='bogus'"), "{told}");
    // Requests that will not count here are said too: no --requeue, no sharing partition.
    let (_, told) = cluster
        .sbatch_told(
            &["--comment=cinch:ckpt=yes,share=yes", "--gres=gpu:1"],
            "true",
        )
        .unwrap();
    for expected in [
        "cinch: ckpt=yes does not count without --requeue",
        "cinch: share=yes does not count now: this job keeps a whole GPU: this cluster has no \
         GPU-sharing partition",
    ] {
        assert!(told.contains(expected), "{expected:?} in {told}");
    }
    // Slurm's own Reason says so from its next scheduling pass (sched_interval=5 here).
    let job = cluster.wait_for_job(id, SHORT, "showing Reason=BeginTime", |j| {
        j.get("Reason") == "BeginTime"
    });
    assert_eq!(state(&job), "PENDING", "{job:?}");
    let job = cluster.wait_for_job(id, LONG, "done", done);
    assert_eq!(state(&job), "COMPLETED");
    let release = release_at.lock().unwrap().expect("the job was seen");
    let started: i64 = run_ok(Command::new("date").args(["-d", job.get("StartTime"), "+%s"]))
        .trim()
        .parse()
        .unwrap();
    assert!(
        started >= release,
        "started at {started}, before the release at {release}"
    );
}

#[test]
fn a_priority_decision_reorders_two_pending_jobs() {
    // A CPU-only job (left alone by default, OrderCpuJobs=no): the fake must never see it, and
    // a decision it sends for it anyway (it learns the id from the test) is refused.
    let cpu_job: Arc<Mutex<Option<u32>>> = Arc::new(Mutex::new(None));
    let cpu_seen = Arc::new(Mutex::new(false));
    let (script_cpu_job, script_cpu_seen) = (cpu_job.clone(), cpu_seen.clone());
    let fake = FakeOptimizer::start(move |snap, _| {
        let prio = |name: &str| match name {
            "first" => Some(100),
            "second" => Some(100_000),
            _ => None,
        };
        if snap
            .pending
            .iter()
            .any(|j| j.name.as_deref() == Some("cpu-only"))
        {
            *script_cpu_seen.lock().unwrap() = true;
        }
        let mut list: Vec<_> = snap
            .pending
            .iter()
            .filter_map(|j| {
                prio(j.name.as_deref()?).map(|p| {
                    json!({"job_id": j.job_id, "priority": p, "reason": "scripted tier", "ttl_s": 120})
                })
            })
            .collect();
        // Beside real decisions only: an answer mostly of refused ones is not used at all.
        if let Some(id) = *script_cpu_job.lock().unwrap() {
            if !list.is_empty() {
                list.push(
                    json!({"job_id": id, "priority": 100_000, "reason": "not mine", "ttl_s": 120}),
                );
            }
        }
        decisions(snap, list)
    });
    let cluster = with_fake(2, &fake);
    let cpu_only = cluster.sbatch(&["-J", "cpu-only", "--begin=now+120", "-t", "1"], "true");
    *cpu_job.lock().unwrap() = Some(cpu_only);
    let blocker = cluster.sbatch(&["-J", "blocker", "-N2", "--gres=gpu:8"], "sleep 6");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    // Submitted in this order, Slurm alone would run `first` first.
    let first = cluster.sbatch(&["-J", "first", "-N2", "--gres=gpu:8"], "sleep 3");
    let second = cluster.sbatch(&["-J", "second", "-N2", "--gres=gpu:8"], "sleep 3");
    for id in [first, second] {
        cluster.wait_for_job(id, SHORT, "reprioritized", |j| {
            decision(j).contains(" prio=")
        });
    }
    runs_before(&cluster, second, first, "the higher priority ran first");
    let cpu = cluster.job(cpu_only);
    assert_eq!(state(&cpu), "PENDING", "{cpu:?}");
    assert_eq!(decision(&cpu), "", "{cpu:?}");
    assert!(
        !*cpu_seen.lock().unwrap(),
        "the CPU-only job was sent to the optimizer"
    );
    let log = cluster.slurmctld_log();
    let refused =
        format!("job {cpu_only}: a CPU-only job (OrderCpuJobs=no), which cinch leaves alone");
    assert!(log.contains(&refused), "{refused} in slurmctld.log");
    // From Slurm 23.02 the new jobs above reached the rounds by delta reads: Slurm's job states,
    // then each new or changed job loaded on its own (plugin/src/agent/job_cache.rs); 22.05 has
    // no such call and loads every job whenever any changed.
    let loaded_one_by_one: u32 = log
        .lines()
        .filter_map(|l| l.split("; jobs read: ").nth(1))
        .filter_map(|reads| {
            reads
                .split(" delta (")
                .nth(1)?
                .split(" ")
                .next()?
                .parse::<u32>()
                .ok()
        })
        .sum();
    if slurm_version() >= (23, 2) {
        assert!(
            loaded_one_by_one >= 3,
            "the rounds loaded {loaded_one_by_one} jobs one by one; the log:\n{}",
            cluster.cinch_log_tail(40)
        );
    } else {
        assert_eq!(loaded_one_by_one, 0, "Slurm 22.05 has no delta reads");
    }
    run_ok(cluster.slurm("scancel").arg(cpu_only.to_string()));
}

/// n2 has every GPU free but no CPU (a CPU-only job holds them), which `consolidate` cannot
/// see: it pins an 8-GPU job there, where it must wait.
fn pin_to_a_node_without_cpus(cluster: &Cluster) -> u32 {
    half_fill(cluster);
    let hog = cluster.sbatch(&["-w", "n2", "-c8", "-J", "cpu-hog"], "sleep 300");
    cluster.wait_for_job(hog, SHORT, "running", running);
    let id = cluster.sbatch(&["--gpus=8", "-J", "pinned"], "sleep 1");
    let job = cluster.wait_for_job(id, SHORT, "pinned to n2", |j| j.get("ReqNodeList") == "n2");
    assert_eq!(state(&job), "PENDING", "{job:?}");
    assert!(decision(&job).starts_with("cinch-decision: pin=n2"));
    // Later rounds confirm the pin instead of flapping it (IntervalSeconds=2 here).
    std::thread::sleep(Duration::from_secs(5));
    let later = cluster.job(id);
    assert_eq!(later.get("ReqNodeList"), "n2", "{later:?}");
    // At most the pinned node too: Slurm takes a node list as nodes the job must include, and
    // without a maximum would start it on n2 and others.
    assert_eq!(later.get("NumNodes"), "1-1", "{later:?}");
    let updates = cluster
        .slurmctld_log()
        .matches(&format!("job {id}: "))
        .count();
    assert_eq!(
        updates,
        1,
        "one update, then renewals only:\n{}",
        cluster.cinch_log_tail(20)
    );
    id
}

#[test]
fn killing_the_optimizer_undoes_cinch_pins_and_jobs_still_run() {
    let cluster = Cluster::up(with_optimizer(4));
    let id = pin_to_a_node_without_cpus(&cluster);
    cluster.kill_optimizer();
    let killed = Instant::now();
    let job = cluster.wait_for_job(id, LONG, "unpinned", |j| j.get("ReqNodeList") == "(null)");
    assert_eq!(
        decision(&job),
        "",
        "cinch's record of the pin is gone: {job:?}"
    );
    assert_eq!(
        job.get("NumNodes"),
        "1",
        "no maximum node count again, as submitted: {job:?}"
    );
    eprintln!("pin undone {:?} after the optimizer died", killed.elapsed());
    let job = cluster.wait_for_job(id, LONG, "done", done);
    assert_eq!(state(&job), "COMPLETED");
    assert_eq!(job.get("NodeList"), "n4", "Slurm placed it by itself");
    assert!(cluster
        .slurmctld_log()
        .contains("optimizer unusable after 3 tries"));
    // New jobs flow under Slurm alone, without cinch's submit hold.
    let next = cluster.sbatch(&["--gpus=2", "-J", "after"], "true");
    assert_eq!(
        state(&cluster.wait_for_job(next, SHORT, "done", done)),
        "COMPLETED"
    );
}

#[test]
fn garbage_from_the_optimizer_changes_nothing() {
    // The script steps only through rounds that see the jobs below pending (a round before
    // they were submitted would spend an answer on no job). Three bad answers open the
    // breaker; the answer after them is taken (its two impossible decisions refused) and
    // closes it. A taken answer settles the round until the cluster changes, so the test
    // submits one more job before the last step instead of waiting out the idle refresh.
    let steps = Arc::new(AtomicUsize::new(0));
    let fake = FakeOptimizer::start({
        let steps = steps.clone();
        move |snap, _| {
            if snap.pending.len() < 3 {
                return decisions(snap, vec![]);
            }
            let some_job = snap.pending[0].job_id;
            match steps.fetch_add(1, Ordering::SeqCst) {
                0 => (200, "{not json".into()),
                1 => (500, "{\"error\":\"internal\",\"message\":\"boom\"}".into()),
                2 => (200, json!({"schema_version": 9, "policy": "x", "mode": "enforce", "time": 0, "decisions": []}).to_string()),
                3 => decisions(
                    snap,
                    vec![
                        json!({"job_id": 999_999, "pin_nodes": ["n1"], "reason": "?", "ttl_s": 60}),
                        json!({"job_id": some_job, "pin_nodes": ["ghost"], "reason": "?", "ttl_s": 60}),
                    ],
                ),
                _ => decisions(
                    snap,
                    vec![json!({"job_id": some_job, "delay_until": snap.time + 100 * 86_400,
                                "priority": 0, "nice": i32::MIN, "reason": "?", "ttl_s": 0})],
                ),
            }
        }
    });
    let cluster = with_fake(2, &fake);
    // Every GPU busy until the garbage has arrived, so the jobs below stay pending meanwhile
    // (however long a loaded machine takes to get the agent asking).
    let blocker = cluster.sbatch(&["-N2", "--gres=gpu:8", "-J", "blocker"], "sleep 600");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    let mut ids: Vec<u32> = ["1", "2", "4"]
        .iter()
        .map(|g| cluster.sbatch(&[&format!("--gres=gpu:{g}")], "sleep 1"))
        .collect();
    let answered = |n: usize| {
        wait_until(
            LONG,
            || (steps.load(Ordering::SeqCst) >= n).then_some(()),
            || {
                format!(
                    "the agent stopped asking ({} requests, {} with the jobs pending)",
                    fake.requests(),
                    steps.load(Ordering::SeqCst)
                )
            },
        )
    };
    answered(4);
    ids.push(cluster.sbatch(&["--gres=gpu:1"], "sleep 1"));
    answered(5);
    assert!(
        ids.iter().all(|id| state(&cluster.job(*id)) == "PENDING"),
        "premise: still queued"
    );
    run_ok(cluster.slurm("scancel").arg(blocker.to_string()));
    for id in ids {
        let job = cluster.wait_for_job(id, LONG, "done", done);
        assert_eq!(state(&job), "COMPLETED", "{job:?}");
        assert_eq!(decision(&job), "", "nothing was applied: {job:?}");
        assert_eq!(job.get("ReqNodeList"), "(null)");
    }
    assert!(cluster.slurmctld_responds());
    let log = cluster.slurmctld_log();
    for expected in [
        "malformed decisions",
        "HTTP 500",
        "optimizer unusable after 3 tries (invalid answer: optimizer speaks schema_version 9",
        "no usable answer this round: refused: optimizer answered HTTP 500",
        "refused 2 invalid decision(s)",
        "not a pending job",
        "unknown node 'ghost'",
        "the optimizer answers again",
        "ttl_s 0 out of range",
        // (The fake is an optimizer from before the delta exchange.)
        "the optimizer has no delta exchange (answered 404",
    ] {
        assert!(
            log.contains(expected),
            "missing {expected:?}:\n{}",
            cluster.cinch_log_tail(60)
        );
    }
}

#[test]
fn the_loop_resumes_after_slurmctld_restarts() {
    let cluster = Cluster::up(with_optimizer(4));
    let pinned = pin_to_a_node_without_cpus(&cluster);
    cluster.restart_slurmctld();
    let job = cluster.job(pinned);
    assert_eq!(
        job.get("ReqNodeList"),
        "n2",
        "the pin survives in Slurm's state"
    );
    assert!(
        decision(&job).starts_with("cinch-decision: pin=n2"),
        "and so does cinch's record of it"
    );
    // The restarted agent runs (restart-slurmctld returned once every node registered again).
    cluster.wait_for_log("agent: running on the primary controller", 2, SHORT);
    // A job submitted after the restart is decided by the restarted agent.
    let id = cluster.sbatch(&["--gpus=8", "-J", "after-restart"], "sleep 1");
    cluster.wait_for_job(id, LONG, "pinned by cinch", |j| {
        decision(j).starts_with("cinch-decision: pin=")
    });
    // Until the nodes registered, Slurm showed them as unknown: the agent waited for them
    // instead of undoing the pin for want of free GPUs (as it did on Slurm 24.11 before).
    let log = cluster.slurmctld_log();
    let restarted = log
        .rfind("agent: running on the primary controller")
        .unwrap();
    assert!(
        !log[restarted..].contains(&format!("job {pinned}: unpin")),
        "{}",
        &log[restarted..]
    );
}

#[test]
fn shadow_mode_decides_and_logs_but_changes_nothing() {
    let cluster = Cluster::up(with_optimizer(4));
    half_fill(&cluster);
    cluster.cinch_policy(&["set", "mode=shadow"]);
    let id = cluster.sbatch(&["--gpus=12", "-J", "shadowed"], "sleep 1");
    let job = cluster.wait_for_job(id, LONG, "running", running);
    assert_eq!(decision(&job), "", "{job:?}");
    assert_eq!(job.get("ReqNodeList"), "(null)");
    let placed = nodes_of(job.get("NodeList"));
    assert_ne!(placed, nodes_of("n[1-2]"), "Slurm placed it by itself");
    let expected = format!("shadow: job {id}: would pin to n1,n2");
    cluster.wait_for_log(&expected, 1, SHORT);
}

#[test]
fn a_burst_of_500_submissions_is_all_accepted() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 16,
        optimizer: true,
        ..ClusterSpec::default()
    });
    let start = Instant::now();
    let ids: Vec<u32> = (0..500)
        .map(|i| {
            let gpus = if i % 5 == 0 {
                "--gres=gpu:2"
            } else {
                "--gres=gpu:1"
            };
            cluster.sbatch(&[gpus, "-J", "burst"], "true")
        })
        .collect();
    let submitted = start.elapsed();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 500);
    assert!(cluster.slurmctld_responds());
    eprintln!("500 submissions accepted in {submitted:?}");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let states = run_ok(
            cluster
                .slurm("squeue")
                .args(["-h", "-t", "all", "-n", "burst", "-o", "%T"]),
        );
        let completed = states.lines().filter(|s| *s == "COMPLETED").count();
        if completed == 500 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{completed}/500 completed; states: {:?}",
            states.lines().collect::<HashSet<_>>()
        );
        assert!(cluster.slurmctld_responds(), "slurmctld stopped answering");
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "all 500 completed {:?} after the first submission",
        start.elapsed()
    );
    let ping = run_ok(
        Command::new("scontrol")
            .env("SLURM_CONF", cluster.dir().join("etc/slurm.conf"))
            .arg("ping"),
    );
    assert!(ping.contains("UP"), "{ping}");
}

/// Issue 6 live: one rack of three 8-GPU nodes with n1 and n2 half busy, so 16 GPUs are free
/// only spread over all three nodes.
#[test]
fn dally_holds_a_network_heavy_job_for_two_whole_nodes_and_releases_it_at_its_timer() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 3,
        racks: 1,
        optimizer: true,
        ..ClusterSpec::default()
    });
    let fillers: Vec<u32> = ["n1", "n2"]
        .iter()
        .map(|n| {
            let id = cluster.sbatch(&["-w", n, "--gres=gpu:4", "-J", "filler"], "sleep 600");
            cluster.wait_for_job(id, SHORT, "running", running);
            id
        })
        .collect();
    cluster.cinch_policy(&["set", "policy=dally", "node_timer_s=40", "rack_timer_s=0"]);

    // A compute-bound job (cifar10: no measured slowdown spread) is not delayed: it runs
    // spread over the three nodes at once.
    let started = Instant::now();
    let compute = cluster.sbatch(
        &["--gpus=16", "--comment=cinch:app=cifar10", "-J", "compute"],
        "sleep 2",
    );
    let job = cluster.wait_for_job(compute, SHORT, "running", running);
    assert!(started.elapsed() < SHORT);
    assert_eq!(nodes_of(job.get("NodeList")).len(), 3, "{job:?}");
    assert!(decision(&job).contains("why=compute-bound"), "{job:?}");
    cluster.wait_for_job(compute, LONG, "done", done);

    // A communication-heavy job (bert) declines the spread placement: delayed, not started.
    let submitted = Instant::now();
    let heavy = cluster.sbatch(
        &["--gpus=16", "--comment=cinch:app=bert", "-J", "heavy"],
        "sleep 2",
    );
    let job = cluster.wait_for_job(heavy, SHORT, "delayed by cinch", |j| {
        decision(j).contains("why=waits for a consolidated placement")
    });
    assert_eq!(state(&job), "PENDING", "{job:?}");
    std::thread::sleep(Duration::from_secs(20).saturating_sub(submitted.elapsed()));
    let job = cluster.job(heavy);
    assert_eq!(state(&job), "PENDING", "still waiting 20 s in: {job:?}");
    assert_eq!(job.get("Reason"), "BeginTime", "{job:?}");
    // Its 40 s timer ends without two whole nodes: it is released to run spread.
    let job = cluster.wait_for_job(heavy, LONG, "running", running);
    assert!(
        submitted.elapsed() >= Duration::from_secs(38),
        "started after {:?}, before its timer",
        submitted.elapsed()
    );
    assert_eq!(nodes_of(job.get("NodeList")).len(), 3, "{job:?}");
    assert!(
        decision(&job).contains("why=one rack placement on 3 nodes"),
        "{job:?}"
    );
    cluster.wait_for_job(heavy, LONG, "done", done);

    // When two whole nodes free up before the timer, the waiting job is pinned there.
    let second = cluster.sbatch(
        &["--gpus=16", "--comment=cinch:app=bert", "-J", "heavy2"],
        "sleep 2",
    );
    cluster.wait_for_job(second, SHORT, "delayed by cinch", |j| {
        decision(j).contains("why=waits for a consolidated placement")
    });
    run_ok(cluster.slurm("scancel").arg(fillers[0].to_string()));
    let job = cluster.wait_for_job(second, Duration::from_secs(30), "running", running);
    assert_eq!(job.get("NodeList"), "n[1,3]", "{job:?}");
    assert!(
        decision(&job).contains("why=consolidated placement on 2 nodes"),
        "{job:?}"
    );
}

/// The research baselines are live policies too: set through `cinch policy set`, QSSF orders the
/// queue by predicted service through Slurm priorities, so a job that asks for one minute passes
/// one that asks for an hour although it was submitted later.
#[test]
fn qssf_set_live_runs_the_shorter_predicted_job_first() {
    let cluster = Cluster::up(with_optimizer(2));
    let shown = cluster.cinch_policy(&["set", "policy=qssf"]);
    assert!(shown.contains("qssf"), "{shown}");
    let blocker = cluster.sbatch(&["-J", "blocker", "-N2", "--gres=gpu:8"], "sleep 12");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    // Submitted in this order, Slurm alone would run `long` first.
    let long = cluster.sbatch(
        &["-J", "long", "-N2", "--gres=gpu:8", "-t", "60"],
        "sleep 3",
    );
    let short = cluster.sbatch(
        &["-J", "short", "-N2", "--gres=gpu:8", "-t", "1"],
        "sleep 3",
    );
    for id in [long, short] {
        cluster.wait_for_job(id, SHORT, "prioritised by qssf", |j| {
            decision(j).contains(" prio=") && decision(j).contains("predicted service")
        });
    }
    let long_prio: u64 = cluster.job(long).get("Priority").parse().unwrap();
    let short_prio: u64 = cluster.job(short).get("Priority").parse().unwrap();
    assert!(
        short_prio > long_prio,
        "short {short_prio}, long {long_prio}"
    );
    runs_before(&cluster, short, long, "the shorter predicted job ran first");
}

/// Fair share still orders two users' jobs with cinch in enforce mode: cinch prefers `early`
/// (user bin's, a 1-minute limit) to `late` (daemon's, 30 minutes) and says so through nice, but
/// bin has just used the whole cluster, and its lower fair share (weight 100000 against
/// cinch's order_weight of 10000) keeps daemon's later job first. (Not `nobody`: Slurm 26.05's
/// association manager maps that name to no uid.)
#[test]
fn fair_share_still_orders_two_users_jobs_with_cinch_in_enforce_mode() {
    let cluster = Cluster::up(ClusterSpec {
        accounting: true,
        ..with_optimizer(2)
    });
    let usage = cluster.sbatch_as("bin", &["-J", "usage", "-N2", "--gres=gpu:8"], "sleep 4");
    cluster.wait_for_job(usage, LONG, "done", done);
    let blocker = cluster.sbatch(&["-J", "blocker", "-N2", "--gres=gpu:8"], "sleep 300");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    let early = cluster.sbatch_as(
        "bin",
        &["-J", "early", "-N2", "--gres=gpu:8", "-t", "1"],
        "sleep 2",
    );
    let late = cluster.sbatch_as(
        "daemon",
        &["-J", "late", "-N2", "--gres=gpu:8", "-t", "30"],
        "sleep 2",
    );
    let field = |id: u32, key: &str| -> i64 {
        cluster
            .job(id)
            .get(key)
            .parse()
            .unwrap_or_else(|_| panic!("job {id}'s {key} is not a number"))
    };
    // cinch's order, bounded: early is nicer (lower nice) than late.
    wait_until(
        LONG,
        || {
            let ordered = [early, late]
                .iter()
                .all(|&id| decision(&cluster.job(id)).contains(" nice="));
            (ordered && field(early, "Nice") < field(late, "Nice")).then_some(())
        },
        || {
            format!(
                "cinch never preferred early through nice: early {:?}, late {:?}",
                cluster.job(early),
                cluster.job(late)
            )
        },
    );
    // Slurm's decay thread ranks users once a minute (PriorityCalcPeriod=1): then daemon's job
    // outranks bin's, cinch's nice included.
    wait_until(
        Duration::from_secs(90),
        || (field(late, "Priority") > field(early, "Priority")).then_some(()),
        || {
            let sshare = run_ok(cluster.slurm("sshare").arg("-a"));
            format!(
                "fair share never put daemon's job first: early {:?}, late {:?}\n{sshare}",
                cluster.job(early),
                cluster.job(late)
            )
        },
    );
    assert!(
        field(early, "Nice") < field(late, "Nice"),
        "cinch still prefers early"
    );
    // The admin's `cinch why` shows the optimizer's latest round, which says so in numbers.
    let why = cluster.cinch_admin(&["why", &late.to_string(), "--from-optimizer"]);
    assert!(
        why.contains("The optimizer's latest decision (cinch policy, enforce mode)")
            && why.contains("Slurm's priority "),
        "{why}"
    );
    // So does the user's, proven by their MUNGE credential, for their own job only.
    let why = cluster
        .cinch_why_as("daemon", &[&late.to_string(), "--from-optimizer"])
        .unwrap_or_else(|e| panic!("daemon's cinch why failed: {e}"));
    assert!(
        why.contains("The optimizer's latest decision (cinch policy, enforce mode)")
            && why.contains("renewed unchanged by every round since")
            && why.contains("Slurm's priority "),
        "{why}"
    );
    let refused = cluster
        .cinch_why_as("daemon", &[&early.to_string(), "--from-optimizer"])
        .unwrap_err();
    assert!(
        refused.contains(&format!(
            "the optimizer has recorded no decision about job {early} of user daemon"
        )),
        "{refused}"
    );
    run_ok(cluster.slurm("scancel").arg(blocker.to_string()));
    runs_before(
        &cluster,
        late,
        early,
        "fair share ran daemon's later job first",
    );
}

/// The plugin keeps the requeue promise whatever the optimizer says: only a job whose user gave
/// `--requeue` (not the cluster's JobRequeue default, which sets Slurm's flag on every batch job)
/// and said `ckpt=yes` is requeued.
#[test]
fn only_jobs_that_opted_in_are_requeued_whatever_the_optimizer_asks() {
    let fake = FakeOptimizer::start(|snap, _| {
        let list = snap
            .running
            .iter()
            .filter(|j| j.name.as_deref().is_some_and(|n| n.starts_with("victim")))
            .map(
                |j| json!({"job_id": j.job_id, "requeue": true, "reason": "scripted", "ttl_s": 60}),
            )
            .collect();
        decisions(snap, list)
    });
    let cluster = with_fake(2, &fake);
    let opted_in = cluster.sbatch(
        &[
            "-J",
            "victim-opted-in",
            "--gres=gpu:1",
            "--requeue",
            "--comment=cinch:ckpt=yes",
        ],
        "sleep 120",
    );
    let default_only = cluster.sbatch(
        &[
            "-J",
            "victim-default",
            "--gres=gpu:1",
            "--comment=cinch:ckpt=yes",
        ],
        "sleep 120",
    );
    let job = cluster.wait_for_job(default_only, SHORT, "running", running);
    assert_eq!(
        job.get("Requeue"),
        "1",
        "premise: the cluster default sets Slurm's flag"
    );
    cluster.wait_for_job(opted_in, LONG, "requeued", |j| j.get("Restarts") == "1");
    // Rounds keep asking; the job that never opted in keeps running where it is.
    std::thread::sleep(Duration::from_secs(5));
    let job = cluster.job(default_only);
    assert_eq!(job.get("Restarts"), "0", "{job:?}");
    assert!(running(&job), "{job:?}");
    assert!(
        cluster.slurmctld_log().contains(&format!(
            "job {default_only}: requeue of a job submitted without --requeue"
        )),
        "the refusal is logged"
    );
    for id in [opted_in, default_only] {
        let _ = cluster.slurm("scancel").arg(id.to_string()).status();
    }
}

/// The default policy, `cinch`, through real Slurm: a network-heavy job is consolidated, and a
/// short job passes a long one queued before it (its predicted service is smaller, and cinch's
/// priorities make Slurm start it first).
/// With n1 and n3 half busy, a 12-GPU bert job is placed by `cinch` on n1 (4 free) and n2 (8),
/// inside rack1, its best shape, and says so; returns it and the fillers.
fn bert_is_consolidated(cluster: &Cluster) -> (u32, Vec<u32>) {
    let fillers = half_fill(cluster);
    let bert = cluster.sbatch(
        &["--gpus=12", "--comment=cinch:app=bert", "-J", "bert"],
        "sleep 2",
    );
    let job = cluster.wait_for_job(bert, LONG, "running", running);
    assert_eq!(job.get("NodeList"), "n[1-2]", "{job:?}");
    assert!(decision(&job).contains("why=predicted"), "{job:?}");
    assert!(
        decision(&job).contains("consolidated: 12 GPUs on 2 nodes in rack rack1"),
        "{job:?}"
    );
    (bert, fillers)
}

#[test]
fn cinch_consolidates_a_network_heavy_job_and_runs_a_short_job_before_a_long_one() {
    let cluster = Cluster::up(with_optimizer(4));
    assert!(
        cluster.cinch_policy(&["show"]).contains("policy: cinch\n"),
        "cinch is the default"
    );
    let (bert, fillers) = bert_is_consolidated(&cluster);
    // The plugin's agent reports itself through the optimizer's /metrics.
    let metrics = cluster.optimizer_metrics();
    for expected in [
        "cinch_agent_mode{mode=\"enforce\"} 1",
        "cinch_agent_breaker_open 0",
        "cinch_agent_round_seconds ",
        "cinch_policy_in_force{policy=\"cinch\",mode=\"enforce\"} 1",
        "cinch_build_info{version=\"",
    ] {
        assert!(metrics.contains(expected), "{expected} in {metrics}");
    }
    cluster.wait_for_job(bert, LONG, "done", done);
    for id in fillers {
        run_ok(cluster.slurm("scancel").arg(id.to_string()));
    }

    // Every GPU busy for a while; a long job, then a short one, both wanting all 32 GPUs.
    let blocker = cluster.sbatch(&["-N4", "--gres=gpu:8", "-J", "blocker"], "sleep 15");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    let long = cluster.sbatch(
        &["-N4", "--gres=gpu:8", "--time=600", "-J", "long"],
        "sleep 5",
    );
    let short = cluster.sbatch(
        &["-N4", "--gres=gpu:8", "--time=5", "-J", "short"],
        "sleep 5",
    );
    let priority = |id: u32| -> u64 { cluster.job(id).get("Priority").parse().unwrap_or(0) };
    wait_until(
        SHORT,
        || (priority(short) > priority(long)).then_some(()),
        || format!("cinch never ordered the queue: {:?}", cluster.job(short)),
    );
    assert!(decision(&cluster.job(short)).contains("shorter first"));
    let job = cluster.wait_for_job(short, LONG, "running", running);
    assert_eq!(
        state(&cluster.job(long)),
        "PENDING",
        "the long job waits: {job:?}"
    );
    cluster.wait_for_job(short, LONG, "done", done);
    let job = cluster.wait_for_job(long, LONG, "running", running);
    assert!(
        job.get("StartTime") >= cluster.job(short).get("EndTime"),
        "the long job started after the short one ended: {job:?}"
    );
    run_ok(cluster.slurm("scancel").arg(long.to_string()));
}

/// `cinch` requeues a long running job whose user opted in (`--requeue` and `ckpt=yes`) for a
/// short one that would otherwise wait hours, and never one that did not opt in.
#[test]
fn cinch_requeues_an_opted_in_long_job_for_a_short_one_and_never_one_that_did_not_opt_in() {
    let cluster = Cluster::up(with_optimizer(2));
    let long = cluster.sbatch(
        &[
            "-N2",
            "--gres=gpu:8",
            "--time=600",
            "--requeue",
            "--comment=cinch:ckpt=yes",
            "-J",
            "long",
        ],
        "sleep 600",
    );
    cluster.wait_for_job(long, SHORT, "running", running);
    let short = cluster.sbatch(
        &["-N1", "--gres=gpu:8", "--time=5", "-J", "short"],
        "sleep 3",
    );
    let job = cluster.wait_for_job(short, LONG, "done", done);
    assert_eq!(state(&job), "COMPLETED", "{job:?}");
    let requeued = cluster.job(long);
    assert_eq!(requeued.get("Restarts"), "1", "{requeued:?}");
    assert!(
        cluster
            .slurmctld_log()
            .contains(&format!("job {long}: requeued: requeued: ranked")),
        "{}",
        cluster.cinch_log_tail(40)
    );
    // Once the short job is done the long one resumes, after Slurm's requeue delay: the test
    // cluster's credential lifetime (30 s) + 1, which the agent read and told the optimizer.
    cluster.wait_for_log("agent: Slurm's requeue delay is 31 s", 1, SHORT);
    let resumed = cluster.wait_for_job(long, Duration::from_secs(90), "running again", running);
    assert_eq!(resumed.get("Restarts"), "1", "{resumed:?}");
    run_ok(cluster.slurm("scancel").arg(long.to_string()));
    cluster.wait_for_job(long, LONG, "done", done);

    // A job running with `running_args` keeps its GPUs while a short one waits behind it.
    let keeps_its_gpus = |running_args: &[&str], waiting_name: &str| {
        let kept = cluster.sbatch(running_args, "sleep 600");
        cluster.wait_for_job(kept, LONG, "running", running);
        let waiting = cluster.sbatch(
            &["-N1", "--gres=gpu:8", "--time=5", "-J", waiting_name],
            "sleep 3",
        );
        std::thread::sleep(Duration::from_secs(15));
        assert_eq!(state(&cluster.job(waiting)), "PENDING");
        let job = cluster.job(kept);
        assert_eq!(state(&job), "RUNNING", "{job:?}");
        assert_eq!(job.get("Restarts"), "0", "{job:?}");
        run_ok(cluster.slurm("scancel").arg(kept.to_string()));
        cluster.wait_for_job(waiting, LONG, "done", done);
    };
    // A preemption that does not pay: an opted-in job predicted to end in about 5 minutes (a
    // 10-minute limit x the default ratio 0.5) saves the short job less than a requeue costs
    // (restart 300 s + Slurm's requeue delay, 31 s here), so it keeps its GPUs and the short
    // job waits.
    keeps_its_gpus(
        &[
            "-N2",
            "--gres=gpu:8",
            "--time=10",
            "--requeue",
            "--comment=cinch:ckpt=yes",
            "-J",
            "near-end",
        ],
        "behind",
    );
    // The same without ckpt=yes: Slurm may requeue it, but its user never said it checkpoints.
    keeps_its_gpus(
        &[
            "-N2",
            "--gres=gpu:8",
            "--time=600",
            "--requeue",
            "-J",
            "kept",
        ],
        "waits",
    );
}

/// A site's `sacct` history in which time limits tell nothing: every job asked for 10 h; four
/// in five ran about a minute (61-70 s), the fifth 6-7 h. The same history as the core's unit
/// test `where_predictions_tell_nothing_a_running_job_is_demoted_by_attained_service_then_requeued`.
fn history_where_limits_tell_nothing() -> String {
    let mut text = String::from("JobID|JobName|User|Submit|Start|End|Timelimit|AllocTRES|State\n");
    let clock = |s: u32| format!("{:02}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60);
    for i in 0..60u32 {
        let run = if i % 5 == 0 {
            21_600 + i * 60
        } else {
            61 + i % 10
        };
        // Two jobs a day, each ending before the next starts: learned in this order.
        let (day, start) = (1 + i / 2, (i % 2) * 12 * 3600);
        let at = |s: u32| format!("2026-01-{day:02}T{}", clock(s));
        text.push_str(&format!(
            "{}|hist-{i}|ann|{}|{}|{}|10:00:00|cpu=8,gres/gpu=8,node=1|COMPLETED\n",
            100 + i,
            at(start),
            at(start),
            at(start + run)
        ));
    }
    text
}

/// Where run-time predictions tell nothing, `cinch` orders by least attained service, as
/// Tiresias does: an opted-in running job keeps its GPUs while it may still be one of the
/// minute-long jobs, and is requeued for a new job like it once it has outrun them all (its
/// Gittins index under the run model falls; the preemption pays, hours against a requeue).
#[test]
fn where_predictions_tell_nothing_a_job_that_outran_the_short_runs_is_requeued_for_a_new_one() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 1,
        racks: 1,
        optimizer: true,
        optimizer_history: Some(history_where_limits_tell_nothing()),
        ..ClusterSpec::default()
    });
    let first = cluster.sbatch(
        &[
            "--gres=gpu:8",
            "--time=600",
            "--requeue",
            "--comment=cinch:ckpt=yes",
            "-J",
            "first",
        ],
        "sleep 600",
    );
    cluster.wait_for_job(first, SHORT, "running", running);
    let seen_running = Instant::now();
    let next = cluster.sbatch(&["--gres=gpu:8", "--time=600", "-J", "next"], "sleep 5");
    // Under 61 s `first` may still be a minute-long job: swapping the two gains nothing, and
    // cinch says why `next` waits: it judges it by every ended job, predictions telling nothing.
    let judged_by_all =
        |job: &Job| decision(job).contains("judged by the runs of the 60 ended jobs");
    let waiting = cluster.wait_for_job(next, SHORT, "ranked by cinch", judged_by_all);
    assert_eq!(state(&waiting), "PENDING", "{waiting:?}");
    std::thread::sleep(Duration::from_secs(50).saturating_sub(seen_running.elapsed()));
    let kept = cluster.job(first);
    assert_eq!(
        (state(&kept), kept.get("Restarts")),
        ("RUNNING", "0"),
        "requeued before it outran the minute-long jobs: {kept:?}\n{}",
        cluster.cinch_log_tail(40)
    );
    // Past 70 s it is one of the long ones: requeued, and `next` runs.
    let job = cluster.wait_for_job(next, Duration::from_secs(90), "done", done);
    assert_eq!(state(&job), "COMPLETED", "{job:?}");
    let requeued = cluster.job(first);
    assert_eq!(requeued.get("Restarts"), "1", "{requeued:?}");
    assert!(
        cluster
            .slurmctld_log()
            .contains(&format!("job {first}: requeued: requeued: ranked")),
        "{}",
        cluster.cinch_log_tail(40)
    );
    run_ok(cluster.slurm("scancel").arg(first.to_string()));
    cluster.wait_for_job(first, LONG, "done", done);
}

/// `cinch` runs a job whose QoS target is near before jobs queued ahead of it that would
/// otherwise go first (shorter ones), through its Slurm priority, where the admin counts its
/// account's targets; the job meets its target and the reason (target, predicted finish, slack)
/// is in its AdminComment. The same target in an account the admin did not allow overtakes
/// nobody, and its reason says why. A malformed target is refused at submission with the reason.
#[test]
fn cinch_runs_a_job_with_a_near_target_before_earlier_shorter_jobs_and_says_why() {
    let cluster = Cluster::up(with_optimizer(2));
    cluster.cinch_policy(&["set", r#"user_target_accounts=["deadline-ok"]"#]);
    let refused = cluster
        .try_sbatch(&["--gres=gpu:1", "--comment=cinch:turnaround=3h"], "true")
        .expect_err("a malformed target is refused");
    assert!(
        refused.contains("cinch hint turnaround: '3h' is not a Slurm duration"),
        "{refused}"
    );

    let blocker = cluster.sbatch(&["-N2", "--gres=gpu:8", "-J", "blocker"], "sleep 15");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    let all = ["-N2", "--gres=gpu:8", "--time=5"];
    let first = cluster.sbatch(&[&all[..], &["-J", "first"]].concat(), "sleep 5");
    let second = cluster.sbatch(&[&all[..], &["-J", "second"]].concat(), "sleep 5");
    // Predicted 30 minutes (a 60-minute limit x the default ratio 0.5); due 45 minutes after
    // submission: 15 minutes of slack, less than its run, so it would be urgent.
    let targeted = |account: &str, name: &str| {
        cluster
            .sbatch_told(
                &[
                    "-N2",
                    "--gres=gpu:8",
                    "--time=60",
                    "--comment=cinch:turnaround=45:00",
                    &format!("--account={account}"),
                    "-J",
                    name,
                ],
                "sleep 5",
            )
            .unwrap()
    };
    let (pushy, told) = targeted("elsewhere", "pushy");
    // Its user is told at sbatch that the target will not count, and why (the agent has had
    // the optimizer's answers since the blocker started).
    assert!(
        told.contains(
            "cinch: turnaround=45:00 does not count here: this site counts stated targets only \
             in account deadline-ok, not this job's"
        ),
        "{told}"
    );
    let (due, told) = targeted("deadline-ok", "due");
    assert!(!told.contains("does not count"), "{told}");
    let priority = |id: u32| -> u64 { cluster.job(id).get("Priority").parse().unwrap_or(0) };
    wait_until(
        SHORT,
        || (priority(due) > priority(first).max(priority(second))).then_some(()),
        || {
            format!(
                "cinch never put the urgent job first: {:?}",
                cluster.job(due)
            )
        },
    );
    let job = cluster.job(due);
    let why = decision(&job);
    assert!(
        why.contains("QoS target: finish by") && why.contains("(hint turnaround)"),
        "{job:?}"
    );
    assert!(
        why.contains("predicted finish") && why.contains("slack 00:1"),
        "{job:?}"
    );
    assert!(why.contains("urgent"), "{job:?}");
    assert!(decision(&cluster.job(first)).contains("shorter first"));
    let job = cluster.job(pushy);
    assert!(
        decision(&job).contains("QoS hint turnaround not counted")
            && !decision(&job).contains("urgent"),
        "{job:?}"
    );
    assert!(
        priority(pushy) < priority(first).min(priority(second)),
        "{job:?}"
    );

    let job = cluster.wait_for_job(due, LONG, "running", running);
    for id in [first, second] {
        assert_eq!(state(&cluster.job(id)), "PENDING", "{job:?}");
    }
    let job = cluster.wait_for_job(due, LONG, "done", done);
    assert_eq!(state(&job), "COMPLETED", "{job:?}");
    let epoch = |t: &str| -> i64 {
        let out = run_ok(Command::new("date").args(["-d", t, "+%s"]));
        out.trim().parse().unwrap()
    };
    assert!(
        epoch(job.get("EndTime")) <= epoch(job.get("SubmitTime")) + 45 * 60,
        "met its target: {job:?}"
    );
    for id in [first, second, pushy] {
        cluster.wait_for_job(id, LONG, "done", done);
    }
}

/// What cinch did to a job stays told after it stops: set the mode off, and `cinch why` (as the
/// job's user) says what cinch had changed, from when until when, why it stopped, and that the
/// optimizer has decided nothing since.
#[test]
fn cinch_why_keeps_what_cinch_did_after_the_mode_is_set_off() {
    let cluster = Cluster::up(with_optimizer(2));
    let blocker = cluster.sbatch(&["-N2", "--gres=gpu:8", "-J", "blocker"], "sleep 300");
    cluster.wait_for_job(blocker, SHORT, "running", running);
    let all = ["-N2", "--gres=gpu:8", "--time=60"];
    let _long = cluster.sbatch_as("nobody", &[&all[..], &["-J", "long"]].concat(), "true");
    let short = cluster.sbatch_as(
        "nobody",
        &["-N2", "--gres=gpu:8", "--time=5", "-J", "short"],
        "true",
    );
    cluster.wait_for_job(short, SHORT, "changed by cinch", |j| {
        decision(j).starts_with("cinch-decision:")
    });
    cluster.cinch_policy(&["set", "mode=off"]);
    let job = cluster.wait_for_job(short, SHORT, "undone", |j| decision(j).is_empty());
    assert!(
        job.get("AdminComment").contains("cinch-past: did=") && state(&job) == "PENDING",
        "{job:?}"
    );
    let told = cluster
        .cinch_why_as("nobody", &[&short.to_string()])
        .unwrap_or_else(|e| panic!("cinch why failed: {e}"));
    for expected in [
        "and stopped: cinch's mode is off now: it changes no job.",
        "Its last reason then: ",
        "Slurm schedules it as submitted now.",
        "the optimizer has decided nothing since its mode was set off at",
    ] {
        assert!(told.contains(expected), "{expected:?} in {told}");
    }
    assert!(!told.contains("has not changed this job"), "{told}");
    run_ok(cluster.slurm("scancel").arg(blocker.to_string()));
}

/// A batch job that prints its progress (a tqdm bar) gets `cinch-watch` beside it from cinch's SPANK plugin,
/// where plugstack.conf names the watcher and the optimizer (`watch=`, `optimizer=`): started in
/// the job's batch task as its user, it reads the job's output file, proves itself with the
/// user's MUNGE credential, and the optimizer takes its readings; `cinch why` then tells the user
/// how far the job is and about how long it has left (within 10% of its real run, read at a
/// tenth of its steps). The watcher ends with the job.
///
/// Idle GPUs on the same cluster (one cluster for both, to keep the suite short): with
/// cinch.conf's `IdleAction=requeue` (no grace, no warning time, for the test's sake) and the
/// stand-in NVML's GPUs at 0%, a job whose user opted in to requeues is requeued by the agent;
/// one that did not (and prints nothing) is flagged, reported and left running, `cinch idle`
/// lists it, and its user's `cinch why` says what happened.
#[test]
fn the_spank_plugin_starts_a_watcher_whose_readings_cinch_why_tells_and_idle_gpus_act_on() {
    let cluster = Cluster::up(ClusterSpec {
        cinch_conf_append: Some(
            "IdleGraceMinutes=0\nIdleWarnMinutes=0\nIdleAction=requeue\n".into(),
        ),
        ..with_optimizer(2)
    });
    start_watchers(&cluster);
    let job = cluster.sbatch_as(
        "nobody",
        &["--gres=gpu:2", "-J", "progress"],
        // A tqdm bar on stderr, redrawn after a carriage return (the same file as stdout).
        "for i in $(seq 1 80); do printf '\\r%3d%%|#    | %d/80 [00:%02d<00:%02d,  2.00it/s]' \
         $((i * 100 / 80)) $i $((i / 2)) $(((80 - i) / 2)) >&2; sleep 0.5; done; echo >&2",
    );
    let opted_in = cluster.sbatch_as(
        "nobody",
        &[
            "--gres=gpu:1",
            "-J",
            "idle-opted-in",
            "--requeue",
            "--comment=cinch:ckpt=yes",
        ],
        "for i in $(seq 1 300); do echo \"step $i/300\"; sleep 1; done",
    );
    let silent = cluster.sbatch_as(
        "nobody",
        &["--gres=gpu:1", "-J", "idle-silent"],
        "sleep 300",
    );
    cluster.wait_for_job(job, LONG, "running", running);
    let started = unix_now();
    // The job's watchers running as its user, as `pgrep -a` lists them (none: empty).
    let watchers = || {
        let out = Command::new("pgrep")
            .args(["-a", "-u", "nobody", "-f"])
            .arg(format!("cinch-watch --job-id {job} "))
            .output()
            .expect("run pgrep");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The progress source's error (issue 62's target: at most 10% once a job has run a tenth of
    // its run): the end its first reading past a tenth of the steps predicts.
    let predicted_end = wait_until(
        LONG,
        || {
            let out = cluster
                .cinch_why_as("nobody", &[&job.to_string(), "--output", "json"])
                .ok()?;
            let why: serde_json::Value = serde_json::from_str(&out).ok()?;
            let p = &why["progress"];
            let (done, total) = (
                p["progress"]["done"].as_u64()?,
                p["progress"]["total"].as_u64()?,
            );
            (done * 10 >= total).then_some(())?;
            Some(p["now"].as_i64()? + p["left_s"].as_i64()?)
        },
        || {
            format!(
                "no progress reading past a tenth of the steps: {:?}; watchers: {:?}; {}",
                cluster.cinch_why_as("nobody", &[&job.to_string()]),
                watchers(),
                cluster.cinch_log_tail(20)
            )
        },
    );
    let told = cluster
        .cinch_why_as("nobody", &[&job.to_string()])
        .expect("cinch why as the job's user");
    assert!(
        told.contains("Its progress, as its output shows it (read by cinch-watch at ")
            && told.contains(" of 80 steps (")
            && told.contains("left at the rate of its last"),
        "{told}"
    );
    // Its two GPUs, as the stand-in driver shows them (FAKE_NVML_BUSY is unset in the job:
    // idle). Slurm numbers the dummy GPUs as the stand-in does, from 0.
    assert!(
        told.contains("): 2 GPUs, 0% busy on average over the watcher's last interval, 0.0 GiB"),
        "{told}"
    );
    let running_watchers = watchers();
    assert_eq!(
        running_watchers.lines().count(),
        1,
        "one watcher for the job: {running_watchers}"
    );
    // Idle GPUs: the watchers' first reports come 5 s into the jobs; the optimizer's health
    // check then shows a new answer epoch, and the agent asks at its next round.
    cluster.wait_for_job(
        opted_in,
        IDLE_ACTION_WAIT,
        "requeued for its idle GPUs",
        |j| j.get("Restarts") != "0",
    );
    assert!(
        cluster.slurmctld_log().contains(&format!(
            "job {opted_in}: requeued: requeued: its GPUs have been idle since"
        )),
        "{}",
        cluster.cinch_log_tail(40)
    );
    // The job that did not opt in: flagged and reported, never requeued.
    let listed = wait_until(
        IDLE_ACTION_WAIT,
        || {
            let idle = cluster.cinch_admin(&["idle"]);
            idle.lines()
                .any(|l| l.starts_with(&format!("{silent} ")) && l.contains(" requeue "))
                .then_some(idle)
        },
        || {
            format!(
                "cinch idle never listed job {silent}: {}",
                cluster.cinch_admin(&["idle"])
            )
        },
    );
    assert!(listed.contains("nobody"), "{listed}");
    let why_silent = cluster
        .cinch_why_as("nobody", &[&silent.to_string()])
        .expect("cinch why as the job's user");
    assert!(
        why_silent.contains("its GPUs have been idle since")
            && why_silent.contains("did not opt in to requeues"),
        "{why_silent}"
    );
    assert!(
        cluster.slurmctld_log().contains(&format!(
            "job {silent}: GPUs idle: its GPUs have been idle since"
        )),
        "{}",
        cluster.cinch_log_tail(40)
    );
    let still = cluster.job(silent);
    assert!(running(&still) && still.get("Restarts") == "0", "{still:?}");
    // Its warning is on its record too, where `scontrol show job` shows it.
    assert!(
        still
            .get("AdminComment")
            .contains("cinch-idle: its GPUs have been idle since"),
        "{still:?}"
    );
    // The progress job ran to its end: how far off its progress's prediction was.
    cluster.wait_for_job(job, LONG, "ended", done);
    let (predicted, actual) = (predicted_end - started, unix_now() - started);
    let error = (predicted as f64 / actual as f64 - 1.0).abs();
    eprintln!("progress: predicted a run of {predicted} s, ran {actual} s: off by {error:.3}");
    // Within 10%, give or take the 2 s the whole-second clocks (the optimizer's, this test's
    // polls) can be off by on a 40 s run.
    assert!(
        (predicted - actual).abs() as f64 <= 0.1 * actual as f64 + 2.0,
        "predicted {predicted} s, ran {actual} s"
    );
    wait_until(
        LONG,
        || watchers().is_empty().then_some(()),
        || format!("the watcher outlived its job: {}", watchers()),
    );
    for id in [opted_in, silent] {
        run_ok(cluster.slurm("scancel").arg(id.to_string()));
    }
}

/// Unix seconds now, by this machine's clock (the optimizer's, on the local cluster).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Has the SPANK plugin start `cinch-watch` with every batch job, reporting every 5 s, on a
/// stand-in NVML (plugin/watch/tests/fake_nvml.c) whose GPUs are all idle.
fn start_watchers(cluster: &Cluster) {
    let watch = cluster.user_binary(&cinch_e2e::artifacts().watch);
    let url = cluster.optimizer_url().expect("the optimizer's URL");
    let nvml = cluster.dir().join("user-bin/libfake-nvml.so");
    run_ok(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&nvml)
            .arg(repo_root().join("plugin/watch/tests/fake_nvml.c")),
    );
    let plugstack = cluster.dir().join("etc/plugstack.conf");
    let line = fs::read_to_string(&plugstack).expect("local-cluster writes plugstack.conf");
    assert!(line.starts_with("optional "), "{line}");
    fs::write(
        &plugstack,
        format!(
            "{} watch={} optimizer={url} interval=5 nvml={}\n",
            line.trim(),
            watch.display(),
            nvml.display()
        ),
    )
    .unwrap();
}

/// The plugin reaches `cinch serve` over TLS (its certificate checked against OptimizerCaFile)
/// and the loop works as over the Unix socket: a network-heavy job is consolidated. The admin's
/// commands use the same URL and CA.
#[test]
fn the_loop_runs_over_tls_to_the_optimizer() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 4,
        optimizer_tls: true,
        ..ClusterSpec::default()
    });
    let conf = std::fs::read_to_string(cluster.dir().join("etc/cinch.conf")).unwrap();
    assert!(conf.contains("OptimizerUrl=https://localhost:"), "{conf}");
    let (_, fillers) = bert_is_consolidated(&cluster);
    let log = cluster.slurmctld_log();
    assert!(!log.contains("TLS:"), "{}", cluster.cinch_log_tail(40));
    // The admin's commands reach it over TLS too, with what `up` printed (URL and CA file).
    let shown = cluster.cinch_policy(&["show"]);
    assert!(shown.contains("enforce"), "{shown}");
    for id in fillers {
        run_ok(cluster.slurm("scancel").arg(id.to_string()));
    }
}

/// An elastic job (`--gpus=8 --requeue`, `elastic=2-16,ckpt=yes`) through real Slurm and the
/// helper: asked for 8 GPUs while 4 are free, `cinch` starts it on those 4 instead of leaving it
/// to wait; once the rest of the cluster is free, it is grown to 16 by checkpoint and requeue.
/// Inside the job the helper reads each allocation, scales the batch size and learning rate,
/// saves a checkpoint on Slurm's SIGTERM and the next run resumes from it. A malformed range,
/// or one without the consent a resize needs, is refused at submission.
#[test]
fn an_elastic_job_is_sized_to_the_free_gpus_and_grown_by_checkpoint_and_requeue() {
    let cluster = Cluster::up(with_optimizer(2));
    cluster.cinch_policy(&[
        "set",
        "policy=cinch",
        "resize_interval_s=60",
        "restart_cost_s=10",
    ]);
    // Each refusal says what is wrong, where the guide is, and ends in the Slurm error that
    // names the same cause (a malformed hint or a missing consent has none: Slurm's generic one).
    for (args, why, slurm_says) in [
        (
            &[
                "--gpus=8",
                "--requeue",
                "--comment=cinch:elastic=16-2,ckpt=yes",
            ][..],
            "MIN <= MAX",
            "Unspecified error",
        ),
        (
            &["--gpus=8", "--comment=cinch:elastic=2-16,ckpt=yes"][..],
            "submitted with --requeue",
            "Unspecified error",
        ),
        (
            &[
                "-N1",
                "--gres=gpu:8",
                "--requeue",
                "--comment=cinch:elastic=2-16,ckpt=yes",
            ][..],
            "in total (--gpus=N)",
            "Invalid generic resource",
        ),
    ] {
        let refused = cluster
            .try_sbatch(args, "true")
            .expect_err("a range cinch cannot honour is refused");
        assert!(
            refused.contains("cinch hint elastic")
                && refused.contains(why)
                && refused.contains(slurm_says)
                && refused.contains("/usr/share/doc/cinch/users.md"),
            "{refused}"
        );
    }

    let blockers = [
        cluster.sbatch(&["-N1", "--gres=gpu:8", "-J", "block8"], "sleep 45"),
        cluster.sbatch(&["-N1", "--gres=gpu:4", "-J", "block4"], "sleep 45"),
    ];
    for id in blockers {
        cluster.wait_for_job(id, SHORT, "running", running);
    }
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin/python");
    let work = cluster.dir().join("elastic");
    fs::create_dir_all(&work).unwrap();
    let log = work.join("runs.log");
    let script = format!(
        r#"set -eu
eval "$(python3 {helper}/cinch_elastic.py env --base-batch 256 --base-lr 0.1 --base-gpus 8 --max-batch 4096)"
exec python3 - <<PY
import sys, time
sys.path.insert(0, "{helper}")
import cinch_elastic as ce
step = ce.load_checkpoint("{work}/ckpt.json", {{"step": 0}})["step"]
with open("{log}", "a") as f:
    f.write("gpus=$CINCH_GPUS batch=$CINCH_BATCH lr=$CINCH_LR resumed_at=%d\n" % step)
ce.CheckpointOnSignal(lambda: ce.save_checkpoint("{work}/ckpt.json", {{"step": step}}))
while True:
    step += 1
    time.sleep(0.1)
PY"#,
        helper = helper.display(),
        work = work.display(),
        log = log.display(),
    );
    let elastic = cluster.sbatch(
        &[
            "--gpus=8",
            "--time=60",
            "--requeue",
            "--comment=cinch:app=cifar10,elastic=2-16,ckpt=yes",
            "-J",
            "elastic",
        ],
        &script,
    );
    let job = cluster.wait_for_job(elastic, SHORT, "running", running);
    assert!(
        job.tres("TresPerJob") == "gres:gpu:4",
        "sized to the 4 free GPUs: {job:?}"
    );
    assert!(decision(&job).contains("elastic 2-16: 4 GPUs"), "{job:?}");
    for id in blockers {
        cluster.wait_for_job(id, LONG, "done", done);
    }
    // After its resize interval the job is requeued, resized to 16 and restarted (Slurm holds a
    // requeued job for its credential lifetime, about two minutes).
    let job = cluster.wait_for_job(elastic, Duration::from_secs(300), "grown to 16", |j| {
        running(j) && j.get("Restarts") == "1" && j.tres("TresPerJob") == "gres:gpu:16"
    });
    assert!(
        cluster
            .slurmctld_log()
            .contains(&format!("job {elastic}: 16 GPUs after the requeue (was 4)")),
        "{}",
        cluster.cinch_log_tail(40)
    );
    let started = Instant::now();
    let runs = loop {
        let runs = fs::read_to_string(&log).unwrap_or_default();
        if runs.lines().count() >= 2 || started.elapsed() > SHORT {
            break runs;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}\n{job:?}");
    assert!(
        lines[0].starts_with("gpus=4 batch=128 lr=0.05 resumed_at=0"),
        "{runs}"
    );
    assert!(
        lines[1].starts_with("gpus=16 batch=512 lr=0.2 resumed_at="),
        "{runs}"
    );
    let resumed: u64 = lines[1].rsplit('=').next().unwrap().parse().unwrap();
    assert!(
        resumed > 0,
        "the second run resumed from the checkpoint: {runs}"
    );
    run_ok(cluster.slurm("scancel").arg(elastic.to_string()));
}

/// Issue 16's live test (docs/policies/sharing.md): with the whole GPUs busy, opted-in jobs of
/// one GPU are turned into shards of the sharing node's GPU at submission, sized from their
/// predicted peak memory (stated, from the site's model table, from the peak a similar job
/// reported), and run there at the same time; a job whose peak does not fit keeps a whole GPU,
/// and a job that did not opt in is never converted. Bad hints and whole-GPU requests to the
/// sharing partition are refused at sbatch.
/// Submits an opted-in job of one GPU with `hints` running `script`, checks sbatch told its
/// user it shares a GPU, and returns it with what Slurm shows of it.
fn submit_shared(cluster: &Cluster, hints: &str, script: &str) -> (u32, Job) {
    let (id, told) = cluster
        .sbatch_told(
            &["--gpus=1", "-t", "30", &format!("--comment=cinch:{hints}")],
            script,
        )
        .unwrap();
    assert!(
        told.contains("cinch: this job shares a GPU"),
        "{hints}: {told}"
    );
    (id, cluster.job(id))
}

/// Both whole GPUs (n1, n2) busy for two hours by their time limits: the jobs holding them.
fn hold_the_whole_gpus(cluster: &Cluster) -> Vec<u32> {
    let blockers: Vec<u32> = (0..2)
        .map(|_| cluster.sbatch(&["--gres=gpu:1", "-t", "120"], "sleep 600"))
        .collect();
    for &id in &blockers {
        cluster.wait_for_job(id, LONG, "blocker running", running);
    }
    blockers
}

/// The agent's last sharing summary for n3's GPU, a few of its 2 s rounds from now.
fn last_sharing_line(cluster: &Cluster) -> String {
    std::thread::sleep(Duration::from_secs(6));
    cluster
        .slurmctld_log()
        .lines()
        .rfind(|l| l.contains("agent: sharing: n3/gpu0"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn opted_in_small_jobs_share_one_gpus_shards_and_the_others_keep_whole_gpus() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 3,
        racks: 1,
        gpus_per_node: 1,
        // 16 shards on the sharing node's one GPU: 80G less 10% is 72G, 4.5G a shard.
        shards_per_node: 16,
        share_nodes: 1,
        optimizer: true,
        cinch_conf_append: Some(
            "ShareModelMemory=bert:32=20G\nShareModelBusy=bert:32=58%\n".into(),
        ),
        ..ClusterSpec::default()
    });
    let helper = repo_root().join("plugin/python/cinch_elastic.py");
    // A resnet job of this user ran and reported its peak and how busy it kept its GPU: later
    // resnet jobs are predicted from it.
    let reporter = cluster.sbatch(
        &["--job-name=trainer", "--comment=cinch:app=resnet"],
        &format!(
            "python3 {h} report-gpu-memory 12 && python3 {h} report-gpu-busy 0.4",
            h = helper.display()
        ),
    );
    let job = cluster.wait_done(reporter, LONG);
    assert_eq!(state(&job), "COMPLETED", "{job:?}");
    assert!(
        job.get("Comment")
            .contains("gpu_mem_peak=12G,gpu_busy=0.40"),
        "{job:?}"
    );

    for (args, why, slurm_says) in [
        (
            &["--gpus=1", "--comment=cinch:share=maybe"][..],
            "not yes or no",
            "Unspecified error",
        ),
        (
            &["--gpus=2", "--comment=cinch:share=yes,gpu_mem=10G"][..],
            "one GPU on one node",
            "Invalid generic resource",
        ),
        (
            &["--gpus=1", "--comment=cinch:share=yes,gpu_mem=lots"][..],
            "gpu_mem",
            "Unspecified error",
        ),
        (
            &["-p", "shared", "--gpus=1"][..],
            "holds shared GPUs",
            "Invalid generic resource",
        ),
        (
            &[
                "-p",
                "shared",
                "--gpus=1",
                "--comment=cinch:share=yes,gpu_mem=10G",
            ][..],
            "to your usual partition",
            "Invalid generic resource",
        ),
    ] {
        let refused = cluster
            .try_sbatch(args, "true")
            .expect_err("sbatch must refuse");
        assert!(
            refused.contains(why) && refused.contains(slurm_says),
            "{args:?}: {refused}"
        );
    }

    let blockers = hold_the_whole_gpus(&cluster);
    // The agent's next round sees them (and the reported peak).
    cluster.wait_for_log(
        "agent: sharing: n3/gpu0 16/16 free; whole GPUs free outside the sharing partition: 0; \
         jobs' reported peaks: 1, busy fractions: 1",
        1,
        LONG,
    );

    let report =
        "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_SHARDS_ON_NODE|CINCH_GPU_MEM_CAP_MIB)='; \
         sleep 25";
    let mut shared = Vec::new();
    // Each busy fraction from another source: stated, the site's table, the reporter's. By
    // the measured model the three together run at 0.61x alone (0.5 + 0.58 + 0.4 of a GPU on
    // time-slicing's 0.91): 43 min added, less than the 2 h wait for a whole GPU.
    for (hints, shards, source, busy_source) in [
        (
            "share=yes,gpu_mem=30G,gpu_busy=50%",
            "7",
            "stated",
            "reported",
        ),
        ("share=yes,app=bert,batch=32", "5", "table", "table"),
        ("share=yes,app=resnet", "3", "observed:1", "observed:1"),
    ] {
        let (id, job) = submit_shared(&cluster, hints, report);
        let record = cinch_record(job.get("AdminComment"));
        assert_eq!(
            record.get("share").map(String::as_str),
            Some(format!("n3:{shards}shards(gpu0)").as_str()),
            "{job:?}"
        );
        assert_eq!(record.get("gpu_mem_src").map(String::as_str), Some(source));
        assert_eq!(
            record.get("gpu_busy_src").map(String::as_str),
            Some(busy_source),
            "{job:?}"
        );
        assert_eq!(job.get("Partition"), "shared", "{job:?}");
        assert_eq!(job.tres("TresPerNode"), format!("gres:shard:{shards}"));
        shared.push((id, shards));
    }
    let (too_big, told) = cluster
        .sbatch_told(
            &[
                "--gpus=1",
                "-t",
                "30",
                "--comment=cinch:share=yes,gpu_mem=75G",
            ],
            "true",
        )
        .unwrap();
    assert!(
        told.contains("keeps a whole GPU") && told.contains("does not fit"),
        "{told}"
    );
    let (plain, told) = cluster
        .sbatch_told(&["--gpus=1", "-t", "30"], "true")
        .unwrap();
    assert!(!told.contains("cinch"), "{told}");

    // The three run at once on the one GPU's shards.
    for &(id, _) in &shared {
        cluster.wait_for_job(id, LONG, "sharing job running", running);
    }
    let together: Vec<String> = shared
        .iter()
        .map(|&(id, _)| {
            let job = cluster.job(id);
            format!("{} {}", state(&job), job.get("NodeList"))
        })
        .collect();
    assert_eq!(together, vec!["RUNNING n3"; 3]);
    // The agent reads the shards in use from Slurm's per-job GRES detail (its format changed
    // in 23.11): 15 of 16 taken while the three run, over a few of its 2 s rounds.
    let last = last_sharing_line(&cluster);
    assert!(last.contains("n3/gpu0 1/16 free"), "{last}");
    for id in [too_big, plain] {
        let job = cluster.job(id);
        assert_eq!(
            (
                state(&job),
                job.get("Partition"),
                job.tres("TresPerJob").as_str()
            ),
            ("PENDING", "gpu", "gres:gpu:1"),
            "{job:?}"
        );
    }
    assert_eq!(
        cinch_record(cluster.job(too_big).get("AdminComment"))
            .get("share")
            .map(String::as_str),
        Some("whole")
    );
    assert!(!cinch_record(cluster.job(plain).get("AdminComment")).contains_key("share"));
    for &(id, shards) in &shared {
        let job = cluster.wait_done(id, LONG);
        assert_eq!(state(&job), "COMPLETED", "{job:?}");
        let out = cluster.job_output(id);
        assert!(
            out.contains(&format!("SLURM_SHARDS_ON_NODE={shards}")),
            "{out}"
        );
        assert!(out.contains("CUDA_VISIBLE_DEVICES=0"), "{out}");
        // The cap cinch's SPANK plugin asks the driver to hold the job to: its shards' part of
        // the GPU's 80G (here none is set: dummy GPUs, no cgroups).
        let shards: u64 = shards.parse().unwrap();
        let cap = shards * 80 * 1024 / 16;
        assert!(
            out.contains(&format!("CINCH_GPU_MEM_CAP_MIB={cap}")),
            "{out}"
        );
        // The SPANK plugin says in the node's log why the driver holds it to nothing here.
        let log = std::fs::read_to_string(cluster.dir().join("log/slurmd-n3.log")).unwrap();
        assert!(
            log.contains(&format!(
                "cinch: job {id}: no GPU memory cap by the driver ({cap} MiB asked): \
                 plugstack.conf names no cinch-watch (watch=) to set it"
            )),
            "slurmd-n3.log:\n{log}"
        );
    }
    let mut cancel = cluster.slurm("scancel");
    for id in blockers.iter().chain([&too_big, &plain]) {
        cancel.arg(id.to_string());
    }
    run_ok(&mut cancel);
}

/// MPS mode (docs/policies/sharing.md): the sharing node offers 100 gres/mps units on its one
/// GPU; opted-in batch jobs of one user become `--gres=mps:K` jobs there, run at the same time,
/// and each one's environment carries its memory cap and the SM share cinch's TaskProlog sets
/// in place of Slurm's (the units are memory, not SMs). CI has no GPU: what is checked is what
/// Slurm accepts and what each job's environment gets; the MPS daemon itself (the Prolog) and a
/// job refused memory beyond its cap need a GPU (docs/policies/sharing.md says what was run).
#[test]
fn under_mps_opted_in_jobs_share_one_gpu_with_memory_caps_in_their_environment() {
    let cluster = Cluster::up(ClusterSpec {
        nodes: 3,
        racks: 1,
        gpus_per_node: 1,
        shards_per_node: 100,
        share_nodes: 1,
        share_mode: "mps",
        optimizer: true,
        ..ClusterSpec::default()
    });
    let blockers = hold_the_whole_gpus(&cluster);
    cluster.wait_for_log(
        "agent: sharing: n3/gpu0 100/100 free; whole GPUs free outside the sharing partition: 0",
        1,
        LONG,
    );
    let report = "env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_[A-Z_]+)='; sleep 20";
    let mut shared = Vec::new();
    // 20G of 72G usable: 28 of 100 units, a cap of 28% of 80G = 22.4G (22937M); 12G: 17 units,
    // 13.6G (13926M). Both stated light: MPS runs them together at full speed.
    for (hints, units, cap_mib) in [
        ("share=yes,gpu_mem=20G,gpu_busy=40%", 28, 22937),
        ("share=yes,gpu_mem=12G,gpu_busy=30%", 17, 13926),
    ] {
        let (id, job) = submit_shared(&cluster, hints, report);
        assert_eq!(job.get("Partition"), "shared", "{job:?}");
        assert_eq!(
            job.tres("TresPerNode"),
            format!("gres:mps:{units}"),
            "{job:?}"
        );
        let record = cinch_record(job.get("AdminComment"));
        assert_eq!(
            record.get("share").map(String::as_str),
            Some(format!("n3:{units}mps(gpu0)").as_str()),
            "{job:?}"
        );
        shared.push((id, cap_mib));
    }
    for &(id, _) in &shared {
        cluster.wait_for_job(id, LONG, "MPS job running", running);
    }
    // The agent reads the units in use from Slurm's per-job GRES detail: 45 taken while both
    // run (a misread would show the GPU free again), over a few of its 2 s rounds.
    let last = last_sharing_line(&cluster);
    assert!(last.contains("n3/gpu0 55/100 free"), "{last}");
    for &(id, cap_mib) in &shared {
        let job = cluster.wait_done(id, LONG);
        assert_eq!(state(&job), "COMPLETED", "{job:?}");
        let out = cluster.job_output(id);
        assert!(
            out.contains(&format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={cap_mib}M")),
            "{out}"
        );
        // Slurm would have set the units' share (28 or 17); cinch's TaskProlog gives 100.
        assert!(
            out.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"),
            "{out}"
        );
        assert!(out.contains("CUDA_VISIBLE_DEVICES=0"), "{out}");
    }
    let mut cancel = cluster.slurm("scancel");
    for id in &blockers {
        cancel.arg(id.to_string());
    }
    run_ok(&mut cancel);
}
