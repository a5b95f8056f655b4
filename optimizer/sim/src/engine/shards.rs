//! Shared GPUs: a job shared at submission, shard jobs started on a GPU's free shards, each
//! GPU's co-runners re-rated as they come and go, and the driver's fence on a node.

use super::*;

/// The sharing decision for an opted-in job arriving at `now`, with what the live agent's view
/// would hold: the sharing GPUs (shards free, the jobs on each and their time limits, shard jobs
/// waiting counted where they would go), the whole-GPU nodes (free GPUs, the first time limit
/// to run out). Returns whether the job became a shard job.
pub(super) fn share_at_submit(state: &mut State, job: usize, now: f64) -> bool {
    use cinch_core::models::sharing::{
        self, CoRunner, ShareJob, ShareView, SharedGpu, Verdict, WholeGpuNode,
    };
    let (Some(sharing), Some(share)) = (state.config.sharing, state.jobs[job].spec.share) else {
        return false;
    };
    let left = |j: usize| -> i64 {
        let job = &state.jobs[j];
        (job.first_start.unwrap_or(now) + job.spec.time_limit - now).max(60.0) as i64
    };
    // What the live agent would know of a job's busy fraction: the site's table's entry for the
    // application it names, if the job names one.
    let busy = |j: usize| -> sharing::Busy {
        let spec = &state.jobs[j].spec;
        if sharing.busy_table && spec.hinted {
            sharing::Busy {
                fraction: crate::colocation::app_busy(spec.app),
                source: sharing::BusySource::Table,
            }
        } else {
            sharing::Busy::UNKNOWN
        }
    };
    // The GPUs whole, then what the plugin's agent would count on them (`ShareView::add_running`,
    // `add_waiting`: the same rules as `plugin/src/share.rs::build`).
    let mut view = ShareView {
        gpus: state
            .shared
            .iter()
            .map(|g| SharedGpu {
                node: g.node.to_string(),
                index: g.index,
                shards_total: sharing.shards_per_gpu,
                // A fenced GPU no shared job holds is only there while a whole one is free.
                shards_free: if sharing.fenced
                    && g.jobs.is_empty()
                    && state.free[g.node as usize] == 0
                {
                    0
                } else {
                    sharing.shards_per_gpu
                },
                co_runners: Vec::new(),
            })
            .collect(),
        whole: Vec::new(),
        reports: sharing::ReportBook::default(),
        mix: sharing::ShareMix::default(),
    };
    for g in &state.shared {
        for &j in &g.jobs {
            let Some((_, shards, _)) = state.jobs[j].shard else {
                continue;
            };
            let co_runner = CoRunner {
                left_s: left(j),
                busy: busy(j).fraction,
                user: Some(user_id(&state.jobs[j].spec.user)),
            };
            view.add_running(&g.node.to_string(), Some(g.index), shards, co_runner);
        }
    }
    debug_assert!(
        view.gpus
            .iter()
            .zip(&state.shared)
            .all(|(v, g)| v.shards_free == g.shards_free || v.shards_free == 0),
        "the view counts the shards the engine holds"
    );
    for &w in &state.shard_waiting {
        if let Some((node, shards, _)) = state.jobs[w].shard {
            let pinned = ShareJob {
                prediction: None,
                busy: busy(w),
                run_s: state.jobs[w].spec.time_limit as i64,
                user: Some(user_id(&state.jobs[w].spec.user)),
            };
            view.add_waiting(&node.to_string(), shards, &pinned, &sharing.params);
        }
    }
    let whole_nodes = state.config.cluster.nodes - sharing.set_aside();
    let mut first_end = vec![None::<f64>; whole_nodes as usize];
    for &r in &state.running {
        let end = state.jobs[r].expected_end();
        for &(node, _) in &state.jobs[r].placement {
            let e = &mut first_end[node as usize];
            *e = Some(e.map_or(end, |e: f64| e.min(end)));
        }
    }
    view.whole = (0..whole_nodes as usize)
        .map(|n| WholeGpuNode {
            partitions: Vec::new(),
            gpus_free: state.free[n],
            first_end: first_end[n].map(|e| e as i64),
        })
        .collect();
    let asking = ShareJob {
        prediction: sharing::predict(Some(share.stated_gib), None, None),
        busy: busy(job),
        run_s: state.jobs[job].spec.time_limit as i64,
        user: Some(user_id(&state.jobs[job].spec.user)),
    };
    match view.decide(&asking, None, now as i64, &sharing.params) {
        Verdict::Share { node, shards, .. } => {
            let node: u32 = node.parse().expect("the view names nodes by index");
            state.jobs[job].shard = Some((node, shards, None));
            state.shard_waiting.push(job);
            true
        }
        Verdict::Whole(_) => false,
    }
}

/// A simulated user's numeric id (as Slurm knows users by uid): a hash of the name (FNV-1a).
pub(super) fn user_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Starts the waiting shard jobs that fit, in submission order, each on the first GPU of its
/// node with room (Slurm's order). A job's true peak decides whether its run holds: under MPS
/// one over its memory cap fails at once and its user resubmits it whole; under shards, when
/// the true peaks on a GPU pass its memory, every job there runs out of memory and is
/// resubmitted (whole, the ones that understated their peak; the others asking to share again).
pub(super) fn start_shard_jobs(
    state: &mut State,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    let Some(sharing) = state.config.sharing else {
        return;
    };
    let mut failed: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < state.shard_waiting.len() {
        let job = state.shard_waiting[i];
        let Some((node, shards, _)) = state.jobs[job].shard else {
            i += 1;
            continue;
        };
        let claimable = |g: &SharedGpuState| {
            !sharing.fenced || !g.jobs.is_empty() || state.free[g.node as usize] > 0
        };
        let Some(gpu) = state
            .shared
            .iter()
            .position(|g| g.node == node && g.shards_free >= shards && claimable(g))
        else {
            i += 1;
            continue;
        };
        state.shard_waiting.remove(i);
        if sharing.fenced && state.shared[gpu].jobs.is_empty() {
            claim_fenced(state, node, true);
        }
        let g = &mut state.shared[gpu];
        g.shards_free -= shards;
        g.jobs.push(job);
        let j = &mut state.jobs[job];
        j.shard = Some((node, shards, Some(gpu)));
        j.phase = Phase::Running;
        j.first_start.get_or_insert(now);
        j.run_start = now;
        j.limit_at = now + j.spec.time_limit;
        j.penalty = state.config.start_latency_s;
        j.shape = Shape {
            gpus: 1,
            nodes: 1,
            racks: 1,
        };
        state.shard_running.push(job);
        state.version += 1;
        let peak = |j: usize| state.jobs[j].spec.share.map_or(0.0, |s| s.peak_gib);
        let fails = match sharing.params.mode {
            ShareMode::Mps => {
                peak(job) > sharing.params.mem_cap_gib(shards, sharing.shards_per_gpu) + 1e-9
            }
            ShareMode::TimeSlice => {
                state.shared[gpu].jobs.iter().map(|&j| peak(j)).sum::<f64>()
                    > sharing.params.gpu_mem_gib + 1e-9
            }
        };
        if fails {
            let crashed = match sharing.params.mode {
                ShareMode::Mps => vec![job],
                ShareMode::TimeSlice => state.shared[gpu].jobs.clone(),
            };
            for j in crashed {
                book(&mut state.jobs[j], now);
                let g = &mut state.shared[gpu];
                g.shards_free += state.jobs[j].shard.map_or(0, |(_, units, _)| units);
                g.jobs.retain(|&k| k != j);
                state.shard_running.retain(|&k| k != j);
                failed.push(j);
            }
            if sharing.fenced && state.shared[gpu].jobs.is_empty() {
                claim_fenced(state, node, false);
            }
        }
        rerate_gpu(state, gpu, now, finishes);
    }
    for job in failed {
        let j = &mut state.jobs[job];
        let understated = j.spec.share.is_some_and(|s| s.peak_gib > s.stated_gib);
        j.shard = None;
        j.phase = Phase::Pending;
        j.work_done = 0.0;
        j.queued_since = now;
        j.generation += 1;
        j.share_failures += 1;
        if understated {
            // Its user saw it fail for memory: it comes back asking for a whole GPU.
            j.spec.share = None;
        }
        state.version += 1;
        if understated || !share_at_submit(state, job, now) {
            state.pending.push(job);
        }
    }
}

/// Books the progress of every job on shared GPU `gpu` at its old speed and plans its finish at
/// the speed the jobs now on that GPU allow.
pub(super) fn rerate_gpu(
    state: &mut State,
    gpu: usize,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    let truth = state
        .config
        .sharing
        .map_or(SharingTruth::Interference(0.0), |s| s.truth);
    let jobs = state.shared[gpu].jobs.clone();
    let rate_jobs = jobs.len() as u32;
    let rate = match truth {
        SharingTruth::Interference(alpha) => {
            1.0 / (1.0 + alpha * f64::from(rate_jobs.saturating_sub(1)))
        }
        SharingTruth::Measured(mode) => {
            let busy: Vec<f64> = jobs
                .iter()
                .map(|&j| crate::colocation::app_busy(state.jobs[j].spec.app))
                .collect();
            cinch_core::models::corun::CorunModel::default().speed(mode, &busy)
        }
    };
    for job in jobs {
        let j = &mut state.jobs[job];
        book(j, now);
        j.co_runners_max = j.co_runners_max.max(rate_jobs.saturating_sub(1));
        j.rate = rate;
        j.generation += 1;
        finishes.push(Reverse((At(j.planned_end(now)), job, j.generation)));
    }
}

/// Adds a running job's progress since `run_start` and moves `run_start` to `now`.
pub(super) fn book(j: &mut JobState, now: f64) {
    let wall = (now - j.run_start).max(0.0);
    let working = (wall - j.penalty).max(0.0);
    j.work_done = (j.work_done + working * j.rate).min(j.spec.run_time);
    j.attained += f64::from(j.spec.gpus) * wall;
    j.penalty = (j.penalty - wall).max(0.0);
    j.run_start = now;
}

/// Ends a shard job at `now`: its shards are freed, the jobs left on its GPU speed up, and
/// waiting shard jobs may start.
pub(super) fn stop_shard(
    state: &mut State,
    job: usize,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    book(&mut state.jobs[job], now);
    let Some((_, shards, Some(gpu))) = state.jobs[job].shard else {
        return;
    };
    let g = &mut state.shared[gpu];
    g.shards_free += shards;
    g.jobs.retain(|&j| j != job);
    let (node, emptied) = (g.node, g.jobs.is_empty());
    if emptied && state.config.sharing.is_some_and(|s| s.fenced) {
        claim_fenced(state, node, false);
    }
    state.shard_running.retain(|&j| j != job);
    state.version += 1;
    rerate_gpu(state, gpu, now, finishes);
    start_shard_jobs(state, now, finishes);
}

/// Takes a fenced shared GPU of `node` from the whole ones when its first shared job starts
/// (`claim`), or gives it back when its last one ends.
pub(super) fn claim_fenced(state: &mut State, node: u32, claim: bool) {
    let free = &mut state.free[node as usize];
    if claim {
        *free -= 1;
        state.free_total -= 1;
    } else {
        *free += 1;
        state.free_total += 1;
    }
    state.version += 1;
}
