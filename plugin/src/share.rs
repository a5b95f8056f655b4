//! GPU sharing at submit time (docs/policies/sharing.md): the agent builds, each round, what the
//! decision needs from Slurm (the sharing nodes' GPUs and the shards in use on each, when whole
//! GPUs free up elsewhere, and the peaks and busy fractions jobs reported of themselves);
//! `job_submit` then decides
//! in microseconds, with [`cinch_core::models::sharing::decide`], whether an opted-in job of one GPU runs
//! on shards of a GPU of a chosen node, and takes those shards from the view so that the next
//! submission sees them gone.
//!
//! Slurm 22.05 cannot turn a pending job's GPU request into shards (a job update merges the new
//! GRES into the old list, and a list with both gpu and shard is refused), so the conversion can
//! only happen in `job_submit`.

use std::collections::HashMap;
use std::sync::Mutex;

use cinch_core::models::corun::ShareMode;
use cinch_core::models::sharing::{
    self, Busy, CoRunner, Prediction, ReportBook, ShareJob, ShareMix, ShareView, SharedGpu,
    Verdict, WholeGpuNode, UNKNOWN_RUN_S,
};
use cinch_core::wire::snapshot::NodeState;

use crate::agent::view::{hints, JobState, JobView, NodeView};
use crate::config::Config;
use crate::hostlist;
use cinch_core::slurm::gres::{node_count, node_gpus};

/// A view older than this (ms) is not used: the job keeps its GPU request.
pub const MAX_VIEW_AGE_MS: i64 = 120_000;

/// The agent's latest view, with when it was taken (Unix ms).
static VIEW: Mutex<Option<(i64, ShareView)>> = Mutex::new(None);

/// Publishes the agent's latest view, taken at `at_ms` (or withdraws it with `None`).
pub fn publish(at_ms: i64, view: Option<ShareView>) {
    *VIEW.lock().unwrap_or_else(|e| e.into_inner()) = view.map(|v| (at_ms, v));
}

/// The GRES a sharing node's GPUs are cut into: `shard` (time-slicing) or `mps`.
pub fn unit_name(config: &Config) -> &'static str {
    match config.share.mode {
        ShareMode::TimeSlice => "shard",
        ShareMode::Mps => "mps",
    }
}

/// The shards (or MPS units: `unit`) a running job holds on each GPU of one node, from Slurm's
/// per-node GRES detail: up to 23.02 `shard:3(IDX:0)`, `shard:(null):3(IDX:0)`,
/// `mps:25(IDX:0)`; from 23.11 each GPU's units taken and offered, `shard:3(0/8,3/8)`,
/// `mps:28(28/100)`.
fn shards_by_gpu(detail: &str, unit: &str) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for entry in detail.split("),").map(|e| e.trim_end_matches(')')) {
        let entry = entry.replace("(null)", "");
        let Some((head, tail)) = entry.split_once('(') else {
            continue;
        };
        let mut parts = head.split(':');
        if parts.next() != Some(unit) {
            continue;
        }
        let Some(count) = parts.next_back().and_then(|c| c.parse::<u32>().ok()) else {
            continue;
        };
        let Some(idx) = tail.strip_prefix("IDX:") else {
            // Per GPU, in the node's order: units taken / units offered.
            for (i, per_gpu) in tail.split(',').enumerate() {
                let taken = per_gpu
                    .split_once('/')
                    .and_then(|(taken, _)| taken.trim().parse::<u32>().ok());
                if let Some(taken) = taken.filter(|&t| t > 0) {
                    out.push((i as u32, taken));
                }
            }
            continue;
        };
        let gpus = hostlist::expand(&format!("g[{idx}]")).unwrap_or_default();
        let n = gpus.len().max(1) as u32;
        for g in gpus {
            if let Ok(i) = g.trim_start_matches('g').parse::<u32>() {
                out.push((i, count / n));
            }
        }
    }
    out
}

/// Shards (or MPS units: `unit`) a job asks for per node (`gres:shard:3`, from 23.11
/// `gres/shard:3`); 0 for every other request.
pub fn job_shards(job: &JobView, unit: &str) -> u32 {
    job.tres_per_node
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(|entry| {
            let entry = entry.trim();
            let name = entry
                .strip_prefix("gres:")
                .or_else(|| entry.strip_prefix("gres/"))
                .unwrap_or(entry);
            node_count(name, unit)
        })
        .sum()
}

fn left_s(job: &JobView, now: i64) -> i64 {
    match job.time_limit_min {
        Some(limit) => (job.start_time + 60 * i64::from(limit) - now).max(60),
        None => UNKNOWN_RUN_S,
    }
}

fn in_partition(partitions: &Option<String>, name: &str) -> bool {
    partitions
        .as_deref()
        .is_some_and(|p| p.split(',').any(|q| q == name))
}

/// How busy `job` keeps its GPU alone, by what it and similar jobs reported and the site's table.
fn job_busy(config: &Config, job: &JobView, reports: &ReportBook) -> Busy {
    let h = hints(job.comment.as_deref());
    let key = sharing::similar_key(&job.user_id.to_string(), job.name.as_deref(), &h);
    sharing::busy_of(key.as_deref(), job.job_id, &h, &config.share_busy, reports)
}

/// Builds the view from one load of Slurm's jobs and nodes; `reports` carries the peaks and busy
/// fractions jobs reported from round to round.
pub fn build(
    config: &Config,
    now_ms: i64,
    jobs: &[JobView],
    nodes: &[NodeView],
    reports: &mut ReportBook,
) -> Option<ShareView> {
    let partition = config.share_partition.as_deref()?;
    let unit = unit_name(config);
    let mps = config.share.mode == ShareMode::Mps;
    let now = now_ms / 1000;
    let mut gpus: Vec<SharedGpu> = Vec::new();
    let mut whole = Vec::new();
    // When the first running whole-GPU job on each node reaches its time limit.
    let mut first_end: HashMap<String, i64> = HashMap::new();
    // Reports count once a job has run (a pending job's would be a stated estimate).
    for job in jobs.iter().filter(|j| j.state != JobState::Pending) {
        // Most comments carry no report: only those are parsed.
        if let Some(comment) = job.comment.as_deref().filter(|c| {
            c.contains(sharing::HINT_GPU_MEM_PEAK) || c.contains(sharing::HINT_GPU_BUSY)
        }) {
            let h = hints(Some(comment));
            let uid = job.user_id.to_string();
            if let Some(key) = sharing::similar_key(&uid, job.name.as_deref(), &h) {
                if let Some(peak) = h
                    .get(sharing::HINT_GPU_MEM_PEAK)
                    .and_then(|v| sharing::parse_gib(v).ok())
                {
                    reports.record_peak(&key, job.job_id, peak);
                }
                if let Some(busy) = h
                    .get(sharing::HINT_GPU_BUSY)
                    .and_then(|v| sharing::parse_busy(v).ok())
                {
                    reports.record_busy(&key, job.job_id, busy);
                }
            }
        }
        if job.state == JobState::Running && job_shards(job, unit) == 0 {
            let end = job.start_time + 60 * i64::from(job.time_limit_min.unwrap_or(u32::MAX / 120));
            for node in hostlist::expand(job.nodes.as_deref().unwrap_or("")).unwrap_or_default() {
                let e = first_end.entry(node).or_insert(end);
                *e = (*e).min(end);
            }
        }
    }
    for node in nodes {
        let total_gpus = node_gpus(node.gres.as_deref().unwrap_or(""));
        if total_gpus == 0 {
            continue;
        }
        if in_partition(&node.partitions, partition) {
            let shards = node_count(node.gres.as_deref().unwrap_or(""), unit);
            if shards == 0 || !node.state.schedulable() && node.state != NodeState::Allocated {
                continue;
            }
            // Slurm spreads a node's shards evenly over its GPUs, the first ones taking any
            // remainder. It does MPS on one GPU per node: all the units are that GPU's (which
            // one, Slurm knows; the view calls it GPU 0).
            let sharing_gpus = if mps { 1 } else { total_gpus };
            for index in 0..sharing_gpus {
                let each = shards / sharing_gpus + u32::from(index < shards % sharing_gpus);
                gpus.push(SharedGpu {
                    node: node.name.clone(),
                    index,
                    shards_total: each,
                    shards_free: each,
                    co_runners: Vec::new(),
                });
            }
        } else {
            let used = node_gpus(node.gres_used.as_deref().unwrap_or("")).min(total_gpus);
            whole.push(WholeGpuNode {
                partitions: node
                    .partitions
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
                gpus_free: if node.state.schedulable() || node.state == NodeState::Allocated {
                    total_gpus - used
                } else {
                    0
                },
                first_end: first_end.get(node.name.as_str()).copied(),
            });
        }
    }
    let mut view = ShareView {
        gpus,
        whole,
        reports: reports.clone(),
        mix: ShareMix::default(),
    };
    // Shards in use: running jobs by Slurm's detail; pending shard jobs pinned to a sharing node
    // are counted where cinch would put them (they start there as soon as Slurm can).
    for job in jobs.iter().filter(|j| j.state == JobState::Running) {
        let names = hostlist::expand(job.nodes.as_deref().unwrap_or("")).unwrap_or_default();
        for (node, detail) in names.iter().zip(&job.gres_detail) {
            for (index, count) in shards_by_gpu(detail, unit) {
                let co_runner = CoRunner {
                    left_s: left_s(job, now),
                    busy: job_busy(config, job, reports).fraction,
                    user: Some(job.user_id),
                };
                view.add_running(node, (!mps).then_some(index), count, co_runner);
            }
        }
    }
    for job in jobs.iter().filter(|j| j.state == JobState::Pending) {
        let count = job_shards(job, unit);
        if count == 0 {
            continue;
        }
        let Some(node) = job.req_nodes.as_deref() else {
            continue;
        };
        let run_s = job
            .time_limit_min
            .map_or(UNKNOWN_RUN_S, |m| 60 * i64::from(m));
        let pinned = ShareJob {
            prediction: None,
            busy: job_busy(config, job, reports),
            run_s,
            user: Some(job.user_id),
        };
        view.add_waiting(node, count, &pinned, &config.share);
    }
    Some(view)
}

/// What a sharing decision needs to know about the job being submitted.
pub struct ShareAsk<'a> {
    pub user_id: u32,
    pub name: Option<&'a str>,
    pub partitions: Option<&'a str>,
    pub time_limit_min: Option<u32>,
    pub hints: &'a cinch_core::models::hints::Hints,
    /// A batch job (`sbatch`): its environment is where MPS mode sets the memory cap.
    pub batch: bool,
}

/// What job_submit does with an opted-in job.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitShare {
    pub verdict: Verdict,
    pub prediction: Option<Prediction>,
    /// How busy the job was taken to keep a GPU (`None`: not decided by the view).
    pub busy: Option<Busy>,
    /// Under MPS, the job's GPU memory cap, GiB (its share of the GPU's memory).
    pub mem_cap_gib: Option<f64>,
    /// The cap the driver is asked to enforce on the job's cgroup (cinch's SPANK plugin, where
    /// the driver can), MiB: its share of the GPU's memory, for a batch job that shares (on
    /// shards or under MPS). Interactive jobs have no environment to carry it.
    pub driver_cap_mib: Option<u64>,
}

/// Decides for one opted-in job at submit time, and on a share takes its shards from the view.
/// `None` when there is no fresh view (the job keeps its GPU request).
pub fn decide_at_submit(
    config: &Config,
    now_ms: i64,
    job_id: u32,
    ask: &ShareAsk,
) -> Option<SubmitShare> {
    let mut slot = VIEW.lock().unwrap_or_else(|e| e.into_inner());
    let (_, view) = slot
        .as_mut()
        .filter(|(at_ms, _)| now_ms - at_ms <= MAX_VIEW_AGE_MS)?;
    let key = sharing::similar_key(&ask.user_id.to_string(), ask.name, ask.hints);
    let prediction = sharing::predict_job(
        key.as_deref(),
        job_id,
        ask.hints,
        &config.share_models,
        &view.reports,
    );
    let busy = sharing::busy_of(
        key.as_deref(),
        job_id,
        ask.hints,
        &config.share_busy,
        &view.reports,
    );
    let mps = config.share.mode == ShareMode::Mps;
    if mps && !ask.batch {
        return Some(SubmitShare {
            verdict: Verdict::Whole(
                "under MPS cinch caps a shared job's GPU memory through its batch script's \
                 environment; an interactive job keeps a whole GPU"
                    .into(),
            ),
            prediction,
            busy: Some(busy),
            mem_cap_gib: None,
            driver_cap_mib: None,
        });
    }
    let job = ShareJob {
        prediction,
        busy,
        run_s: ask
            .time_limit_min
            .map_or(UNKNOWN_RUN_S, |m| 60 * i64::from(m)),
        user: Some(ask.user_id),
    };
    let verdict = view.decide(&job, ask.partitions, now_ms / 1000, &config.share);
    // The job's share of its GPU's memory, whatever the mode.
    let share_gib = match &verdict {
        Verdict::Share {
            node,
            index,
            shards,
            ..
        } => view
            .gpus
            .iter()
            .find(|g| g.node == *node && g.index == *index)
            .map(|g| config.share.mem_cap_gib(*shards, g.shards_total)),
        Verdict::Whole(_) => None,
    };
    Some(SubmitShare {
        verdict,
        prediction,
        busy: Some(busy),
        mem_cap_gib: share_gib.filter(|_| mps),
        driver_cap_mib: share_gib
            .filter(|_| ask.batch)
            .map(|cap| (cap * 1024.0).floor() as u64),
    })
}

/// The AdminComment words for a sharing decision: `share=n3:3shards(gpu0) gpu_mem_pred=9.0G
/// gpu_mem_src=stated gpu_busy_pred=58% gpu_busy_src=table` (under MPS `share=n3:25mps(gpu0)
/// gpu_mem_cap=20.0G ...`), or `share=whole` with the prediction if there is one.
pub fn record_words(share: &SubmitShare) -> String {
    let mut out = match &share.verdict {
        Verdict::Share {
            node,
            index,
            shards,
            ..
        } => {
            if let Some(cap) = share.mem_cap_gib {
                format!(" share={node}:{shards}mps(gpu{index}) gpu_mem_cap={cap:.1}G")
            } else {
                format!(" share={node}:{shards}shards(gpu{index})")
            }
        }
        Verdict::Whole(_) => " share=whole".to_string(),
    };
    if let Some(p) = share.prediction {
        let source = match p.source {
            sharing::Source::Stated => "stated".to_string(),
            sharing::Source::Table => "table".to_string(),
            sharing::Source::Observed(n) => format!("observed:{n}"),
        };
        out.push_str(&format!(" gpu_mem_pred={:.1}G gpu_mem_src={source}", p.gib));
    }
    if let Some(busy) = share.busy {
        let source = match busy.source {
            sharing::BusySource::Reported => "reported".to_string(),
            sharing::BusySource::Observed(n) => format!("observed:{n}"),
            sharing::BusySource::Table => "table".to_string(),
            sharing::BusySource::Unknown => "unknown".to_string(),
        };
        out.push_str(&format!(
            " gpu_busy_pred={:.0}% gpu_busy_src={source}",
            busy.fraction * 100.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::{job, node};

    fn config() -> Config {
        Config {
            share_partition: Some("shared".into()),
            ..Config::default()
        }
    }

    fn sharing_node(name: &str) -> NodeView {
        NodeView {
            gres: Some("gpu:2,shard:16".into()),
            gres_used: Some("gpu:0,shard:(null):0(IDX:N/A)".into()),
            partitions: Some("shared".into()),
            ..node(name, "gpu:0")
        }
    }

    #[test]
    fn parses_shards_from_gres_strings() {
        assert_eq!(shards_by_gpu("shard:3(IDX:0)", "shard"), vec![(0, 3)]);
        assert_eq!(
            shards_by_gpu("gpu:1(IDX:1),shard:(null):2(IDX:0)", "shard"),
            vec![(0, 2)]
        );
        assert_eq!(shards_by_gpu("gpu:2(IDX:0-1)", "shard"), vec![]);
        assert_eq!(shards_by_gpu("mps:25(IDX:0)", "mps"), vec![(0, 25)]);
        // Slurm 23.11 on: each GPU's units taken / offered.
        assert_eq!(shards_by_gpu("mps:28(28/100)", "mps"), vec![(0, 28)]);
        assert_eq!(
            shards_by_gpu("gpu:1(IDX:0),shard:3(0/8,3/8)", "shard"),
            vec![(1, 3)]
        );
        assert_eq!(shards_by_gpu("shard:3(0/8,3/8)", "mps"), vec![]);
    }

    #[test]
    fn the_view_counts_shards_in_use_and_when_whole_gpus_free_up() {
        let now = 1_000_000;
        let mut running = job(1, JobState::Running);
        running.nodes = Some("s1".into());
        running.tres_per_node = Some("gres:shard:3".into());
        let mut spelled_2311 = running.clone();
        spelled_2311.tres_per_node = Some("gres/shard:3".into());
        assert_eq!(
            job_shards(&spelled_2311, "shard"),
            3,
            "Slurm 23.11+ spells it gres/"
        );
        running.gres_detail = vec!["shard:3(IDX:1)".into()];
        running.start_time = now - 600;
        running.time_limit_min = Some(60);
        running.comment = Some("cinch:app=bert,batch=32,gpu_mem_peak=7G,gpu_busy=30%".into());
        let mut pinned = job(2, JobState::Pending);
        pinned.tres_per_node = Some("gres:shard:6".into());
        pinned.tres_per_job = None;
        pinned.req_nodes = Some("s1".into());
        let mut whole = job(3, JobState::Running);
        whole.nodes = Some("n1".into());
        whole.start_time = now;
        whole.time_limit_min = Some(30);
        let nodes = [sharing_node("s1"), node("n1", "gpu:8(IDX:0-7)")];
        let mut peaks = ReportBook::default();
        let view = build(
            &config(),
            now * 1000,
            &[running, pinned, whole],
            &nodes,
            &mut peaks,
        )
        .unwrap();
        let free: Vec<(u32, u32)> = view.gpus.iter().map(|g| (g.index, g.shards_free)).collect();
        // GPU 1 holds the running job's 3 shards; the pinned 6 go where they fit best (GPU 0).
        assert_eq!(free, vec![(0, 2), (1, 5)]);
        assert_eq!(
            view.gpus[1].co_runners,
            vec![CoRunner {
                left_s: 3_000,
                busy: 0.3,
                user: Some(1000),
            }]
        );
        // The pinned job has no report, no table entry: taken as busy.
        assert_eq!(view.gpus[0].co_runners[0].busy, 1.0);
        // Both jobs' shapes are the mix the decision's fragmentation term expects.
        let mut mix = ShareMix::default();
        mix.add(375); // 3 of GPU 1's 8 shards
        mix.add(750); // 6 of GPU 0's 8
        assert_eq!(view.mix, mix);
        assert_eq!(view.whole_gpu_wait_s(Some("gpu"), now), 1_800);
        assert_eq!(view.whole_gpu_wait_s(Some("other"), now), UNKNOWN_RUN_S);
        assert_eq!(
            view.reports.observed_peak("1000/bert:32", 9),
            Some((7.0, 1))
        );
        assert_eq!(
            view.reports.observed_busy("1000/bert:32", 9),
            Some((0.3, 1))
        );
        // Without a sharing partition there is nothing to build.
        assert!(build(&Config::default(), now * 1000, &[], &nodes, &mut peaks).is_none());
    }

    #[test]
    fn submit_decisions_take_shards_and_stale_views_are_not_used() {
        let now = 2_000_000;
        let nodes = [sharing_node("s1"), node("n1", "gpu:8(IDX:0-7)")];
        let mut busy = job(3, JobState::Running);
        busy.nodes = Some("n1".into());
        busy.start_time = now;
        busy.time_limit_min = Some(600);
        let mut peaks = ReportBook::default();
        publish(
            now * 1000,
            build(&config(), now * 1000, &[busy.clone()], &nodes, &mut peaks),
        );
        let h: cinch_core::models::hints::Hints = [
            ("share".to_string(), "yes".to_string()),
            ("gpu_mem".into(), "30G".into()),
        ]
        .into();
        let ask = |user_id: u32, batch: bool| ShareAsk {
            user_id,
            name: None,
            partitions: Some("gpu"),
            time_limit_min: Some(60),
            hints: &h,
            batch,
        };
        let submit = |id: u32| decide_at_submit(&config(), now * 1000, id, &ask(1000, true));
        let mut placed = Vec::new();
        for id in 10..14 {
            // The last is interactive: it shares as well, with no environment to carry a cap.
            let s = if id == 13 {
                decide_at_submit(&config(), now * 1000, id, &ask(1000, false)).unwrap()
            } else {
                submit(id).unwrap()
            };
            if id == 13 {
                assert_eq!(s.driver_cap_mib, None);
            }
            placed.push(match s.verdict {
                Verdict::Share { index, shards, .. } => Some((index, shards)),
                Verdict::Whole(_) => None,
            });
            if id == 10 {
                // On shards no MPS cap; the driver's cap is the job's 4 of 8 shards of 80G.
                assert_eq!((s.mem_cap_gib, s.driver_cap_mib), (None, Some(40_960)));
                assert_eq!(
                    record_words(&s),
                    " share=s1:4shards(gpu0) gpu_mem_pred=30.0G gpu_mem_src=stated \
                     gpu_busy_pred=100% gpu_busy_src=unknown"
                );
            }
        }
        // 30G is 4 of 8 shards of 72G usable: one job per idle GPU first, then two per GPU,
        // then no room.
        assert_eq!(
            placed,
            vec![Some((0, 4)), Some((1, 4)), Some((0, 4)), Some((1, 4))]
        );
        let s = submit(14).unwrap();
        assert!(matches!(s.verdict, Verdict::Whole(_)));
        assert!(decide_at_submit(&config(), (now + 600) * 1000, 15, &ask(1000, true)).is_none());

        // Under MPS: units of `mps`, a memory cap, one user per GPU, batch jobs only.
        let mps = Config {
            share: cinch_core::models::sharing::ShareParams {
                mode: ShareMode::Mps,
                ..cinch_core::models::sharing::ShareParams::default()
            },
            ..config()
        };
        let mps_node = NodeView {
            gres: Some("gpu:1,mps:100".into()),
            gres_used: Some("gpu:0,mps:0(IDX:N/A)".into()),
            ..sharing_node("m1")
        };
        let nodes = [mps_node, node("n1", "gpu:8(IDX:0-7)")];
        publish(
            now * 1000,
            build(&mps, now * 1000, &[busy.clone()], &nodes, &mut peaks),
        );
        // One GPU per node does MPS: a node of two GPUs and 100 units shares one GPU of 100.
        let two = NodeView {
            gres: Some("gpu:2,mps:100".into()),
            ..sharing_node("m2")
        };
        let view = build(&mps, now * 1000, &[], &[two], &mut peaks).unwrap();
        let units: Vec<(u32, u32)> = view
            .gpus
            .iter()
            .map(|g| (g.index, g.shards_total))
            .collect();
        assert_eq!(units, vec![(0, 100)]);
        let first = decide_at_submit(&mps, now * 1000, 20, &ask(1000, true)).unwrap();
        // 30G of 72G usable is 42 of 100 units; the cap is 42% of 80G.
        assert_eq!(
            record_words(&first),
            " share=m1:42mps(gpu0) gpu_mem_cap=33.6G gpu_mem_pred=30.0G gpu_mem_src=stated \
             gpu_busy_pred=100% gpu_busy_src=unknown"
        );
        assert_eq!(first.mem_cap_gib, Some(33.6));
        assert_eq!(first.driver_cap_mib, Some(34_406));
        // Another user's job may not join (MPS would serialise them); the same user's may.
        let other = decide_at_submit(&mps, now * 1000, 21, &ask(2000, true)).unwrap();
        assert!(matches!(other.verdict, Verdict::Whole(_)), "{other:?}");
        let same = decide_at_submit(&mps, now * 1000, 22, &ask(1000, true)).unwrap();
        assert!(matches!(same.verdict, Verdict::Share { .. }), "{same:?}");
        // An interactive job has no batch environment to carry the cap: a whole GPU.
        let interactive = decide_at_submit(&mps, now * 1000, 23, &ask(1000, false)).unwrap();
        assert!(
            matches!(&interactive.verdict, Verdict::Whole(w) if w.contains("interactive")),
            "{interactive:?}"
        );
        publish(0, None);
    }
}
