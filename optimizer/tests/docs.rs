//! The docs' claims that the code can check: which policies requeue, which count users' stated
//! targets, that every policy is named where the docs list them all, and the requeue limits'
//! defaults. A doc that drifts from the code fails here, naming the file and the claim.

use cinch_core::enact::apply::RequeueLimits;
use cinch_core::policy::{POLICIES, POLICY_NAMES};
use cinch_core::wire::decision::StatedTargets;
use cinch_core::PolicyConfig;

fn doc(path: &str) -> String {
    let full = format!("{}/../docs/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The backticked words of `text` between `start` and the next `end`, in order.
fn listed<'a>(text: &'a str, start: &str, end: &str, file: &str) -> Vec<&'a str> {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("{file} no longer says {start:?}"));
    let rest = &text[at + start.len()..];
    let stop = rest.find(end).unwrap_or(rest.len());
    rest[..stop].split('`').skip(1).step_by(2).collect()
}

fn sorted(mut names: Vec<&str>) -> Vec<&str> {
    names.sort_unstable();
    names
}

fn requeuing() -> Vec<&'static str> {
    sorted(
        POLICIES
            .iter()
            .filter(|p| p.requeues)
            .map(|p| p.name)
            .collect(),
    )
}

#[test]
fn the_docs_name_the_policies_that_requeue() {
    let operations = doc("operations.md");
    assert_eq!(
        sorted(listed(
            &operations,
            "| requeue (policies ",
            ";",
            "operations.md"
        )),
        requeuing(),
        "docs/operations.md's requeue row"
    );
    let users = doc("users.md");
    assert_eq!(
        sorted(listed(
            &users,
            "the policy in force requeues (",
            ")",
            "users.md"
        )),
        requeuing(),
        "docs/users.md's --cinch-ckpt row"
    );
}

#[test]
fn the_users_guide_names_the_policies_that_use_stated_targets() {
    let users = doc("users.md");
    let using: Vec<&str> = POLICY_NAMES
        .iter()
        .copied()
        // A portfolio counts them as its member in force does.
        .filter(|&name| name != "portfolio")
        .filter(|&name| {
            !matches!(
                PolicyConfig::defaults_for(name).unwrap().stated_targets(),
                StatedTargets::Unused { .. }
            )
        })
        .collect();
    assert_eq!(
        sorted(listed(
            &users,
            "the policy in force uses QoS targets (",
            ")",
            "users.md"
        )),
        sorted(using)
    );
}

#[test]
fn every_policy_is_named_where_the_docs_list_them_all() {
    let openapi = doc("openapi.json");
    assert_eq!(
        sorted(listed(&openapi, "One of ", "\"", "openapi.json")),
        sorted(POLICY_NAMES.to_vec()),
        "docs/openapi.json's policy names"
    );
    let architecture = doc("architecture.md");
    let paragraph = listed(
        &architecture,
        "## Policies",
        "**One registry.**",
        "architecture.md",
    );
    for name in POLICY_NAMES {
        assert!(
            paragraph.contains(name),
            "docs/architecture.md's Policies section does not name {name}"
        );
    }
    let parameters = doc("policies/parameters.md");
    for name in POLICY_NAMES {
        assert!(
            parameters.contains(&format!("`{name}`")),
            "docs/policies/parameters.md does not name {name}"
        );
    }
}

#[test]
fn the_requeue_limits_defaults_are_the_codes() {
    let operations = doc("operations.md");
    let claim = format!(
        "`MaxRequeuesPerJob` for a job ({}) or `MaxRequeuesPerHour` for the cluster ({})",
        RequeueLimits::DEFAULT_MAX_PER_JOB,
        RequeueLimits::DEFAULT_MAX_PER_HOUR
    );
    assert!(operations.contains(&claim), "docs/operations.md: {claim}");
}
