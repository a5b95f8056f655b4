//! `portfolio`: cinch chooses how to schedule by re-simulating its own cluster's recent past
//! (docs/policies/portfolio.md). Every `every_h` the optimizer replays the last `window_h` of its
//! record under each member, and the member that served that window best decides from then on,
//! if it beats the member in force by more than `margin`.
//!
//! Which member is in force is the optimizer's state, not this module's: the service's
//! evaluations (and the simulator's `portfolio`) choose it and run that member's policy. Asked
//! on its own, without a choice made, the portfolio decides as its first member.

use super::param_table::ParamError;
use super::{Policy, PolicyConfig};
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::snapshot::Snapshot;

/// What a portfolio's evaluations minimise over the replayed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// The jobs' mean time in the system.
    #[default]
    Mean,
    /// The 99th percentile of the jobs' time in the system.
    P99,
    /// The share of the jobs whose stated finish (`due`, `turnaround`) falls in the window that
    /// missed it; the mean time in the system on a window without such jobs.
    Qos,
}

impl Objective {
    /// As admins write it.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Mean => "mean",
            Objective::P99 => "p99",
            Objective::Qos => "qos",
        }
    }
}

impl<'de> serde::Deserialize<'de> for Objective {
    /// By name, with an error that says which parameter and what it takes (serde's own names
    /// neither).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "mean" => Ok(Objective::Mean),
            "p99" => Ok(Objective::P99),
            "qos" => Ok(Objective::Qos),
            other => Err(serde::de::Error::custom(format!(
                "objective must be mean, p99 or qos, not '{other}'"
            ))),
        }
    }
}

/// The members a portfolio has unless told: cinch's own, the baselines, and Slurm alone.
pub const DEFAULT_MEMBERS: [&str; 5] = ["cinch", "tiresias", "qssf", "strict", "slurm"];

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    pub struct PortfolioParams {
        /// The members, by policy name, each with its defaults (`slurm`: Slurm alone, as
        /// `passthrough`); the first decides until an evaluation chooses. One member pins it.
        members: Vec<String> = DEFAULT_MEMBERS.iter().map(|m| m.to_string()).collect();
        /// Hours between two evaluations.
        every_h: f64 = 6.0, range(0.25, 168);
        /// Hours of the recent past each evaluation replays (the record must keep as many:
        /// the service's `record_hours`).
        window_h: f64 = 24.0, range(1, 744);
        /// Replays per member, each with its own draw of the runs not yet ended.
        draws: u32 = 2, range(1, 20);
        /// Hours each replay runs on past the window's end, with no new arrivals, so that the
        /// work a member put off counts against it: each of the window's jobs counts its time
        /// in the system up to its finish or the end of this drain. 0: up to the window's end,
        /// where a member that leaves long jobs waiting loses nothing for it.
        drain_h: f64 = 0.0, range(0, 744);
        /// Hours at the window's end whose arrivals are load, not score: only the jobs there
        /// before them are scored, each followed to its finish or the window's end under the
        /// load that came after, so a member that starves jobs while new ones keep coming pays
        /// for it. 0: every job of the window is scored. Less than `window_h`.
        follow_h: f64 = 0.0, range(0, 744);
        /// The winner replaces the member in force only if its mean time in the system over the
        /// window is lower by more than this share of the member's.
        margin: f64 = 0.05, range(0, 1);
        /// The winner must also beat the member in force by more than the replays' own error:
        /// the largest gap between the replay of the member in force and what the record shows
        /// happened, over the last windows that member ran throughout (as many as `window_h`
        /// holds evaluations). Off: on the stress grid's half it was judged on, it lost
        /// (docs/policies/portfolio.md).
        error_margin: bool = false;
        /// Fewer jobs in the window than this and an evaluation changes nothing.
        min_jobs: u32 = 20, range(1, 1_000_000);
        /// What an evaluation minimises: `mean` (the jobs' mean time in the system over the
        /// window), `p99` (its 99th percentile) or `qos` (the share of the window's stated
        /// finish targets missed; the mean on a window without any).
        objective: Objective = Objective::Mean;
        /// A guard: a candidate whose p99 time in the system is more than this share above the
        /// in-force member's is not chosen (0: no guard).
        max_p99_rise: f64 = 0.0, range(0, 100);
        /// A guard: a candidate whose fairness (Jain's index over the users' mean times in the
        /// system, 1 when every user's jobs fare alike) is below this is not chosen (0: no
        /// guard).
        min_fairness: f64 = 0.0, range(0, 1);
        /// A guard: a candidate that misses more of the window's stated finish targets than the
        /// in-force member by more than this share of them is not chosen (0: no guard).
        max_qos_miss_rise: f64 = 0.0, range(0, 1);
        /// New variants of cinch each evaluation breeds and replays beside the members (ONES's
        /// evolutionary search over its parameters, the window as fitness); as many of the best
        /// are kept for the next. 0: no search.
        search: u32 = 0, range(0, 20);
    }
}

impl PortfolioParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()?;
        if self.error_margin && self.drain_h > 0.0 {
            // The replays' error is measured against what the record shows within the window;
            // a drained replay counts time past it.
            return Err(ParamError::Invalid {
                name: "error_margin",
                why: "cannot be measured with drain_h above 0 (a drained replay counts time \
                      past the window, the record does not)"
                    .into(),
            });
        }
        if self.follow_h > 0.0 && self.follow_h >= self.window_h {
            return Err(ParamError::Invalid {
                name: "follow_h",
                why: format!(
                    "must be less than window_h ({}): the window's first hours are the ones scored",
                    self.window_h
                ),
            });
        }
        if self.error_margin && self.follow_h > 0.0 {
            // The replays' error is measured against every job the record shows in the window.
            return Err(ParamError::Invalid {
                name: "error_margin",
                why: "cannot be measured with follow_h above 0 (the replays score only the \
                      window's first jobs, the record's measure all)"
                    .into(),
            });
        }
        self.member_configs().map(|_| ())
    }

    /// The members' policies, each with its defaults, in order.
    pub fn member_configs(&self) -> Result<Vec<PolicyConfig>, ParamError> {
        let invalid = |why: String| ParamError::Invalid {
            name: "members",
            why,
        };
        if self.members.is_empty() {
            return Err(invalid("a portfolio needs at least one member".into()));
        }
        let mut configs = Vec::with_capacity(self.members.len());
        for (k, name) in self.members.iter().enumerate() {
            if self.members[..k].contains(name) {
                return Err(invalid(format!("'{name}' is listed twice")));
            }
            let policy = member_policy(name);
            if policy == "portfolio" {
                return Err(invalid(
                    "a portfolio cannot be a member of a portfolio".into(),
                ));
            }
            configs.push(
                PolicyConfig::defaults_for(policy)
                    .map_err(|_| invalid(format!("unknown policy '{name}'")))?,
            );
        }
        Ok(configs)
    }
}

/// The policy a member name runs: `slurm` is Slurm alone, cinch's `passthrough`.
fn member_policy(name: &str) -> &str {
    if name == "slurm" {
        "passthrough"
    } else {
        name
    }
}

pub struct Portfolio(pub PortfolioParams);

impl Policy for Portfolio {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        match self.0.member_configs() {
            Ok(members) => members[0].decide(snapshot, now, rng, history),
            // Parameters are validated before they are stored; never reached.
            Err(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_known_policies_listed_once_and_never_a_portfolio() {
        let p = PortfolioParams::default();
        let names: Vec<&str> = p
            .member_configs()
            .unwrap()
            .iter()
            .map(|c| c.name())
            .collect();
        assert_eq!(
            names,
            ["cinch", "tiresias", "qssf", "strict", "passthrough"]
        );
        for (members, says) in [
            (vec![], "at least one member"),
            (vec!["cinch", "cinch"], "'cinch' is listed twice"),
            (vec!["portfolio"], "cannot be a member"),
            (vec!["fastest"], "unknown policy 'fastest'"),
        ] {
            let p = PortfolioParams {
                members: members.iter().map(|m| m.to_string()).collect(),
                ..PortfolioParams::default()
            };
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains(says), "{members:?}: {err}");
        }
        let p = PortfolioParams {
            every_h: 0.1,
            ..PortfolioParams::default()
        };
        assert!(p.validate().unwrap_err().to_string().contains("every_h"));
        // The replays' error is measured within the window, on every job: neither a drain nor
        // following goes with it.
        for (other, p) in [
            (
                "drain_h",
                PortfolioParams {
                    drain_h: 24.0,
                    error_margin: true,
                    ..PortfolioParams::default()
                },
            ),
            (
                "follow_h",
                PortfolioParams {
                    follow_h: 12.0,
                    error_margin: true,
                    ..PortfolioParams::default()
                },
            ),
        ] {
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains("error_margin") && err.contains(other), "{err}");
        }
        let p = PortfolioParams {
            drain_h: 24.0,
            ..PortfolioParams::default()
        };
        assert!(p.validate().is_ok());
        // Following jobs needs hours of the window left to score them in.
        for (follow_h, window_h, ok) in
            [(12.0, 24.0, true), (24.0, 24.0, false), (30.0, 24.0, false)]
        {
            let p = PortfolioParams {
                follow_h,
                window_h,
                ..PortfolioParams::default()
            };
            match p.validate() {
                Ok(()) => assert!(ok, "follow_h {follow_h} accepted"),
                Err(e) => assert!(!ok && e.to_string().contains("follow_h"), "{e}"),
            }
        }
    }
}
