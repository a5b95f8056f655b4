//! Elastic jobs (ONES, Bian et al., SC'21): a job whose user declares a GPU range
//! (`elastic=MIN-MAX`, with `ckpt=yes` and `--requeue`) may be started, and restarted from its
//! checkpoint, on any GPU count in that range; at each start it reads its count from Slurm and
//! scales its global batch size and learning rate linearly (up to a cap), as ONES does.
//!
//! This module holds what the policy and the plugin both need: the hint, the throughput model
//! the search uses, and [`search`], ONES's online evolutionary search over GPU counts.
//!
//! The search follows ONES (section 2 of `../shared/research/seed-systems.md`): a population of
//! candidate schedules (a GPU count per elastic job, 0 = not running) seeded from the running
//! schedule; uniform crossover of random parent pairs; mutation that drops jobs and halves or
//! doubles others; "pad", which fills the free GPUs; selection by fitness. Where Slurm differs
//! from ONES's own runtime, so does the search, and each change was measured on the Pollux
//! workloads (docs/policies/elastic.md):
//! - every resize of a running job is a checkpoint, a requeue and Slurm's requeue delay, not a
//!   cheap in-process change at an epoch boundary: running jobs change only by a factor of two or
//!   more (or to an end of their range), only when the time saved beats the restart, at most once
//!   per interval, and (by default) only grow;
//! - pad starts waiting jobs at the count they asked for where it fits, then at their smallest,
//!   shortest first, then grows jobs shortest first up to their largest;
//! - fitness is the sum of predicted completion times (a waiting job: after the first running job
//!   ends), not ONES's remaining GPU-time: with pad filling every free GPU, GPU-time rewarded
//!   shrinking long jobs to one GPU for good (avg JCT 2.42 h against 1.62 h, same settings).
//!
//! Throughput per count comes from a scaling model per application ([`APP_SERIAL`]); contiguity
//! (ONES's reorder step) is the placement's job: cinch places each sized job with its
//! consolidation rules and leaves running jobs where they are unless it resizes them. The budget
//! is a number of generations, not wall time, so that a seed replays a round exactly.

use crate::util::rng::SeededRng;

/// The hint: `elastic=MIN-MAX` GPUs.
pub const HINT_ELASTIC: &str = "elastic";

/// With the profile hints (`iters`, `iters_done`, `iter_rate`): the GPU count the rate was
/// measured on (the job's latest run), which may differ from the count it asks for now.
pub const HINT_RATE_GPUS: &str = "rate_gpus";

/// What an elastic job reported of itself: predicted remaining seconds at the rate it measured,
/// and the GPU count it measured it on.
pub fn reported_remaining(hints: &crate::slurm::job_hints::Hints) -> Option<(f64, u32)> {
    let profile = crate::models::qos::profile(hints)?;
    let done = profile.done_s?;
    let gpus = hints
        .get(HINT_RATE_GPUS)?
        .parse::<u32>()
        .ok()
        .filter(|&g| g > 0)?;
    Some(((profile.run_s - done).max(1.0), gpus))
}

/// A declared GPU range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: u32,
    pub max: u32,
}

impl Range {
    pub fn contains(self, gpus: u32) -> bool {
        (self.min..=self.max).contains(&gpus)
    }
}

/// Largest GPU count a range may name.
pub const MAX_ELASTIC_GPUS: u32 = 4096;

/// Parses `MIN-MAX` (or `N`, a fixed count) with 1 <= MIN <= MAX <= [`MAX_ELASTIC_GPUS`].
pub fn parse_range(value: &str) -> Result<Range, String> {
    let (lo, hi) = value.split_once('-').unwrap_or((value, value));
    let parse = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("'{value}' is not a GPU range MIN-MAX (e.g. 4-16)"))
    };
    let (min, max) = (parse(lo)?, parse(hi)?);
    if min == 0 || min > max || max > MAX_ELASTIC_GPUS {
        return Err(format!(
            "'{value}': the range must satisfy 1 <= MIN <= MAX <= {MAX_ELASTIC_GPUS}"
        ));
    }
    Ok(Range { min, max })
}

/// The range a job's hints declare, if it declares one and it parses.
pub fn range(hints: &crate::slurm::job_hints::Hints) -> Option<Range> {
    hints.get(HINT_ELASTIC).and_then(|v| parse_range(v).ok())
}

/// The global batch size and learning rate an elastic job uses on `gpus` GPUs, by the rule the
/// helper (`plugin/python/cinch_elastic.py`) implements: linear scaling from the job's base (the batch and
/// rate it was tuned for on `base_gpus`), the batch capped at `max_batch` (the rate scales with
/// the batch actually used).
pub fn scaled_batch(
    base_batch: u32,
    base_lr: f64,
    base_gpus: u32,
    gpus: u32,
    max_batch: u32,
) -> (u32, f64) {
    let want = u64::from(base_batch) * u64::from(gpus) / u64::from(base_gpus.max(1));
    let batch = want.clamp(1, u64::from(max_batch.max(1))) as u32;
    (
        batch,
        base_lr * f64::from(batch) / f64::from(base_batch.max(1)),
    )
}

/// How an application's throughput grows with GPUs (consolidated, batch scaled linearly):
/// `speed(n) = n / (1 + serial * (n - 1))`, relative to one GPU. `serial` per application was
/// fitted to the Pollux measurements and convergence curves (the simulator's model of them, by
/// `cinch_sim::elastic::fit_serial` over the 8 Pollux workloads, whose test re-fits it); unknown applications take
/// [`DEFAULT_SERIAL`].
pub const APP_SERIAL: [(&str, f64); 6] = [
    ("bert", 0.044),
    ("cifar10", 0.088),
    ("deepspeech2", 0.048),
    ("imagenet", 0.031),
    ("ncf", 0.817),
    ("yolov3", 0.225),
];

/// The serial fraction assumed for an application cinch does not know: between the measured
/// ones (the median of [`APP_SERIAL`]).
pub const DEFAULT_SERIAL: f64 = 0.068;

/// The scaling model of an application (`app=` hint), known or assumed.
pub fn serial_of(app: Option<&str>) -> f64 {
    app.and_then(|a| {
        APP_SERIAL
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(a))
            .map(|&(_, s)| s)
    })
    .unwrap_or(DEFAULT_SERIAL)
}

/// Relative speed on `n` GPUs (1 GPU = 1).
pub fn speed(serial: f64, n: u32) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let n = f64::from(n);
    n / (1.0 + serial * (n - 1.0))
}

/// One elastic job as the search sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub job_id: u32,
    pub range: Range,
    /// GPUs it runs on now (0: waiting).
    pub current: u32,
    /// Whether a running job may be resized this round (opted in, past its resize interval).
    pub resizable: bool,
    /// Whether it may also shrink (it has not been restarted too often); growing stays allowed,
    /// so that no job is left small for good.
    pub may_shrink: bool,
    /// Predicted remaining run time on `reference` GPUs, seconds.
    pub remaining_s: f64,
    pub reference: u32,
    pub serial: f64,
}

impl Candidate {
    /// Predicted remaining seconds on `n` GPUs.
    pub fn remaining_on(&self, n: u32) -> f64 {
        self.remaining_s * speed(self.serial, self.reference) / speed(self.serial, n.max(1))
    }
}

/// The search's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchParams {
    /// Candidates per generation (ONES: 16).
    pub population: usize,
    /// Generations per round: the round's budget.
    pub generations: usize,
    /// Chance that mutation touches a job (ONES: 0.3).
    pub mutation: f64,
    /// What resizing a running job costs it (checkpoint, requeue, restart), seconds.
    pub restart_s: f64,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            population: 16,
            generations: 30,
            mutation: 0.3,
            restart_s: 300.0,
        }
    }
}

/// The GPU count per candidate (same order) that the search finds best for `capacity` GPUs (the
/// free GPUs plus those of the resizable running elastic jobs). Running jobs that may not be
/// resized keep their count and their GPUs are not in `capacity`.
pub fn search(
    jobs: &[Candidate],
    capacity: u32,
    params: SearchParams,
    rng: &mut SeededRng,
) -> Vec<u32> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let search = Search::new(jobs, capacity, params);
    let current: Vec<u32> = jobs.iter().map(|j| j.current).collect();
    let mut population: Vec<(f64, Vec<u32>)> = Vec::with_capacity(params.population * 2);
    let mut seed = current.clone();
    search.repair(&mut seed);
    population.push((search.fitness(&seed), seed));
    while population.len() < params.population.max(2) {
        let mut c = population[0].1.clone();
        search.mutate(&mut c, rng);
        search.repair(&mut c);
        population.push((search.fitness(&c), c));
    }
    for _ in 0..params.generations {
        let n = population.len();
        for _ in 0..n / 2 {
            let a = rng.below(n as u64) as usize;
            let b = rng.below(n as u64) as usize;
            let mut child: Vec<u32> = population[a]
                .1
                .iter()
                .zip(&population[b].1)
                .map(|(&x, &y)| if rng.unit() < 0.5 { x } else { y })
                .collect();
            search.mutate(&mut child, rng);
            search.repair(&mut child);
            population.push((search.fitness(&child), child));
        }
        population.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        population.dedup_by(|a, b| a.1 == b.1);
        population.truncate(params.population.max(2));
    }
    population.swap_remove(0).1
}

/// One search's fixed inputs: the candidates, the GPUs to share among them, and the order in
/// which repairs pad and cut.
struct Search<'j> {
    jobs: &'j [Candidate],
    pool: u32,
    params: SearchParams,
    /// Pad order: ascending predicted remaining time at the smallest count.
    by_remaining: Vec<usize>,
}

impl<'j> Search<'j> {
    fn new(jobs: &'j [Candidate], capacity: u32, params: SearchParams) -> Self {
        let mut by_remaining: Vec<usize> = (0..jobs.len()).collect();
        by_remaining.sort_by(|&a, &b| {
            jobs[a]
                .remaining_on(jobs[a].range.min)
                .total_cmp(&jobs[b].remaining_on(jobs[b].range.min))
                .then(jobs[a].job_id.cmp(&jobs[b].job_id))
        });
        Search {
            jobs,
            pool: capacity,
            params,
            by_remaining,
        }
    }

    /// A running job that may not be resized keeps its count, outside the pool.
    fn fixed(j: &Candidate) -> bool {
        j.current > 0 && !j.resizable
    }

    /// The GPUs of the pool that `sizes` uses.
    fn used(&self, sizes: &[u32]) -> u32 {
        sizes
            .iter()
            .zip(self.jobs)
            .filter(|(_, j)| !Self::fixed(j))
            .map(|(s, _)| *s)
            .sum()
    }

    /// Makes `sizes` a valid assignment that leaves as little of the pool idle as it can.
    fn repair(&self, sizes: &mut [u32]) {
        self.clamp_to_ranges(sizes);
        self.cut_to_the_pool(sizes);
        let mut free = self.pool.saturating_sub(self.used(sizes));
        self.pad(sizes, &mut free);
        self.no_small_steps(sizes, &mut free);
        // What that gave back goes to waiting jobs, shortest first.
        for &i in &self.by_remaining {
            let j = &self.jobs[i];
            if sizes[i] == 0 && j.current == 0 && j.range.min <= free {
                let to = j.range.max.min(free);
                sizes[i] = to;
                free -= to;
            }
        }
    }

    fn clamp_to_ranges(&self, sizes: &mut [u32]) {
        for (s, j) in sizes.iter_mut().zip(self.jobs) {
            if Self::fixed(j) {
                *s = j.current;
            } else if !j.may_shrink && j.current > 0 {
                *s = (*s).clamp(j.current, j.range.max);
            } else if *s > 0 {
                *s = (*s).clamp(j.range.min, j.range.max);
            }
        }
    }

    /// Over capacity: shrink the longest jobs to their smallest count, then drop them.
    fn cut_to_the_pool(&self, sizes: &mut [u32]) {
        let jobs = self.jobs;
        let mut over = self.used(sizes).saturating_sub(self.pool);
        for &i in self.by_remaining.iter().rev() {
            if over == 0 {
                break;
            }
            if Self::fixed(&jobs[i]) || sizes[i] == 0 {
                continue;
            }
            let cut = (sizes[i] - jobs[i].range.min).min(over);
            sizes[i] -= cut;
            over -= cut;
            if over > 0 {
                over -= sizes[i].min(over);
                sizes[i] = 0;
            }
        }
    }

    /// Pad: waiting jobs at their smallest count, shortest first; then grow the shortest.
    fn pad(&self, sizes: &mut [u32], free: &mut u32) {
        let jobs = self.jobs;
        // Waiting jobs start at the count they asked for where that fits (shortest first), the
        // rest at their smallest: in Slurm every later resize is a checkpoint and requeue, so a
        // job started far below its ask pays for each step back up (ONES starts new jobs at one
        // GPU because its resizes are nearly free).
        for &i in &self.by_remaining {
            let want = jobs[i]
                .reference
                .clamp(jobs[i].range.min, jobs[i].range.max);
            if sizes[i] == 0 && !Self::fixed(&jobs[i]) && want <= *free {
                sizes[i] = want;
                *free -= want;
            }
        }
        for &i in &self.by_remaining {
            if sizes[i] == 0 && !Self::fixed(&jobs[i]) && jobs[i].range.min <= *free {
                sizes[i] = jobs[i].range.min;
                *free -= sizes[i];
            }
        }
        for &i in &self.by_remaining {
            if *free == 0 {
                break;
            }
            let j = &jobs[i];
            if sizes[i] > 0 && !Self::fixed(j) {
                let mut to = sizes[i] + (j.range.max - sizes[i]).min(*free);
                // A running job grows past its count only when the time saved beats the
                // restart, and by at least doubling (or to its largest count): every step is a
                // checkpoint and requeue. Back up to its count is free (no restart).
                if j.current > 0
                    && to > j.current
                    && (j.remaining_on(j.current) - j.remaining_on(to) <= self.params.restart_s
                        || (to < 2 * j.current && to < j.range.max))
                {
                    to = j.current.min(sizes[i] + *free).max(sizes[i]);
                }
                *free -= to - sizes[i];
                sizes[i] = to;
            }
        }
    }

    /// A running job changes by at least a factor of two (or to an end of its range), or not
    /// at all: small steps cost a restart each for little.
    fn no_small_steps(&self, sizes: &mut [u32], free: &mut u32) {
        for (i, j) in self.jobs.iter().enumerate() {
            let s = sizes[i];
            let small_step = j.current > 0
                && s > 0
                && s != j.current
                && s * 2 > j.current
                && s < 2 * j.current
                && s != j.range.min
                && s != j.range.max;
            if !small_step {
                continue;
            }
            if s > j.current {
                *free += s - j.current;
                sizes[i] = j.current;
            } else if *free >= j.current - s {
                *free -= j.current - s;
                sizes[i] = j.current;
            }
        }
    }

    /// The sum of predicted completion times: a running job's remaining time on its count (plus
    /// the restart when it changes), a waiting job's remaining time on its smallest count after
    /// the first running job ends.
    fn fitness(&self, sizes: &[u32]) -> f64 {
        let mut first_end = f64::INFINITY;
        let mut sum = 0.0;
        let mut waiting = 0.0;
        for (&n, j) in sizes.iter().zip(self.jobs) {
            if n == 0 {
                waiting += 1.0;
                sum += j.remaining_on(j.range.min);
                continue;
            }
            let mut t = j.remaining_on(n);
            if j.current > 0 && n != j.current {
                t += self.params.restart_s;
            }
            first_end = first_end.min(t);
            sum += t;
        }
        if waiting > 0.0 && first_end.is_finite() {
            sum += waiting * first_end;
        }
        sum
    }

    /// ONES's mutation: each job touched with the mutation chance goes to zero, half or double.
    fn mutate(&self, sizes: &mut [u32], rng: &mut SeededRng) {
        for (s, j) in sizes.iter_mut().zip(self.jobs) {
            if Self::fixed(j) || rng.unit() >= self.params.mutation {
                continue;
            }
            *s = match rng.below(3) {
                0 => 0,
                1 => (*s / 2).max(j.range.min),
                _ => (*s).max(1).saturating_mul(2).min(j.range.max),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, min: u32, max: u32, current: u32, remaining_s: f64) -> Candidate {
        Candidate {
            job_id: id,
            range: Range { min, max },
            current,
            resizable: true,
            may_shrink: true,
            remaining_s,
            reference: 1,
            serial: 0.1,
        }
    }

    #[test]
    fn ranges_parse_and_bad_ones_say_why() {
        assert_eq!(parse_range("4-16"), Ok(Range { min: 4, max: 16 }));
        assert_eq!(parse_range("8"), Ok(Range { min: 8, max: 8 }));
        for bad in ["0-4", "8-4", "x", "4-", "1-99999"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
        assert!(parse_range("16-4").unwrap_err().contains("MIN <= MAX"));
    }

    #[test]
    fn the_batch_follows_the_gpus_up_to_its_cap_and_the_rate_follows_the_batch() {
        assert_eq!(scaled_batch(256, 0.1, 4, 8, 4096), (512, 0.2));
        assert_eq!(scaled_batch(256, 0.1, 4, 2, 4096), (128, 0.05));
        let (batch, lr) = scaled_batch(256, 0.1, 4, 64, 1024);
        assert_eq!(batch, 1024);
        assert!((lr - 0.4).abs() < 1e-12);
    }

    #[test]
    fn every_waiting_job_runs_and_spare_gpus_go_where_they_save_the_most_time() {
        let jobs = [
            job(1, 1, 16, 0, 36_000.0),
            job(2, 1, 16, 0, 600.0),
            job(3, 2, 8, 0, 3_600.0),
        ];
        let sizes = search(&jobs, 8, SearchParams::default(), &mut SeededRng::new(1));
        assert_eq!(sizes.iter().sum::<u32>(), 8, "{sizes:?}");
        assert!(
            sizes.iter().zip(&jobs).all(|(&s, j)| j.range.contains(s)),
            "{sizes:?}"
        );
        assert!(sizes.iter().all(|&s| s > 0), "every job runs: {sizes:?}");
        // Completion times: a GPU more saves the 10-hour job far more than the 10-minute one.
        assert!(sizes[0] > sizes[1], "{sizes:?}");
        // A seed replays the round.
        assert_eq!(
            sizes,
            search(&jobs, 8, SearchParams::default(), &mut SeededRng::new(1))
        );
    }

    #[test]
    fn a_running_job_is_resized_only_when_the_saving_beats_the_restart_and_never_if_fixed() {
        // Alone on 16 GPUs, running on 4 with hours left: growing pays.
        let mut lone = job(1, 1, 16, 4, 8.0 * 3600.0);
        let sizes = search(
            &[lone.clone()],
            16,
            SearchParams::default(),
            &mut SeededRng::new(2),
        );
        assert!(sizes[0] > 4, "{sizes:?}");
        // Not resizable: it keeps its count whatever is free.
        lone.resizable = false;
        let sizes = search(&[lone], 12, SearchParams::default(), &mut SeededRng::new(2));
        assert_eq!(sizes, [4]);
        // A minute left: a restart costs more than it saves.
        let short = job(1, 1, 16, 4, 60.0);
        let sizes = search(
            &[short],
            16,
            SearchParams::default(),
            &mut SeededRng::new(2),
        );
        assert_eq!(sizes, [4]);
    }
}
