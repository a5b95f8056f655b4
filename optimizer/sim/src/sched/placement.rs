//! Where the simulated Slurm puts a job's GPUs: its own node selection, or a node list (a pin)
//! that a policy set.

use crate::engine::State;

/// Slurm's node selection for GPU jobs (cons_tres, equal node weights), reduced to GPUs, as
/// measured on Slurm 22.05.8 and 24.11.5 in the local cluster with topology/tree (docs/simulator.md,
/// "Fidelity: live replay"): a job that one node can hold goes to the tightest such node (the
/// fewest free GPUs, then the lowest index); a larger one takes the nodes with the most free GPUs
/// first, among equals one in a rack it already uses, then the lowest index, until it has its
/// GPUs. Per-node requests take the first nodes with enough free, in index order (not measured).
pub fn first_fit(state: &State, job: usize) -> Option<Vec<(u32, u32)>> {
    let spec = &state.jobs[job].spec;
    let cluster = state.cluster();
    if let Some(per) = spec.gpus_per_node {
        return first_fit_in(state, spec.gpus, Some(per), 0..state.free.len() as u32);
    }
    if spec.gpus <= cluster.gpus_per_node {
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
    if state.free_total < spec.gpus {
        return None;
    }
    let mut placement: Vec<(u32, u32)> = Vec::new();
    let mut racks_used: Vec<u32> = Vec::new();
    let mut remaining = spec.gpus;
    while remaining > 0 {
        let (node, free) = state
            .free
            .iter()
            .enumerate()
            .filter(|&(n, &f)| f > 0 && !placement.iter().any(|&(p, _)| p as usize == n))
            .max_by_key(|&(n, &f)| {
                let same_rack = racks_used.contains(&cluster.rack_of(n as u32));
                (f, same_rack, std::cmp::Reverse(n))
            })
            .map(|(n, &f)| (n as u32, f))?;
        let take = free.min(remaining);
        placement.push((node, take));
        racks_used.push(cluster.rack_of(node));
        remaining -= take;
    }
    Some(placement)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterSpec;
    use crate::engine::SimConfig;
    use crate::workload::JobSpec;

    fn spec(id: u32, gpus: u32) -> JobSpec {
        JobSpec::for_test(id, 0, gpus, 100.0)
    }

    /// Where Slurm's selection puts a job of `gpus` GPUs on nodes of 8 GPUs (2 racks) with
    /// `busy[i]` GPUs of node i in use: the (node name, GPUs) pairs.
    fn placed(nodes: u32, busy: &[u32], gpus: u32) -> Vec<(String, u32)> {
        let config = SimConfig {
            cluster: ClusterSpec::parse(&format!("{nodes}x8"), 2).unwrap(),
            ..SimConfig::default()
        };
        let running = busy
            .iter()
            .enumerate()
            .filter(|(_, &b)| b > 0)
            .map(|(n, &b)| (spec(100 + n as u32, b), vec![(n as u32, b)]))
            .collect();
        let state = State::scenario(config, vec![spec(1, gpus)], running);
        first_fit(&state, 0)
            .unwrap()
            .into_iter()
            .map(|(n, g)| (ClusterSpec::node_name(n), g))
            .collect()
    }

    fn names(p: &[(String, u32)]) -> Vec<&str> {
        p.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The cases measured on Slurm 22.05.8 and 24.11.5 (docs/simulator.md).
    #[test]
    fn slurm_places_as_measured_on_the_local_cluster() {
        // One node holds it: the tightest (free n1:3 n2:2 n3:8 n4:8 -> n3 for 4 GPUs).
        assert_eq!(names(&placed(4, &[5, 6, 0, 0], 4)), ["n3"]);
        // free n1:4 n2:8 n3:4 n4:8, 12 GPUs: the most free first, across racks: n[2,4].
        assert_eq!(names(&placed(4, &[4, 0, 4, 0], 12)), ["n2", "n4"]);
        // free n1:6 n2:6 n3:8 n4:5, 12 GPUs: n3 first, then n1 (equal to n2, lower): n[1,3].
        assert_eq!(names(&placed(4, &[2, 2, 0, 3], 12)), ["n3", "n1"]);
        // free n1:2 n2:2 n3:8 n4:2, 10 GPUs: n3, then n4 (in n3's rack) among the equals.
        assert_eq!(names(&placed(4, &[6, 6, 0, 6], 10)), ["n3", "n4"]);
        // free n1:3 n2:8 n3:3 n4:3, 13 GPUs: n2, n1 (its rack), then n3 (lowest): n[1-3].
        assert_eq!(
            placed(4, &[5, 0, 5, 5], 13),
            [("n2".into(), 8), ("n1".into(), 3), ("n3".into(), 2)]
        );
        // 6 nodes (racks n1-n3, n4-n6), free 8 8 8 5 5 0, 10 GPUs: n[1-2].
        assert_eq!(names(&placed(6, &[0, 0, 0, 3, 3, 8], 10)), ["n1", "n2"]);
    }
}
