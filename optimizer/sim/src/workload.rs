//! What the simulator runs: jobs with an application, an ideal run time and the estimate the
//! scheduler sees; from a trace, or generated (the built-in default workload).

use super::perf::App;
use super::trace::Trace;
use cinch_core::util::rng::SeededRng;

/// One job as the simulator runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub id: u32,
    /// The trace's id of the job, for reports.
    pub name: String,
    /// The name its user gave it (Slurm's JobName), when the trace says: what a live agent sees
    /// and history keys similar jobs by. Traces without names (Philly, Alibaba, the built-in
    /// workload) give none, rather than their unique ids.
    pub job_name: Option<String>,
    pub user: String,
    /// Seconds.
    pub submit: i64,
    /// The GPUs the job asks for now: what it was submitted with, or the size cinch last gave
    /// an elastic job (Slurm's view of the request after an update).
    pub gpus: u32,
    pub gpus_per_node: Option<u32>,
    pub app: App,
    pub local_bsz: f64,
    /// Seconds on the most consolidated placement.
    pub run_time: f64,
    /// The job's time limit, seconds: what backfill plans with and predictors may read; Slurm
    /// kills a run that reaches it.
    pub time_limit: f64,
    /// Whether the job's user told cinch about it: its application and that it checkpoints
    /// (`cinch:app=...,ckpt=yes`), submitted with `--requeue`. Only these jobs carry the
    /// application hint in the snapshot; cinch learns the rest from history, as live.
    pub hinted: bool,
    /// Whether the job may be requeued, by any policy alike: the site's preemptible set
    /// ([`Preemptible`]). Such a job is submitted with `--requeue` and says `ckpt=yes`.
    pub preemptible: bool,
    /// The job's QoS target, if its user gave one: finish by this time (seconds; the `due`
    /// hint).
    pub due: Option<f64>,
    /// Set for an elastic job (its user declared a GPU range; it is also hinted and opted in).
    pub elastic: Option<Elastic>,
    /// Set for a job of one GPU whose user lets it share a GPU (`share=yes`).
    pub share: Option<Share>,
    /// Set for a job whose output shows its progress (a tqdm bar, `step N/M`), which the
    /// watcher on its node reads ([`assign_progress`]).
    pub progress: Option<ShownProgress>,
    /// Set for a job that holds its GPUs idle once this share of its run is done, to its end
    /// (the idle model, an assumption: docs/simulator.md, "Idle GPUs"; [`assign_idle`]).
    pub idle_from: Option<f64>,
}

#[cfg(test)]
impl JobSpec {
    /// A job for unit tests: `j{id}` of user `u`, submitted at `submit`, `gpus` GPUs for
    /// `run_time` seconds of Bert under a limit of twice that; no hints, target or options.
    pub(crate) fn for_test(id: u32, submit: i64, gpus: u32, run_time: f64) -> JobSpec {
        JobSpec {
            idle_from: None,
            id,
            name: format!("j{id}"),
            job_name: None,
            user: "u".into(),
            submit,
            gpus,
            gpus_per_node: None,
            app: App::Bert,
            local_bsz: 8.0,
            run_time,
            time_limit: 2.0 * run_time,
            hinted: false,
            preemptible: false,
            due: None,
            elastic: None,
            share: None,
            progress: None,
        }
    }
}

/// What the output of a job that shows its progress says, against what the job really does
/// (docs/simulator.md, "Progress"). The watcher reads its steps every
/// [`PROGRESS_INTERVAL_S`]; cinch sees the latest reading and one from up to
/// [`PROGRESS_WINDOW_S`] before it, once the run has worked [`PROGRESS_FIRST_S`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShownProgress {
    /// Its printed total over its true work: 1 for a job that ends at its printed total; more
    /// for one that ends early (early stopping, a crash): it ends at 1/this of its steps.
    pub printed_over_true: f64,
    /// The rate the watcher measures over the true one: steps come at an uneven pace
    /// (evaluation, checkpoints, data), so two readings misjudge it a little.
    pub rate_error: f64,
}

impl ShownProgress {
    /// What the watcher has read by `now` of a run that began working at `work_start` at
    /// `rate` (its speed on its placement), with `work_done` of its `run_time` seconds of work
    /// done in earlier runs: a reading every [`PROGRESS_INTERVAL_S`] of work, the first that
    /// gives a rate after [`PROGRESS_FIRST_S`], the earlier one cinch sees at most
    /// [`PROGRESS_WINDOW_S`] before the latest. Its steps are its true work scaled to its
    /// printed total; the rate between the readings is off by the job's error. `None` before
    /// the first such reading.
    pub fn reading(
        &self,
        run_time: f64,
        work_done: f64,
        work_start: f64,
        rate: f64,
        now: f64,
    ) -> Option<cinch_core::wire::snapshot::JobProgress> {
        /// Steps the output prints in all: fine enough that rounding says nothing.
        const STEPS: f64 = 1e6;
        let worked = now - work_start;
        if worked < PROGRESS_FIRST_S || run_time <= 0.0 {
            return None;
        }
        let at = work_start + (worked / PROGRESS_INTERVAL_S).floor() * PROGRESS_INTERVAL_S;
        let since =
            (at - PROGRESS_WINDOW_S).max(work_start + PROGRESS_FIRST_S - PROGRESS_INTERVAL_S);
        let steps_per_s = STEPS / self.printed_over_true * rate / run_time;
        let done = (work_done / run_time * STEPS / self.printed_over_true
            + (at - work_start) * steps_per_s)
            .min(STEPS);
        let since_done = (done - (at - since) * steps_per_s * self.rate_error).clamp(0.0, done);
        Some(cinch_core::wire::snapshot::JobProgress {
            total: STEPS as u64,
            done: done as u64,
            at: at.floor() as i64,
            since_done: since_done as u64,
            since: since.floor() as i64,
        })
    }
}

/// Seconds between two readings of a job's output by its watcher.
pub const PROGRESS_INTERVAL_S: f64 = 60.0;
/// Seconds of work before the first reading that gives a rate: the job's start-up (loading
/// data, building the model) prints no steps, then two readings are needed.
pub const PROGRESS_FIRST_S: f64 = 180.0;
/// The earlier of the two readings cinch sees is at most this long before the latest: the
/// rate is the recent one.
pub const PROGRESS_WINDOW_S: f64 = 600.0;
/// The share of jobs that end before their printed total: those Compute Canada's Cedar
/// recorded as not COMPLETED and not TIMEOUT (FAILED 8.7%, OUT_OF_MEMORY 6.4%, CANCELLED 4.5%,
/// NODE_FAIL 0.1% of its 14,149 GPU jobs of 2021; `../shared/traces`), rounded. An assumption
/// for every trace: only Cedar records how jobs ended. Jobs killed at their limit are not
/// among them: the simulator kills those itself.
pub const EARLY_END_SHARE: f64 = 0.2;
/// Where an early-ending job stops, as a share of its printed total: uniform between these
/// (an assumption: traces do not say).
pub const EARLY_END_AT: (f64, f64) = (0.05, 0.95);
/// The spread of the measured rate's error (the standard deviation of its logarithm): an
/// assumption until the live watcher's readings are measured.
pub const PROGRESS_RATE_ERROR: f64 = 0.1;

/// Lets a `share` of `jobs` show their progress, from streams of `seed`'s own: a fixed number
/// of draws per job, so the share changes no other job's draws. Which jobs end early and how
/// far off their rates are follow [`EARLY_END_SHARE`], [`EARLY_END_AT`] and
/// [`PROGRESS_RATE_ERROR`].
pub fn assign_progress(jobs: &mut [JobSpec], share: f64, seed: u64) {
    let mut rng = SeededRng::new(seed ^ 0x0090_6E55);
    for job in jobs {
        let (shows, early, at) = (rng.unit(), rng.unit(), rng.unit());
        let (u1, u2) = (rng.unit().max(1e-12), rng.unit());
        let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        job.progress = (shows < share).then(|| ShownProgress {
            printed_over_true: if early < EARLY_END_SHARE {
                1.0 / (EARLY_END_AT.0 + (EARLY_END_AT.1 - EARLY_END_AT.0) * at)
            } else {
                1.0
            },
            rate_error: (PROGRESS_RATE_ERROR * normal).exp(),
        });
    }
}

/// Where an idle job's GPUs go idle, as a share of its run: uniform between these (the idle
/// model, an assumption: no trace records GPU use over time).
pub const IDLE_FROM: (f64, f64) = (0.1, 0.9);

/// Lets a `share` of `jobs` hold their GPUs idle from a point of their run to its end (a
/// forgotten session, a hung job, a script waiting on input): the idle model, an assumption
/// (docs/simulator.md, "Idle GPUs"). From a stream of `seed`'s own, two draws per job.
pub fn assign_idle(jobs: &mut [JobSpec], share: f64, seed: u64) {
    let mut rng = SeededRng::new(seed ^ 0x01D1_E5E5);
    for job in jobs {
        let (idle, from) = (rng.unit(), rng.unit());
        job.idle_from = (idle < share).then_some(IDLE_FROM.0 + (IDLE_FROM.1 - IDLE_FROM.0) * from);
    }
}

/// What a job that may share a GPU states, and what it really uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The peak its user states (`gpu_mem=`), GiB.
    pub stated_gib: f64,
    /// Its true peak GPU memory, GiB (what the simulated job uses; cinch only sees the stated).
    pub peak_gib: f64,
}

/// Lets a `share` of the jobs of one GPU share (`share=yes`), from a stream of `seed`'s own:
/// each one's true peak is a draw from `peak_fractions` (shares of a GPU's memory) times
/// `gpu_mem_gib`. Its user states that peak times a log-normal error of spread `stated_error`
/// (the standard deviation of its logarithm; 0: exact, as measured on an earlier run), rounded
/// up to a whole GiB: users may state too little as well as too much. Elastic and multi-GPU
/// jobs never share.
pub fn assign_sharing(
    jobs: &mut [JobSpec],
    share: f64,
    peak_fractions: &[f64],
    gpu_mem_gib: f64,
    stated_error: f64,
    seed: u64,
) {
    let mut rng = SeededRng::new(seed ^ 0x05AA_12E0);
    // A stream of its own, so the error's spread changes no job's peak or opt-in.
    let mut error_rng = SeededRng::new(seed ^ 0x0E44_0125);
    for job in jobs {
        // Two draws for every job, so the share changes no other job's peak.
        let opts_in = rng.unit() < share;
        let pick = rng.below(peak_fractions.len().max(1) as u64) as usize;
        // A standard normal by Box-Muller, two draws for every job.
        let (u1, u2) = (error_rng.unit().max(1e-12), error_rng.unit());
        let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let eligible =
            job.gpus == 1 && job.elastic.is_none() && job.gpus_per_node.is_none_or(|n| n == 1);
        job.share = match peak_fractions.get(pick) {
            Some(&fraction) if opts_in && eligible => {
                let peak_gib = (fraction * gpu_mem_gib).max(0.1);
                Some(Share {
                    stated_gib: (peak_gib * (stated_error * normal).exp()).ceil(),
                    peak_gib,
                })
            }
            _ => None,
        };
    }
}

/// What makes a job elastic in the simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Elastic {
    /// The range its user declares (`elastic=MIN-MAX`).
    pub range: cinch_core::models::elastic::Range,
    /// The GPUs it was submitted with: `run_time` is its run on them.
    pub asked: u32,
    /// Its true relative speed on n GPUs (index n; 1.0 at `asked`), consolidated: what the
    /// simulated job does, which cinch does not know (it has its own scaling model).
    pub speed: Vec<f64>,
}

impl Elastic {
    /// Relative speed on `gpus` GPUs (1.0 on the asked count).
    pub fn speed_on(&self, gpus: u32) -> f64 {
        self.speed
            .get(gpus as usize)
            .copied()
            .unwrap_or_else(|| *self.speed.last().unwrap_or(&1.0))
    }
}

/// Who may be requeued, the same for every policy (`--preemptible`): a site setting, as Slurm's
/// `PreemptMode=REQUEUE` on a partition or its users' `--requeue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preemptible {
    /// Only the jobs whose users opted in (`--requeue` and `ckpt=yes`): the hinted ones.
    #[default]
    OptedIn,
    /// Every job (a site whose jobs all checkpoint, or whose partition requeues any job).
    All,
}

impl std::str::FromStr for Preemptible {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "opted-in" => Ok(Preemptible::OptedIn),
            "all" => Ok(Preemptible::All),
            other => Err(format!(
                "unknown preemptible set '{other}' (known: opted-in, all)"
            )),
        }
    }
}

impl std::fmt::Display for Preemptible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Preemptible::OptedIn => "opted-in",
            Preemptible::All => "all",
        })
    }
}

/// Options for turning a trace into jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadOptions {
    pub seed: u64,
    /// How jobs whose trace gives no time limit get one (real users' limits by default).
    pub limits: crate::limits::Limits,
    /// The share of jobs whose users give cinch hints and opt in to requeue ([`JobSpec::hinted`]).
    pub hinted: f64,
    /// Who may be requeued, by any policy.
    pub preemptible: Preemptible,
    /// The share of jobs with a QoS target ([`JobSpec::due`], rule in [`qos_target`]).
    pub qos_share: f64,
    /// The share of jobs that are elastic, among those the trace gives a scaling for (Pollux
    /// workloads): they declare `elastic=1-max(asked, 16)` and are hinted.
    pub elastic: f64,
    /// The share of jobs whose output shows their progress to the watcher
    /// ([`assign_progress`]).
    pub progress: f64,
    /// The share of jobs that hold their GPUs idle for the end of their run ([`assign_idle`]).
    pub idle: f64,
}

/// The default share of hinted jobs: half. Sites see hints only from the users who bother; half
/// is neither the omniscient 1 nor a cinch that knows nothing (docs/simulator.md).
pub const DEFAULT_HINTED: f64 = 0.5;

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            seed: 1,
            limits: crate::limits::Limits::default(),
            hinted: DEFAULT_HINTED,
            preemptible: Preemptible::OptedIn,
            qos_share: 0.0,
            elastic: 0.0,
            progress: 0.0,
            idle: 0.0,
        }
    }
}

/// The application of a job whose trace names none, by its GPU-time (a documented, seeded
/// rule in the spirit of the Pollux and Sia workload generators, which map Philly jobs to
/// models by GPU-time): under 1 GPU-hour ncf or cifar10; 1-10 GPU-hours deepspeech2 or yolov3;
/// 10-100 GPU-hours bert or imagenet; more, imagenet. Each choice is a fair coin from `rng`.
pub fn assign_app(gpus: u32, run_time: f64, rng: &mut SeededRng) -> App {
    let gpu_hours = f64::from(gpus) * run_time / 3600.0;
    let pair = if gpu_hours < 1.0 {
        [App::Ncf, App::Cifar10]
    } else if gpu_hours < 10.0 {
        [App::DeepSpeech2, App::Yolov3]
    } else if gpu_hours < 100.0 {
        [App::Bert, App::ImageNet]
    } else {
        [App::ImageNet, App::ImageNet]
    };
    pair[rng.below(2) as usize]
}

/// The QoS target of a job that has one (GENIE's rule): finish by its submission plus
/// U(1.5, 3) times its run time on the best placement. Two draws per job from `rng`, whether the
/// job is targeted or not, so the share changes no other job's target.
pub fn qos_target(submit: i64, run_time: f64, share: f64, rng: &mut SeededRng) -> Option<f64> {
    let targeted = rng.unit() < share;
    let factor = 1.5 + 1.5 * rng.unit();
    targeted.then_some(submit as f64 + factor * run_time)
}

/// Gives a share of `jobs` QoS targets by [`qos_target`], from a stream of `seed`'s own.
pub fn assign_targets(jobs: &mut [JobSpec], share: f64, seed: u64) {
    let mut rng = SeededRng::new(seed ^ 0x0005_D0E5);
    for job in jobs {
        job.due = qos_target(job.submit, job.run_time, share, &mut rng);
    }
}

/// The trace's jobs, with applications assigned where missing and time limits filled in.
pub fn from_trace(trace: &Trace, options: &WorkloadOptions) -> Vec<JobSpec> {
    let mut rng = SeededRng::new(options.seed ^ 0xA11C_A7E5);
    // A stream of its own, so the share hinted changes no application drawn.
    let mut hint_rng = SeededRng::new(options.seed ^ 0x4127_ED00);
    let mut limit_rng = SeededRng::new(options.seed ^ 0x0011_4117);
    let mut elastic_rng = SeededRng::new(options.seed ^ 0x0E1A_5710);
    let mut jobs: Vec<JobSpec> = trace
        .jobs
        .iter()
        .enumerate()
        .map(|(i, job)| {
            // Draw for every job so one job's application does not depend on which others
            // named theirs.
            let drawn = assign_app(job.gpus, job.run_time, &mut rng);
            let app = job.app.unwrap_or(drawn);
            let elastic = (elastic_rng.unit() < options.elastic)
                .then_some(job.scaling.as_ref())
                .flatten()
                .filter(|_| job.gpus_per_node.is_none())
                .map(|speed| Elastic {
                    range: cinch_core::models::elastic::Range {
                        min: 1,
                        max: (speed.len() as u32 - 1).max(job.gpus),
                    },
                    asked: job.gpus,
                    speed: speed.clone(),
                });
            // Drawn for every job (the stream stays the same); a trace that says who opted in
            // (a cinch record) is taken at its word.
            let drawn_hinted = hint_rng.unit() < options.hinted;
            let hinted = job.opted_in.unwrap_or(drawn_hinted) || elastic.is_some();
            // Drawn for every job, so the limits of the jobs that have one do not shift the rest.
            let drawn_limit = options.limits.draw(job.run_time, &mut limit_rng);
            JobSpec {
                idle_from: None,
                id: i as u32 + 1,
                name: job.name.clone(),
                job_name: job.job_name.clone(),
                user: job.user.clone(),
                submit: job.submit,
                gpus: job.gpus,
                gpus_per_node: job.gpus_per_node,
                app,
                local_bsz: job
                    .local_bsz
                    .unwrap_or(f64::from(app.model().typical_local_bsz)),
                run_time: job.run_time,
                time_limit: job.time_limit.unwrap_or(drawn_limit).max(60.0),
                // An elastic job's user says what it runs and that it checkpoints.
                hinted,
                preemptible: hinted || options.preemptible == Preemptible::All,
                due: None,
                elastic,
                share: None,
                progress: None,
            }
        })
        .collect();
    assign_targets(&mut jobs, options.qos_share, options.seed);
    assign_progress(&mut jobs, options.progress, options.seed);
    assign_idle(&mut jobs, options.idle, options.seed);
    jobs
}

/// Quantiles at which the Philly tables below are taken.
pub const QUANTILES: [f64; 10] = [0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0];

/// Distributions of the Philly sample `philly_vc6c71a0.csv` (Jeon et al., ATC'19, via the
/// Pollux artifact; see `../shared/traces/README.md`), re-derived by a test from the file:
/// the value at each of [`QUANTILES`] (nearest rank).
pub mod philly_tables {
    /// GPUs per job and how many of the 9,953 jobs asked for that many.
    pub const GPUS: [(u32, u32); 5] = [(1, 9054), (2, 37), (4, 396), (8, 455), (16, 11)];
    /// Run time of 1-GPU jobs, seconds.
    pub const RUN_TIME_1GPU: [f64; 10] = [
        7.0, 79.0, 147.0, 646.0, 1291.0, 5004.0, 19912.0, 62604.0, 265306.0, 1591441.0,
    ];
    /// Run time of multi-GPU jobs, seconds.
    pub const RUN_TIME_MULTI: [f64; 10] = [
        9.0, 56.0, 81.0, 161.0, 510.0, 13606.0, 54869.0, 129031.0, 330549.0, 868158.0,
    ];
    /// Gaps between consecutive submissions, seconds.
    pub const INTERARRIVAL: [f64; 10] = [
        0.0, 0.0, 0.0, 1.0, 5.0, 48.0, 1047.0, 3563.0, 16014.0, 266074.0,
    ];
}

/// The nearest-rank value at each of [`QUANTILES`] (how the tables above were made).
pub fn quantile_table(values: &mut [f64]) -> [f64; 10] {
    values.sort_by(f64::total_cmp);
    QUANTILES.map(|q| cinch_core::util::stats::percentile(values, q))
}

/// Draws from a quantile table, interpolating log(1 + x) between its points.
fn sample(table: &[f64; 10], rng: &mut SeededRng) -> f64 {
    let u = rng.unit();
    let i = QUANTILES
        .partition_point(|&q| q <= u)
        .clamp(1, QUANTILES.len() - 1);
    let (q0, q1) = (QUANTILES[i - 1], QUANTILES[i]);
    let (a, b) = (table[i - 1].ln_1p(), table[i].ln_1p());
    (a + (b - a) * (u - q0) / (q1 - q0)).exp_m1()
}

/// The value whose weight covers `pick` (below the weights' sum) in a (value, weight) table.
fn weighted(table: &[(u32, u32)], mut pick: u32) -> u32 {
    table
        .iter()
        .find(|(_, w)| {
            let hit = pick < *w;
            pick = pick.saturating_sub(*w);
            hit
        })
        .map(|(value, _)| *value)
        .expect("weights cover the draw")
}

/// The built-in workload: `jobs` jobs drawn from the Philly distributions above, their
/// submissions spaced by Philly's gaps scaled so that the offered load (GPU-seconds asked per
/// second of submissions, over the cluster's GPUs) is `load`.
pub fn synthetic(jobs: usize, total_gpus: u32, load: f64, seed: u64) -> Trace {
    let mut rng = SeededRng::new(seed);
    let weight: u32 = philly_tables::GPUS.iter().map(|(_, n)| n).sum();
    let mut trace = Trace::default();
    let mut gaps = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let gpus = weighted(&philly_tables::GPUS, rng.below(u64::from(weight)) as u32);
        let table = if gpus == 1 {
            &philly_tables::RUN_TIME_1GPU
        } else {
            &philly_tables::RUN_TIME_MULTI
        };
        let run_time = sample(table, &mut rng).max(1.0).round();
        let gap = if i == 0 {
            0.0
        } else {
            sample(&philly_tables::INTERARRIVAL, &mut rng)
        };
        gaps.push(gap);
        trace.jobs.push(super::trace::TraceJob {
            user: format!("user{}", rng.below(20)),
            ..super::trace::TraceJob::new(format!("synthetic-{i:05}"), 0, gpus, run_time)
        });
    }
    space_to_load(&mut trace, gaps, total_gpus, load);
    trace
}

/// A workload of the shape issue 31 describes for a Philly virtual cluster this project does
/// not have, from its published statistics only (no job of it is known): 95% of the GPU-time in
/// multi-GPU jobs of up to 24 GPUs, the largest 1% of jobs holding about 85% of it, a median run
/// of 0.4 h. One job in a hundred is a giant (8, 16 or 24 GPUs, 1.5-10 days, log-uniform); the
/// rest ask for 1-16 GPUs (mostly one) and run log-normally around 0.4 h. Poisson arrivals,
/// spaced so that the offered load is `load`. A check on a shape cinch was not built on, not a
/// workload to tune on.
pub fn heavy_tailed(jobs: usize, total_gpus: u32, load: f64, seed: u64) -> Trace {
    const GIANT_SHARE: f64 = 0.01;
    const GIANT_GPUS: [u32; 3] = [8, 16, 24];
    const GIANT_RUN_S: (f64, f64) = (1.5 * 86_400.0, 10.0 * 86_400.0);
    /// (GPUs, weight) of the other jobs.
    const GPUS: [(u32, u32); 5] = [(1, 75), (2, 8), (4, 7), (8, 6), (16, 4)];
    const MEDIAN_RUN_S: f64 = 0.4 * 3600.0;
    const RUN_SIGMA: f64 = 1.5;
    let mut rng = SeededRng::new(seed ^ 0x4EA7_7A11);
    let weight: u32 = GPUS.iter().map(|(_, w)| w).sum();
    let mut trace = Trace::default();
    let mut gaps = Vec::with_capacity(jobs);
    for i in 0..jobs {
        // The same number of draws for every job, so the shares move no other job.
        let (giant, size, u1, u2, gap) = (
            rng.unit() < GIANT_SHARE,
            rng.next_u64(),
            rng.unit().max(1e-12),
            rng.unit(),
            -(1.0 - rng.unit()).ln(),
        );
        let (gpus, run_time) = if giant {
            let gpus = GIANT_GPUS[(size % GIANT_GPUS.len() as u64) as usize];
            let (lo, hi) = (GIANT_RUN_S.0.ln(), GIANT_RUN_S.1.ln());
            (gpus, (lo + (hi - lo) * u2).exp())
        } else {
            let gpus = weighted(&GPUS, (size % u64::from(weight)) as u32);
            // A standard normal by Box-Muller.
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (gpus, MEDIAN_RUN_S * (RUN_SIGMA * normal).exp())
        };
        gaps.push(if i == 0 { 0.0 } else { gap });
        trace.jobs.push(super::trace::TraceJob {
            user: format!("user{}", rng.below(20)),
            ..super::trace::TraceJob::new(
                format!("heavy-{i:05}"),
                0,
                gpus,
                run_time.max(60.0).round(),
            )
        });
    }
    space_to_load(&mut trace, gaps, total_gpus, load);
    trace
}

/// A workload shape the suite's traces lack (issue 60's stress grid): a flood of small jobs
/// around a few big ones that hold much of the GPU-time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StressShape {
    /// Share of the small jobs that ask for one GPU (the rest 2 or 4).
    pub one_gpu_share: f64,
    /// GPUs of the big jobs: each one of these, as likely.
    pub big_gpus: [u32; 2],
    /// Run hours of the big jobs, log-uniform between these.
    pub big_hours: (f64, f64),
    /// Share of all GPU-time the big jobs hold (sets how many of them there are).
    pub big_share: f64,
    /// Share of the small jobs in their tail, and its run hours (log-uniform): a flood of short
    /// runs still has some that run for days.
    pub small_tail: (f64, f64, f64),
    /// Arrivals in bursts (a tenth of the gaps hold nine tenths of the time) rather than
    /// Poisson.
    pub bursty: bool,
}

impl StressShape {
    /// The shape issue 60 reports for a Philly virtual cluster this project does not have, from
    /// its published figures only: 97.5% of jobs of one GPU with a median run of 0.4 h and a p90
    /// of 0.7 h (a tail of 3% running 10-100 h), and jobs of 8 and 16 GPUs running up to 475 h
    /// that hold 75% of the GPU-time.
    pub const FLOOD: StressShape = StressShape {
        one_gpu_share: 0.975,
        big_gpus: [8, 16],
        big_hours: (1.0, 475.0),
        big_share: 0.75,
        small_tail: (0.03, 10.0, 100.0),
        bursty: false,
    };
}

/// Small jobs' median run and the spread of its logarithm (their body, before the tail).
const STRESS_SMALL_MEDIAN_S: f64 = 0.4 * 3600.0;
const STRESS_SMALL_SIGMA: f64 = 0.5;

/// A workload of `shape`: small jobs (one GPU, else 2 or 4) running log-normally around 0.4 h,
/// and as many big jobs as make their share of the GPU-time `shape.big_share`; arrivals
/// spaced to the offered `load`. Seeded; a check on shapes cinch was not built on.
pub fn stress(jobs: usize, total_gpus: u32, load: f64, seed: u64, shape: &StressShape) -> Trace {
    let mut rng = SeededRng::new(seed ^ 0x57E5_5000);
    let big_gpus = shape.big_gpus.map(|g| g.min(total_gpus.max(1)));
    // Mean GPU-seconds of a small job and of a big one, to set the share of big jobs.
    let small_gpus = shape.one_gpu_share + (1.0 - shape.one_gpu_share) * 3.0;
    let log_uniform_mean = |lo: f64, hi: f64| {
        if hi > lo {
            (hi - lo) / (hi / lo).ln()
        } else {
            lo
        }
    };
    let (tail_share, tail_lo, tail_hi) = shape.small_tail;
    let (tail_lo, tail_hi) = (tail_lo * 3600.0, tail_hi * 3600.0);
    let small = small_gpus
        * ((1.0 - tail_share) * STRESS_SMALL_MEDIAN_S * (STRESS_SMALL_SIGMA.powi(2) / 2.0).exp()
            + tail_share * log_uniform_mean(tail_lo, tail_hi));
    let (lo, hi) = (shape.big_hours.0 * 3600.0, shape.big_hours.1 * 3600.0);
    let big_run = log_uniform_mean(lo, hi);
    let big = f64::from(big_gpus[0] + big_gpus[1]) / 2.0 * big_run;
    let s = shape.big_share.clamp(0.0, 0.99);
    let big_fraction = s * small / ((1.0 - s) * big + s * small);
    let mut trace = Trace::default();
    let mut gaps = Vec::with_capacity(jobs);
    for i in 0..jobs {
        // The same draws for every job, so one setting moves no other job.
        let (u_big, u_size, u1, u2, u_gap, u_burst, u_tail) = (
            rng.unit(),
            rng.unit(),
            rng.unit().max(1e-12),
            rng.unit(),
            rng.unit(),
            rng.unit(),
            rng.unit(),
        );
        let (gpus, run_time) = if u_big < big_fraction {
            let gpus = big_gpus[usize::from(u_size >= 0.5)];
            (gpus, (lo.ln() + (hi.ln() - lo.ln()) * u2).exp())
        } else {
            let gpus = if u_size < shape.one_gpu_share {
                1
            } else if u_size < shape.one_gpu_share + (1.0 - shape.one_gpu_share) / 2.0 {
                2
            } else {
                4
            };
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let run = if u_tail < tail_share {
                (tail_lo.ln() + (tail_hi.ln() - tail_lo.ln()) * u2).exp()
            } else {
                STRESS_SMALL_MEDIAN_S * (STRESS_SMALL_SIGMA * normal).exp()
            };
            (gpus.min(total_gpus.max(1)), run)
        };
        let exponential = -(1.0 - u_gap).ln();
        let gap = match (i, shape.bursty) {
            (0, _) => 0.0,
            // Nine gaps in ten are short (a burst), one is long: the same mean.
            (_, true) if u_burst < 0.9 => exponential * 0.1 / 0.9,
            (_, true) => exponential * 9.1,
            (_, false) => exponential,
        };
        gaps.push(gap);
        trace.jobs.push(super::trace::TraceJob {
            user: format!("user{}", rng.below(30)),
            ..super::trace::TraceJob::new(
                format!("stress-{i:05}"),
                0,
                gpus,
                run_time.max(60.0).round(),
            )
        });
    }
    space_to_load(&mut trace, gaps, total_gpus, load);
    trace
}

/// Sets the jobs' submissions from `gaps` (one per job), scaled so that the offered load
/// (GPU-seconds asked per second of submissions, over `total_gpus`) is `load`.
fn space_to_load(trace: &mut Trace, gaps: Vec<f64>, total_gpus: u32, load: f64) {
    let demand: f64 = trace
        .jobs
        .iter()
        .map(|j| f64::from(j.gpus) * j.run_time)
        .sum();
    let span: f64 = gaps.iter().sum();
    // span * scale * gpus * load = demand.
    let scale = if span > 0.0 {
        demand / (span * f64::from(total_gpus.max(1)) * load.max(1e-6))
    } else {
        1.0
    };
    let mut t = 0.0;
    for (job, gap) in trace.jobs.iter_mut().zip(gaps) {
        t += gap * scale;
        job.submit = t.round() as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::read_philly;

    /// An hour's job at full speed: the watcher's reading says what is left, after its
    /// first reading; one that stops at half its printed total looks twice as long; a
    /// requeued one counts the work its earlier runs did.
    #[test]
    fn a_progress_reading_tells_what_is_left_as_a_watcher_would() {
        let exact = ShownProgress {
            printed_over_true: 1.0,
            rate_error: 1.0,
        };
        assert_eq!(exact.reading(3_600.0, 0.0, 0.0, 1.0, 100.0), None);
        let r = exact.reading(3_600.0, 0.0, 0.0, 1.0, 400.0).unwrap();
        // The latest reading at 360 s (every 60 s), the earlier at 120 s (the first).
        assert_eq!((r.at, r.since, r.total), (360, 120, 1_000_000));
        let left = r.remaining_s(400).unwrap();
        assert!((left - 3_200.0).abs() < 1.0, "{left}");
        // Half the speed on its placement: twice the time left.
        let r = exact.reading(3_600.0, 0.0, 0.0, 0.5, 400.0).unwrap();
        let left = r.remaining_s(400).unwrap();
        assert!((left - 6_800.0).abs() < 1.0, "{left}");
        // Ends at half its printed total: its progress says twice the hour.
        let early = ShownProgress {
            printed_over_true: 2.0,
            ..exact
        };
        let r = early.reading(3_600.0, 0.0, 0.0, 1.0, 400.0).unwrap();
        let run = r.predicted_run_s(0).unwrap();
        assert!((run - 7_200.0).abs() < 1.0, "{run}");
        // Its rate misjudged by 10%: so is what is left.
        let off = ShownProgress {
            rate_error: 1.1,
            ..exact
        };
        let r = off.reading(3_600.0, 0.0, 0.0, 1.0, 400.0).unwrap();
        let left = r.remaining_s(360).unwrap();
        assert!((left - 3_240.0 / 1.1).abs() < 1.0, "{left}");
        // Requeued with half its work done; working again since 5,000 s.
        let r = exact
            .reading(3_600.0, 1_800.0, 5_000.0, 1.0, 5_400.0)
            .unwrap();
        let left = r.remaining_s(5_400).unwrap();
        assert!((left - 1_400.0).abs() < 1.0, "{left}");
    }

    /// The share picks which jobs show progress and changes no job's draws; about
    /// [`EARLY_END_SHARE`] of them end early, each between its bounds, and rate errors spread
    /// both ways.
    #[test]
    fn progress_is_drawn_per_job_whatever_the_share() {
        let mut jobs = from_trace(&synthetic(4_000, 128, 0.8, 7), &WorkloadOptions::default());
        assert_eq!(jobs.len(), 4_000);
        assert!(jobs.iter().all(|j| j.progress.is_none()), "none by default");
        assign_progress(&mut jobs, 0.0, 7);
        assert!(jobs.iter().all(|j| j.progress.is_none()));
        let mut all = jobs.clone();
        assign_progress(&mut all, 1.0, 7);
        let mut half = jobs.clone();
        assign_progress(&mut half, 0.5, 7);
        let shown = half.iter().filter(|j| j.progress.is_some()).count();
        assert!((1_800..2_200).contains(&shown), "{shown}");
        for (h, a) in half.iter().zip(&all) {
            if h.progress.is_some() {
                assert_eq!(h.progress, a.progress);
            }
        }
        let drawn: Vec<ShownProgress> = all.iter().map(|j| j.progress.unwrap()).collect();
        let early = drawn.iter().filter(|p| p.printed_over_true > 1.0).count() as f64;
        assert!((early / 4_000.0 - EARLY_END_SHARE).abs() < 0.03, "{early}");
        assert!(drawn.iter().all(|p| {
            (1.0..=1.0 / EARLY_END_AT.0).contains(&p.printed_over_true)
                && (0.5..2.0).contains(&p.rate_error)
        }));
        assert!(
            drawn.iter().any(|p| p.rate_error < 0.95) && drawn.iter().any(|p| p.rate_error > 1.05)
        );
    }

    #[test]
    fn the_flood_has_the_shape_it_stands_in_for() {
        let trace = stress(7423, 512, 1.0, 1, &StressShape::FLOOD);
        assert_eq!(trace, stress(7423, 512, 1.0, 1, &StressShape::FLOOD));
        let n = trace.jobs.len() as f64;
        let one = trace.jobs.iter().filter(|j| j.gpus == 1).count() as f64 / n;
        assert!((0.95..0.99).contains(&one), "one-GPU share {one}");
        let gpu_time = |j: &crate::trace::TraceJob| f64::from(j.gpus) * j.run_time;
        let total: f64 = trace.jobs.iter().map(gpu_time).sum();
        let big: f64 = trace
            .jobs
            .iter()
            .filter(|j| j.gpus >= 8)
            .map(gpu_time)
            .sum();
        assert!(
            (0.6..0.88).contains(&(big / total)),
            "big share {}",
            big / total
        );
        let mut runs: Vec<f64> = trace.jobs.iter().map(|j| j.run_time).collect();
        runs.sort_by(f64::total_cmp);
        let median_h = runs[runs.len() / 2] / 3600.0;
        assert!((0.3..0.5).contains(&median_h), "median {median_h} h");
        let bursty = stress(
            2000,
            512,
            1.0,
            1,
            &StressShape {
                bursty: true,
                ..StressShape::FLOOD
            },
        );
        let gaps: Vec<i64> = bursty
            .jobs
            .windows(2)
            .map(|w| w[1].submit - w[0].submit)
            .collect();
        let mean = gaps.iter().sum::<i64>() as f64 / gaps.len() as f64;
        let short = gaps.iter().filter(|&&g| (g as f64) < mean / 3.0).count();
        assert!(
            short > gaps.len() * 8 / 10,
            "{short} of {} gaps short",
            gaps.len()
        );
    }

    #[test]
    fn the_synthetic_workload_is_seeded_and_reaches_the_asked_load() {
        let a = synthetic(3000, 128, 0.8, 7);
        assert_eq!(a, synthetic(3000, 128, 0.8, 7));
        assert_ne!(a, synthetic(3000, 128, 0.8, 8));
        let demand: f64 = a.jobs.iter().map(|j| f64::from(j.gpus) * j.run_time).sum();
        let span = a.jobs.last().unwrap().submit as f64;
        let load = demand / (span * 128.0);
        assert!((load - 0.8).abs() < 0.01, "load {load}");
        // Philly's shape: about 9% multi-GPU jobs, median run time near 21 minutes.
        let multi = a.jobs.iter().filter(|j| j.gpus > 1).count() as f64 / 3000.0;
        assert!((0.07..0.11).contains(&multi), "{multi}");
        let mut run: Vec<f64> = a.jobs.iter().map(|j| j.run_time).collect();
        let median = quantile_table(&mut run)[4];
        assert!((900.0..1800.0).contains(&median), "{median}");
    }

    #[test]
    fn the_heavy_tailed_workload_has_the_shape_it_is_made_to_have() {
        let a = heavy_tailed(7423, 512, 0.74, 1);
        assert_eq!(a, heavy_tailed(7423, 512, 0.74, 1));
        assert_ne!(a, heavy_tailed(7423, 512, 0.74, 2));
        for seed in 1..=3 {
            let t = heavy_tailed(7423, 512, 0.74, seed);
            let mut gpu_time: Vec<f64> = t
                .jobs
                .iter()
                .map(|j| f64::from(j.gpus) * j.run_time)
                .collect();
            let total: f64 = gpu_time.iter().sum();
            let span = t.jobs.last().unwrap().submit as f64;
            let load = total / (span * 512.0);
            assert!((load - 0.74).abs() < 0.01, "load {load}");
            let multi: f64 = t
                .jobs
                .iter()
                .filter(|j| j.gpus > 1)
                .map(|j| f64::from(j.gpus) * j.run_time)
                .sum();
            assert!((0.93..0.97).contains(&(multi / total)), "{}", multi / total);
            assert!(t.jobs.iter().all(|j| j.gpus <= 24));
            gpu_time.sort_by(|a, b| b.total_cmp(a));
            let largest: f64 = gpu_time[..t.jobs.len() / 100].iter().sum();
            assert!(
                (0.82..0.88).contains(&(largest / total)),
                "{}",
                largest / total
            );
            let mut run: Vec<f64> = t.jobs.iter().map(|j| j.run_time).collect();
            let median = quantile_table(&mut run)[4];
            assert!((0.35 * 3600.0..0.45 * 3600.0).contains(&median), "{median}");
        }
    }

    #[test]
    fn stated_peaks_are_exact_or_off_both_ways_without_moving_the_true_ones() {
        let base = from_trace(&synthetic(2000, 128, 0.8, 7), &WorkloadOptions::default());
        let fractions = [0.1, 0.3, 0.5, 0.9];
        let mut exact = base.clone();
        assign_sharing(&mut exact, 1.0, &fractions, 80.0, 0.0, 1);
        let mut off = base;
        assign_sharing(&mut off, 1.0, &fractions, 80.0, 0.2, 1);
        let pairs: Vec<(Share, Share)> = exact
            .iter()
            .zip(&off)
            .filter_map(|(e, o)| Some((e.share?, o.share?)))
            .collect();
        assert!(pairs.len() > 1000, "{}", pairs.len());
        for (e, o) in &pairs {
            assert_eq!(e.peak_gib, o.peak_gib, "the error moves no true peak");
            assert_eq!(e.stated_gib, e.peak_gib.ceil());
        }
        let under = pairs
            .iter()
            .filter(|(_, o)| o.stated_gib < o.peak_gib)
            .count();
        let over = pairs
            .iter()
            .filter(|(_, o)| o.stated_gib > o.peak_gib * 1.1)
            .count();
        // A spread of 0.2 states too little about a third of the time (rounding up saves some).
        let share = under as f64 / pairs.len() as f64;
        assert!((0.2..0.45).contains(&share), "{share}");
        assert!(over > pairs.len() / 5, "{over}");
    }

    #[test]
    fn applications_follow_gpu_time_and_the_seed() {
        let mut rng = SeededRng::new(3);
        for _ in 0..50 {
            assert!(matches!(
                assign_app(1, 600.0, &mut rng),
                App::Ncf | App::Cifar10
            ));
            assert!(matches!(
                assign_app(8, 3.0 * 3600.0, &mut rng),
                App::Bert | App::ImageNet
            ));
            assert_eq!(assign_app(16, 360_000.0, &mut rng), App::ImageNet);
        }
    }

    #[test]
    #[cfg_attr(
        not(shared_traces),
        ignore = "needs ../shared/traces (public data sets, not in the repository)"
    )]
    fn the_philly_tables_are_what_the_trace_says() {
        let traces =
            crate::shared_dir("traces").expect("../shared/traces was here when this was built");
        let trace = read_philly(&traces.join("philly_vc6c71a0.csv")).unwrap();
        let mut gpus: Vec<(u32, u32)> = Vec::new();
        for job in &trace.jobs {
            match gpus.iter_mut().find(|(g, _)| *g == job.gpus) {
                Some((_, n)) => *n += 1,
                None => gpus.push((job.gpus, 1)),
            }
        }
        gpus.sort_unstable();
        assert_eq!(gpus, philly_tables::GPUS);
        let mut one: Vec<f64> = trace
            .jobs
            .iter()
            .filter(|j| j.gpus == 1)
            .map(|j| j.run_time)
            .collect();
        let mut multi: Vec<f64> = trace
            .jobs
            .iter()
            .filter(|j| j.gpus > 1)
            .map(|j| j.run_time)
            .collect();
        let mut gaps: Vec<f64> = trace
            .jobs
            .windows(2)
            .map(|w| (w[1].submit - w[0].submit) as f64)
            .collect();
        assert_eq!(quantile_table(&mut one), philly_tables::RUN_TIME_1GPU);
        assert_eq!(quantile_table(&mut multi), philly_tables::RUN_TIME_MULTI);
        assert_eq!(quantile_table(&mut gaps), philly_tables::INTERARRIVAL);
    }
}
