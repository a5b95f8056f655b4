//! Scheduling policies: one trait, one file each. A policy is a pure function of
//! (snapshot, now, seeded rng) returning a decision with a reason per job it has an opinion on,
//! so the service, the simulator and the tests all run the very same code.

mod free_index;
pub mod param_table;
mod placement;
mod shapes;

use serde::{Deserialize, Serialize};

pub use crate::models::apps::{app_slowdown, APP_SLOWDOWN};
pub use crate::wire::reason::Sensitivity;
pub use cinch::RESERVED_PRIORITY as CINCH_RESERVED_PRIORITY;
use placement::Cluster;
pub use placement::{Placement, PlanOutcome};
pub use portfolio::Objective as PortfolioObjective;
pub use strict::RESERVED_PRIORITY as STRICT_RESERVED_PRIORITY;

use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::{Clause, Reason, Submitted};
use crate::wire::snapshot::{PendingJob, Snapshot};

/// Pending jobs in the order Slurm considers them: priority, then submit time, then id.
fn slurm_order(pending: &[PendingJob]) -> Vec<&PendingJob> {
    slurm_order_indices(pending)
        .into_iter()
        .map(|i| &pending[i])
        .collect()
}

/// [`slurm_order`] as positions in `pending`.
fn slurm_order_indices(pending: &[PendingJob]) -> Vec<usize> {
    // Sorted as small keys, not by looking into the large jobs at every comparison; the
    // position last makes the order total, so an unstable sort is the stable one.
    let mut keys: Vec<(crate::slurm::order::OrderKey, usize)> = pending
        .iter()
        .enumerate()
        .map(|(i, j)| (j.slurm_order_key(), i))
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|k| k.1).collect()
}

/// Why cinch leaves a job's placement as the user submitted it, if it does: a node list, a
/// constraint, or a `--begin` still ahead are the user's.
fn left_as_submitted(job: &PendingJob, now: i64) -> Option<Submitted> {
    if let Some(begin) = job.begin_time.filter(|&t| t > now) {
        return Some(Submitted::Begin(begin));
    }
    if !job.required_nodes.is_empty() {
        return Some(Submitted::RequiredNodes);
    }
    if job.constraint.is_some() {
        return Some(Submitted::Constraint);
    }
    None
}

/// Pin `job` to its planned nodes (sorted), changing its node count when the plan needs to.
fn pin_decision(
    job: &PendingJob,
    placement: Placement,
    reason: impl Into<Reason>,
    ttl_s: u32,
) -> Decision {
    let mut d = Decision::explain(job.job_id, reason, ttl_s);
    pin(&mut d, job, placement);
    d
}

/// Pins `d`'s job to `placement`'s nodes (its node count changed to theirs if it differs).
fn pin(d: &mut Decision, job: &PendingJob, placement: Placement) {
    let mut nodes: Vec<String> = (placement.gpus_on.into_iter())
        .map(|(n, _)| n.to_string())
        .collect();
    nodes.sort();
    let count = nodes.len() as u32;
    d.node_count = (count != job.min_nodes).then_some(count);
    d.pin_nodes = Some(nodes);
}

pub use crate::wire::mode::Mode;

/// A placing policy's one round: multi-GPU jobs (at least `min_gpus`) in Slurm's order are
/// pinned to the placement `Cluster::place` finds when `accept` takes it, and get `otherwise`'s
/// decision when it does not (or there is none); smaller jobs take their GPUs in the plan where
/// Slurm's best fit will put them, so no pin is planned on GPUs Slurm is about to give away.
/// Jobs with a user's node list, constraint or future `--begin` are only explained.
fn pin_in_slurm_order(
    snapshot: &Snapshot,
    now: i64,
    min_gpus: u32,
    cross_rack: bool,
    ttl_s: u32,
    accept: impl Fn(&Cluster, &PendingJob, &Placement) -> bool,
    mut otherwise: impl FnMut(&Cluster, &PendingJob) -> Decision,
) -> Vec<Decision> {
    let mut cluster = Cluster::new(snapshot);
    let mut decisions = Vec::new();
    for job in slurm_order(&snapshot.pending) {
        if job.gpus < min_gpus {
            cluster.take_best_fit_node(job);
            continue;
        }
        if let Some(why) = left_as_submitted(job, now) {
            decisions.push(Decision::explain(job.job_id, Clause::Submitted(why), ttl_s));
            continue;
        }
        let saved = cluster.save();
        match cluster.place(job, now, cross_rack) {
            Ok((placement, reason)) if accept(&cluster, job, &placement) => {
                decisions.push(pin_decision(job, placement, Clause::Placed(reason), ttl_s));
            }
            _ => {
                cluster.restore(saved);
                decisions.push(otherwise(&cluster, job));
            }
        }
    }
    decisions
}

pub trait Policy {
    /// The decisions for the snapshot's jobs. Must only name jobs and nodes of the snapshot,
    /// never plan more GPUs on a node than are free, and be deterministic given `rng` and
    /// `history` (what earlier snapshots showed).
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision>;
}

/// What the registry says of a policy besides its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInfo {
    /// The name admins and `cinch sim --policies` use.
    pub name: &'static str,
    /// One of the baselines cinch is measured against, rather than cinch's own.
    pub baseline: bool,
    /// Whether it may requeue running jobs (its results then depend on who may be requeued).
    pub requeues: bool,
    /// One line for `cinch policy set --help`.
    pub summary: &'static str,
}

/// Declares every policy from one table: the module (one file, holding the policy type named
/// as its variant, with `impl Policy`, and its parameters with `Default`, serde and
/// `validate()`), and what [`PolicyInfo`] says of it. Everything that dispatches on the policy
/// (names, defaults, parsing, serialising, deciding) is generated here, so a new policy is one
/// file plus one line in [`registry!`]'s invocation below.
macro_rules! registry {
    ($(
        $variant:ident($params:ident) in $module:ident {
            name: $name:literal,
            baseline: $baseline:literal,
            requeues: $requeues:literal,
            summary: $summary:literal $(,)?
        }
    )*) => {
        $(
            mod $module;
            pub use $module::{$variant, $params};
        )*

        /// A policy and its parameters, as admins set it: `{"name": "consolidate", "params":
        /// {...}}`. Omitted parameters take their defaults; unknown names, unknown parameters
        /// and out-of-range values are refused with a message saying which.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(try_from = "RawPolicyConfig", into = "RawPolicyConfig")]
        pub enum PolicyConfig {
            $( $variant($params), )*
        }

        /// Every policy, in the registry's order: cinch's own first, then the research and
        /// Slurm baselines.
        pub const POLICIES: &[PolicyInfo] = &[
            $( PolicyInfo {
                name: $name,
                baseline: $baseline,
                requeues: $requeues,
                summary: $summary,
            }, )*
        ];

        /// The policy names admins can choose, in the registry's order.
        pub const POLICY_NAMES: &[&str] = &[ $( $name, )* ];

        /// The named policy's parameters with their defaults, ranges and docs (its
        /// [`param_table!`](crate::param_table)); `None` for an unknown name.
        pub fn param_docs(name: &str) -> Option<Vec<param_table::ParamDoc>> {
            match name {
                $( $name => Some($params::table()), )*
                _ => None,
            }
        }

        impl PolicyConfig {
            /// What the registry says of this policy.
            pub fn info(&self) -> &'static PolicyInfo {
                let name = match self {
                    $( PolicyConfig::$variant(_) => $name, )*
                };
                POLICIES
                    .iter()
                    .find(|p| p.name == name)
                    .expect("every variant is in POLICIES")
            }

            /// The named policy with default parameters.
            pub fn defaults_for(name: &str) -> Result<PolicyConfig, String> {
                match name {
                    $( $name => Ok(PolicyConfig::$variant($params::default())), )*
                    other => Err(format!(
                        "unknown policy '{other}' (known: {})",
                        POLICY_NAMES.join(", ")
                    )),
                }
            }

            pub fn decide(
                &self,
                snapshot: &Snapshot,
                now: i64,
                rng: &mut SeededRng,
                history: &History,
            ) -> Vec<Decision> {
                match self {
                    $( PolicyConfig::$variant(p) => {
                        $variant(p.clone()).decide(snapshot, now, rng, history)
                    } )*
                }
            }
        }

        impl TryFrom<RawPolicyConfig> for PolicyConfig {
            type Error = String;

            fn try_from(raw: RawPolicyConfig) -> Result<Self, String> {
                let params = raw.params.unwrap_or_else(|| serde_json::json!({}));
                match raw.name.as_str() {
                    $( $name => Ok(PolicyConfig::$variant(
                        checked(&raw.name, params, |p: &$params| p.validate())?,
                    )), )*
                    other => PolicyConfig::defaults_for(other),
                }
            }
        }

        impl From<PolicyConfig> for RawPolicyConfig {
            fn from(config: PolicyConfig) -> Self {
                let params = match &config {
                    $( PolicyConfig::$variant(p) => serde_json::to_value(p), )*
                }
                .expect("policy parameters serialise");
                RawPolicyConfig {
                    name: config.name().to_string(),
                    params: Some(params),
                }
            }
        }
    };
}

registry! {
    Cinch(CinchParams) in cinch {
        name: "cinch", baseline: false, requeues: true,
        summary: "cinch's own: predicted-service order, consolidation, preemption that pays, elastic sizes, QoS targets",
    }
    Passthrough(PassthroughParams) in passthrough {
        name: "passthrough", baseline: false, requeues: false,
        summary: "decides nothing: Slurm schedules as without cinch",
    }
    Consolidate(ConsolidateParams) in consolidate {
        name: "consolidate", baseline: false, requeues: false,
        summary: "pins multi-GPU jobs to the fewest nodes free now, inside one rack",
    }
    Dally(DallyParams) in dally {
        name: "dally", baseline: false, requeues: true,
        summary: "network-sensitive consolidation by delay scheduling (Dally)",
    }
    Strict(StrictParams) in strict {
        name: "strict", baseline: true, requeues: false,
        summary: "strict consolidation: a job starts only on its best shape, with a reservation",
    }
    Switches(SwitchesParams) in switches {
        name: "switches", baseline: true, requeues: false,
        summary: "Slurm's --switches=1@WAIT on every multi-GPU job",
    }
    Tiresias(TiresiasParams) in tiresias {
        name: "tiresias", baseline: true, requeues: true,
        summary: "discretized two-dimensional least-attained-service (Tiresias)",
    }
    Qssf(QssfParams) in qssf {
        name: "qssf", baseline: true, requeues: false,
        summary: "quasi-shortest-service-first on predicted run times (Helios)",
    }
    Edf(EdfParams) in edf {
        name: "edf", baseline: true, requeues: false,
        summary: "earliest deadline first, the QoS baseline",
    }
    EqualShare(EqualShareParams) in equal_share {
        name: "equal-share", baseline: true, requeues: true,
        summary: "elastic jobs sized to an equal share of the GPUs",
    }
    Portfolio(PortfolioParams) in portfolio {
        name: "portfolio", baseline: false, requeues: true,
        summary: "the member (cinch, the baselines, Slurm) that served the recent past best, by self-simulation",
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::Cinch(CinchParams::default())
    }
}

impl PolicyConfig {
    pub fn name(&self) -> &'static str {
        self.info().name
    }

    /// Whether this is one of the baselines cinch is measured against rather than its own.
    pub fn is_baseline(&self) -> bool {
        self.info().baseline
    }

    /// Whose stated QoS targets this policy counts (a portfolio: ask its member in force).
    pub fn stated_targets(&self) -> crate::wire::decision::StatedTargets {
        use crate::wire::decision::StatedTargets;
        match self {
            PolicyConfig::Cinch(p) if p.user_targets => StatedTargets::Everyone,
            PolicyConfig::Cinch(p) => StatedTargets::Listed {
                accounts: p.user_target_accounts.clone(),
                qos: p.user_target_qos.clone(),
            },
            PolicyConfig::Edf(_) => StatedTargets::Everyone,
            other => StatedTargets::Unused {
                policy: other.name().to_string(),
            },
        }
    }
}

/// The wire form of [`PolicyConfig`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawPolicyConfig {
    /// One of `cinch`, `passthrough`, `consolidate`, `dally`, `strict`, `switches`, `tiresias`, `qssf`, `edf`, `equal-share`, `portfolio`.
    pub name: String,
    /// The policy's parameters (docs/api.md); omitted ones take their defaults.
    #[serde(default)]
    pub params: Option<serde_json::Value>,
}

/// A policy's parameters from JSON, then checked by the policy's own rules.
fn checked<P: serde::de::DeserializeOwned>(
    name: &str,
    params: serde_json::Value,
    validate: impl Fn(&P) -> Result<(), param_table::ParamError>,
) -> Result<P, String> {
    let p: P =
        serde_json::from_value(params).map_err(|e| format!("policy '{name}' params: {e}"))?;
    validate(&p).map_err(|e| format!("policy '{name}' params: {e}"))?;
    Ok(p)
}

/// The complete policy setting: what the admin REST API reads and writes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub mode: Mode,
    #[cfg_attr(feature = "openapi", schema(value_type = RawPolicyConfig))]
    pub policy: PolicyConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/policies/parameters.md, as the policies' tables make it.
    fn parameters_md() -> String {
        let mut out = String::from(
            "# Policy parameters\n\n\
             Every policy's parameters with their defaults and ranges, as `cinch policy set \
             NAME.KEY=VALUE` and `PUT /v1/policy` take them (docs/api.md). Made from the \
             policies' own declarations (`param_table!` in each policy's file): a test fails \
             when this page differs from them, and `CINCH_WRITE_DOCS=1 cargo test -p cinch-core \
             parameters_page` writes it anew.\n",
        );
        for policy in POLICY_NAMES {
            out.push('\n');
            out.push_str(&param_table::markdown(policy, &param_docs(policy).unwrap()));
        }
        out
    }

    #[test]
    fn the_parameters_page_is_the_policies_tables() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/policies/parameters.md");
        let want = parameters_md();
        if std::env::var_os("CINCH_WRITE_DOCS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/policies/parameters.md differs from the policies' tables; \
             CINCH_WRITE_DOCS=1 cargo test -p cinch-core parameters_page writes it"
        );
        assert!(param_docs("nonesuch").is_none());
        // Every parameter a policy serialises is in its table.
        for policy in POLICY_NAMES {
            let defaults =
                serde_json::to_value(PolicyConfig::defaults_for(policy).unwrap()).unwrap();
            let keys: Vec<String> = defaults["params"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            let mut named: Vec<String> = param_docs(policy)
                .unwrap()
                .iter()
                .map(|p| p.name.to_string())
                .collect();
            named.sort();
            let mut keys = keys;
            keys.sort();
            assert_eq!(keys, named, "{policy}");
        }
    }

    fn parse(json: &str) -> Result<PolicySettings, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn the_stricter_mode_wins_and_modes_parse_in_any_case() {
        assert_eq!(Mode::Enforce.stricter(Mode::Shadow), Mode::Shadow);
        assert_eq!(Mode::Off.stricter(Mode::Enforce), Mode::Off);
        assert_eq!(Mode::Enforce.stricter(Mode::Enforce), Mode::Enforce);
        assert_eq!("ENFORCE".parse(), Ok(Mode::Enforce));
        assert_eq!("shadow".parse(), Ok(Mode::Shadow));
        assert!("on".parse::<Mode>().is_err());
    }

    #[test]
    fn every_registered_policy_round_trips_by_name_and_through_json() {
        assert_eq!(POLICY_NAMES.len(), POLICIES.len());
        for info in POLICIES {
            let config = PolicyConfig::defaults_for(info.name).unwrap();
            assert_eq!(config.info(), info);
            assert_eq!(config.name(), info.name);
            let json = serde_json::to_value(&config).unwrap();
            assert_eq!(json["name"], info.name);
            assert_eq!(
                serde_json::from_value::<PolicyConfig>(json).unwrap(),
                config
            );
            assert!(!info.summary.is_empty(), "{}", info.name);
        }
        assert_eq!(PolicyConfig::default().name(), "cinch");
        assert!(!PolicyConfig::default().is_baseline());
        assert!(PolicyConfig::defaults_for("tiresias")
            .unwrap()
            .is_baseline());
    }

    #[test]
    fn defaults_fill_in_omitted_parameters() {
        let settings = parse(r#"{"mode":"enforce","policy":{"name":"consolidate"}}"#).unwrap();
        assert_eq!(settings.mode, Mode::Enforce);
        assert_eq!(
            settings.policy,
            PolicyConfig::Consolidate(ConsolidateParams::default())
        );
        let settings = parse(r#"{"mode":"off","policy":{"name":"passthrough","params":{}}}"#);
        assert!(settings.is_ok());
    }

    #[test]
    fn round_trips_through_json() {
        let settings = PolicySettings {
            mode: Mode::Shadow,
            policy: PolicyConfig::Consolidate(ConsolidateParams {
                ttl_s: 77,
                ..ConsolidateParams::default()
            }),
        };
        let json = serde_json::to_string(&settings).unwrap();
        assert_eq!(parse(&json).unwrap(), settings);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let err = parse(r#"{"mode":"on","policy":{"name":"consolidate"}}"#).unwrap_err();
        assert!(err.contains("unknown variant `on`"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"fastest"}}"#).unwrap_err();
        assert!(err.contains("unknown policy 'fastest'"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"ttl_s":-5}}}"#)
            .unwrap_err();
        assert!(err.contains("ttl_s") || err.contains("-5"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"ttl_s":0}}}"#)
            .unwrap_err();
        assert!(err.contains("ttl_s must be"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"speed":1}}}"#)
            .unwrap_err();
        assert!(err.contains("unknown field `speed`"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"passthrough","params":{"x":1}}}"#)
            .unwrap_err();
        assert!(err.contains("unknown field `x`"), "{err}");
    }
}
