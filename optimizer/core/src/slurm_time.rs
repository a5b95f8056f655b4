//! Times and durations as Slurm writes and reads them: `YYYY-MM-DDTHH:MM[:SS]` and
//! `[D-]HH:MM:SS`, `MM:SS`, `MM` (the forms of `--time`, `--begin` and `sacct`).

/// Slurm's duration forms as seconds: `minutes`, `minutes:seconds`, `hours:minutes:seconds`,
/// `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a Slurm duration (MM, MM:SS, HH:MM:SS or D-HH[:MM[:SS]])");
    let s = s.trim();
    if s.is_empty() {
        return Err(bad());
    }
    let number = |p: &str| {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse::<u64>().map_err(|_| bad())
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(number(d)?), r),
        None => (None, s),
    };
    let parts: Vec<u64> = rest.split(':').map(number).collect::<Result<_, _>>()?;
    let seconds = match (days, &parts[..]) {
        (None, [m]) => m * 60,
        (None, [m, sec]) => m * 60 + sec,
        (None, [h, m, sec]) | (Some(_), [h, m, sec]) => h * 3600 + m * 60 + sec,
        (Some(_), [h]) => h * 3600,
        (Some(_), [h, m]) => h * 3600 + m * 60,
        _ => return Err(bad()),
    };
    days.unwrap_or(0)
        .checked_mul(86_400)
        .and_then(|d| d.checked_add(seconds))
        .ok_or_else(bad)
}

/// Seconds as Slurm prints a duration: `[D-]HH:MM:SS` (negative with a leading `-`).
pub fn format_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.unsigned_abs();
    let (days, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{sign}{days}-{h:02}:{m:02}:{sec:02}")
    } else {
        format!("{sign}{h:02}:{m:02}:{sec:02}")
    }
}

/// A point in time: Unix seconds, or `YYYY-MM-DDTHH:MM[:SS]` with `Z` or an offset
/// (`+01:00`), or without one read as UTC (the plugin's agent turns a user's local time into
/// Unix seconds before the optimizer sees it, so only hand-made snapshots rely on this).
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map_err(|_| format!("'{s}' is out of range"));
    }
    let bad = |e: &dyn std::fmt::Display| {
        format!("'{s}' is not a time (YYYY-MM-DDTHH:MM[:SS], with Z or an offset, or Unix seconds): {e}")
    };
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t.as_second());
    }
    let civil: jiff::civil::DateTime = s.parse().map_err(|e| bad(&e))?;
    jiff::tz::TimeZone::UTC
        .to_timestamp(civil)
        .map(|t| t.as_second())
        .map_err(|e| bad(&e))
}

/// The fields (year, month, day, hour, minute, second) of a time written without an offset
/// (`YYYY-MM-DDTHH:MM[:SS]`), which a user means in their site's local time; `None` for any
/// other form.
pub fn local_fields(s: &str) -> Option<[i32; 6]> {
    let s = s.trim();
    if s.parse::<jiff::Timestamp>().is_ok() {
        return None;
    }
    let c: jiff::civil::DateTime = s.parse().ok()?;
    Some([
        i32::from(c.year()),
        i32::from(c.month()),
        i32::from(c.day()),
        i32::from(c.hour()),
        i32::from(c.minute()),
        i32::from(c.second()),
    ])
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC, said so).
pub fn format_time(unix_s: i64) -> String {
    match jiff::Timestamp::from_second(unix_s) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => unix_s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_slurm_form() {
        assert_eq!(parse_duration("90"), Ok(5400));
        assert_eq!(parse_duration("15:00"), Ok(900));
        assert_eq!(parse_duration("2:00:00"), Ok(7200));
        assert_eq!(parse_duration("1-12"), Ok(129_600));
        assert_eq!(parse_duration("1-00:30"), Ok(88_200));
        assert_eq!(parse_duration("1-00:00:05"), Ok(86_405));
        for bad in [
            "",
            "soon",
            "1:2:3:4",
            "-5",
            "1-",
            "3h",
            "1-2-3",
            "99999999999999999999",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("not a Slurm duration"), "{bad}: {err}");
        }
        assert_eq!(format_duration(86_405), "1-00:00:05");
        assert_eq!(format_duration(3725), "01:02:05");
        assert_eq!(format_duration(-60), "-00:01:00");
    }

    #[test]
    fn times_parse_with_and_without_an_offset_and_print_as_utc() {
        assert_eq!(parse_time("1795394227"), Ok(1_795_394_227));
        assert_eq!(parse_time("2026-11-24T18:00:00Z"), Ok(1_795_543_200));
        assert_eq!(parse_time("2026-11-24T18:00:00"), Ok(1_795_543_200));
        assert_eq!(parse_time("2026-11-24T18:00"), Ok(1_795_543_200));
        assert_eq!(parse_time("2026-11-24T19:00:00+01:00"), Ok(1_795_543_200));
        assert_eq!(format_time(1_795_543_200), "2026-11-24T18:00:00Z");
        assert_eq!(
            local_fields("2026-11-24T18:05"),
            Some([2026, 11, 24, 18, 5, 0])
        );
        assert_eq!(local_fields("2026-11-24T18:05:00Z"), None);
        assert_eq!(local_fields("1795543200"), None);
        for bad in ["tomorrow", "2026-13-01T00:00:00", "", "now+1h"] {
            assert!(
                parse_time(bad).unwrap_err().contains("is not a time"),
                "{bad}"
            );
        }
    }
}
