//! Properties every policy must keep on any valid snapshot: decisions name only the snapshot's
//! jobs and nodes, never plan more GPUs on a node than are free, respect what the job allows,
//! and are the same for the same seed.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use cinch_optimizer::policy::{Consolidate, ConsolidateParams, Policy, PolicyConfig};
use cinch_optimizer::snapshot::{Node, NodeState, PendingJob, Snapshot};
use cinch_optimizer::testing::{node, pending, snapshot};
use cinch_optimizer::{History, SeededRng};

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
        (nodes, jobs).prop_map(|(nodes, jobs)| snapshot(nodes, jobs))
    })
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
            let distinct: HashSet<&str> = placement.gpus_on.iter().map(|(n, _)| n.as_str()).collect();
            prop_assert_eq!(distinct.len(), placement.gpus_on.len(), "no node twice");
            for (name, gpus) in &placement.gpus_on {
                let node = nodes.get(name.as_str()).copied();
                prop_assert!(node.is_some(), "unknown node {}", name);
                let node = node.unwrap();
                prop_assert!(node.state.schedulable(), "{} is {:?}", name, node.state);
                prop_assert!(!job.excluded_nodes.contains(name), "{} was excluded", name);
                if let Some(p) = &job.partition {
                    prop_assert!(node.partitions.contains(p), "{} not in {}", name, p);
                }
                if let Some(per) = job.gpus_per_node {
                    prop_assert_eq!(*gpus, per);
                }
                *used.entry(name.clone()).or_default() += gpus;
            }
        }
        for (name, gpus) in used {
            let free = nodes[name.as_str()].gpus_free();
            prop_assert!(gpus <= free, "{}: planned {} GPUs, {} free", name, gpus, free);
        }
    }

    #[test]
    fn decisions_name_only_known_jobs_and_nodes_and_repeat_for_a_seed(
        snap in arb_snapshot(),
        params in params(),
        seed in any::<u64>(),
    ) {
        let jobs: HashSet<u32> = snap.pending.iter().map(|j| j.job_id).collect();
        let names: HashSet<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
        for policy in [
            PolicyConfig::Consolidate(params),
            PolicyConfig::defaults_for("passthrough").unwrap(),
            PolicyConfig::defaults_for("dally").unwrap(),
        ] {
            let first = policy.decide(&snap, snap.time, &mut SeededRng::new(seed), &History::default());
            let again = policy.decide(&snap, snap.time, &mut SeededRng::new(seed), &History::default());
            prop_assert_eq!(&first, &again);
            let mut seen = HashSet::new();
            for d in &first {
                prop_assert!(jobs.contains(&d.job_id), "unknown job {}", d.job_id);
                prop_assert!(seen.insert(d.job_id), "job {} decided twice", d.job_id);
                prop_assert!(!d.reason.is_empty());
                prop_assert!(d.ttl_s >= 1);
                for n in d.pin_nodes.iter().flatten() {
                    prop_assert!(names.contains(n.as_str()), "unknown node {}", n);
                }
            }
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
    let snap = snapshot(
        cinch_optimizer::testing::cluster(4, 8, 2),
        vec![pending(1, 16)],
    );
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
