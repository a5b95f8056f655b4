//! The hints users write in `--comment "cinch:key=value,..."` (docs/api.md): which keys cinch
//! knows, and the warnings a user gets at `sbatch` for a hint cinch would otherwise ignore in
//! silence. Hints that cannot be honoured at all (a malformed QoS time, elastic range or sharing
//! request) are refused by their own checks instead.

use std::collections::BTreeMap;

/// Every hint key cinch reads.
pub const KNOWN: [&str; 14] = [
    "app",
    "ckpt",
    crate::qos::HINT_DUE,
    crate::qos::HINT_TURNAROUND,
    crate::qos::HINT_START_WITHIN,
    crate::qos::HINT_ITERS,
    crate::qos::HINT_ITERS_DONE,
    crate::qos::HINT_ITER_RATE,
    crate::elastic::HINT_RATE_GPUS,
    crate::elastic::HINT_ELASTIC,
    crate::sharing::HINT_SHARE,
    crate::sharing::HINT_GPU_MEM,
    crate::sharing::HINT_GPU_MEM_PEAK,
    crate::sharing::HINT_BATCH,
];

/// Applications whose behaviour cinch has measured (network sensitivity, scaling).
pub fn known_apps() -> Vec<&'static str> {
    let mut apps: Vec<&str> = crate::policy::APP_SLOWDOWN
        .iter()
        .map(|&(a, _)| a)
        .collect();
    apps.sort_unstable();
    apps
}

/// What the user should hear about hints cinch will ignore or read differently than written.
pub fn warnings(hints: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for key in hints.keys() {
        if !KNOWN.contains(&key.as_str()) {
            out.push(format!(
                "unknown hint '{key}' ignored (cinch reads: {})",
                KNOWN.join(", ")
            ));
        }
    }
    if let Some(ckpt) = hints.get("ckpt") {
        if !matches!(ckpt.to_ascii_lowercase().as_str(), "yes" | "no") {
            out.push(format!(
                "ckpt='{ckpt}' is not yes or no: taken as no (the job is never requeued by cinch)"
            ));
        }
    }
    if let Some(app) = hints.get("app") {
        let apps = known_apps();
        if !apps.contains(&app.to_ascii_lowercase().as_str()) {
            out.push(format!(
                "app='{app}' is not an application cinch has measured ({}); cinch learns how \
                 such jobs run from their history instead",
                apps.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn typos_and_unknown_applications_are_named() {
        assert!(warnings(&hints(&[
            ("app", "BERT"),
            ("ckpt", "yes"),
            ("share", "yes")
        ]))
        .is_empty());
        let w = warnings(&hints(&[
            ("app", "bogus"),
            ("ckpt", "maybe"),
            ("chkpt", "yes"),
        ]));
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("unknown hint 'chkpt' ignored"), "{w:?}");
        assert!(w[1].contains("ckpt='maybe' is not yes or no"), "{w:?}");
        assert!(
            w[2].contains("app='bogus'") && w[2].contains("bert, cifar10"),
            "{w:?}"
        );
    }
}
