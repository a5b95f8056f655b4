//! The hints users write in `--comment "cinch:key=value,..."` (docs/api.md): which keys cinch
//! knows, and the warnings a user gets at `sbatch` for a hint cinch would otherwise ignore in
//! silence. Hints that cannot be honoured at all (a malformed QoS time, elastic range or sharing
//! request) are refused by their own checks instead.

pub use crate::slurm::job_hints::Hints;
pub use crate::wire::refusal::Refusal;

/// Every hint key cinch reads.
pub const KNOWN: [&str; 15] = [
    "app",
    "ckpt",
    crate::models::qos::HINT_DUE,
    crate::models::qos::HINT_TURNAROUND,
    crate::models::qos::HINT_START_WITHIN,
    crate::models::qos::HINT_ITERS,
    crate::models::qos::HINT_ITERS_DONE,
    crate::models::qos::HINT_ITER_RATE,
    crate::models::elastic::HINT_RATE_GPUS,
    crate::models::elastic::HINT_ELASTIC,
    crate::models::sharing::HINT_SHARE,
    crate::models::sharing::HINT_GPU_MEM,
    crate::models::sharing::HINT_GPU_MEM_PEAK,
    crate::models::sharing::HINT_GPU_BUSY,
    crate::models::sharing::HINT_BATCH,
];

/// One `--cinch-*` option of the SPANK plugin: its name (without `--`), the hint it sets, the
/// word describing its argument (`None`: a flag, which sets the hint to `yes`) and its usage.
pub struct CinchOption {
    pub name: &'static str,
    pub hint: &'static str,
    pub arg: Option<&'static str>,
    pub usage: &'static str,
}

/// The `--cinch-*` options sbatch, salloc and srun take when the SPANK plugin is installed
/// (docs/users.md). Each sets the hint of the same meaning.
pub const OPTIONS: [CinchOption; 9] = [
    CinchOption {
        name: "cinch-app",
        hint: "app",
        arg: Some("NAME"),
        usage: "the model the job trains (bert, cifar10, deepspeech2, imagenet, ncf, yolov3, ...)",
    },
    CinchOption {
        name: "cinch-ckpt",
        hint: "ckpt",
        arg: None,
        usage:
            "the job resumes from a checkpoint if requeued (with --requeue, cinch may requeue it)",
    },
    CinchOption {
        name: "cinch-due",
        hint: crate::models::qos::HINT_DUE,
        arg: Some("TIME"),
        usage: "QoS target: finish by this time (as for --begin: YYYY-MM-DDTHH:MM[:SS], 16:00, \
                tomorrow, now+2hours, ...; local time); counts where the site counts users' \
                targets (sbatch says when not)",
    },
    CinchOption {
        name: "cinch-turnaround",
        hint: crate::models::qos::HINT_TURNAROUND,
        arg: Some("DURATION"),
        usage: "QoS target: finish within this long of submission (e.g. 6:00:00); counts where \
                the site counts users' targets (sbatch says when not)",
    },
    CinchOption {
        name: "cinch-start-within",
        hint: crate::models::qos::HINT_START_WITHIN,
        arg: Some("DURATION"),
        usage: "QoS target: start within this long of submission (e.g. 15:00); counts where the \
                site counts users' targets (sbatch says when not)",
    },
    CinchOption {
        name: "cinch-elastic",
        hint: crate::models::elastic::HINT_ELASTIC,
        arg: Some("MIN-MAX"),
        usage:
            "the job runs on any GPU count in this range (needs --gpus=N, --requeue, --cinch-ckpt)",
    },
    CinchOption {
        name: "cinch-share",
        hint: crate::models::sharing::HINT_SHARE,
        arg: None,
        usage: "a one-GPU job may share a GPU with other small jobs, where the site has a \
                sharing partition (sbatch says whether it shares)",
    },
    CinchOption {
        name: "cinch-gpu-mem",
        hint: crate::models::sharing::HINT_GPU_MEM,
        arg: Some("SIZE"),
        usage: "the job's peak GPU memory (e.g. 12G), for sharing",
    },
    CinchOption {
        name: "cinch-batch",
        hint: crate::models::sharing::HINT_BATCH,
        arg: Some("N"),
        usage: "the job's batch size (with --cinch-app: the site's GPU memory table)",
    },
];

/// Checks an option's value as sbatch reads it; the error says what is wrong.
pub fn check_option(option: &CinchOption, value: Option<&str>) -> Result<(), String> {
    let Some(arg) = option.arg else {
        return Ok(());
    };
    let value = value.unwrap_or("").trim();
    let bad = |why: String| Err(format!("--{} {arg}: {why}", option.name));
    if value.is_empty() {
        return bad("a value is needed".into());
    }
    if value.contains([',', '=', ' ', '\t']) {
        return bad(format!("'{value}' may not contain ',', '=' or spaces"));
    }
    let checked = match option.hint {
        // The form only: whether the time is still ahead is for job_submit, on the controller's
        // clock (any present will do to read the form).
        h if h == crate::models::qos::HINT_DUE => crate::slurm::slurm_time::resolve_point(
            value,
            crate::slurm::slurm_time::Now {
                unix: 0,
                local: [2000, 1, 1, 0, 0, 0],
            },
        )
        .map(|_| ()),
        h if h == crate::models::qos::HINT_TURNAROUND
            || h == crate::models::qos::HINT_START_WITHIN =>
        {
            crate::slurm::slurm_time::parse_duration(value).map(|_| ())
        }
        h if h == crate::models::elastic::HINT_ELASTIC => {
            crate::models::elastic::parse_range(value).map(|_| ())
        }
        h if h == crate::models::sharing::HINT_GPU_MEM => {
            crate::models::sharing::parse_gib(value).map(|_| ())
        }
        h if h == crate::models::sharing::HINT_BATCH => value
            .parse::<u32>()
            .ok()
            .filter(|&b| b > 0)
            .map(|_| ())
            .ok_or_else(|| format!("'{value}' is not a positive whole number")),
        _ => Ok(()),
    };
    checked.or_else(bad)
}

/// Where Slurm passes a SPANK option to the job: `_SLURM_SPANK_OPTION_<plugin>_<option>` in the
/// job's SPANK environment, every character other than a letter or digit as `_`.
pub const SPANK_ENV_PREFIX: &str = "_SLURM_SPANK_OPTION_cinch_";

/// Applications whose behaviour cinch has measured (network sensitivity, scaling).
pub fn known_apps() -> Vec<&'static str> {
    let mut apps: Vec<&str> = crate::models::apps::APP_SLOWDOWN
        .iter()
        .map(|&(a, _)| a)
        .collect();
    apps.sort_unstable();
    apps
}

impl Hints {
    /// The hints given as `--cinch-*` options, from the job's SPANK environment (`NAME=value`
    /// entries; a flag's value is empty or `(null)`).
    pub fn from_spank_env<'a>(entries: impl IntoIterator<Item = &'a str>) -> Hints {
        let mut hints = Hints::default();
        for entry in entries {
            let Some(rest) = entry.strip_prefix(SPANK_ENV_PREFIX) else {
                continue;
            };
            let (name, value) = rest.split_once('=').unwrap_or((rest, ""));
            let Some(option) = OPTIONS.iter().find(|o| o.name.replace('-', "_") == name) else {
                continue;
            };
            let value = match option.arg {
                None => "yes".to_string(),
                Some(_) => value.to_string(),
            };
            hints.insert(option.hint.to_string(), value);
        }
        hints
    }

    /// What the user should hear about hints cinch will ignore or read differently than written.
    pub fn warnings(&self) -> Vec<String> {
        let hints = self;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::hints;

    #[test]
    fn options_are_checked_as_their_hints_and_read_back_from_slurms_spank_environment() {
        let opt = |name: &str| OPTIONS.iter().find(|o| o.name == name).unwrap();
        assert!(check_option(opt("cinch-share"), None).is_ok());
        assert!(check_option(opt("cinch-gpu-mem"), Some("12G")).is_ok());
        for due in [
            "2026-12-01T09:00",
            "tomorrow",
            "now+2hours",
            "16:00",
            "teatime",
        ] {
            assert!(check_option(opt("cinch-due"), Some(due)).is_ok(), "{due}");
        }
        assert!(check_option(opt("cinch-elastic"), Some("2-16")).is_ok());
        for (name, value, why) in [
            (
                "cinch-gpu-mem",
                "lots",
                "--cinch-gpu-mem SIZE: 'lots' is not a memory size",
            ),
            ("cinch-turnaround", "3h", "not a Slurm duration"),
            ("cinch-due", "someday", "'someday' is not a time"),
            ("cinch-elastic", "16-2", "MIN"),
            ("cinch-app", "bert,ckpt=yes", "may not contain"),
            ("cinch-batch", "0", "positive whole number"),
            ("cinch-app", "", "a value is needed"),
        ] {
            let err = check_option(opt(name), Some(value)).unwrap_err();
            assert!(err.contains(why), "{name}={value}: {err}");
        }
        let given = Hints::from_spank_env([
            "_SLURM_SPANK_OPTION_cinch_cinch_app=bert",
            "_SLURM_SPANK_OPTION_cinch_cinch_share=(null)",
            "_SLURM_SPANK_OPTION_cinch_cinch_gpu_mem=12G",
            "_SLURM_SPANK_OPTION_other_x=1",
            "PATH=/bin",
        ]);
        assert_eq!(
            given.0.into_iter().collect::<Vec<_>>(),
            vec![
                ("app".to_string(), "bert".to_string()),
                ("gpu_mem".into(), "12G".into()),
                ("share".into(), "yes".into())
            ]
        );
        let merged = hints(&[("app", "bert"), ("share", "yes")])
            .merge_into_comment(Some("team-a cinch:app=cifar10,ckpt=yes"));
        assert_eq!(merged, "team-a cinch:app=bert,ckpt=yes,share=yes");
        assert_eq!(
            hints(&[("ckpt", "yes")]).merge_into_comment(None),
            "cinch:ckpt=yes"
        );
    }

    #[test]
    fn typos_and_unknown_applications_are_named() {
        assert!(hints(&[("app", "BERT"), ("ckpt", "yes"), ("share", "yes")])
            .warnings()
            .is_empty());
        let w = hints(&[("app", "bogus"), ("ckpt", "maybe"), ("chkpt", "yes")]).warnings();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("unknown hint 'chkpt' ignored"), "{w:?}");
        assert!(w[1].contains("ckpt='maybe' is not yes or no"), "{w:?}");
        assert!(
            w[2].contains("app='bogus'") && w[2].contains("bert, cifar10"),
            "{w:?}"
        );
    }
}
