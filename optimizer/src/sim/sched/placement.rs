//! Where a job's GPUs go, the ways the schedulers choose: Slurm's first fit, consolidation
//! (fewest nodes, one rack, tightest fit), and a cinch pin.

use crate::sim::engine::State;

/// GPUs taken on each node: (node, GPUs).
pub type Placement = Vec<(u32, u32)>;

/// Slurm's node selection without topology (cons_tres `_eval_nodes_consec` with equal node
/// weights, reduced to GPUs): a job that one node can hold goes to the tightest such node (the
/// fewest free GPUs, then the lowest index); a larger one takes free GPUs from nodes in index
/// order as it finds them, with no regard for racks. Per-node requests take the first nodes
/// with enough free.
pub fn first_fit(state: &State, job: usize) -> Option<Vec<(u32, u32)>> {
    let spec = &state.jobs[job].spec;
    if spec.gpus_per_node.is_none() && spec.gpus <= state.cluster().gpus_per_node {
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
    first_fit_in(
        state,
        spec.gpus,
        spec.gpus_per_node,
        0..state.free.len() as u32,
    )
}

pub(super) fn first_fit_in(
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

/// The most consolidated placement free now: fewest nodes, inside one rack when one can
/// hold the job, then the tightest fit (fewest GPUs left over on the nodes used).
pub fn consolidated(state: &State, job: usize) -> Option<Vec<(u32, u32)>> {
    let spec = &state.jobs[job].spec;
    let cluster = state.cluster();
    // (nodes, leftover) of the best placement inside one rack so far.
    let mut best: Option<((usize, u32), Placement)> = None;
    for rack in 0..cluster.racks {
        let nodes: Vec<u32> = (0..cluster.nodes)
            .filter(|&n| cluster.rack_of(n) == rack)
            .collect();
        if let Some((placement, leftover)) = fewest(state, &nodes, spec.gpus, spec.gpus_per_node) {
            let key = (placement.len(), leftover);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, placement));
            }
        }
    }
    match best {
        Some((_, placement)) => Some(placement),
        None if cluster.racks > 1 => {
            let all: Vec<u32> = (0..cluster.nodes).collect();
            fewest(state, &all, spec.gpus, spec.gpus_per_node).map(|(p, _)| p)
        }
        None => None,
    }
}

/// Fewest of `nodes` covering `gpus`: largest free first, then swap the last pick for the
/// tightest node that still covers what it must. Returns the placement and the GPUs it leaves
/// free on the nodes used.
fn fewest(
    state: &State,
    nodes: &[u32],
    gpus: u32,
    per_node: Option<u32>,
) -> Option<(Vec<(u32, u32)>, u32)> {
    let mut candidates: Vec<(u32, u32)> = nodes
        .iter()
        .map(|&n| (n, state.free[n as usize]))
        .filter(|&(_, f)| f > 0 && per_node.is_none_or(|p| f >= p))
        .collect();
    if let Some(p) = per_node {
        // Per-node requests: the tightest nodes that hold p each.
        candidates.sort_by_key(|&(n, f)| (f, n));
        let count = (gpus / p) as usize;
        if candidates.len() < count {
            return None;
        }
        let chosen = &candidates[..count];
        let leftover = chosen.iter().map(|&(_, f)| f - p).sum();
        return Some((chosen.iter().map(|&(n, _)| (n, p)).collect(), leftover));
    }
    candidates.sort_by_key(|&(n, f)| (std::cmp::Reverse(f), n));
    let mut placement = Vec::new();
    let mut remaining = gpus;
    let mut index = 0;
    while remaining > 0 && index < candidates.len() {
        let (node, free) = candidates[index];
        if free >= remaining {
            // The last node: the tightest one (among those not used yet) that covers the rest.
            let (tight, tight_free) = candidates[index..]
                .iter()
                .filter(|&&(_, f)| f >= remaining)
                .min_by_key(|&&(n, f)| (f, n))
                .copied()
                .expect("this node covers the rest");
            placement.push((tight, remaining));
            let leftover = tight_free - remaining;
            let used: u32 = placement[..placement.len() - 1]
                .iter()
                .map(|&(n, g)| state.free[n as usize] - g)
                .sum();
            return Some((placement, leftover + used));
        }
        placement.push((node, free));
        remaining -= free;
        index += 1;
    }
    None
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
