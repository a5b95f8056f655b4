//! Reading `scontrol show job` and `scontrol show config` text: `cinch why`, `cinch replay` and
//! the end-to-end tests all read what Slurm reports this way, so they agree on fields whose
//! values hold spaces.

use std::collections::BTreeMap;

/// Fields scontrol prints alone on their line, whose value (free text or a path) may hold
/// spaces and `=`: the value is the rest of the line.
const WHOLE_LINE_FIELDS: [&str; 8] = [
    "AdminComment",
    "Comment",
    "SystemComment",
    "Command",
    "WorkDir",
    "StdErr",
    "StdIn",
    "StdOut",
];

/// One job's `scontrol show job` output as key -> value.
pub fn parse_show_job(text: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(key) = WHOLE_LINE_FIELDS.iter().find(|key| {
            line.strip_prefix(**key)
                .is_some_and(|rest| rest.starts_with('='))
        }) {
            fields.insert(key.to_string(), line[key.len() + 1..].trim().to_string());
            continue;
        }
        for token in line.split_whitespace() {
            if let Some((key, value)) = token.split_once('=') {
                fields.insert(key.to_string(), value.to_string());
            }
        }
    }
    fields
}

/// The munged socket Slurm authenticates through, from `scontrol show config` (`AuthInfo =
/// socket=PATH[,other=...]`); `None` where Slurm uses munge's default.
pub fn munge_socket(show_config: &str) -> Option<String> {
    let value = show_config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "AuthInfo").then_some(value.trim())
    })?;
    value
        .split(',')
        .find_map(|option| option.trim().strip_prefix("socket="))
        .filter(|path| !path.is_empty())
        .map(str::to_string)
}

/// Slurm's credential lifetime when `AuthInfo` sets none (or one under 5 s, which Slurm refuses):
/// `DEFAULT_EXPIRATION_WINDOW`, 120 s, in every release from 22.05 to 26.05.
pub const DEFAULT_CRED_EXPIRE_S: u32 = 120;
/// Slurm's requeue delay where `AuthInfo` sets no credential lifetime.
pub const DEFAULT_REQUEUE_DELAY_S: u32 = DEFAULT_CRED_EXPIRE_S + 1;

/// Seconds slurmctld keeps a requeued job from starting again: its credential lifetime
/// (`AuthInfo=cred_expire=N`) plus one (job_mgr.c sets the job's begin time to now +
/// cred_expire + 1, so that the revoked credential is gone from the nodes first). `auth_info` is
/// slurm.conf's `AuthInfo` value as slurmctld holds it, `None` when unset. Read as Slurm reads
/// it (cred.c): the number after the first `cred_expire=`, as `atoi` takes it; under 5 s Slurm
/// logs an error and keeps the default.
pub fn requeue_delay_s(auth_info: Option<&str>) -> u32 {
    let cred_expire = auth_info
        .and_then(|info| info.find("cred_expire=").map(|at| &info[at + 12..]))
        .map(|rest| {
            let rest = rest.trim_start();
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse::<u32>().unwrap_or(0)
        })
        .filter(|&seconds| seconds >= 5)
        .unwrap_or(DEFAULT_CRED_EXPIRE_S);
    cred_expire.saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requeue_delay_is_the_credential_lifetime_plus_one_as_slurm_reads_it() {
        assert_eq!(requeue_delay_s(None), 121);
        assert_eq!(requeue_delay_s(Some("socket=/run/munge.sock")), 121);
        assert_eq!(requeue_delay_s(Some("cred_expire=30")), 31);
        assert_eq!(
            requeue_delay_s(Some("socket=/tmp/m.sock,cred_expire=600,ttl=9")),
            601
        );
        // Slurm refuses a lifetime under 5 s (and atoi reads garbage as 0): its default stays.
        assert_eq!(requeue_delay_s(Some("cred_expire=4")), 121);
        assert_eq!(requeue_delay_s(Some("cred_expire=soon")), 121);
        // atoi stops at the first non-digit.
        assert_eq!(requeue_delay_s(Some("cred_expire=45s")), 46);
    }

    #[test]
    fn reads_fields_including_those_with_spaces() {
        let job = parse_show_job(
            "JobId=7 JobName=wrap\n   JobState=COMPLETED Reason=None Dependency=(null)\n   \
             AdminComment=site note | cinch: gpus=8 gpu_spec=per_node:4 \n   \
             Comment=my note a=b\n   StdOut=/home/ann/my runs/7.out\n   NodeList=n[1-2]\n",
        );
        assert_eq!(job["JobId"], "7");
        assert_eq!(job["JobState"], "COMPLETED");
        assert_eq!(
            job["AdminComment"],
            "site note | cinch: gpus=8 gpu_spec=per_node:4"
        );
        assert_eq!(job["Comment"], "my note a=b");
        assert_eq!(job["StdOut"], "/home/ann/my runs/7.out");
        assert_eq!(job["NodeList"], "n[1-2]");
        assert!(
            !job.contains_key("gpus"),
            "nothing read out of a whole-line value"
        );
        assert!(!job.contains_key("Missing"));
    }

    #[test]
    fn the_munge_socket_comes_from_auth_info() {
        let config = "AuthAltTypes            = (null)\nAuthInfo                = \
                      cred_expire=70,socket=/tmp/c/munge/munge.socket\nAuthType = auth/munge\n";
        assert_eq!(
            munge_socket(config).as_deref(),
            Some("/tmp/c/munge/munge.socket")
        );
        assert_eq!(munge_socket("AuthInfo                = (null)\n"), None);
        assert_eq!(munge_socket("AuthType = auth/munge\n"), None);
    }
}
