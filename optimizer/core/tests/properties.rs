//! Properties every policy must keep on any valid snapshot: decisions name only the snapshot's
//! jobs and nodes, never plan more GPUs on a node than are free, respect what the job allows,
//! and are the same for the same seed.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use cinch_core::policy::{Consolidate, ConsolidateParams, Policy, PolicyConfig, POLICY_NAMES};
use cinch_core::testing::{node, pending, snapshot};
use cinch_core::wire::snapshot::{Node, NodeState, PendingJob, RunningJob, Snapshot};
use cinch_core::{History, SeededRng};

fn arb_node(index: usize) -> impl Strategy<Value = Node> {
    (
        prop_oneof![Just(4u32), Just(8u32)],
        0u32..=8,
        0usize..4,
        prop_oneof![
            6 => Just(None),
            1 => Just(Some(NodeState::Drained)),
            1 => Just(Some(NodeState::Down)),
        ],
        proptest::bool::weighted(0.2),
    )
        .prop_map(move |(total, alloc, rack, state, debug)| {
            let mut n = node(
                &format!("n{index}"),
                total,
                alloc.min(total),
                &format!("r{rack}"),
            );
            if let Some(state) = state {
                n.state = state;
            }
            n.partitions = if debug {
                vec!["debug".into()]
            } else {
                vec!["gpu".into(), "debug".into()]
            };
            n
        })
}

fn arb_job(id: u32, nodes: usize) -> impl Strategy<Value = PendingJob> {
    (
        0u32..=20,
        proptest::option::weighted(0.3, 1u32..=8),
        1u32..=3,
        proptest::option::weighted(0.3, 1u32..=4),
        0u32..3,
        proptest::collection::vec(0..nodes, 0..2),
        proptest::bool::weighted(0.3),
    )
        .prop_map(
            move |(gpus, per_node, min_nodes, extra, priority, excluded, gpu_partition)| {
                let mut job = pending(id, gpus);
                job.priority = priority;
                job.min_nodes = min_nodes;
                job.max_nodes = extra.map(|e| min_nodes + e - 1);
                if let Some(p) = per_node {
                    job.gpus_per_node = Some(p);
                    job.gpus = p * min_nodes;
                    job.max_nodes = Some(min_nodes);
                }
                job.excluded_nodes = excluded.iter().map(|i| format!("n{i}")).collect();
                job.partition = gpu_partition.then(|| "gpu".to_string());
                job
            },
        )
}

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    (1usize..24, 0u32..30).prop_flat_map(|(node_count, job_count)| {
        let nodes: Vec<_> = (0..node_count).map(arb_node).collect();
        let jobs: Vec<_> = (0..job_count).map(|i| arb_job(i + 1, node_count)).collect();
        // Per node, whether its busy GPUs belong to a job that opted in to requeue, and how
        // long that job has run.
        let owners = proptest::collection::vec((any::<bool>(), 0i64..200_000), node_count);
        (nodes, jobs, owners).prop_map(|(nodes, jobs, owners)| {
            let mut snap = snapshot(nodes, jobs);
            snap.running = running_jobs(&snap, &owners);
            snap
        })
    })
}

/// One running job on each node with GPUs in use, holding them; ids from 1000.
fn running_jobs(snap: &Snapshot, owners: &[(bool, i64)]) -> Vec<RunningJob> {
    snap.nodes
        .iter()
        .zip(owners)
        .enumerate()
        .filter(|(_, (n, _))| n.gpus_alloc > 0)
        .map(|(i, (n, &(opted_in, ran)))| RunningJob {
            idle_action: Default::default(),
            job_id: 1000 + i as u32,
            user: format!("user{}", i % 3),
            name: Some(format!("run{}", i % 4)),
            nodes: vec![n.name.clone()],
            gpus: n.gpus_alloc,
            start_time: snap.time - ran,
            submit_time: None,
            time_limit_min: Some(4 * 60),
            requeue: opted_in,
            restarts: 0,
            hints: if opted_in {
                [("ckpt", "yes"), ("app", "bert")]
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            } else {
                Default::default()
            },
            progress: None,
        })
        .collect()
}

/// What the optimizer learned before `snap`: its running jobs were seen an hour earlier, and
/// jobs like its pending ones ran and ended before that.
fn learned_history(snap: &Snapshot) -> History {
    let mut history = History::default();
    let mut earlier = snap.clone();
    earlier.time = snap.time - 7_200;
    earlier.pending.clear();
    earlier.running = snap
        .pending
        .iter()
        .take(5)
        .map(|j| RunningJob {
            job_id: 100_000 + j.job_id,
            user: j.user.clone(),
            name: j.name.clone(),
            nodes: snap
                .nodes
                .first()
                .map(|n| vec![n.name.clone()])
                .unwrap_or_default(),
            gpus: j.gpus,
            start_time: earlier.time - 3_600,
            time_limit_min: j.time_limit_min,
            ..RunningJob::default()
        })
        .collect();
    history.observe(&earlier);
    let mut hour_ago = snap.clone();
    hour_ago.time = snap.time - 3_600;
    hour_ago.running.retain(|r| r.start_time <= hour_ago.time);
    history.observe(&hour_ago);
    history.observe(snap);
    history
}

fn params() -> impl Strategy<Value = ConsolidateParams> {
    (2u32..=6, any::<bool>(), 1u32..=600).prop_map(|(min_gpus, cross_rack, ttl_s)| {
        ConsolidateParams {
            min_gpus,
            cross_rack,
            ttl_s,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn consolidate_never_plans_more_gpus_than_are_free(snap in arb_snapshot(), params in params()) {
        prop_assert!(snap.validate().is_ok());
        let nodes: HashMap<&str, &Node> = snap.node_index();
        let mut used: HashMap<String, u32> = HashMap::new();
        for (job, outcome) in Consolidate(params).plan(&snap) {
            let Ok((placement, _reason)) = outcome else { continue };
            let total: u32 = placement.gpus_on.iter().map(|(_, g)| g).sum();
            prop_assert_eq!(total, job.gpus, "job {} gets exactly its GPUs", job.job_id);
            let count = placement.gpus_on.len() as u32;
            prop_assert!(count >= job.min_nodes, "job {}: {} < min_nodes", job.job_id, count);
            prop_assert!(count <= job.max_nodes.unwrap_or(u32::MAX));
            let distinct: HashSet<&str> = placement.gpus_on.iter().map(|&(n, _)| n).collect();
            prop_assert_eq!(distinct.len(), placement.gpus_on.len(), "no node twice");
            for &(name, ref gpus) in &placement.gpus_on {
                let node = nodes.get(name).copied();
                prop_assert!(node.is_some(), "unknown node {}", name);
                let node = node.unwrap();
                prop_assert!(node.state.schedulable(), "{} is {:?}", name, node.state);
                prop_assert!(!job.excluded_nodes.iter().any(|e| e == name), "{} was excluded", name);
                if let Some(p) = &job.partition {
                    prop_assert!(node.partitions.contains(p), "{} not in {}", name, p);
                }
                if let Some(per) = job.gpus_per_node {
                    prop_assert_eq!(*gpus, per);
                }
                *used.entry(name.to_string()).or_default() += gpus;
            }
        }
        for (name, gpus) in used {
            let free = nodes[name.as_str()].gpus_free();
            prop_assert!(gpus <= free, "{}: planned {} GPUs, {} free", name, gpus, free);
        }
    }

    /// Every policy, with running jobs and a learned history: decisions name only the
    /// snapshot's jobs and nodes, repeat for a seed, pin no more GPUs than the pinned nodes have
    /// free (or free by requeues in the same answer), and requeue only running jobs whose users
    /// opted in.
    #[test]
    fn every_policy_decides_within_the_snapshot_and_its_capacity(
        snap in arb_snapshot(),
        params in params(),
        seed in any::<u64>(),
    ) {
        prop_assert!(snap.validate().is_ok());
        let history = learned_history(&snap);
        let pending: HashMap<u32, &PendingJob> = snap.pending.iter().map(|j| (j.job_id, j)).collect();
        let running: HashMap<u32, &RunningJob> = snap.running.iter().map(|j| (j.job_id, j)).collect();
        let nodes: HashMap<&str, &Node> = snap.node_index();
        let policies = std::iter::once(PolicyConfig::Consolidate(params))
            .chain(POLICY_NAMES.iter().map(|n| PolicyConfig::defaults_for(n).unwrap()));
        for policy in policies {
            let name = policy.name();
            let first = policy.decide(&snap, snap.time, &mut SeededRng::new(seed), &history);
            let again = policy.decide(&snap, snap.time, &mut SeededRng::new(seed), &history);
            prop_assert_eq!(&first, &again, "{}", name);
            // A policy that requeues jobs in the same answer may pin onto the GPUs they free.
            let mut freed: HashMap<&str, u32> = HashMap::new();
            for d in first.iter().filter(|d| d.requeue == Some(true)) {
                if let Some(job) = running.get(&d.job_id) {
                    for n in &job.nodes {
                        *freed.entry(n.as_str()).or_default() += job.gpus;
                    }
                }
            }
            let free_of = |n: &str| -> u64 {
                nodes.get(n).map_or(0, |node| {
                    let alloc = node.gpus_total.saturating_sub(node.gpus_free());
                    u64::from(node.gpus_free() + freed.get(n).copied().unwrap_or(0).min(alloc))
                })
            };
            let mut seen = HashSet::new();
            let mut pinned_nodes: HashSet<&str> = HashSet::new();
            let mut pinned_gpus = 0u64;
            for d in &first {
                prop_assert!(seen.insert(d.job_id), "{}: job {} decided twice", name, d.job_id);
                prop_assert!(!d.reason.is_empty());
                prop_assert!(d.ttl_s >= 1);
                if d.requeue == Some(true) {
                    let job = running.get(&d.job_id);
                    prop_assert!(job.is_some(), "{}: requeue of job {} that is not running", name, d.job_id);
                    let job = job.unwrap();
                    prop_assert!(job.requeue && job.hints.get("ckpt").is_some_and(|v| v == "yes"),
                        "{}: requeue of job {} that did not opt in", name, d.job_id);
                    continue;
                }
                let job = pending.get(&d.job_id);
                prop_assert!(job.is_some(), "{}: unknown job {}", name, d.job_id);
                let job = job.unwrap();
                // A reservation (strict's, cinch's) pins the first waiting job to the nodes its
                // shape frees on first: not free now, and Slurm starts it only once they are.
                // A portfolio asked on its own decides as its first member.
                let deciding = match &policy {
                    PolicyConfig::Portfolio(p) => p.member_configs().unwrap()[0].clone(),
                    other => other.clone(),
                };
                let reservation = match deciding {
                    PolicyConfig::Strict(_) => {
                        d.priority == Some(cinch_core::policy::STRICT_RESERVED_PRIORITY)
                    }
                    // (As a priority set outright, or the most favourable nice cinch gives.)
                    PolicyConfig::Cinch(ref p) => {
                        d.priority == Some(cinch_core::policy::CINCH_RESERVED_PRIORITY)
                            || (p.order_weight > 0 && d.nice == Some(-(p.order_weight as i32)))
                    }
                    _ => false,
                };
                if let Some(pin) = d.pin_nodes.as_ref().filter(|_| !reservation) {
                    let free: u64 = pin.iter().map(|n| free_of(n.as_str())).sum();
                    prop_assert!(u64::from(job.gpus) <= free, "{}: job {} pinned to {} free GPUs", name, job.job_id, free);
                    prop_assert!(pin.len() as u32 <= job.gpus.max(job.min_nodes), "{}: job {} ({} GPUs, min_nodes {}) pinned to {:?}", name, job.job_id, job.gpus, job.min_nodes, pin);
                    for n in pin {
                        prop_assert!(nodes.contains_key(n.as_str()), "{}: unknown node {}", name, n);
                        pinned_nodes.insert(n.as_str());
                    }
                    pinned_gpus += u64::from(job.gpus);
                }
            }
            let free_on_pins: u64 = pinned_nodes.iter().map(|n| free_of(n)).sum();
            prop_assert!(pinned_gpus <= free_on_pins, "{}: {} GPUs pinned onto {} free", name, pinned_gpus, free_on_pins);
        }
    }

    #[test]
    fn snapshots_round_trip_through_json(snap in arb_snapshot()) {
        let json = serde_json::to_string(&snap).unwrap();
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, snap);
    }
}

#[test]
fn passthrough_decides_nothing() {
    let snap = snapshot(cinch_core::testing::cluster(4, 8, 2), vec![pending(1, 16)]);
    let policy = PolicyConfig::defaults_for("passthrough").unwrap();
    assert!(policy
        .decide(&snap, 0, &mut SeededRng::new(1), &History::default())
        .is_empty());
    let consolidate = Consolidate(ConsolidateParams::default());
    assert_eq!(
        consolidate
            .decide(&snap, 0, &mut SeededRng::new(1), &History::default())
            .len(),
        1
    );
}
