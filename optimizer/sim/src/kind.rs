//! The schedulers `cinch sim --policies` can name, and how each is built: Slurm alone, every
//! policy of the core through the live path, and the portfolio over them.

use std::fmt;
use std::str::FromStr;

use crate::engine::{Scheduler, SimConfig};
use crate::sched::{CinchPolicy, SlurmDeadline, SlurmDefault};
use crate::settings::settings_map;
use cinch_core::policy::{CinchParams, DallyParams, PolicyConfig, SwitchesParams, POLICY_NAMES};

/// A policy with parameters, `NAME:key=value+key=value` ([`settings_map`]).
fn with_params(name: &str, settings: &str) -> Result<PolicyConfig, String> {
    let raw = cinch_core::policy::RawPolicyConfig {
        name: name.to_string(),
        params: Some(serde_json::Value::Object(settings_map(settings)?)),
    };
    PolicyConfig::try_from(raw)
}

/// The schedulers `cinch sim --policies` can name.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulerKind {
    /// Slurm alone (and cinch's `passthrough`): the engine's model of slurmctld.
    Slurm,
    /// Slurm alone with the QoS targets as `--deadline` (cancelled once they cannot be met).
    SlurmDeadline,
    /// A policy of the core, run through the live path.
    Policy(PolicyConfig),
    /// The portfolio: the member that served the recent past best, by self-simulation
    /// ([`crate::portfolio`]).
    Portfolio(Box<crate::portfolio::PortfolioSettings>),
    /// What perfect knowledge would give: cinch (or a variant) told every job's true run
    /// ([`CinchPolicy::told_run_times`]). A reference for how much of the gap a policy closes,
    /// not a policy anyone can run: never a baseline, a member or a winner.
    Perfect(PolicyConfig),
}

/// All of them, in report order, with default parameters.
pub fn all_kinds() -> Vec<SchedulerKind> {
    std::iter::once(SchedulerKind::Slurm)
        .chain(
            [
                "switches",
                "strict",
                "tiresias",
                "qssf",
                "consolidate",
                "dally",
                "cinch",
            ]
            .into_iter()
            .map(|name| SchedulerKind::Policy(PolicyConfig::defaults_for(name).expect("known"))),
        )
        .collect()
}

impl SchedulerKind {
    pub fn build(&self) -> Box<dyn Scheduler> {
        self.build_for(SimConfig::default())
    }

    /// The scheduler for a run under `config` (the portfolio's replays take their network and
    /// round interval from it).
    pub fn build_for(&self, config: SimConfig) -> Box<dyn Scheduler> {
        if let SchedulerKind::Policy(PolicyConfig::Portfolio(params)) = self {
            // The policy's parameters as the simulator's portfolio (they were validated).
            let settings = crate::portfolio::PortfolioSettings::from_params(params)
                .expect("validated parameters");
            return SchedulerKind::Portfolio(Box::new(settings)).build_for(config);
        }
        match self {
            SchedulerKind::Portfolio(settings) => {
                let names = settings
                    .members()
                    .iter()
                    .map(|m| SchedulerKind::Policy(m.clone()).to_string())
                    .collect();
                Box::new(crate::portfolio::PortfolioPolicy::new(
                    (**settings).clone(),
                    names,
                    config,
                    self.to_string(),
                ))
            }
            SchedulerKind::Slurm | SchedulerKind::Policy(PolicyConfig::Passthrough(_)) => {
                Box::new(SlurmDefault)
            }
            SchedulerKind::SlurmDeadline => Box::new(SlurmDeadline),
            SchedulerKind::Policy(config) => {
                Box::new(CinchPolicy::new(config.clone(), self.to_string()))
            }
            SchedulerKind::Perfect(config) => {
                Box::new(CinchPolicy::new(config.clone(), self.to_string()).told_run_times())
            }
        }
    }

    /// Whether this is one of the baselines cinch is measured against (Slurm alone and the
    /// survey's: strict, Tiresias, QSSF, ...); the portfolio and the reference are not.
    pub fn is_baseline(&self) -> bool {
        match self {
            SchedulerKind::Slurm | SchedulerKind::SlurmDeadline => true,
            SchedulerKind::Policy(p) => p.is_baseline(),
            SchedulerKind::Portfolio(_) | SchedulerKind::Perfect(_) => false,
        }
    }

    /// Whether this is the perfect-knowledge reference, which no site can run.
    pub fn is_reference(&self) -> bool {
        matches!(self, SchedulerKind::Perfect(_))
    }
}

impl SchedulerKind {
    /// This scheduler as a member self-simulation replays ([`crate::selfsim::Member`]), with
    /// its name; none for the portfolio itself.
    pub fn member(&self) -> Option<(String, crate::selfsim::Member)> {
        let member = match self {
            SchedulerKind::Slurm | SchedulerKind::SlurmDeadline => {
                crate::selfsim::Member::SlurmAlone
            }
            SchedulerKind::Policy(config) => crate::selfsim::Member::Policy(config.clone()),
            SchedulerKind::Portfolio(_) | SchedulerKind::Perfect(_) => return None,
        };
        Some((self.to_string(), member))
    }
}

impl SchedulerKind {
    /// What this scheduler is, in one line for a report's reader. `multifactor`: whether the
    /// run's Slurm orders by priority/multifactor with fair share (else submit order).
    pub fn about(&self, multifactor: bool) -> String {
        let slurm = if multifactor {
            "Slurm's priority/multifactor with fair share (the trace's users), its main scheduler and backfill"
        } else {
            "Slurm's priority/basic (first in, first out), its main scheduler and backfill"
        };
        match self {
            SchedulerKind::Slurm | SchedulerKind::Policy(PolicyConfig::Passthrough(_)) => {
                format!("Slurm without cinch: {slurm}")
            }
            SchedulerKind::SlurmDeadline => format!(
                "Slurm without cinch, QoS targets given as --deadline (a job that can no longer \
                 make it is cancelled): {slurm}"
            ),
            SchedulerKind::Portfolio(_) => format!(
                "{} (docs/policies/portfolio.md)",
                PolicyConfig::defaults_for("portfolio")
                    .map(|c| c.info().summary)
                    .unwrap_or_default()
            ),
            SchedulerKind::Perfect(config) => format!(
                "a reference no site can run: {} told every job's true run time",
                SchedulerKind::Policy(config.clone())
            ),
            SchedulerKind::Policy(config) => {
                let what = match config {
                    PolicyConfig::Strict(_) => {
                        "strict consolidation (the survey's baseline): a multi-GPU job starts only \
                         on its most consolidated placement, held for it by a reservation"
                    }
                    PolicyConfig::Tiresias(_) => {
                        "Tiresias: discretized two-dimensional least attained service, GPUs x \
                         time; requeues the jobs that opted in to let less-served jobs run"
                    }
                    PolicyConfig::Qssf(_) => {
                        "QSSF (Helios): quasi-shortest service first, by predicted GPU time"
                    }
                    other => other.info().summary,
                };
                format!("{what}; on top of {slurm}")
            }
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = match self {
            SchedulerKind::Slurm | SchedulerKind::Policy(PolicyConfig::Passthrough(_)) => {
                return f.write_str("slurm")
            }
            SchedulerKind::SlurmDeadline => return f.write_str("slurm-deadline"),
            SchedulerKind::Portfolio(settings) => return f.write_str(&settings.name()),
            SchedulerKind::Perfect(config) => {
                return match config {
                    PolicyConfig::Cinch(p) if *p == CinchParams::default() => {
                        f.write_str("perfect")
                    }
                    other => write!(f, "perfect:{}", SchedulerKind::Policy(other.clone())),
                };
            }
            SchedulerKind::Policy(config) => config,
        };
        match config {
            PolicyConfig::Switches(SwitchesParams { max_wait_s, .. }) => {
                f.write_str("slurm-switches")?;
                if *max_wait_s != SwitchesParams::default().max_wait_s {
                    write!(f, "@{max_wait_s}")?;
                }
                Ok(())
            }
            PolicyConfig::Dally(DallyParams {
                node_timer_s: Some(t),
                rack_timer_s: Some(r),
                ..
            }) if t == r => write!(f, "cinch-dally@{t}"),
            PolicyConfig::Cinch(params) => f.write_str(&crate::search::cinch_name(params)),
            c if c.is_baseline() => f.write_str(c.name()),
            c => write!(f, "cinch-{}", c.name()),
        }
    }
}

/// Seconds after `@` in a policy name, 0 to 604800.
fn seconds_after_at(s: &str, rest: &str, what: &str) -> Result<u32, String> {
    rest.parse()
        .ok()
        .filter(|&t| t <= 604_800)
        .ok_or_else(|| format!("'{s}': {what} must be 0 to 604800 seconds"))
}

impl FromStr for SchedulerKind {
    type Err = String;
    /// `slurm`, `slurm-switches[@SECONDS]` (or `switches`), `strict`, `tiresias`, `qssf`,
    /// `consolidate` (or `cinch-consolidate`), `dally` (auto-tuned timers) or `dally@SECONDS`
    /// (both timers fixed), `passthrough` (= `slurm`), `cinch`; any policy with parameters as
    /// `NAME:key=value+...` (e.g. `cinch:preempt=false+consolidate=false`); `perfect` (cinch
    /// told every job's true run, a reference) or `perfect:cinch:key=value+...` for a variant.
    fn from_str(s: &str) -> Result<Self, String> {
        let name = s.trim();
        if name == "perfect" {
            return Ok(SchedulerKind::Perfect(
                PolicyConfig::defaults_for("cinch").expect("known"),
            ));
        }
        if let Some(inner) = name.strip_prefix("perfect:") {
            // Only cinch reads what a job says of its own run (its profile), which is how the
            // reference is told: another policy told so would be itself under another name.
            return match inner.parse::<SchedulerKind>()? {
                SchedulerKind::Policy(config @ PolicyConfig::Cinch(_)) => {
                    Ok(SchedulerKind::Perfect(config))
                }
                _ => Err(format!(
                    "'{s}': perfect: takes cinch or a variant of it (perfect:cinch:key=value+...); \
                     only cinch reads the run times the reference is told"
                )),
            };
        }
        if name == "slurm" {
            return Ok(SchedulerKind::Slurm);
        }
        if name == "slurm-deadline" {
            return Ok(SchedulerKind::SlurmDeadline);
        }
        if name == "portfolio" {
            return Ok(SchedulerKind::Portfolio(Box::default()));
        }
        if let Some(settings) = name.strip_prefix("portfolio:") {
            return crate::portfolio::PortfolioSettings::parse(settings)
                .map(|s| SchedulerKind::Portfolio(Box::new(s)));
        }
        let policy = name
            .strip_prefix("cinch-")
            .or_else(|| name.strip_prefix("slurm-"))
            .unwrap_or(name);
        if let Some(wait) = policy.strip_prefix("switches@") {
            return Ok(SchedulerKind::Policy(PolicyConfig::Switches(
                SwitchesParams {
                    max_wait_s: seconds_after_at(s, wait, "the wait")?,
                    ..SwitchesParams::default()
                },
            )));
        }
        if let Some((policy, settings)) = policy.split_once(':') {
            return with_params(policy, settings).map(SchedulerKind::Policy);
        }
        if let Some(timer) = policy.strip_prefix("dally@") {
            let t = seconds_after_at(s, timer, "the timer")?;
            return Ok(SchedulerKind::Policy(PolicyConfig::Dally(DallyParams {
                node_timer_s: Some(t),
                rack_timer_s: Some(t),
                ..DallyParams::default()
            })));
        }
        PolicyConfig::defaults_for(policy)
            .map(SchedulerKind::Policy)
            .map_err(|_| {
                format!(
                    "unknown policy '{s}' (known: slurm, slurm-deadline, {}; slurm-switches@SECONDS, \
                     dally@SECONDS, NAME:key=value+...)",
                    POLICY_NAMES.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_and_bad_ones_are_refused() {
        for kind in all_kinds() {
            assert_eq!(kind.to_string().parse::<SchedulerKind>().unwrap(), kind);
        }
        assert_eq!(
            "slurm-switches@60".parse::<SchedulerKind>().unwrap(),
            SchedulerKind::Policy(PolicyConfig::Switches(SwitchesParams {
                max_wait_s: 60,
                ..SwitchesParams::default()
            }))
        );
        assert!("slurm-switches@-1".parse::<SchedulerKind>().is_err());
        // A portfolio's name gives its objective and guards, and reads back as the same.
        for settings in [
            "objective=p99",
            "objective=qos+max_qos_miss_rise=0.05",
            "max_p99_rise=0.1+min_fairness=0.9+search=2",
            "drain_h=24",
            "every_h=1+margin=0+error_margin=true",
            "members=tiresias/cinch/slurm+window_h=48",
        ] {
            let kind: SchedulerKind = format!("portfolio:{settings}").parse().unwrap();
            let name = kind.to_string();
            for setting in settings.split('+') {
                assert!(name.contains(setting), "{setting} in {name}");
            }
            assert_eq!(name.parse::<SchedulerKind>().unwrap(), kind, "{name}");
        }
        // Every parameter of the table, and only those; each one's range from the table.
        let err = "portfolio:every_hour=1"
            .parse::<SchedulerKind>()
            .unwrap_err();
        assert!(
            err.contains("unknown field `every_hour`") && err.contains("max_qos_miss_rise"),
            "{err}"
        );
        let err = "portfolio:window_h=0".parse::<SchedulerKind>().unwrap_err();
        assert!(err.contains("window_h must be from 1 to 744"), "{err}");
        let err = "fastest".parse::<SchedulerKind>().unwrap_err();
        assert!(err.contains("unknown policy 'fastest'"), "{err}");
    }

    #[test]
    fn the_perfect_knowledge_reference_parses_names_itself_and_is_no_member() {
        let perfect = "perfect".parse::<SchedulerKind>().unwrap();
        assert_eq!(
            perfect,
            SchedulerKind::Perfect(PolicyConfig::defaults_for("cinch").unwrap())
        );
        assert_eq!(perfect.to_string(), "perfect");
        assert!(perfect.is_reference() && perfect.member().is_none());
        assert!(perfect.about(true).contains("no site can run"));
        let variant = "perfect:cinch:preempt=false"
            .parse::<SchedulerKind>()
            .unwrap();
        assert_eq!(variant.to_string(), "perfect:cinch:preempt=false");
        assert_eq!(
            variant.to_string().parse::<SchedulerKind>().unwrap(),
            variant
        );
        // Only cinch reads the profile the reference is told by.
        for bad in [
            "perfect:qssf",
            "perfect:slurm",
            "perfect:portfolio",
            "perfect:slurm-deadline",
            "perfect:x",
        ] {
            assert!(bad.parse::<SchedulerKind>().is_err(), "{bad}");
        }
        assert!(!"cinch".parse::<SchedulerKind>().unwrap().is_reference());
    }
}
