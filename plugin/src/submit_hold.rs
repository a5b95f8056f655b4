//! job_submit's hold rule: a new multi-GPU job is held (a short BeginTime) for one agent round,
//! so the optimizer can place it before Slurm starts it elsewhere. Only while the agent is live
//! and enforcing, never over a user's own `--begin`; the hold lapses by itself if cinch goes away
//! and the next round releases it whatever happens.

use cinch_core::Mode;

use crate::config::Config;

/// Until when (Unix seconds) job_submit holds a job asking for `gpus` GPUs in total, with the
/// user's `begin_time` (0: none), at `now_ms`, when the agent enforced a round until
/// `enforcing_until_ms`; `None`: no hold.
pub fn hold_until(
    config: &Config,
    gpus: u64,
    begin_time: i64,
    now_ms: i64,
    enforcing_until_ms: i64,
) -> Option<i64> {
    (config.mode == Mode::Enforce
        && config.submit_hold_s > 0
        && gpus >= 2
        && begin_time == 0
        && now_ms < enforcing_until_ms)
        .then(|| now_ms / 1000 + i64::from(config.submit_hold_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_000_000_000;

    fn config(mode: Mode, hold_s: u32) -> Config {
        Config {
            mode,
            submit_hold_s: hold_s,
            ..Config::default()
        }
    }

    #[test]
    fn holds_new_multi_gpu_jobs_only_while_the_agent_enforces() {
        let live = NOW_MS + 30_000;
        let enforce = config(Mode::Enforce, 5);
        assert_eq!(
            hold_until(&enforce, 8, 0, NOW_MS, live),
            Some(NOW_MS / 1000 + 5)
        );
        assert_eq!(hold_until(&enforce, 1, 0, NOW_MS, live), None, "1 GPU");
        assert_eq!(
            hold_until(&enforce, 8, NOW_MS / 1000 + 600, NOW_MS, live),
            None,
            "the user's --begin"
        );
        assert_eq!(
            hold_until(&enforce, 8, 0, NOW_MS, NOW_MS),
            None,
            "the agent's window ran out (optimizer lost, agent stopped)"
        );
        assert_eq!(
            hold_until(&config(Mode::Shadow, 5), 8, 0, NOW_MS, live),
            None
        );
        assert_eq!(
            hold_until(&config(Mode::Enforce, 0), 8, 0, NOW_MS, live),
            None
        );
    }
}
