//! Where the simulated Slurm puts a job's GPUs: its own node selection, or a node list (a pin)
//! that a policy set.

use crate::engine::State;

/// Slurm's node selection (cons_tres with topology/tree, equal node weights), reduced to GPUs
/// and as measured on Slurm 22.05.8 in the local cluster (docs/simulator.md, "Fidelity"): a job
/// that one node can hold goes to the tightest such node (the fewest free GPUs, then the lowest
/// index); a larger one goes to the first rack (leaf switch) whose free GPUs can hold it, taking
/// its nodes in index order, and only when no rack can, to nodes in index order across racks.
/// Per-node requests take the first nodes with enough free, in the first rack that has enough
/// of them, else across racks.
pub fn first_fit(state: &State, job: usize) -> Option<Vec<(u32, u32)>> {
    let spec = &state.jobs[job].spec;
    let cluster = state.cluster();
    if spec.gpus_per_node.is_none() && spec.gpus <= cluster.gpus_per_node {
        if let Some((node, _)) = state
            .free
            .iter()
            .enumerate()
            .filter(|&(_, &f)| f >= spec.gpus)
            .min_by_key(|&(n, &f)| (f, n))
        {
            return Some(vec![(node as u32, spec.gpus)]);
        }
    }
    let nodes = state.free.len() as u32;
    (0..cluster.racks)
        .find_map(|rack| {
            let in_rack = (0..nodes).filter(|&n| cluster.rack_of(n) == rack);
            first_fit_in(state, spec.gpus, spec.gpus_per_node, in_rack)
        })
        .or_else(|| first_fit_in(state, spec.gpus, spec.gpus_per_node, 0..nodes))
}

fn first_fit_in(
    state: &State,
    gpus: u32,
    per_node: Option<u32>,
    nodes: impl Iterator<Item = u32>,
) -> Option<Vec<(u32, u32)>> {
    let mut placement = Vec::new();
    let mut remaining = gpus;
    for node in nodes {
        if remaining == 0 {
            break;
        }
        let free = state.free[node as usize];
        let take = match per_node {
            Some(n) if free >= n => n,
            Some(_) => 0,
            None => free.min(remaining),
        };
        if take > 0 {
            placement.push((node, take));
            remaining -= take;
        }
    }
    (remaining == 0).then_some(placement)
}

/// A cinch pin (ReqNodeList): the job must run on exactly these nodes, each giving at least
/// one GPU (per-node requests: exactly their count on each).
pub fn pinned(state: &State, job: usize, nodes: &[u32]) -> Option<Vec<(u32, u32)>> {
    let spec = &state.jobs[job].spec;
    if nodes.is_empty() || nodes.iter().any(|&n| n as usize >= state.free.len()) {
        return None;
    }
    if let Some(p) = spec.gpus_per_node {
        let fits = nodes.len() as u32 * p == spec.gpus
            && nodes.iter().all(|&n| state.free[n as usize] >= p);
        return fits.then(|| nodes.iter().map(|&n| (n, p)).collect());
    }
    let free: u32 = nodes.iter().map(|&n| state.free[n as usize]).sum();
    if free < spec.gpus
        || nodes.len() as u32 > spec.gpus
        || nodes.iter().any(|&n| state.free[n as usize] == 0)
    {
        return None;
    }
    // One GPU on each node first (Slurm allocates every listed node), then fill in order.
    let mut placement: Vec<(u32, u32)> = nodes.iter().map(|&n| (n, 1)).collect();
    let mut remaining = spec.gpus - nodes.len() as u32;
    for (node, taken) in &mut placement {
        let extra = (state.free[*node as usize] - *taken).min(remaining);
        *taken += extra;
        remaining -= extra;
    }
    Some(placement)
}
