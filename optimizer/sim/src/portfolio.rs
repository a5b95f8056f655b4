//! The portfolio: cinch choosing how to schedule by re-simulating its own cluster's recent past
//! (docs/policies/portfolio.md). Every `every_s` it replays the last `window_s` of its own record
//! under each member ([`crate::selfsim`]), and the member that served the window best runs from
//! then on; it switches only when the winner beats the member in force by more than `margin`
//! (hysteresis: a tie or a near one keeps what runs).
//!
//! [`PortfolioPolicy`] runs it in simulated time: the outer run's optimizer keeps the record a
//! live one keeps, and the inner replays see only that record.

use cinch_core::learn::record::RecordLimits;
use cinch_core::policy::PolicyConfig;
use cinch_core::policy::PortfolioObjective as Objective;
use cinch_core::policy::PortfolioParams;

use crate::engine::{Action, Scheduler, SimConfig, State};
use crate::sched::CinchPolicy;
use crate::search;
use crate::selfsim::{self, Member, MemberResult};
use cinch_core::util::rng::SeededRng;

/// What the portfolio runs and how it chooses: the `portfolio` policy's parameters (their one
/// declaration, [`PortfolioParams`]), checked, with the members resolved to their policies.
#[derive(Debug, Clone, PartialEq)]
pub struct PortfolioSettings {
    params: PortfolioParams,
    /// Live policies (Slurm alone is `passthrough`); the first runs until the first evaluation.
    members: Vec<PolicyConfig>,
}

impl Default for PortfolioSettings {
    /// The `portfolio` policy's defaults (cinch_core::policy::portfolio).
    fn default() -> Self {
        PortfolioSettings::from_params(&PortfolioParams::default()).expect("valid defaults")
    }
}

impl PortfolioSettings {
    /// The settings of a `portfolio` policy's parameters, once they pass its checks.
    pub fn from_params(params: &PortfolioParams) -> Result<PortfolioSettings, String> {
        params.validate().map_err(|e| format!("portfolio: {e}"))?;
        Ok(PortfolioSettings {
            members: params.member_configs().map_err(|e| e.to_string())?,
            params: params.clone(),
        })
    }

    /// `key=value` settings joined by `+`, as the `portfolio` policy's parameters (values as
    /// JSON, else as strings; `members` as names joined by `/`), over the defaults.
    pub fn parse(settings: &str) -> Result<PortfolioSettings, String> {
        let mut values =
            crate::settings::settings_map(settings).map_err(|e| format!("portfolio: {e}"))?;
        if let Some(serde_json::Value::String(names)) = values.get("members") {
            let names: Vec<&str> = names.split('/').map(str::trim).collect();
            values.insert("members".into(), serde_json::json!(names));
        }
        let params: PortfolioParams = serde_json::from_value(serde_json::Value::Object(values))
            .map_err(|e| format!("portfolio: {e}"))?;
        PortfolioSettings::from_params(&params)
    }

    /// The parameters these settings were made from.
    pub fn params(&self) -> &PortfolioParams {
        &self.params
    }

    /// The members' policies, in order.
    pub fn members(&self) -> &[PolicyConfig] {
        &self.members
    }

    /// Seconds between two evaluations.
    pub fn every_s(&self) -> i64 {
        (self.params.every_h * 3600.0).round() as i64
    }

    /// Seconds of the recent past each evaluation replays.
    pub fn window_s(&self) -> i64 {
        (self.params.window_h * 3600.0).round() as i64
    }

    /// Seconds each replay runs on past the window's end ([`selfsim::Replay::drained`]).
    pub fn drain_s(&self) -> f64 {
        self.params.drain_h * 3600.0
    }

    /// Seconds at each window's end whose arrivals are load, not score
    /// ([`selfsim::Replay::following`]).
    pub fn follow_s(&self) -> f64 {
        self.params.follow_h * 3600.0
    }

    /// Fewer jobs in a window than this and it decides nothing (too little to go on).
    pub fn min_jobs(&self) -> usize {
        self.params.min_jobs as usize
    }

    /// Variants of cinch bred each evaluation ([`crate::search`]); 0: none.
    pub fn search(&self) -> usize {
        self.params.search as usize
    }

    /// As `cinch sim --policies` names it: `portfolio`, then each parameter that differs from
    /// its default as `key=value`, joined by `+` (members joined by `/`, as [`Self::parse`]
    /// reads them: a comma would split `--policies`).
    pub fn name(&self) -> String {
        let changed =
            crate::settings::changed_settings(&self.params, &PortfolioParams::default(), |value| {
                match value {
                    serde_json::Value::Array(list) => list
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join("/"),
                    serde_json::Value::String(text) => text.clone(),
                    serde_json::Value::Number(n) => {
                        n.as_f64().map_or_else(|| n.to_string(), |v| v.to_string())
                    }
                    other => other.to_string(),
                }
            });
        if changed.is_empty() {
            "portfolio".into()
        } else {
            format!("portfolio:{changed}")
        }
    }
}

/// One evaluation: when, the candidates (the members, then the search's variants) and each
/// one's result, the candidate in force before and after (indices into `candidates`), and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evaluation {
    pub at: i64,
    pub window: (i64, i64),
    pub candidates: Vec<String>,
    /// In the order of `candidates`; empty when the window had too few jobs.
    pub results: Vec<MemberResult>,
    pub before: usize,
    pub after: usize,
    pub why: String,
    /// With `error_margin`: the replays' largest error over the evaluations of the last
    /// window ([`Portfolio::replay_error`]), the least lead that switched; else 0.
    #[serde(default)]
    pub replay_error: f64,
}

impl Evaluation {
    /// The name of the candidate in force before it.
    pub fn before_name(&self) -> &str {
        &self.candidates[self.before]
    }

    /// The name of the candidate in force after it.
    pub fn after_name(&self) -> &str {
        &self.candidates[self.after]
    }
}

/// What a portfolio carries over a restart of the live service (its `portfolio.json`): the
/// candidate in force by name, the variants the search keeps, when it last evaluated (the next
/// is due a period after), and its latest evaluation with results (the search breeds from it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Carried {
    pub in_force: String,
    pub variants: Vec<(String, PolicyConfig)>,
    pub last: Option<i64>,
    pub latest: Option<Evaluation>,
    /// The replays' errors on the last windows one candidate ran throughout, with when each
    /// was measured ([`Portfolio::replay_error`]), and when the one in force was put in force.
    #[serde(default)]
    pub replay_errors: Vec<(i64, f64)>,
    #[serde(default)]
    pub switched_at: Option<i64>,
}

/// The portfolio's state: the member (or searched variant) in force and the evaluations so far.
#[derive(Debug, Clone)]
pub struct Portfolio {
    pub settings: PortfolioSettings,
    /// The members' names, as reports give them.
    pub names: Vec<String>,
    /// The variants of cinch the search keeps between evaluations (the best of the last,
    /// and the one in force if it is one), named as `cinch sim --policies` takes them.
    pub variants: Vec<(String, PolicyConfig)>,
    /// Into the members followed by `variants`.
    pub active: usize,
    pub evaluations: Vec<Evaluation>,
    /// Each recent evaluation's time and how far the replay of the member in force was from
    /// what the record shows happened, as a share of the latter, kept for a window.
    replay_errors: Vec<(i64, f64)>,
    /// When the candidate in force was put in force (None: it has run since the start).
    switched_at: Option<i64>,
    last: Option<i64>,
    seed: u64,
}

impl Portfolio {
    pub fn new(settings: PortfolioSettings, names: Vec<String>, seed: u64) -> Portfolio {
        Portfolio {
            settings,
            names,
            variants: Vec::new(),
            active: 0,
            evaluations: Vec::new(),
            replay_errors: Vec::new(),
            switched_at: None,
            last: None,
            seed,
        }
    }

    /// What it carries over a restart ([`Carried`]).
    pub fn carried(&self) -> Carried {
        Carried {
            in_force: self.active_name(),
            variants: self.variants.clone(),
            last: self.last,
            latest: self
                .evaluations
                .iter()
                .rev()
                .find(|e| !e.results.is_empty())
                .cloned(),
            replay_errors: self.replay_errors.clone(),
            switched_at: self.switched_at,
        }
    }

    /// Takes up what an earlier run of it carried: the candidate in force, the variants, the
    /// time of the last evaluation and the latest one. An error, and nothing changed, when the
    /// candidate in force is none of its members and variants (carried under other members).
    pub fn carry_on(&mut self, carried: Carried) -> Result<(), String> {
        let mut pool = self.pool();
        pool.truncate(self.names.len());
        pool.extend(carried.variants.iter().cloned());
        let active = pool
            .iter()
            .position(|(n, _)| *n == carried.in_force)
            .ok_or_else(|| {
                format!(
                    "the member in force, '{}', is none of {}",
                    carried.in_force,
                    pool.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        self.variants = carried.variants;
        self.active = active;
        self.last = carried.last;
        self.evaluations = carried.latest.into_iter().collect();
        self.replay_errors = carried.replay_errors;
        self.switched_at = carried.switched_at;
        Ok(())
    }

    /// Drops every evaluation but what it still reads (the latest with results, which the
    /// search breeds from): a long-lived service keeps its own views of them.
    pub fn forget_old_evaluations(&mut self) {
        if let Some(latest) = self.evaluations.iter().rposition(|e| !e.results.is_empty()) {
            self.evaluations.drain(..latest);
        }
        self.evaluations.retain(|e| !e.results.is_empty());
    }

    /// The members, then the variants kept, with their names.
    fn pool(&self) -> Vec<(String, PolicyConfig)> {
        self.names
            .iter()
            .cloned()
            .zip(self.settings.members().iter().cloned())
            .chain(self.variants.iter().cloned())
            .collect()
    }

    /// The policy in force (asked every round: no pool is built).
    pub fn active_config(&self) -> PolicyConfig {
        match self.active.checked_sub(self.names.len()) {
            None => self.settings.members()[self.active].clone(),
            Some(v) => self.variants[v].1.clone(),
        }
    }

    /// The name of the policy in force.
    pub fn active_name(&self) -> String {
        match self.active.checked_sub(self.names.len()) {
            None => self.names[self.active].clone(),
            Some(v) => self.variants[v].0.clone(),
        }
    }

    /// A result's value under the admin's objective (less is better).
    fn objective(&self, r: &MemberResult) -> f64 {
        objective_value(self.settings.params().objective, r)
    }

    /// The pool and `settings.search` new variants of cinch, each bred from one of the best
    /// cinch candidates of the last evaluation by the objective (the members' cinch before
    /// any), none twice.
    fn candidates(&self, rng: &mut SeededRng) -> Vec<(String, PolicyConfig)> {
        let mut candidates = self.pool();
        if self.settings.search() == 0 {
            return candidates;
        }
        let mut parents: Vec<(f64, PolicyConfig)> = self
            .evaluations
            .iter()
            .rev()
            .find(|e| !e.results.is_empty())
            .map(|e| {
                e.results
                    .iter()
                    .zip(&e.candidates)
                    .filter_map(|(r, name)| {
                        let config = candidates.iter().find(|(n, _)| n == name)?.1.clone();
                        matches!(config, PolicyConfig::Cinch(_))
                            .then_some((self.objective(r), config))
                    })
                    .collect()
            })
            .unwrap_or_default();
        parents.sort_by(|a, b| a.0.total_cmp(&b.0));
        parents.truncate(self.settings.search().max(1));
        if parents.is_empty() {
            parents = candidates
                .iter()
                .filter(|(_, c)| matches!(c, PolicyConfig::Cinch(_)))
                .map(|(_, c)| (0.0, c.clone()))
                .take(1)
                .collect();
        }
        if parents.is_empty() {
            // No cinch among the members: the search starts from cinch's defaults.
            parents.push((0.0, PolicyConfig::defaults_for("cinch").expect("known")));
        }
        let mut bred = 0;
        // A few tries more than asked: a mutant already in the pool is not replayed twice.
        for _ in 0..self.settings.search() * 8 {
            if bred == self.settings.search() {
                break;
            }
            let parent = &parents[rng.below(parents.len() as u64) as usize].1;
            let Some(child) = search::mutate(parent, rng) else {
                continue;
            };
            let name = search::name_of(&child);
            if candidates.iter().any(|(n, _)| *n == name) {
                continue;
            }
            candidates.push((name, child));
            bred += 1;
        }
        candidates
    }

    /// The variants to keep after an evaluation of `candidates`: the best `settings.search`,
    /// and the one in force if it is a variant and not among them.
    fn survivors(
        &self,
        candidates: &[(String, PolicyConfig)],
        results: &[MemberResult],
        active: usize,
    ) -> Vec<(String, PolicyConfig)> {
        let members = self.names.len();
        let mut ranked: Vec<usize> = (members..candidates.len()).collect();
        ranked.sort_by(|&a, &b| {
            self.objective(&results[a])
                .total_cmp(&self.objective(&results[b]))
        });
        let mut kept: Vec<usize> = ranked.into_iter().take(self.settings.search()).collect();
        if active >= members && !kept.contains(&active) {
            kept.push(active);
        }
        kept.into_iter().map(|i| candidates[i].clone()).collect()
    }

    /// Whether an evaluation is due at `now`, the record having begun at `from`.
    pub fn due(&self, now: i64, from: i64) -> bool {
        now - self.last.unwrap_or(from) >= self.settings.every_s()
    }

    /// Replays the window ending at `now` of `record` under every member and chooses; the
    /// evaluation made (also kept in [`Portfolio::evaluations`]).
    pub fn evaluate(
        &mut self,
        record: &cinch_core::learn::record::Record,
        now: i64,
        config: SimConfig,
    ) -> Result<&Evaluation, crate::SimError> {
        self.last = Some(now);
        let from = record.span().map_or(now, |(from, _)| from);
        let start = (now - self.settings.window_s()).max(from);
        let replays = (0..u64::from(self.settings.params().draws))
            .map(|d| {
                selfsim::replay(record, start, now, config, self.seed ^ (now as u64) ^ d).map(|r| {
                    r.following(self.settings.follow_s())
                        .drained(self.settings.drain_s())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let before = self.active;
        let jobs = replays.first().map_or(0, |r| r.jobs.len());
        let mut candidates = self.pool();
        let mut replay_error = 0.0;
        let (results, after, why) = if jobs < self.settings.min_jobs() {
            (
                Vec::new(),
                before,
                format!(
                    "{jobs} jobs in the window, fewer than {}: kept",
                    self.settings.min_jobs()
                ),
            )
        } else {
            let mut rng = SeededRng::new(self.seed ^ (now as u64).rotate_left(17));
            candidates = self.candidates(&mut rng);
            let replayed: Vec<(String, Member)> = candidates
                .iter()
                .map(|(name, config)| (name.clone(), Member::Policy(config.clone())))
                .collect();
            let results = selfsim::evaluate(&replays, &replayed)?;
            let observed = replays.first().map_or((0.0, 0.0), |r| r.observed_h);
            replay_error = self.replay_error(now, start, &results[before], observed);
            let (after, why) = choose(&results, before, &self.settings, replay_error);
            (results, after, why)
        };
        if after != before {
            self.switched_at = Some(now);
        }
        if !results.is_empty() {
            // The members stay; the variants kept are the best of these (the one in force
            // among them), and the index in force is its place among them.
            self.variants = self.survivors(&candidates, &results, after);
            let name = &candidates[after].0;
            self.active = self
                .pool()
                .iter()
                .position(|(n, _)| n == name)
                .expect("the candidate in force is kept");
        }
        self.evaluations.push(Evaluation {
            at: now,
            window: (start, now),
            candidates: candidates.into_iter().map(|(n, _)| n).collect(),
            results,
            before,
            after,
            why,
            replay_error,
        });
        Ok(self.evaluations.last().expect("just pushed"))
    }

    /// With `error_margin`, the least lead the replays can be trusted with: the largest error,
    /// as a share, between the replay of the member in force (`replayed`) and what the record
    /// shows happened (`observed`: mean and p99 hours in the system), over the last windows
    /// that member ran throughout (as many as one window holds evaluations); 0 without it.
    /// A lead smaller than the replays' own error on what really ran says nothing about the
    /// members. A window (from `start`) that began before the last switch is not measured: its
    /// record is two members' doing, and its replay under one of them is off by their
    /// difference, not by the replays' error.
    fn replay_error(
        &mut self,
        now: i64,
        start: i64,
        replayed: &MemberResult,
        observed: (f64, f64),
    ) -> f64 {
        if !self.settings.params().error_margin {
            return 0.0;
        }
        if self.switched_at.is_none_or(|at| at <= start) {
            let (replayed, observed) = match self.settings.params().objective {
                Objective::P99 => (replayed.p99_h, observed.1),
                // Finish targets are not in the record's outcome: the mean's error stands
                // for it.
                Objective::Mean | Objective::Qos => (replayed.mean_h, observed.0),
            };
            let error = if observed > 0.0 {
                (replayed - observed).abs() / observed
            } else {
                0.0
            };
            let kept = (self.settings.window_s() / self.settings.every_s().max(1)).max(1) as usize;
            self.replay_errors.push((now, error));
            let over = self.replay_errors.len().saturating_sub(kept);
            self.replay_errors.drain(..over);
        }
        self.replay_errors
            .iter()
            .map(|&(_, e)| e)
            .fold(0.0, f64::max)
    }
}

impl Portfolio {
    /// Its evaluations in a line: how many, how many switched, each candidate's share of the
    /// evaluations it was put in force by, and the replays' wall time.
    pub fn summary(&self) -> String {
        let evaluated: Vec<&Evaluation> = self
            .evaluations
            .iter()
            .filter(|e| !e.results.is_empty())
            .collect();
        let switches = evaluated
            .iter()
            .filter(|e| e.before_name() != e.after_name())
            .count();
        let mut in_force: Vec<(String, usize)> = Vec::new();
        for e in &evaluated {
            let name = e.after_name();
            match in_force.iter_mut().find(|(n, _)| n == name) {
                Some((_, count)) => *count += 1,
                None => in_force.push((name.to_string(), 1)),
            }
        }
        in_force.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let wall_s: f64 = evaluated
            .iter()
            .flat_map(|e| &e.results)
            .map(|r| r.wall_s)
            .sum();
        let replayed: usize = evaluated.iter().map(|e| e.results.len()).sum();
        format!(
            "{} evaluations ({} with too few jobs), {} switches; in force after them: {}; {} \
             candidates replayed in {:.1} s",
            self.evaluations.len(),
            self.evaluations.len() - evaluated.len(),
            switches,
            if in_force.is_empty() {
                "none".to_string()
            } else {
                in_force
                    .iter()
                    .map(|(n, c)| format!("{n} {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            replayed,
            wall_s
        )
    }
}

/// A result's value under `objective` (less is better).
pub fn objective_value(objective: Objective, r: &MemberResult) -> f64 {
    match objective {
        Objective::Mean => r.mean_h,
        Objective::P99 => r.p99_h,
        // The same jobs are judged for every member of a window, so the values compare.
        Objective::Qos if r.qos_targeted > 0 => r.qos_missed,
        Objective::Qos => r.mean_h,
    }
}

/// A result's value under `objective`, in words.
fn described(objective: Objective, r: &MemberResult) -> String {
    match objective {
        Objective::Mean => format!("{:.3} h", r.mean_h),
        Objective::P99 => format!("p99 {:.3} h", r.p99_h),
        Objective::Qos if r.qos_targeted > 0 => format!(
            "{:.1}% of {} finish targets missed",
            r.qos_missed * 100.0,
            r.qos_targeted
        ),
        Objective::Qos => format!("{:.3} h (no finish target in the window)", r.mean_h),
    }
}

/// The candidate to run after an evaluation, and why: among those that pass the guards (p99
/// at most `max_p99_rise` above the in-force one's, fairness at least `min_fairness`, finish
/// targets missed at most `max_qos_miss_rise` more), the one with the least objective, if it
/// beats the one in force by more than `margin` of its value; else the one in force.
pub fn choose(
    results: &[MemberResult],
    active: usize,
    rule: &PortfolioSettings,
    replay_error: f64,
) -> (usize, String) {
    let params = rule.params();
    let margin = params.margin.max(replay_error);
    let Some(current) = results.get(active) else {
        return (active, "no results: kept".into());
    };
    let value = |r: &MemberResult| objective_value(params.objective, r);
    let show = |r: &MemberResult| described(params.objective, r);
    let guarded = |r: &MemberResult| -> Option<String> {
        if params.max_p99_rise > 0.0 && r.p99_h > current.p99_h * (1.0 + params.max_p99_rise) {
            return Some(format!(
                "p99 {:.3} h, over {}'s {:.3} h by more than {:.0}%",
                r.p99_h,
                current.member,
                current.p99_h,
                params.max_p99_rise * 100.0
            ));
        }
        if params.min_fairness > 0.0 && r.fairness < params.min_fairness {
            return Some(format!(
                "fairness {:.3}, under {}",
                r.fairness, params.min_fairness
            ));
        }
        if params.max_qos_miss_rise > 0.0
            && r.qos_missed > current.qos_missed + params.max_qos_miss_rise
        {
            return Some(format!(
                "{:.1}% of finish targets missed, over {}'s {:.1}% by more than {:.1} points",
                r.qos_missed * 100.0,
                current.member,
                current.qos_missed * 100.0,
                params.max_qos_miss_rise * 100.0
            ));
        }
        None
    };
    let best = (0..results.len())
        .filter(|&k| k == active || guarded(&results[k]).is_none())
        .min_by(|&a, &b| {
            value(&results[a])
                .total_cmp(&value(&results[b]))
                .then((a != active).cmp(&(b != active)))
        })
        .unwrap_or(active);
    // The best by the objective alone, when a guard set it aside: said, so the admin sees why.
    let unguarded = (0..results.len())
        .min_by(|&a, &b| value(&results[a]).total_cmp(&value(&results[b])))
        .filter(|&k| k != best)
        .and_then(|k| {
            guarded(&results[k]).map(|why| format!("; {} set aside: {why}", results[k].member))
        })
        .unwrap_or_default();
    let winner = &results[best];
    if best == active {
        return (
            active,
            format!("{} is best: kept{unguarded}", current.member),
        );
    }
    if value(winner) < value(current) * (1.0 - margin) {
        (
            best,
            format!(
                "{} {} against {}'s {}: switched{unguarded}",
                winner.member,
                show(winner),
                current.member,
                show(current)
            ),
        )
    } else {
        (
            active,
            format!(
                "{} {} against {}'s {}, within the {}: kept{unguarded}",
                winner.member,
                show(winner),
                current.member,
                show(current),
                if margin > params.margin {
                    format!(
                        "{:.1}% the replays have been off by lately (on what {} did)",
                        margin * 100.0,
                        current.member
                    )
                } else {
                    format!("{:.0}% margin", params.margin * 100.0)
                }
            ),
        )
    }
}

/// The portfolio in simulated time: cinch's live path with the member in force as its policy,
/// its optimizer keeping the record the replays read.
pub struct PortfolioPolicy {
    inner: CinchPolicy,
    pub portfolio: Portfolio,
    config: SimConfig,
    name: String,
}

impl PortfolioPolicy {
    pub fn new(
        settings: PortfolioSettings,
        names: Vec<String>,
        config: SimConfig,
        name: String,
    ) -> PortfolioPolicy {
        let first = settings.members()[0].clone();
        let mut inner = CinchPolicy::new(first, name.clone());
        // The window back, as the live service keeps it.
        inner.keep_record(RecordLimits {
            window_s: settings.window_s() + settings.every_s(),
            max_jobs: 1_000_000,
        });
        PortfolioPolicy {
            inner,
            portfolio: Portfolio::new(settings, names, 0x9047_F011),
            config,
            name,
        }
    }
}

impl Scheduler for PortfolioPolicy {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn prepare(&mut self, state: &State, now: f64) -> Vec<Action> {
        let t = now as i64;
        if let Some((from, _)) = self.inner.record().and_then(|r| r.span()) {
            if self.portfolio.due(t, from) {
                let record = self.inner.record().expect("kept").clone();
                // A replay that fails leaves the member in force (and says nothing more here:
                // the evaluation list shows the gap).
                if self.portfolio.evaluate(&record, t, self.config).is_ok() {
                    self.inner.set_policy(self.portfolio.active_config());
                }
            }
        }
        self.inner.prepare(state, now)
    }

    fn order_key(&self, state: &State, job: usize, now: f64) -> f64 {
        self.inner.order_key(state, job, now)
    }

    fn place(&self, state: &State, job: usize, now: f64) -> Option<Vec<(u32, u32)>> {
        self.inner.place(state, job, now)
    }

    fn after_pass(&mut self, state: &State, now: f64) {
        self.inner.after_pass(state, now)
    }

    fn holds_new_jobs(&self) -> bool {
        self.inner.holds_new_jobs()
    }

    fn median_delay_s(&self) -> Option<f64> {
        self.inner.median_delay_s()
    }

    fn progress_error(&self) -> Option<(f64, usize)> {
        self.inner.progress_error()
    }

    fn portfolio_summary(&self) -> Option<String> {
        Some(self.portfolio.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(member: &str, mean_h: f64) -> MemberResult {
        MemberResult {
            member: member.into(),
            mean_h,
            p99_h: 0.0,
            fairness: 1.0,
            qos_targeted: 0,
            qos_missed: 0.0,
            jobs: 100,
            wall_s: 0.0,
        }
    }

    /// `jobs` synthetic jobs (seed `seed`) at load 1.2 on 8x8 GPUs, rounds every 30 s.
    fn busy_8x8(jobs: usize, seed: u64) -> (Vec<crate::workload::JobSpec>, SimConfig) {
        let trace = crate::workload::synthetic(jobs, 64, 1.2, seed);
        let jobs =
            crate::workload::from_trace(&trace, &crate::workload::WorkloadOptions::default());
        let config = SimConfig {
            cluster: crate::ClusterSpec::parse("8x8", 2).unwrap(),
            round_interval_s: 30.0,
            ..SimConfig::default()
        };
        (jobs, config)
    }

    fn margin(margin: f64) -> PortfolioSettings {
        PortfolioSettings::parse(&format!("margin={margin}")).unwrap()
    }

    #[test]
    fn the_best_member_runs_only_when_it_beats_the_one_in_force_by_the_margin() {
        let results = [
            result("cinch", 10.0),
            result("tiresias", 9.0),
            result("qssf", 9.8),
        ];
        let (after, why) = choose(&results, 0, &margin(0.05), 0.0);
        assert_eq!(after, 1, "{why}");
        assert!(why.contains("switched"), "{why}");
        // 9.8 against 10: 2% better, within a 5% margin.
        let results = [result("cinch", 10.0), result("qssf", 9.8)];
        let (after, why) = choose(&results, 0, &margin(0.05), 0.0);
        assert_eq!(after, 0);
        assert!(why.contains("within the 5% margin: kept"), "{why}");
        // A tie keeps the member in force, whichever is listed first.
        let results = [result("cinch", 10.0), result("tiresias", 10.0)];
        assert_eq!(choose(&results, 1, &margin(0.0), 0.0).0, 1);
        assert_eq!(choose(&results, 0, &margin(0.0), 0.0).0, 0);
    }

    #[test]
    fn with_the_error_margin_a_lead_must_outgrow_the_replays_own_recent_error() {
        let settings =
            PortfolioSettings::parse("every_h=1+window_h=10+margin=0+error_margin=true").unwrap();
        let mut portfolio = Portfolio::new(settings.clone(), vec!["cinch".into()], 1);
        let error = |p: &mut Portfolio, now: i64, replayed: f64| {
            p.replay_error(
                now,
                now - 10 * 3600,
                &result("cinch", replayed),
                (10.0, 0.0),
            )
        };
        // The replay of the member in force against what the record shows: 2% off, then 6%
        // off an hour later; the largest of the errors kept stands.
        assert!((error(&mut portfolio, 0, 10.2) - 0.02).abs() < 1e-9);
        assert!((error(&mut portfolio, 3600, 9.4) - 0.06).abs() < 1e-9);
        // A switch at 2 h: the windows that began before it are two members' doing, and are
        // not measured (this one's replay is 100% off).
        portfolio.switched_at = Some(7200);
        assert!((error(&mut portfolio, 10 * 3600, 20.0) - 0.06).abs() < 1e-9);
        // The windows the new member ran throughout are; ten of them (a window's worth of
        // evaluations) and the old errors are gone.
        for hour in 12..22 {
            assert!(error(&mut portfolio, hour * 3600, 10.1) >= 0.01 - 1e-9);
        }
        assert!((error(&mut portfolio, 22 * 3600, 10.1) - 0.01).abs() < 1e-9);
        assert_eq!(portfolio.replay_errors.len(), 10);
        // A 4% lead: kept while the replays have been off by 6%, switched at 3%.
        let results = [result("cinch", 10.0), result("tiresias", 9.6)];
        let (after, why) = choose(&results, 0, &settings, 0.06);
        assert_eq!(after, 0, "{why}");
        assert!(
            why.ends_with(
                "within the 6.0% the replays have been off by lately (on what cinch did): kept"
            ),
            "{why}"
        );
        assert_eq!(choose(&results, 0, &settings, 0.03).0, 1);
        // The admin's margin stays the floor.
        assert_eq!(choose(&results, 0, &margin(0.05), 0.03).0, 0);
        // Off, the replays' error is not asked for, and a carried record of errors reads back.
        let mut off = Portfolio::new(margin(0.0), vec!["cinch".into()], 1);
        assert_eq!(
            off.replay_error(0, 0, &result("cinch", 20.0), (10.0, 0.0)),
            0.0
        );
        let carried = portfolio.carried();
        assert_eq!(carried.switched_at, Some(7200));
        let mut json = serde_json::to_value(&carried).unwrap();
        let mut restarted = Portfolio::new(settings, vec!["cinch".into()], 1);
        restarted
            .carry_on(serde_json::from_value(json.clone()).unwrap())
            .unwrap();
        assert_eq!(restarted.replay_errors, portfolio.replay_errors);
        assert_eq!(restarted.switched_at, Some(7200));
        // A file written before errors were kept still reads, with none.
        json.as_object_mut().unwrap().remove("replay_errors");
        json.as_object_mut().unwrap().remove("switched_at");
        let old: Carried = serde_json::from_value(json).unwrap();
        assert!(old.replay_errors.is_empty() && old.switched_at.is_none());
    }

    #[test]
    fn the_objective_and_the_guards_are_the_admins() {
        let with = |p99_h: f64, fairness: f64, r: MemberResult| MemberResult {
            p99_h,
            fairness,
            ..r
        };
        let results = [
            with(20.0, 0.9, result("cinch", 10.0)),
            with(40.0, 0.9, result("tiresias", 8.0)),
            with(18.0, 0.5, result("qssf", 9.0)),
            with(19.0, 0.9, result("strict", 9.9)),
        ];
        // By the mean, Tiresias wins; guarded against a p99 rise over 50%, it is set aside
        // and QSSF wins; guarded also on fairness 0.8, nothing beats cinch by the margin.
        assert_eq!(choose(&results, 0, &margin(0.05), 0.0).0, 1);
        let rule = PortfolioSettings::parse("max_p99_rise=0.5").unwrap();
        let (after, why) = choose(&results, 0, &rule, 0.0);
        assert_eq!(after, 2, "{why}");
        assert!(
            why.contains(
                "tiresias set aside: p99 40.000 h, over cinch's 20.000 h by more than 50%"
            ),
            "{why}"
        );
        let rule = PortfolioSettings::parse("max_p99_rise=0.5+min_fairness=0.8").unwrap();
        let (after, why) = choose(&results, 0, &rule, 0.0);
        assert_eq!(after, 0, "{why}");
        assert!(
            why.contains("strict 9.900 h against cinch's 10.000 h, within"),
            "{why}"
        );
        // By the p99: strict's 19 h is within 5% of cinch's 20 h, QSSF's 18 h is not.
        let rule = PortfolioSettings::parse("objective=p99").unwrap();
        let (after, why) = choose(&results, 0, &rule, 0.0);
        assert_eq!(after, 2, "{why}");
        assert!(
            why.starts_with("qssf p99 18.000 h against cinch's p99 20.000 h: switched"),
            "{why}"
        );
        // By the finish targets missed (20 in the window): Tiresias misses 5%, QSSF 10%, cinch
        // (in force) 30%, strict 45%.
        let missing = |share: f64, r: MemberResult| MemberResult {
            qos_targeted: 20,
            qos_missed: share,
            ..r
        };
        let targeted = [
            missing(0.30, results[0].clone()),
            missing(0.05, results[1].clone()),
            missing(0.10, results[2].clone()),
            missing(0.45, results[3].clone()),
        ];
        let rule = PortfolioSettings::parse("objective=qos").unwrap();
        let (after, why) = choose(&targeted, 0, &rule, 0.0);
        assert_eq!(after, 1, "{why}");
        assert!(
            why.starts_with(
                "tiresias 5.0% of 20 finish targets missed against cinch's 30.0% of 20 finish \
                 targets missed: switched"
            ),
            "{why}"
        );
        // By the mean, guarded against missing more than 10 points more than the member in
        // force: with Tiresias in force (best mean, 5%) it is kept; with strict in force (5%)
        // and Tiresias missing 30%, Tiresias is set aside and QSSF (10%) wins.
        let rule = PortfolioSettings::parse("max_qos_miss_rise=0.1").unwrap();
        assert_eq!(choose(&targeted, 1, &rule, 0.0).0, 1);
        let rule = PortfolioSettings::parse("max_qos_miss_rise=0.1+margin=0").unwrap();
        let from_strict = [
            targeted[0].clone(),
            missing(0.30, with(40.0, 0.9, result("tiresias", 8.0))),
            targeted[2].clone(),
            missing(0.05, targeted[3].clone()),
        ];
        let (after, why) = choose(&from_strict, 3, &rule, 0.0);
        assert_eq!(after, 2, "{why}");
        assert!(
            why.contains(
                "tiresias set aside: 30.0% of finish targets missed, over strict's 5.0% by more \
                 than 10.0 points"
            ),
            "{why}"
        );
        // A window without a finish target: the QoS objective falls back to the mean.
        let (after, why) = choose(
            &results,
            0,
            &PortfolioSettings::parse("objective=qos").unwrap(),
            0.0,
        );
        assert_eq!(after, 1, "{why}");
        assert!(
            why.starts_with("tiresias 8.000 h (no finish target in the window) against"),
            "{why}"
        );
        let err = PortfolioSettings::parse("objective=median").unwrap_err();
        assert!(
            err.contains("objective must be mean, p99 or qos, not 'median'"),
            "{err}"
        );
        assert!(PortfolioSettings::parse("min_fairness=2")
            .unwrap_err()
            .contains("min_fairness must be from 0 to 1"));
    }

    #[test]
    fn the_portfolio_evaluates_on_its_own_record_every_period_and_runs_the_winner() {
        let (jobs, config) = busy_8x8(600, 3);
        let settings = PortfolioSettings::parse("window_h=12+min_jobs=5").unwrap();
        let names = settings
            .members()
            .iter()
            .map(|m| m.name().to_string())
            .collect();
        let mut policy = PortfolioPolicy::new(settings.clone(), names, config, "portfolio".into());
        let outcome = crate::engine::simulate(&jobs, &mut policy, config, &mut |_, _| {}).unwrap();
        assert!(outcome.jobs.iter().all(|j| j.finish.is_some()));
        let evaluations = &policy.portfolio.evaluations;
        assert!(evaluations.len() >= 3, "{}", evaluations.len());
        for pair in evaluations.windows(2) {
            assert!(pair[1].at - pair[0].at >= settings.every_s());
            assert_eq!(pair[1].before, pair[0].after, "one member in force between");
        }
        for e in evaluations.iter().filter(|e| !e.results.is_empty()) {
            assert_eq!(e.results.len(), settings.members().len());
            assert!(e.window.1 - e.window.0 <= settings.window_s());
            assert_eq!(
                (e.after, e.why.clone()),
                choose(&e.results, e.before, &settings, e.replay_error)
            );
        }
        assert_eq!(
            policy.inner.config(),
            &settings.members()[policy.portfolio.active],
            "the member in force decides"
        );
    }

    #[test]
    fn the_search_replays_bred_variants_beside_the_members_and_keeps_the_best() {
        let (jobs, config) = busy_8x8(400, 5);
        let settings = PortfolioSettings::parse(
            "window_h=12+min_jobs=5+search=2+draws=1+members=cinch/tiresias",
        )
        .unwrap();
        let names = vec!["cinch".to_string(), "tiresias".to_string()];
        let mut policy =
            PortfolioPolicy::new(settings.clone(), names.clone(), config, "portfolio".into());
        crate::engine::simulate(&jobs, &mut policy, config, &mut |_, _| {}).unwrap();
        let evaluations: Vec<&Evaluation> = policy
            .portfolio
            .evaluations
            .iter()
            .filter(|e| !e.results.is_empty())
            .collect();
        assert!(evaluations.len() >= 3, "{}", evaluations.len());
        let mut bred = std::collections::BTreeSet::new();
        for (k, e) in evaluations.iter().enumerate() {
            assert_eq!(&e.candidates[..2], ["cinch", "tiresias"], "members first");
            // The members, the variants kept (at most two, three with one in force), two new.
            assert!((4..=7).contains(&e.candidates.len()), "{:?}", e.candidates);
            assert_eq!(e.results.len(), e.candidates.len());
            for (result, name) in e.results.iter().zip(&e.candidates) {
                assert_eq!(&result.member, name);
            }
            let unique: std::collections::BTreeSet<_> = e.candidates.iter().collect();
            assert_eq!(
                unique.len(),
                e.candidates.len(),
                "none twice: {:?}",
                e.candidates
            );
            for name in &e.candidates[2..] {
                let kind: crate::kind::SchedulerKind = name.parse().unwrap();
                assert!(name.starts_with("cinch:"), "{name}: {kind}");
                bred.insert(name.clone());
            }
            assert_eq!(
                (e.after, e.why.clone()),
                choose(&e.results, e.before, &settings, e.replay_error)
            );
            // What the next evaluation starts from: the best two variants of this one.
            if let Some(next) = evaluations.get(k + 1) {
                let mut ranked: Vec<usize> = (2..e.candidates.len()).collect();
                ranked.sort_by(|&a, &b| e.results[a].mean_h.total_cmp(&e.results[b].mean_h));
                for &best in &ranked[..2] {
                    assert!(
                        next.candidates.contains(&e.candidates[best]),
                        "{} kept",
                        e.candidates[best]
                    );
                }
                assert_eq!(next.before_name(), e.after_name(), "one in force between");
                // Besides the members and two new ones, only variants this one replayed.
                let kept = &next.candidates[2..next.candidates.len() - 2];
                assert!(kept.iter().all(|n| e.candidates.contains(n)), "{kept:?}");
            }
        }
        assert!(bred.len() > evaluations.len(), "the search moves: {bred:?}");
        assert_eq!(
            search::name_of(policy.inner.config()),
            match policy.portfolio.active_name().as_str() {
                "cinch" => "cinch".to_string(),
                other => other.to_string(),
            },
            "the candidate in force decides"
        );
        // Carried over a restart (through its JSON): the same candidate in force, the same
        // variants, the next evaluation due when it was, bred from the same parents.
        let carried = policy.portfolio.carried();
        let json = serde_json::to_string(&carried).unwrap();
        let mut again = Portfolio::new(settings.clone(), names, 0x9047_F011);
        again
            .carry_on(serde_json::from_str(&json).unwrap())
            .unwrap();
        assert_eq!(again.active_name(), policy.portfolio.active_name());
        assert_eq!(again.active_config(), policy.portfolio.active_config());
        assert_eq!(again.variants, policy.portfolio.variants);
        assert_eq!(again.carried(), carried);
        let mut trimmed = policy.portfolio.clone();
        trimmed.forget_old_evaluations();
        assert!(
            trimmed.evaluations.len() <= 1,
            "{}",
            trimmed.evaluations.len()
        );
        assert_eq!(trimmed.carried(), carried, "it keeps what it reads");
        let last = carried.last.expect("it evaluated");
        for now in [last + settings.every_s() - 1, last + settings.every_s()] {
            assert_eq!(again.due(now, 0), policy.portfolio.due(now, 0), "{now}");
        }
        assert_eq!(
            again.candidates(&mut SeededRng::new(7)),
            policy.portfolio.candidates(&mut SeededRng::new(7))
        );
        // Carried under other members: refused, nothing changed.
        let mut other = Portfolio::new(
            PortfolioSettings::parse("members=qssf/slurm").unwrap(),
            vec!["qssf".to_string(), "slurm".to_string()],
            0x9047_F011,
        );
        let mut strange = carried.clone();
        strange.in_force = "tiresias".into();
        let err = other.carry_on(strange).unwrap_err();
        assert!(err.contains("'tiresias', is none of qssf, slurm"), "{err}");
        assert_eq!(
            (other.active_name(), other.carried().last),
            ("qssf".into(), None)
        );
    }

    #[test]
    fn settings_parse_over_the_defaults_and_bad_ones_are_refused() {
        let s = PortfolioSettings::parse("every_h=12+members=cinch/tiresias/slurm").unwrap();
        assert_eq!(s.every_s(), 12 * 3600);
        assert_eq!(s.window_s(), 24 * 3600);
        assert_eq!(
            s.members().iter().map(|m| m.name()).collect::<Vec<_>>(),
            vec!["cinch", "tiresias", "passthrough"]
        );
        for (bad, says) in [
            ("every_h=0", "every_h must be from 0.25 to 168"),
            ("members=nosuch", "unknown policy 'nosuch'"),
            ("draws=0", "draws must be from 1 to 20"),
            ("margin=2", "margin must be from 0 to 1"),
            ("speed=3", "unknown field `speed`"),
            ("every_h", "parameters are key=value"),
        ] {
            let err = PortfolioSettings::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
