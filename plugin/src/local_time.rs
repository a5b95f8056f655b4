//! The controller's local time, through the C library as Slurm reads `--begin`: the present as
//! `slurm_time::Now`, a wall-clock time as Unix seconds, and a user's `due=` resolved at submit.
//! After the first call the C library keeps its time zone in memory, so this does no I/O in
//! `job_submit` (slurmctld has read the zone long before, for its own log lines).

use cinch_core::slurm::slurm_time::{self, Now, Point};

/// The present: Unix seconds and the local wall clock of the same second.
pub fn now() -> Now {
    // SAFETY: time(NULL) only returns; localtime_r writes only the struct we own.
    let (unix, tm) = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        (t, tm)
    };
    Now {
        unix,
        local: [
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
        ],
    }
}

/// A local date and time (year, month, day, hour, minute, second) as Unix seconds, by the C
/// library's time zone (the controller's, as Slurm reads `--begin`).
pub fn to_unix([year, month, day, hour, minute, second]: [i32; 6]) -> Option<i64> {
    // SAFETY: an all-zero tm is valid; mktime reads and normalises only the struct we own.
    let t = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = year - 1900;
        tm.tm_mon = month - 1;
        tm.tm_mday = day;
        tm.tm_hour = hour;
        tm.tm_min = minute;
        tm.tm_sec = second;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    (t != -1).then_some(t)
}

/// A `due=` target as the user wrote it, checked at submit: the instant it means, and the form
/// the job keeps when the user wrote a word (`tomorrow`, `now+2hours`, `16:00`), which means
/// something else tomorrow. A due time that has passed cannot be met and is refused.
pub fn resolve_due(value: &str, now: Now) -> Result<(i64, Option<String>), String> {
    let (unix, written_as) = match slurm_time::resolve_point(value, now)? {
        Point::Unix(t) => (t, slurm_time::format_time(t)),
        Point::Local(fields) => (
            to_unix(fields).ok_or_else(|| format!("'{value}' does not exist in local time"))?,
            slurm_time::format_local(fields),
        ),
    };
    if unix <= now.unix {
        return Err(format!(
            "'{value}' ({written_as}) has passed: a due time must lie ahead"
        ));
    }
    // The forms the agent reads every round keep what the user wrote.
    let kept = slurm_time::local_fields(value).is_some() || slurm_time::parse_time(value).is_ok();
    Ok((unix, (!kept).then_some(written_as)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_words_are_fixed_at_submit_and_past_ones_refused() {
        let now = now();
        let (at, kept) = resolve_due("now+2hours", now).unwrap();
        assert_eq!(at, now.unix + 7200);
        assert_eq!(kept, Some(slurm_time::format_time(now.unix + 7200)));
        let (at, kept) = resolve_due("tomorrow", now).unwrap();
        assert!(at > now.unix && at <= now.unix + 86_400 + 3600, "{at}");
        assert!(kept.is_some_and(|k| k.ends_with("T00:00:00")));
        assert_eq!(resolve_due("2099-01-01T00:00", now).unwrap().1, None);
        assert_eq!(resolve_due("2099-01-01T00:00:00Z", now).unwrap().1, None);
        for past in ["2020-01-01T00:00", "now-1minute", "now", "today"] {
            let err = resolve_due(past, now).unwrap_err();
            assert!(err.contains("has passed"), "{past}: {err}");
        }
        assert!(resolve_due("someday", now)
            .unwrap_err()
            .contains("is not a time"));
    }
}
