//! What `job_submit` decides about one submission, as a pure function of what the request says,
//! cinch.conf, the sharing view and the time: the edit to make, or the refusal to give. The
//! export only reads the descriptor into a [`Submission`] and writes the [`Edit`] back, so every
//! rule here is unit-tested without Slurm.

use std::os::raw::c_int;

use cinch_core::models::hints::{Hints, Refusal};
use cinch_core::models::sharing::Verdict;
use cinch_core::slurm::slurm_time::Now;
use cinch_core::wire::decision::StatedTargets;

use crate::agent::owned::HOLD_KEY;
use crate::config::{Config, Mode};
use crate::record::{merge_admin_comment, JobRequest};
use crate::share::{ShareAsk, SubmitShare};
use crate::submit_hold;

/// What `job_submit` reads of a request.
#[derive(Debug, Clone)]
pub struct Submission {
    pub request: JobRequest,
    /// `--comment`, where hints are written.
    pub comment: Option<String>,
    /// The SPANK plugin's `--cinch-*` options, as `SPANK_CINCH_*=value` entries.
    pub spank_env: Vec<String>,
    pub admin_comment: Option<String>,
    /// The user's `--begin` (0: none).
    pub begin_time: i64,
    /// `--nodelist`, if given.
    pub req_nodes: Option<String>,
    /// A batch job (`sbatch`, with a script and an environment).
    pub batch: bool,
}

/// The moment of the submission, and whether the agent is live and enforcing.
#[derive(Debug, Clone, Copy)]
pub struct When<'a> {
    pub now_ms: i64,
    /// The same moment as the controller's local wall clock (for `due=` in words).
    pub local: Now,
    /// Until when the agent is known to be live and enforcing (Unix ms).
    pub enforcing_until_ms: i64,
    /// Whose stated QoS targets the optimizer's policy counts, as its latest answer said
    /// (`None`: not known yet).
    pub stated_targets: Option<&'a StatedTargets>,
}

/// Where a job that shares goes instead of the GPU it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRequest {
    pub partition: String,
    /// Replaces tres_per_node; tres_per_job and tres_per_task are cleared.
    pub tres_per_node: String,
    /// Replaces req_nodes.
    pub node: String,
    /// Set in the batch job's environment (MPS mode: the memory cap, and the SM share cinch's
    /// task prolog gives it).
    pub env: Vec<(String, String)>,
}

/// The MPS client's memory limit, per device the job sees (its one GPU is device 0).
pub const MPS_MEM_LIMIT_VAR: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
/// The GPU memory cap, MiB, that cinch's SPANK plugin asks the driver to enforce on a shared
/// job's cgroup (`cinch_core::models::sharing::DRIVER_CAP_VAR`).
pub use cinch_core::models::sharing::DRIVER_CAP_VAR;
/// The SM share cinch's task prolog (slurm-conf/cinch-task-prolog) sets in place of the one
/// Slurm derives from the job's MPS units.
pub const MPS_THREADS_VAR: &str = "CINCH_MPS_THREAD_PERCENTAGE";

/// The changes to the job's descriptor, written together or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// cinch's record of the request (also logged).
    pub record: String,
    /// The job's AdminComment with the record in it.
    pub admin_comment: String,
    /// The submit-time hold, as a BeginTime.
    pub begin_time: Option<i64>,
    /// The comment with the `--cinch-*` options merged in.
    pub comment: Option<String>,
    pub shards: Option<ShardRequest>,
    /// What sbatch prints to the user.
    pub told: Vec<String>,
}

/// A submission cinch refuses: Slurm's error code for the cause, and what the user is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: c_int,
    pub user_message: String,
}

/// How a QoS target is written, for refusals.
const DUE_EXAMPLE: &str = "due= as for --begin (2026-12-01T09:00, 16:00, tomorrow, now+2hours), \
     turnaround= and start_within= as Slurm durations such as 2:00:00";

/// The Slurm error code that names a refusal's cause; sbatch prints its text after cinch's
/// message ("Batch job submission failed: ...").
fn refusal_code(refusal: &Refusal) -> c_int {
    use cinch_slurm_ffi::slurm_err_t;
    match refusal {
        Refusal::Time(_) => slurm_err_t::ESLURM_INVALID_TIME_VALUE as c_int,
        Refusal::GpuRequest(_) => slurm_err_t::ESLURM_INVALID_GRES as c_int,
        Refusal::Hint(_) => cinch_slurm_ffi::SLURM_ERROR as c_int,
    }
}

/// Why an `elastic=` hint cannot be honoured for this request, if it cannot.
fn check_elastic(value: &str, hints: &Hints, request: &JobRequest) -> Result<(), Refusal> {
    let gpu_request = |m: String| Refusal::GpuRequest(format!("cinch hint elastic: {m}"));
    let hint = |m: String| Refusal::Hint(format!("cinch hint elastic: {m}"));
    let range = cinch_core::models::elastic::parse_range(value).map_err(hint)?;
    let gpus = request
        .gpus
        .as_ref()
        .map_err(|e| gpu_request(e.to_string()))?;
    let Some(per_job) = gpus.per_job.as_ref().filter(|_| {
        gpus.per_node.is_none() && gpus.per_task.is_none() && gpus.per_socket.is_none()
    }) else {
        return Err(gpu_request(
            "an elastic job asks for its GPUs in total (--gpus=N), not per node or task".into(),
        ));
    };
    if per_job.types.len() > 1 {
        return Err(gpu_request("an elastic job asks for one GPU type".into()));
    }
    if !range.contains(per_job.count.min(u64::from(u32::MAX)) as u32) {
        return Err(gpu_request(format!(
            "--gpus={} is outside the declared range {}-{}",
            per_job.count, range.min, range.max
        )));
    }
    if !hints.checkpoints() {
        return Err(hint(
            "an elastic job must say it resumes from a checkpoint (ckpt=yes)".into(),
        ));
    }
    if request.requeue != Some(true) {
        return Err(hint(
            "an elastic job must be submitted with --requeue".into(),
        ));
    }
    Ok(())
}

/// Whether and where an opted-in job of one GPU shares, with the line its user is shown; `None`
/// when cinch does not decide (not enforcing, no sharing partition, or no fresh view of the
/// cluster): the job keeps its GPU request.
fn share_decision(
    config: &Config,
    submission: &Submission,
    hints: &Hints,
    when: When,
    share_view: impl FnOnce(&ShareAsk) -> Option<SubmitShare>,
) -> Option<(SubmitShare, String)> {
    config.share_partition.as_ref()?;
    let live = when.enforcing_until_ms > when.now_ms;
    if config.mode != Mode::Enforce || !live {
        return None;
    }
    let keep = |why: &str| SubmitShare {
        verdict: Verdict::Whole(why.into()),
        prediction: None,
        busy: None,
        mem_cap_gib: None,
        driver_cap_mib: None,
    };
    let request = &submission.request;
    let typed = request.gpus.as_ref().is_ok_and(|g| !g.types().is_empty());
    let share = if typed {
        keep("a GPU type was asked for; shared GPUs have none")
    } else if submission.req_nodes.is_some() {
        keep("the job names its nodes (--nodelist)")
    } else {
        share_view(&ShareAsk {
            user_id: request.user_id.unwrap_or(u32::MAX),
            name: request.name.as_deref(),
            partitions: request.partition.as_deref(),
            time_limit_min: request.time_limit_min,
            hints,
            batch: submission.batch,
        })?
    };
    let message = match &share.verdict {
        Verdict::Share { why, .. } => format!("cinch: this job shares a GPU: {why}"),
        Verdict::Whole(why) => format!("cinch: this job keeps a whole GPU: {why}"),
    };
    Some((share, message))
}

/// Why an opted-in job keeps a whole GPU when [`share_decision`] did not decide (`None`: it
/// did): the user asked to share, and is told why it will not.
fn why_not_shared(config: &Config) -> String {
    let why = if config.share_partition.is_none() {
        "this cluster has no GPU-sharing partition (admin: SharePartition in cinch.conf)"
    } else if config.mode != Mode::Enforce {
        "cinch only watches here (Mode=shadow in cinch.conf) and places no job on a shared GPU"
    } else {
        "cinch has no fresh view of the cluster now (its optimizer is away or it has just \
         started), and shares a GPU only on one"
    };
    format!("cinch: share=yes does not count now: this job keeps a whole GPU: {why}")
}

/// The lines that tell a user which of their `--cinch-*` requests will not count here, and
/// why, each one they can act on: the admin keeps cinch off the job, the policy in force does
/// not count their stated targets, or they did not opt in to what a hint needs.
fn not_counted(
    request: &JobRequest,
    hints: &Hints,
    config: &Config,
    when: When,
    kept_off: Option<&str>,
) -> Vec<String> {
    use cinch_core::models::qos::{HINT_DUE, HINT_START_WITHIN, HINT_TURNAROUND};
    if hints.is_empty() {
        return Vec::new();
    }
    if let Some(why) = kept_off {
        return vec![format!(
            "cinch: your cinch hints do not count: the admin keeps cinch off {why}"
        )];
    }
    let mut lines = Vec::new();
    let targets: Vec<String> = [HINT_DUE, HINT_TURNAROUND, HINT_START_WITHIN]
        .iter()
        .filter_map(|k| hints.get(k).map(|v| format!("{k}={v}")))
        .collect();
    if let (false, Some(counted)) = (targets.is_empty(), when.stated_targets) {
        if let Err(why) = counted.counted_for(request.account.as_deref(), request.qos.as_deref()) {
            let deadline = match counted {
                StatedTargets::Listed { .. } => "; Slurm's --deadline does",
                _ => "",
            };
            lines.push(format!(
                "cinch: {} does not count here: {why}{deadline}",
                targets.join(", ")
            ));
        }
    }
    if hints.checkpoints() {
        if request.requeue != Some(true) {
            lines.push(
                "cinch: ckpt=yes does not count without --requeue: cinch requeues only jobs \
                 submitted with --requeue that checkpoint"
                    .to_string(),
            );
        } else if config.max_requeues_per_job == 0 {
            lines.push(
                "cinch: ckpt=yes does not count here: this site turns cinch's requeues off \
                 (admin: MaxRequeuesPerJob=0)"
                    .to_string(),
            );
        }
    }
    lines
}

/// Everything `job_submit` decides for a submission while cinch is not off: the edit (record,
/// merged hints, submit hold, sharing) or the refusal, with `config.user_guide` named in every
/// refusal. `share_view` answers for an opted-in one-GPU job from the agent's view of the
/// cluster (`None`: no fresh view).
pub fn decide(
    submission: &Submission,
    config: &Config,
    when: When,
    share_view: impl FnOnce(&ShareAsk) -> Option<SubmitShare>,
) -> Result<Edit, Refused> {
    let request = &submission.request;
    // `--cinch-*` options (the SPANK plugin) are hints too: they go into the job's comment,
    // where the agent and users see every hint, replacing a comment hint of the same name.
    let mut option_hints = Hints::from_spank_env(submission.spank_env.iter().map(String::as_str));
    let comment = submission.comment.as_deref();
    let guide = &config.user_guide;
    let refuse = |refusal: Refusal, example: &str| Refused {
        code: refusal_code(&refusal),
        user_message: format!("{refusal} (see {guide}: {example})"),
    };
    // A due time in words (`tomorrow`, `now+2hours`, `16:00`) means what it means now: the job
    // keeps the time it stood for at submission, and its user is told. One that has passed
    // cannot be met.
    let mut told: Vec<String> = Vec::new();
    // The comment's hints with the options' over them, as the merged comment will read.
    let mut hints = Hints::from_comment(comment);
    hints.extend(option_hints.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(due) = hints.get(cinch_core::models::qos::HINT_DUE).cloned() {
        match crate::local_time::resolve_due(&due, when.local) {
            Ok((_, Some(fixed))) => {
                told.push(format!("cinch: due={due} is kept as due={fixed}"));
                option_hints.insert(cinch_core::models::qos::HINT_DUE.to_string(), fixed.clone());
                hints.insert(cinch_core::models::qos::HINT_DUE.to_string(), fixed);
            }
            Ok((_, None)) => {}
            Err(problem) => {
                return Err(refuse(
                    Refusal::Time(format!("cinch hint due: {problem}")),
                    DUE_EXAMPLE,
                ))
            }
        }
    }
    let new_comment = (!option_hints.is_empty()).then(|| option_hints.merge_into_comment(comment));
    // A malformed QoS target or profile is the user's to fix, told now rather than ignored.
    if let Err(problem) = cinch_core::models::qos::check_hints(&hints) {
        return Err(refuse(Refusal::Time(problem), DUE_EXAMPLE));
    }
    // An elastic range must parse, name a total GPU request within it, and come with the
    // checkpoint and requeue consent every resize needs.
    if let Some(value) = hints.get(cinch_core::models::elastic::HINT_ELASTIC) {
        check_elastic(value, &hints, request).map_err(|refusal| {
            refuse(
                refusal,
                "sbatch --gpus=N --requeue --comment cinch:elastic=MIN-MAX,ckpt=yes",
            )
        })?;
    }
    let gpus = request
        .gpus
        .as_ref()
        .ok()
        .and_then(|g| g.total(request.min_nodes, request.num_tasks))
        .unwrap_or(0);
    // GPU sharing: the hints must fit the request, and whole GPUs stay off the sharing
    // partition (Slurm 22.05 does not keep them off GPUs whose shards are in use).
    let one_gpu = gpus == 1 && request.min_nodes.unwrap_or(1) <= 1;
    let share_opt_in =
        cinch_core::models::sharing::check_hints(&hints, one_gpu).map_err(|refusal| {
            refuse(
                refusal,
                "sbatch --gpus=1 --comment cinch:share=yes,gpu_mem=10G",
            )
        })?;
    if let Some(part) = config.share_partition.as_deref() {
        let in_share_partition = request
            .partition
            .as_deref()
            .is_some_and(|p| p.split(',').any(|q| q == part));
        if in_share_partition && gpus > 0 {
            let instead = if share_opt_in {
                ", where cinch itself places jobs that may share: submit with share=yes to your \
                 usual partition"
            } else {
                ": ask for shards there (--gres=shard:K), or let cinch share a one-GPU job \
                 (--gpus=1 --comment cinch:share=yes,gpu_mem=10G)"
            };
            return Err(Refused {
                code: refusal_code(&Refusal::GpuRequest(String::new())),
                user_message: format!("partition {part} holds shared GPUs{instead}"),
            });
        }
    }
    // The admin keeps cinch off the job by its partition or QOS (one kept off by the QOS its
    // account gives it, not known here for jobs that name none, is released by the next round).
    let kept_off = config.hands_off(gpus, request.partition.as_deref(), request.qos.as_deref());
    let sharing = if share_opt_in && kept_off.is_none() {
        share_decision(config, submission, &hints, when, share_view)
    } else {
        None
    };
    // What sbatch prints to the user: how a due time in words was read, the sharing decision,
    // what will not count and why, and warnings about hints cinch would otherwise ignore.
    told.extend(sharing.iter().map(|(_, m)| m.clone()));
    if share_opt_in && sharing.is_none() && kept_off.is_none() {
        told.push(why_not_shared(config));
    }
    told.extend(not_counted(
        request,
        &hints,
        config,
        when,
        kept_off.as_deref(),
    ));
    told.extend(
        hints
            .warnings()
            .into_iter()
            .map(|w| format!("cinch: warning: {w}")),
    );
    // Hold a new multi-GPU job for one agent round, so it can be placed before Slurm starts it
    // elsewhere — only while the agent is live and enforcing, and never over a user's own
    // --begin. The hold is a BeginTime: it lapses by itself if cinch goes away. Not for a job
    // the admin keeps cinch off.
    let kept_off = kept_off.is_some();
    let hold_until = submit_hold::hold_until(
        config,
        gpus,
        submission.begin_time,
        when.now_ms,
        when.enforcing_until_ms,
    )
    .filter(|_| !kept_off);
    let mut record = request.record();
    if let Some(t) = hold_until {
        record.push_str(&format!(
            " {HOLD_KEY}{}",
            cinch_core::slurm::slurm_time::format_time(t)
        ));
    }
    if let Some((share, _)) = &sharing {
        record.push_str(&crate::share::record_words(share));
    }
    let shards = sharing.and_then(|(share, _)| match share.verdict {
        Verdict::Share { node, shards, .. } => Some(ShardRequest {
            partition: config.share_partition.clone().unwrap_or_default(),
            tres_per_node: format!(
                "{}{}:{shards}",
                cinch_slurm_ffi::GRES_TRES_PREFIX,
                crate::share::unit_name(config)
            ),
            node,
            env: share
                .mem_cap_gib
                .map(|cap| {
                    [
                        (
                            MPS_MEM_LIMIT_VAR.to_string(),
                            format!("0={}M", (cap * 1024.0).floor() as u64),
                        ),
                        (
                            MPS_THREADS_VAR.to_string(),
                            config.share_mps_thread_percent.to_string(),
                        ),
                    ]
                })
                .into_iter()
                .flatten()
                .chain(
                    share
                        .driver_cap_mib
                        .map(|mib| (DRIVER_CAP_VAR.to_string(), mib.to_string())),
                )
                .collect(),
        }),
        Verdict::Whole(_) => None,
    });
    Ok(Edit {
        admin_comment: merge_admin_comment(submission.admin_comment.as_deref(), &record),
        record,
        begin_time: hold_until,
        comment: new_comment,
        shards,
        told,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::models::sharing::{Prediction, Source};
    use cinch_core::slurm::gres::GpuRequest;

    const NOW_MS: i64 = 1_795_600_000_000;

    fn config(text: &str) -> Config {
        let (config, problems) = crate::config::parse(text);
        assert!(problems.is_empty(), "{problems:?}");
        config
    }

    fn when(enforcing: bool) -> When<'static> {
        When {
            now_ms: NOW_MS,
            local: Now {
                unix: NOW_MS / 1000,
                local: [2026, 11, 25, 12, 0, 0],
            },
            enforcing_until_ms: if enforcing { NOW_MS + 10_000 } else { 0 },
            stated_targets: None,
        }
    }

    /// A request as sbatch sends it: `gpus` as tres_per_job (`gres/gpu:N`), no --begin.
    fn submission(gpus: Option<&str>, comment: Option<&str>) -> Submission {
        Submission {
            request: JobRequest {
                name: Some("train".into()),
                user_id: Some(1000),
                partition: None,
                account: None,
                qos: None,
                min_nodes: None,
                max_nodes: None,
                num_tasks: None,
                time_limit_min: Some(60),
                gpus: GpuRequest::parse(gpus, None, None, None),
                requeue: None,
            },
            comment: comment.map(str::to_string),
            spank_env: Vec::new(),
            admin_comment: None,
            begin_time: 0,
            req_nodes: None,
            batch: true,
        }
    }

    fn no_view(_: &ShareAsk) -> Option<SubmitShare> {
        None
    }

    fn decide_now(s: &Submission, c: &Config) -> Result<Edit, Refused> {
        decide(s, c, when(true), no_view)
    }

    #[test]
    fn a_plain_job_gets_its_record_and_nothing_else() {
        let c = config("Mode=enforce\n");
        let edit = decide_now(&submission(Some("gres/gpu:1"), None), &c).unwrap();
        assert!(edit.record.starts_with("cinch: gpus=1"), "{}", edit.record);
        assert_eq!(edit.admin_comment, edit.record);
        assert_eq!(edit.begin_time, None, "one GPU: no submit hold");
        assert_eq!(edit.comment, None);
        assert_eq!(edit.shards, None);
        assert!(edit.told.is_empty(), "{:?}", edit.told);
        // An admin's own AdminComment stays beside the record.
        let mut s = submission(Some("gres/gpu:1"), None);
        s.admin_comment = Some("site note".into());
        let edit = decide_now(&s, &c).unwrap();
        assert_eq!(
            edit.admin_comment,
            format!("site note | {}", edit.record),
            "{edit:?}"
        );
    }

    #[test]
    fn a_multi_gpu_job_is_held_one_round_only_while_the_agent_enforces_and_not_over_begin() {
        let c = config("Mode=enforce\nSubmitHoldSeconds=5\n");
        let s = submission(Some("gres/gpu:8"), None);
        let edit = decide(&s, &c, when(true), no_view).unwrap();
        assert_eq!(edit.begin_time, Some(NOW_MS / 1000 + 5));
        assert!(edit.record.contains(&format!(
            " {HOLD_KEY}{}",
            cinch_core::slurm::slurm_time::format_time(NOW_MS / 1000 + 5)
        )));
        // The agent is not live: no hold, since nothing would place the job.
        assert_eq!(
            decide(&s, &c, when(false), no_view).unwrap().begin_time,
            None
        );
        // The user's own --begin wins.
        let mut begins = s.clone();
        begins.begin_time = NOW_MS / 1000 + 3600;
        assert_eq!(decide_now(&begins, &c).unwrap().begin_time, None);
        // Shadow mode changes nothing about when a job may start.
        assert_eq!(
            decide_now(&s, &config("Mode=shadow\n")).unwrap().begin_time,
            None
        );
        // Nor does cinch hold a job the admin keeps it off by partition.
        let c = config("Mode=enforce\nExcludePartitions=debug\n");
        let mut debug = s.clone();
        debug.request.partition = Some("debug".into());
        assert_eq!(decide_now(&debug, &c).unwrap().begin_time, None);
    }

    #[test]
    fn cinch_options_are_merged_into_the_comment_and_a_due_time_in_words_is_kept_as_a_time() {
        let c = config("Mode=enforce\n");
        let mut s = submission(Some("gres/gpu:1"), Some("my run cinch:app=bert"));
        s.spank_env = vec![
            format!(
                "{}cinch_due=tomorrow",
                cinch_core::models::hints::SPANK_ENV_PREFIX
            ),
            "OTHER=1".into(),
        ];
        let edit = decide_now(&s, &c).unwrap();
        let comment = edit.comment.unwrap();
        assert!(comment.contains("app=bert"), "{comment}");
        assert!(comment.contains("due=2026-11-26T00:00:00"), "{comment}");
        assert_eq!(
            edit.told,
            ["cinch: due=tomorrow is kept as due=2026-11-26T00:00:00"]
        );
    }

    #[test]
    fn targets_that_cannot_be_met_or_read_are_refused_with_a_time_error() {
        let c = config("Mode=enforce\nUserGuide=https://hpc.example.org/cinch\n");
        let time_error = cinch_slurm_ffi::slurm_err_t::ESLURM_INVALID_TIME_VALUE as c_int;
        for comment in [
            "cinch:due=2020-01-01T00:00",
            "cinch:due=someday",
            "cinch:turnaround=fast",
        ] {
            let refused =
                decide_now(&submission(Some("gres/gpu:1"), Some(comment)), &c).expect_err(comment);
            assert_eq!(refused.code, time_error, "{comment}");
            assert!(
                refused
                    .user_message
                    .contains("(see https://hpc.example.org/cinch: due= as for --begin"),
                "{comment}: {}",
                refused.user_message
            );
        }
    }

    #[test]
    fn an_elastic_job_needs_a_total_gpu_request_in_range_a_checkpoint_and_requeue() {
        let c = config("Mode=enforce\n");
        let elastic = |gpus: &str, comment: &str, requeue: Option<bool>| {
            let mut s = submission(Some(gpus), Some(comment));
            s.request.requeue = requeue;
            decide_now(&s, &c)
        };
        let ok = elastic("gres/gpu:8", "cinch:elastic=2-16,ckpt=yes", Some(true));
        assert!(ok.is_ok(), "{ok:?}");
        let gres = cinch_slurm_ffi::slurm_err_t::ESLURM_INVALID_GRES as c_int;
        let generic = cinch_slurm_ffi::SLURM_ERROR as c_int;
        for (gpus, comment, requeue, code, says) in [
            (
                "gres/gpu:32",
                "cinch:elastic=2-16,ckpt=yes",
                Some(true),
                gres,
                "outside",
            ),
            (
                "gres/gpu:8",
                "cinch:elastic=16-2,ckpt=yes",
                Some(true),
                generic,
                "MIN <= MAX",
            ),
            (
                "gres/gpu:8",
                "cinch:elastic=2-16",
                Some(true),
                generic,
                "ckpt=yes",
            ),
            (
                "gres/gpu:8",
                "cinch:elastic=2-16,ckpt=true",
                Some(true),
                generic,
                "ckpt=yes",
            ),
            (
                "gres/gpu:8",
                "cinch:elastic=2-16,ckpt=yes",
                None,
                generic,
                "--requeue",
            ),
        ] {
            let refused = elastic(gpus, comment, requeue).expect_err(comment);
            assert_eq!(refused.code, code, "{gpus} {comment}: {refused:?}");
            assert!(refused.user_message.contains(says), "{refused:?}");
        }
    }

    #[test]
    fn whole_gpus_are_kept_off_the_sharing_partition() {
        let c = config("Mode=enforce\nSharePartition=shared\n");
        let mut s = submission(Some("gres/gpu:1"), None);
        s.request.partition = Some("gpu,shared".into());
        let refused = decide_now(&s, &c).unwrap_err();
        assert_eq!(
            refused.code,
            cinch_slurm_ffi::slurm_err_t::ESLURM_INVALID_GRES as c_int
        );
        assert!(
            refused
                .user_message
                .starts_with("partition shared holds shared GPUs: ask for shards there"),
            "{refused:?}"
        );
        // A CPU-only job may run there.
        s.request.gpus = GpuRequest::parse(None, None, None, None);
        assert!(decide_now(&s, &c).is_ok());
    }

    #[test]
    fn under_mps_a_shared_job_asks_for_mps_units_and_carries_its_memory_cap() {
        let c = config("Mode=enforce\nSharePartition=shared\nShareMode=mps\n");
        let s = submission(Some("gres/gpu:1"), Some("cinch:share=yes,gpu_mem=30G"));
        let edit = decide(&s, &c, when(true), |ask: &ShareAsk| {
            assert!(ask.batch);
            Some(SubmitShare {
                verdict: Verdict::Share {
                    node: "m1".into(),
                    index: 0,
                    shards: 42,
                    prediction: Prediction {
                        gib: 30.0,
                        source: Source::Stated,
                    },
                    why: "fits".into(),
                },
                prediction: None,
                busy: None,
                mem_cap_gib: Some(33.6),
                driver_cap_mib: Some(34406),
            })
        })
        .unwrap();
        assert_eq!(
            edit.shards,
            Some(ShardRequest {
                partition: "shared".into(),
                tres_per_node: format!("{}mps:42", cinch_slurm_ffi::GRES_TRES_PREFIX),
                node: "m1".into(),
                env: vec![
                    (MPS_MEM_LIMIT_VAR.into(), "0=34406M".into()),
                    (MPS_THREADS_VAR.into(), "100".into()),
                    (DRIVER_CAP_VAR.into(), "34406".into()),
                ],
            })
        );
        assert!(
            edit.record
                .contains(" share=m1:42mps(gpu0) gpu_mem_cap=33.6G"),
            "{}",
            edit.record
        );
    }

    #[test]
    fn users_are_told_which_of_their_requests_will_not_count_here_and_why() {
        let told = |s: &Submission, c: &Config, targets: Option<&StatedTargets>| {
            let at = When {
                stated_targets: targets,
                ..when(true)
            };
            decide(s, c, at, no_view).unwrap().told
        };
        let enforce = config("Mode=enforce\n");
        let mut target = submission(Some("gres/gpu:8"), Some("cinch:turnaround=6:00:00"));
        target.request.account = Some("physics".into());
        // Nobody's stated targets count (cinch's default): said, with what does count.
        let nobody = StatedTargets::Listed {
            accounts: Vec::new(),
            qos: Vec::new(),
        };
        assert_eq!(
            told(&target, &enforce, Some(&nobody)),
            [
                "cinch: turnaround=6:00:00 does not count here: this site does not count targets \
              users state (admin: user_targets); Slurm's --deadline does"
            ]
        );
        // Counted for the job's account or QOS, or for everyone: nothing to say.
        let listed = StatedTargets::Listed {
            accounts: vec!["physics".into()],
            qos: vec!["urgent".into()],
        };
        assert!(told(&target, &enforce, Some(&listed)).is_empty());
        assert!(told(&target, &enforce, Some(&StatedTargets::Everyone)).is_empty());
        let mut other = target.clone();
        other.request.account = Some("chemistry".into());
        assert_eq!(
            told(&other, &enforce, Some(&listed)),
            [
                "cinch: turnaround=6:00:00 does not count here: this site counts stated targets \
              only in account physics and QOS urgent, not this job's (admin: \
              user_target_accounts, user_target_qos); Slurm's --deadline does"
            ]
        );
        other.request.qos = Some("urgent".into());
        assert!(told(&other, &enforce, Some(&listed)).is_empty());
        // A policy that has no use for targets.
        let unused = StatedTargets::Unused {
            policy: "tiresias".into(),
        };
        assert_eq!(
            told(&target, &enforce, Some(&unused)),
            [
                "cinch: turnaround=6:00:00 does not count here: the policy in force (tiresias) \
              does not use QoS targets"
            ]
        );
        // Before the optimizer has said, nothing is claimed either way.
        assert!(told(&target, &enforce, None).is_empty());

        // ckpt=yes without --requeue, or with requeues turned off.
        let mut ckpt = submission(Some("gres/gpu:8"), Some("cinch:ckpt=yes"));
        assert_eq!(
            told(&ckpt, &enforce, None),
            [
                "cinch: ckpt=yes does not count without --requeue: cinch requeues only jobs \
              submitted with --requeue that checkpoint"
            ]
        );
        ckpt.request.requeue = Some(true);
        assert!(told(&ckpt, &enforce, None).is_empty());
        let no_requeues = config("Mode=enforce\nMaxRequeuesPerJob=0\n");
        assert_eq!(
            told(&ckpt, &no_requeues, None),
            [
                "cinch: ckpt=yes does not count here: this site turns cinch's requeues off \
              (admin: MaxRequeuesPerJob=0)"
            ]
        );

        // share=yes with no sharing partition, or while cinch only watches.
        let share = submission(Some("gres/gpu:1"), Some("cinch:share=yes,gpu_mem=10G"));
        assert_eq!(
            told(&share, &enforce, None),
            ["cinch: share=yes does not count now: this job keeps a whole GPU: this cluster has \
              no GPU-sharing partition (admin: SharePartition in cinch.conf)"]
        );
        let shadow = config("Mode=shadow\nSharePartition=shared\n");
        assert_eq!(
            told(&share, &shadow, None),
            [
                "cinch: share=yes does not count now: this job keeps a whole GPU: cinch only \
              watches here (Mode=shadow in cinch.conf) and places no job on a shared GPU"
            ]
        );
        let sharing = config("Mode=enforce\nSharePartition=shared\n");
        assert_eq!(
            told(&share, &sharing, None),
            [
                "cinch: share=yes does not count now: this job keeps a whole GPU: cinch has no \
              fresh view of the cluster now (its optimizer is away or it has just started), and \
              shares a GPU only on one"
            ]
        );

        // A job the admin keeps cinch off: one line for all its hints.
        let excluded = config("Mode=enforce\nExcludePartitions=debug\n");
        let mut off = target.clone();
        off.request.partition = Some("debug".into());
        assert_eq!(
            told(&off, &excluded, Some(&nobody)),
            [
                "cinch: your cinch hints do not count: the admin keeps cinch off partition debug \
              (ExcludePartitions)"
            ]
        );
        // A plain job is told nothing.
        assert!(told(
            &submission(Some("gres/gpu:8"), None),
            &enforce,
            Some(&nobody)
        )
        .is_empty());
    }

    #[test]
    fn an_opted_in_job_shares_where_the_view_says_and_only_while_enforcing() {
        let c = config("Mode=enforce\nSharePartition=shared\n");
        let s = submission(Some("gres/gpu:1"), Some("cinch:share=yes,gpu_mem=10G"));
        let share = |ask: &ShareAsk| {
            assert_eq!(ask.user_id, 1000);
            assert_eq!(ask.time_limit_min, Some(60));
            assert_eq!(ask.hints.get("gpu_mem").map(String::as_str), Some("10G"));
            Some(SubmitShare {
                verdict: Verdict::Share {
                    node: "n3".into(),
                    index: 1,
                    shards: 3,
                    prediction: Prediction {
                        gib: 11.0,
                        source: Source::Stated,
                    },
                    why: "fits beside one job".into(),
                },
                prediction: None,
                busy: None,
                mem_cap_gib: None,
                driver_cap_mib: Some(10_240),
            })
        };
        let edit = decide(&s, &c, when(true), share).unwrap();
        assert_eq!(
            edit.shards,
            Some(ShardRequest {
                partition: "shared".into(),
                tres_per_node: format!("{}shard:3", cinch_slurm_ffi::GRES_TRES_PREFIX),
                node: "n3".into(),
                // On shards only the driver's cap, where cinch's SPANK plugin can set one.
                env: vec![(DRIVER_CAP_VAR.into(), "10240".into())],
            })
        );
        assert!(
            edit.record.contains(" share=n3:3shards(gpu1)"),
            "{}",
            edit.record
        );
        assert_eq!(
            edit.told,
            ["cinch: this job shares a GPU: fits beside one job"]
        );
        // Not enforcing: the view is not asked, the job keeps its GPU.
        let edit = decide(&s, &c, when(false), |_: &ShareAsk| -> Option<SubmitShare> {
            panic!("asked the view while not enforcing")
        })
        .unwrap();
        assert_eq!(edit.shards, None);
        // A job that names its nodes keeps a whole GPU, and is told why.
        let mut pinned = s.clone();
        pinned.req_nodes = Some("n1".into());
        let edit = decide(&pinned, &c, when(true), share).unwrap();
        assert_eq!(edit.shards, None);
        assert_eq!(
            edit.told,
            ["cinch: this job keeps a whole GPU: the job names its nodes (--nodelist)"]
        );
        // share=yes on two GPUs is the user's mistake, told at sbatch.
        let two = submission(Some("gres/gpu:2"), Some("cinch:share=yes,gpu_mem=10G"));
        let refused = decide_now(&two, &c).unwrap_err();
        assert!(refused.user_message.contains("share"), "{refused:?}");
        assert!(
            refused
                .user_message
                .contains("sbatch --gpus=1 --comment cinch:share=yes"),
            "{refused:?}"
        );
    }

    #[test]
    fn hints_cinch_would_ignore_are_named_and_the_job_is_accepted() {
        let c = config("Mode=enforce\n");
        let s = submission(Some("gres/gpu:1"), Some("cinch:app=bert,chkpt=yes"));
        let edit = decide_now(&s, &c).unwrap();
        assert_eq!(edit.told.len(), 1, "{:?}", edit.told);
        assert!(
            edit.told[0].starts_with("cinch: warning: unknown hint 'chkpt' ignored (cinch reads:"),
            "{:?}",
            edit.told
        );
    }
}
