//! The portfolio's parameter search (docs/policies/portfolio.md, "Parameter search"): ONES's
//! online evolutionary search applied to cinch's own parameters, with the replayed window as the
//! fitness. Each evaluation breeds new variants of cinch from the best ones so far by changing one
//! or two of its scheduling parameters (a gene each), replays them beside the members, and keeps
//! the best few for the next evaluation (elitism); the variant that wins a window runs like any
//! member, under the same hysteresis.
//!
//! The genes are the parameters that decide whom cinch starts, waits for or requeues, each with a
//! few values spread over its declared range: a small discrete space, so a handful of variants
//! an evaluation walks it, and no value is tuned to a case (they are the range's landmarks).

use cinch_core::policy::{CinchParams, PolicyConfig, RawPolicyConfig};
use cinch_core::util::rng::SeededRng;
use serde_json::Value;

/// One gene: a cinch parameter and the values the search may give it (as JSON).
pub type Gene = (&'static str, &'static [&'static str]);

const SWITCH: &[&str] = &["true", "false"];

/// The search space: cinch's scheduling switches and the bounds of its waits and requeues.
pub const GENES: [Gene; 10] = [
    ("queue_order", SWITCH),
    ("consolidate", SWITCH),
    ("preempt", SWITCH),
    ("reserve", SWITCH),
    ("wait_always", SWITCH),
    ("start_at_release", SWITCH),
    ("max_stretch", &["0.0", "1.0", "3.0", "10.0"]),
    ("max_wait_s", &["600", "3600", "14400", "86400"]),
    ("preempt_ratio", &["1.5", "2.0", "4.0", "16.0"]),
    ("max_preemptions", &["0", "1", "3", "10"]),
];

/// A gene's values.
fn values(gene: &Gene) -> impl Iterator<Item = Value> {
    gene.1
        .iter()
        .map(|v| serde_json::from_str(v).expect("gene values are JSON"))
}

/// `parent` with one gene changed (two, half the time), each to another of its values; none if
/// `parent` is not cinch.
pub fn mutate(parent: &PolicyConfig, rng: &mut SeededRng) -> Option<PolicyConfig> {
    let PolicyConfig::Cinch(params) = parent else {
        return None;
    };
    let Value::Object(mut map) = serde_json::to_value(params).ok()? else {
        return None;
    };
    let changes = if rng.unit() < 0.5 { 1 } else { 2 };
    let mut changed: Vec<usize> = Vec::new();
    while changed.len() < changes {
        let g = rng.below(GENES.len() as u64) as usize;
        if changed.contains(&g) {
            continue;
        }
        changed.push(g);
        let gene = &GENES[g];
        let others: Vec<Value> = values(gene).filter(|v| !same(map.get(gene.0), v)).collect();
        if others.is_empty() {
            continue;
        }
        let pick = others[rng.below(others.len() as u64) as usize].clone();
        map.insert(gene.0.to_string(), pick);
    }
    // Through the parameters' one declaration: a value out of range is refused, not run.
    PolicyConfig::try_from(RawPolicyConfig {
        name: "cinch".into(),
        params: Some(Value::Object(map)),
    })
    .ok()
}

/// Whether a parameter's current value is `value` (numbers compared as numbers: 3 is 3.0).
fn same(current: Option<&Value>, value: &Value) -> bool {
    match (current, value) {
        (Some(Value::Number(a)), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Some(a), b) => a == b,
        (None, _) => false,
    }
}

/// How reports and `cinch policy show` name a variant: as `cinch sim --policies` takes it
/// (`cinch:preempt=false+max_stretch=10.0`); a policy other than cinch by its name.
pub fn name_of(config: &PolicyConfig) -> String {
    match config {
        PolicyConfig::Cinch(params) => cinch_name(params),
        other => other.name().to_string(),
    }
}

/// `cinch`, and `:key=value+...` for each parameter that differs from its default.
pub fn cinch_name(params: &CinchParams) -> String {
    let changed =
        crate::settings::changed_settings(params, &CinchParams::default(), Value::to_string);
    if changed.is_empty() {
        "cinch".to_string()
    } else {
        format!("cinch:{changed}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::SchedulerKind;
    use serde_json::json;

    #[test]
    fn every_gene_value_is_a_valid_cinch_parameter() {
        for gene in &GENES {
            for value in values(gene) {
                let raw = RawPolicyConfig {
                    name: "cinch".into(),
                    params: Some(json!({ gene.0: value })),
                };
                assert!(PolicyConfig::try_from(raw).is_ok(), "{} = {value}", gene.0);
            }
        }
    }

    #[test]
    fn a_mutant_changes_one_or_two_genes_and_names_itself() {
        let parent = PolicyConfig::Cinch(CinchParams::default());
        let mut rng = SeededRng::new(7);
        let mut changed_counts = [0usize; 3];
        for _ in 0..200 {
            let child = mutate(&parent, &mut rng).expect("cinch mutates");
            let name = name_of(&child);
            let changed = name
                .strip_prefix("cinch:")
                .expect("a variant differs")
                .split('+');
            let n = changed.count();
            assert!((1..=2).contains(&n), "{name}");
            changed_counts[n] += 1;
            // The name is the variant: parsed back, it is the same configuration.
            let parsed: SchedulerKind = name.parse().unwrap();
            assert_eq!(parsed, SchedulerKind::Policy(child), "{name}");
        }
        assert!(
            changed_counts[1] > 50 && changed_counts[2] > 50,
            "{changed_counts:?}"
        );
        let tiresias = PolicyConfig::defaults_for("tiresias").unwrap();
        assert!(mutate(&tiresias, &mut rng).is_none());
    }
}
