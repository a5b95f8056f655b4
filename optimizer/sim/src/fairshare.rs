//! The site's own priorities and whether users got their share: Slurm's priority/multifactor
//! with Fair Tree fair share (what most GPU sites run), and the per-user fairness a run is judged
//! by.
//!
//! Multifactor as slurmctld computes it for one account of equal shares (the traces give users,
//! not an account tree): each user's usage is the GPU-seconds their jobs held (`TRESBillingWeights
//! =GRES/gpu=1`), decayed with `PriorityDecayHalfLife`; every `PriorityCalcPeriod` the users are
//! ranked by Fair Tree's level fair share (shares over usage, so least usage first) and a user's
//! factor is their rank over the number of users (ties share the higher rank; users without usage
//! get 1). A job's priority is `PriorityWeightFairshare x factor + PriorityWeightAge x
//! min(age / PriorityMaxAge, 1)`, age counted from submission. Usage of a run is added when it
//! ends (as slurmctld does with `AccountingStorageEnforce=limits`) and, for running jobs, at
//! every recalculation.

use std::collections::HashMap;

/// slurm.conf's priority settings, in Slurm's units (seconds for times).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Multifactor {
    pub weight_fairshare: f64,
    pub weight_age: f64,
    pub max_age_s: f64,
    pub half_life_s: f64,
    pub calc_period_s: f64,
}

impl Default for Multifactor {
    /// A common site setting: fair share far above age (Slurm's own defaults for the half-life
    /// (7 days), calculation period (5 min) and maximum age (7 days)).
    fn default() -> Self {
        Multifactor {
            weight_fairshare: 100_000.0,
            weight_age: 1_000.0,
            max_age_s: 7.0 * 86_400.0,
            half_life_s: 7.0 * 86_400.0,
            calc_period_s: 300.0,
        }
    }
}

/// Users' decayed usage and their Fair Tree factors, as of the last recalculation.
#[derive(Debug, Clone)]
pub struct FairShare {
    pub settings: Multifactor,
    /// Each job's user, as an index.
    user_of: Vec<u32>,
    /// Each user's index, by name.
    index_of: HashMap<String, u32>,
    usage: Vec<f64>,
    factor: Vec<f64>,
    last_calc: f64,
}

impl FairShare {
    /// `users`: each job's user name, in job order. Every user starts with no usage.
    pub fn new<'a>(settings: Multifactor, users: impl IntoIterator<Item = &'a str>) -> FairShare {
        let (user_of, index_of) = user_indices(users);
        let count = index_of.len();
        FairShare {
            settings,
            user_of,
            index_of: (index_of.into_iter())
                .map(|(name, i)| (name.to_string(), i))
                .collect(),
            usage: vec![0.0; count],
            factor: vec![1.0; count],
            last_calc: 0.0,
        }
    }

    /// When the factors were last computed.
    pub fn last_calc(&self) -> f64 {
        self.last_calc
    }

    /// The fair-share factor (0-1] of `job`'s user.
    pub fn factor_of(&self, job: usize) -> f64 {
        self.factor[self.user_of[job] as usize]
    }

    /// Whether the recalculation is due at `now` (every `PriorityCalcPeriod`).
    pub fn due(&self, now: f64) -> bool {
        now >= self.last_calc + self.settings.calc_period_s
    }

    /// The priority of `job`, submitted at `submit`, at `now`: fair share and age weighted.
    pub fn priority(&self, job: usize, submit: f64, now: f64) -> f64 {
        let m = &self.settings;
        let age = (now - submit).max(0.0);
        let age_factor = if m.max_age_s > 0.0 {
            (age / m.max_age_s).min(1.0)
        } else {
            1.0
        };
        (m.weight_fairshare * self.factor_of(job) + m.weight_age * age_factor).floor()
    }

    /// A run of `job` on `gpus` GPUs since `run_start` ended (or is booked) at `now`: its
    /// GPU-seconds since the last recalculation count now.
    pub fn ran(&mut self, job: usize, gpus: u32, run_start: f64, now: f64) {
        let from = run_start.max(self.last_calc);
        if now > from {
            self.usage[self.user_of[job] as usize] += f64::from(gpus) * (now - from);
        }
    }

    /// The recalculation at `now`: usage decays, `running` jobs' (job, GPUs, run start) usage
    /// since the last one is added, users are ranked again.
    pub fn recalc(&mut self, now: f64, running: impl IntoIterator<Item = (usize, u32, f64)>) {
        let dt = (now - self.last_calc).max(0.0);
        let half_life_s = self.settings.half_life_s;
        if half_life_s > 0.0 {
            let decay = 0.5f64.powf(dt / half_life_s);
            self.usage.iter_mut().for_each(|u| *u *= decay);
        }
        for (job, gpus, start) in running {
            self.ran(job, gpus, start, now);
        }
        self.last_calc = now;
        self.rank();
    }

    /// Starts from usage had before `at`: `usage` gives users by name with their decayed
    /// GPU-seconds at `at` (a user with no job here is left out: nothing of theirs is ranked).
    /// The users are ranked by it at once, and runs count from `at` on (what they ran before is
    /// in `usage`).
    pub fn start_from<'u>(&mut self, at: f64, usage: impl IntoIterator<Item = (&'u str, f64)>) {
        for (user, gpu_s) in usage {
            if let Some(&u) = self.index_of.get(user) {
                self.usage[u as usize] = gpu_s;
            }
        }
        self.last_calc = at;
        self.rank();
    }

    /// Rank by usage, least first: a user's factor is 1 - (users with less usage) / users.
    fn rank(&mut self) {
        let n = self.usage.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| self.usage[a].total_cmp(&self.usage[b]));
        let mut less = 0;
        for (i, &u) in order.iter().enumerate() {
            if i > 0 && self.usage[u] > self.usage[order[i - 1]] {
                less = i;
            }
            self.factor[u] = 1.0 - less as f64 / n as f64;
        }
    }
}

/// Each name's index (in order of first appearance) by position, and by name.
fn user_indices<'a>(users: impl IntoIterator<Item = &'a str>) -> (Vec<u32>, HashMap<&'a str, u32>) {
    let mut index: HashMap<&str, u32> = HashMap::new();
    let of = users
        .into_iter()
        .map(|u| {
            let next = index.len() as u32;
            *index.entry(u).or_insert(next)
        })
        .collect();
    (of, index)
}

/// Whether users got their share of the GPUs while they competed for them: over the time the
/// cluster's GPUs were oversubscribed (the GPUs waiting and running jobs ask for exceed the
/// cluster's), each user's GPU-seconds held against their max-min fair share of the GPUs (the
/// cluster's GPUs split equally among the users who want them, no user given more than they
/// ask for, the rest shared among the others).
#[derive(Debug, Clone)]
pub struct FairnessMeter {
    user_of: Vec<u32>,
    users: usize,
    /// Per user, as of the last observation: GPUs held, GPUs asked for (held and waiting).
    held: Vec<f64>,
    wanted: Vec<f64>,
    /// The version of the state `held` and `wanted` were taken from.
    version: Option<u64>,
    since: f64,
    received: Vec<f64>,
    fair: Vec<f64>,
}

/// A run's fairness across users.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    /// Jain's index over the users' received-to-fair ratios (1: every user got their share;
    /// 1/n: one user got everything).
    pub jain: f64,
    /// The lowest received-to-fair ratio of a user.
    pub worst: f64,
    /// Users counted: those whose fair share was at least 1% of all fair GPU-seconds (users who
    /// barely competed would make the ratios noise).
    pub users: usize,
}

impl FairnessMeter {
    /// A meter for jobs of these users (in job order); `None` with fewer than two users.
    pub fn new<'a>(users: impl IntoIterator<Item = &'a str>) -> Option<FairnessMeter> {
        let (user_of, index_of) = user_indices(users);
        let users = index_of.len();
        (users >= 2).then(|| FairnessMeter {
            user_of,
            users,
            held: vec![0.0; users],
            wanted: vec![0.0; users],
            version: None,
            since: 0.0,
            received: vec![0.0; users],
            fair: vec![0.0; users],
        })
    }

    /// The state from `since` up to `now` is booked; then the state at `now`, of `version`
    /// (read again only when that changed): `held` (job, GPUs) of running jobs and `waiting`
    /// (job, GPUs) of pending ones, on `capacity` GPUs.
    pub fn observe(
        &mut self,
        now: f64,
        capacity: u32,
        version: u64,
        held: impl IntoIterator<Item = (usize, u32)>,
        waiting: impl IntoIterator<Item = (usize, u32)>,
    ) {
        let dt = now - self.since;
        if dt > 0.0 {
            let wanted: f64 = self.wanted.iter().sum();
            if wanted > f64::from(capacity) {
                let shares = max_min_fair(&self.wanted, f64::from(capacity));
                for ((received, held), (fair, share)) in self
                    .received
                    .iter_mut()
                    .zip(&self.held)
                    .zip(self.fair.iter_mut().zip(shares))
                {
                    *received += held * dt;
                    *fair += share * dt;
                }
            }
        }
        self.since = now;
        if self.version == Some(version) {
            return;
        }
        self.version = Some(version);
        self.held.iter_mut().for_each(|h| *h = 0.0);
        self.wanted.iter_mut().for_each(|w| *w = 0.0);
        for (job, gpus) in held {
            let u = self.user_of[job] as usize;
            self.held[u] += f64::from(gpus);
            self.wanted[u] += f64::from(gpus);
        }
        for (job, gpus) in waiting {
            self.wanted[self.user_of[job] as usize] += f64::from(gpus);
        }
    }

    /// The run's fairness; `None` when no two users competed.
    pub fn fairness(&self) -> Option<Fairness> {
        let total: f64 = self.fair.iter().sum();
        let ratios: Vec<f64> = (0..self.users)
            .filter(|&u| total > 0.0 && self.fair[u] >= 0.01 * total)
            .map(|u| self.received[u] / self.fair[u])
            .collect();
        (ratios.len() >= 2).then(|| Fairness {
            jain: jain_index(&ratios),
            worst: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            users: ratios.len(),
        })
    }
}

/// Jain's fairness index of `x`: (sum x)^2 / (n sum x^2).
pub fn jain_index(x: &[f64]) -> f64 {
    let (sum, squares) = x.iter().fold((0.0, 0.0), |(s, q), v| (s + v, q + v * v));
    if squares > 0.0 {
        sum * sum / (x.len() as f64 * squares)
    } else {
        f64::NAN
    }
}

/// Max-min fair shares of `capacity` among demands `want` (water-filling).
pub fn max_min_fair(want: &[f64], capacity: f64) -> Vec<f64> {
    let mut share = vec![0.0; want.len()];
    let mut order: Vec<usize> = (0..want.len()).filter(|&u| want[u] > 0.0).collect();
    order.sort_by(|&a, &b| want[a].total_cmp(&want[b]));
    let mut left = capacity;
    let mut n = order.len();
    for u in order {
        let level = left / n as f64;
        share[u] = want[u].min(level);
        left -= share[u];
        n -= 1;
    }
    share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_tree_ranks_users_by_decayed_usage_ties_sharing_the_higher_rank() {
        let no_decay = Multifactor {
            half_life_s: 0.0,
            ..Multifactor::default()
        };
        let mut fs = FairShare::new(no_decay, ["ann", "bob", "cy", "ann"]);
        // ann held 8 GPUs for 100 s, bob 1 GPU for 100 s, cy nothing.
        fs.ran(0, 8, 0.0, 100.0);
        fs.recalc(100.0, [(1, 1, 0.0)]);
        assert_eq!(fs.factor_of(2), 1.0); // cy: least usage
        assert!((fs.factor_of(1) - 2.0 / 3.0).abs() < 1e-12);
        assert!((fs.factor_of(0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(fs.factor_of(3), fs.factor_of(0)); // job 3 is ann's too
                                                      // A half-life later ann's usage is half (400), bob's 50 + 1 GPU for 100 s more (150):
                                                      // the order stands; bob's running job counted only since the last recalculation.
        fs.settings.half_life_s = 100.0;
        fs.recalc(200.0, [(1, 1, 0.0)]);
        assert!(fs.factor_of(1) > fs.factor_of(0));
        // Equal usage shares the higher rank.
        let mut tie = FairShare::new(no_decay, ["a", "b", "c"]);
        tie.ran(0, 1, 0.0, 10.0);
        tie.ran(1, 1, 0.0, 10.0);
        tie.recalc(10.0, []);
        assert_eq!(tie.factor_of(0), tie.factor_of(1));
        assert!((tie.factor_of(0) - 2.0 / 3.0).abs() < 1e-12);
    }

    /// A replay starts from the users' usage before its window: ranked by it at once, and a
    /// job running since before then counts only from then on (its earlier GPU-seconds are in
    /// the usage given).
    #[test]
    fn usage_from_before_ranks_users_at_once_and_runs_count_only_after_it() {
        let no_decay = Multifactor {
            half_life_s: 0.0,
            ..Multifactor::default()
        };
        let mut fs = FairShare::new(no_decay, ["ann", "bob", "cy", "ann"]);
        fs.start_from(
            1000.0,
            [("ann", 500.0), ("bob", 100.0), ("nobody here", 9e9)],
        );
        assert_eq!(fs.last_calc(), 1000.0);
        assert_eq!(fs.factor_of(2), 1.0); // cy: none
        assert!((fs.factor_of(1) - 2.0 / 3.0).abs() < 1e-12);
        assert!((fs.factor_of(0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(fs.factor_of(0), fs.factor_of(3));
        // bob's job running since 0 counts 8 GPUs x 100 s (from 1000), not 1100 s: 900, past
        // ann's 500.
        fs.recalc(1100.0, [(1, 8, 0.0)]);
        assert_eq!(fs.usage[fs.user_of[1] as usize], 900.0);
        assert!(fs.factor_of(0) > fs.factor_of(1));
    }

    #[test]
    fn max_min_fair_gives_small_demands_whole_and_splits_the_rest() {
        let s = max_min_fair(&[2.0, 10.0, 10.0, 0.0], 12.0);
        assert_eq!(s, vec![2.0, 5.0, 5.0, 0.0]);
        assert_eq!(max_min_fair(&[1.0, 1.0], 8.0), vec![1.0, 1.0]);
    }

    #[test]
    fn the_meter_counts_only_contended_time_and_scores_a_hog_as_unfair() {
        // Jobs 0 (ann) and 1 (bob), 8 GPUs each, on an 8-GPU cluster.
        let users = ["ann", "bob"];
        let mut fair = FairnessMeter::new(users).unwrap();
        // 0-10 s: ann alone (uncontended); 10-30 s: both want 8, ann holds 8; 30-50 s: bob does.
        fair.observe(0.0, 8, 1, [(0, 8)], []);
        fair.observe(10.0, 8, 2, [(0, 8)], [(1, 8)]);
        // The same version again: nothing changed, only the time passes.
        fair.observe(20.0, 8, 2, [], []);
        fair.observe(30.0, 8, 3, [(1, 8)], [(0, 8)]);
        fair.observe(50.0, 8, 4, [], []);
        let f = fair.fairness().unwrap();
        assert!(
            (f.jain - 1.0).abs() < 1e-12 && (f.worst - 1.0).abs() < 1e-12,
            "{f:?}"
        );
        // ann holds all 8 GPUs for the 40 s both want them: bob got nothing of his 4.
        let mut hog = FairnessMeter::new(users).unwrap();
        hog.observe(0.0, 8, 1, [(0, 8)], [(1, 8)]);
        hog.observe(40.0, 8, 2, [], []);
        let f = hog.fairness().unwrap();
        assert_eq!(f.worst, 0.0);
        assert!((f.jain - 0.5).abs() < 1e-12, "{f:?}");
        assert!(FairnessMeter::new(["solo", "solo"]).is_none());
        assert!((jain_index(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
    }
}
