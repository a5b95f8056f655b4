//! Builders for scenarios: small snapshots written the way a test reads.

use crate::snapshot::{Node, NodeState, PendingJob, Snapshot, SCHEMA_VERSION};

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
        schema_version: SCHEMA_VERSION,
        time: 1_000_000,
        nodes,
        running: Vec::new(),
        pending,
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
