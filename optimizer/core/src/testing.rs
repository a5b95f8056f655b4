//! Builders for scenarios: small snapshots written the way a test reads.

use crate::wire::snapshot::{Node, NodeState, PendingJob, Snapshot, SCHEMA_VERSION};

/// A node with `total` GPUs of which `alloc` are in use, in `rack` ("" for none).
pub fn node(name: &str, total: u32, alloc: u32, rack: &str) -> Node {
    Node {
        name: name.to_string(),
        gpus_total: total,
        gpus_alloc: alloc,
        state: if alloc == 0 {
            NodeState::Idle
        } else if alloc < total {
            NodeState::Mixed
        } else {
            NodeState::Allocated
        },
        features: Vec::new(),
        partitions: Vec::new(),
        rack: (!rack.is_empty()).then(|| rack.to_string()),
    }
}

/// A pending job asking for `gpus` GPUs in total, on any number of nodes.
pub fn pending(job_id: u32, gpus: u32) -> PendingJob {
    PendingJob {
        name: Some(format!("job{job_id}")),
        time_limit_min: Some(60),
        priority: 1000,
        ..PendingJob::new(
            job_id,
            format!("user{}", job_id % 3),
            gpus,
            i64::from(job_id),
        )
    }
}

/// A pending job asking for `per_node` GPUs on each of `nodes` nodes.
pub fn pending_per_node(job_id: u32, per_node: u32, nodes: u32) -> PendingJob {
    PendingJob {
        gpus_per_node: Some(per_node),
        min_nodes: nodes,
        max_nodes: Some(nodes),
        ..pending(job_id, per_node * nodes)
    }
}

pub fn snapshot(nodes: Vec<Node>, pending: Vec<PendingJob>) -> Snapshot {
    Snapshot {
        agent: None,
        idle: None,
        schema_version: SCHEMA_VERSION,
        time: 1_000_000,
        nodes,
        running: Vec::new(),
        pending,
        requeue_delay_s: crate::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S,
    }
}

/// `count` nodes named n1.. with `gpus` GPUs each, split evenly over `racks` racks r1...
pub fn cluster(count: u32, gpus: u32, racks: u32) -> Vec<Node> {
    let per_rack = count.div_ceil(racks.max(1));
    (1..=count)
        .map(|i| {
            node(
                &format!("n{i}"),
                gpus,
                0,
                &format!("r{}", (i - 1) / per_rack + 1),
            )
        })
        .collect()
}

/// A busy cluster for benchmarks: `nodes` nodes of `gpus` GPUs in `racks` racks, about half the
/// GPUs in use by one running job per node, and `jobs` pending jobs with the GPU counts DL
/// clusters see (mostly 1-8, some 16-64; a third of the 8+ ones per-node requests), seeded.
pub fn busy_snapshot(nodes: u32, gpus: u32, racks: u32, jobs: u32, seed: u64) -> Snapshot {
    let mut rng = crate::util::rng::SeededRng::new(seed);
    let mut all = cluster(nodes, gpus, racks);
    let mut running = Vec::new();
    for (i, node) in all.iter_mut().enumerate() {
        let used = rng.below(u64::from(gpus) + 1) as u32;
        if used > 0 {
            node.gpus_alloc = used;
            node.state = if used == gpus {
                NodeState::Allocated
            } else {
                NodeState::Mixed
            };
            running.push(crate::wire::snapshot::RunningJob {
                job_id: 1_000_000_000 + i as u32,
                user: "running".into(),
                nodes: vec![node.name.clone()],
                gpus: used,
                start_time: 0,
                time_limit_min: Some(600),
                ..crate::wire::snapshot::RunningJob::default()
            });
        }
    }
    let sizes = [1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64];
    let pending_jobs: Vec<PendingJob> = (1..=jobs)
        .map(|id| {
            let gpus_asked = sizes[rng.below(sizes.len() as u64) as usize];
            let mut job = pending(id, gpus_asked);
            job.priority = rng.below(10_000) as u32;
            job.submit_time = i64::from(id);
            job.time_limit_min = Some(10 + rng.below(1440) as u32);
            if gpus_asked >= gpus && rng.below(3) == 0 {
                job.gpus_per_node = Some(gpus);
                job.min_nodes = gpus_asked / gpus;
                job.max_nodes = Some(gpus_asked / gpus);
            }
            job
        })
        .collect();
    let mut snap = snapshot(all, pending_jobs);
    snap.running = running;
    snap
}

/// Hints as a job's comment would give them (`[("app", "bert")]`).
pub fn hints(pairs: &[(&str, &str)]) -> crate::slurm::job_hints::Hints {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An optimizer's answer carrying `decisions` in `mode`, as a round's port returns it.
pub fn answer(
    mode: crate::Mode,
    decisions: Vec<crate::Decision>,
) -> Result<crate::Decisions, crate::enact::round::AskError> {
    Ok(crate::Decisions {
        observed: Default::default(),
        schema_version: crate::SCHEMA_VERSION,
        policy: "consolidate".into(),
        mode,
        time: 0,
        stated_targets: None,
        decisions,
    })
}

/// A decision pinning job 1 to n1 and n2 for 300 s.
pub fn pin_job_1() -> crate::Decision {
    crate::Decision {
        pin_nodes: Some(vec!["n1".into(), "n2".into()]),
        ..crate::Decision::explain(1, "consolidated", 300)
    }
}

/// A fresh directory under the system's temporary one (`cinch-NAME-PID-N`, N counting within
/// the process, so tests side by side never share one), removed with what is in it when dropped:
/// test runs leave nothing behind.
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> ScratchDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cinch-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        ScratchDir(dir)
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A record of the hour before `now` (cinch_core::learn::record, as `record.jsonl` holds it) on
/// one node of 8 GPUs: an 8-GPU job that opted in to requeues (user `big`) ran 50 minutes
/// while 20 one-GPU jobs (user `small`) waited behind it, then ran 5 minutes each. Replayed,
/// a policy that requeues the long job for the short ones (Tiresias) serves that hour best.
pub fn record_where_a_long_job_held_up_short_ones(now: i64) -> String {
    use serde_json::json;
    let t0 = now - 3600;
    let mut lines = vec![json!({
        "cinch_record": 1, "from": t0, "to": now, "window_s": 259200, "jobs": 21,
        "nodes": [{"name": "n1", "gpus": 8, "rack": "r1"}],
    })];
    lines.push(json!({
        "job_id": 1, "user": "big", "name": "train", "submit": t0, "gpus": 8,
        "time_limit_min": 600, "hints": {"ckpt": "yes"}, "requeue": true,
        "runs": [{"start": t0, "nodes": ["n1"], "gpus": 8, "end": t0 + 3000}], "left": t0 + 3000,
    }));
    for i in 0..20 {
        lines.push(json!({
            "job_id": 2 + i, "user": "small", "name": "sweep", "submit": t0 + 100 + 5 * i,
            "gpus": 1, "time_limit_min": 30,
            "runs": [{"start": t0 + 3000, "nodes": ["n1"], "gpus": 1, "end": t0 + 3300}],
            "left": t0 + 3300,
        }));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}
