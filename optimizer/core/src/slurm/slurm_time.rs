//! Times and durations as Slurm writes and reads them: `YYYY-MM-DDTHH:MM[:SS]` and
//! `[D-]HH:MM:SS`, `MM:SS`, `MM` (the forms of `--time`, `--begin` and `sacct`), and the words a
//! user may write for a point in time as for `--begin` (`now+1hour`, `tomorrow`, `16:00`, ...).

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

/// A point in time as a user wrote it, resolved against the present: an exact instant, or a
/// wall-clock time in the site's local time zone (turned into an instant by the C library, as
/// Slurm turns `--begin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    Unix(i64),
    Local([i32; 6]),
}

/// The present, as `resolve_point` needs it: Unix seconds and the same instant's local wall
/// clock (year, month, day, hour, minute, second).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub unix: i64,
    pub local: [i32; 6],
}

/// The forms `resolve_point` reads, for error messages and the user guide.
pub const POINT_FORMS: &str = "YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS][AM|PM], \
     now[+|-COUNT[seconds|minutes|hours|days|weeks]], today, tomorrow, midnight, noon, \
     elevenses, fika, teatime, or those with an offset (Z, +01:00) or Unix seconds";

/// A point in time in any form Slurm's `--begin` takes (one word: no spaces), resolved against
/// `now` as Slurm resolves it: a time of day alone is the next one to come (today, or tomorrow
/// if it has passed); a date alone is its midnight; `now+COUNT` counts seconds unless a unit
/// follows. Forms with an offset and Unix seconds are exact instants.
pub fn resolve_point(s: &str, now: Now) -> Result<Point, String> {
    let text = s.trim();
    let bad = |why: &str| format!("'{text}' is not a time ({why}; use {POINT_FORMS})");
    if text.is_empty() {
        return Err(bad("empty"));
    }
    if text.len() > 6 && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .map(Point::Unix)
            .map_err(|_| bad("out of range"));
    }
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(Point::Unix(t.as_second()));
    }
    let lower = text.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("now") {
        return now_plus(rest, now).map(Point::Unix).map_err(|e| bad(&e));
    }
    let today = civil_date(now.local).ok_or_else(|| bad("the present is not a date"))?;
    // A date part (or a day word), then optionally `T` and a time part.
    let (date_text, time_text) = match split_date_time(&lower) {
        Some((d, t)) => (Some(d), Some(t)),
        None if looks_like_time(&lower) => (None, Some(lower.as_str())),
        None => (Some(lower.as_str()), None),
    };
    let date = match date_text {
        None => None,
        Some("today") => Some(today),
        Some("tomorrow") => Some(
            today
                .checked_add(jiff::Span::new().days(1))
                .map_err(|e| bad(&e.to_string()))?,
        ),
        Some(d) => Some(parse_date(d, today).map_err(|e| bad(&e))?),
    };
    let clock = match time_text {
        None => None,
        Some(t) => Some(parse_clock(t).map_err(|e| bad(&e))?),
    };
    let at = |date: jiff::civil::Date, (h, m, sec): (i8, i8, i8)| -> [i32; 6] {
        [
            i32::from(date.year()),
            i32::from(date.month()),
            i32::from(date.day()),
            i32::from(h),
            i32::from(m),
            i32::from(sec),
        ]
    };
    Ok(Point::Local(match (date, clock) {
        (Some(date), Some(clock)) => at(date, clock),
        (Some(date), None) => at(date, (0, 0, 0)),
        (None, Some(clock)) => {
            let (h, m, sec) = clock;
            let passed =
                (h as i32, m as i32, sec as i32) <= (now.local[3], now.local[4], now.local[5]);
            let day = if passed {
                today
                    .checked_add(jiff::Span::new().days(1))
                    .map_err(|e| bad(&e.to_string()))?
            } else {
                today
            };
            at(day, clock)
        }
        (None, None) => return Err(bad("no date or time")),
    }))
}

fn civil_date([year, month, day, ..]: [i32; 6]) -> Option<jiff::civil::Date> {
    jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .ok()
}

/// `""`, `+COUNT[unit]` or `-COUNT[unit]` after `now`, as Unix seconds.
fn now_plus(rest: &str, now: Now) -> Result<i64, String> {
    if rest.is_empty() {
        return Ok(now.unix);
    }
    let (sign, rest) = match rest.as_bytes()[0] {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return Err("now is followed by +COUNT or -COUNT".into()),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let count: i64 = rest[..digits]
        .parse()
        .map_err(|_| "now+ needs a whole number".to_string())?;
    let unit = match &rest[digits..] {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 604_800,
        other => return Err(format!("'{other}' is not a unit of time")),
    };
    count
        .checked_mul(unit)
        .and_then(|d| now.unix.checked_add(sign * d))
        .ok_or_else(|| "out of range".to_string())
}

/// `DATEtTIME` (lower-cased) split at the `t` that ends a date or day word; `None` without one.
fn split_date_time(s: &str) -> Option<(&str, &str)> {
    s.match_indices('t').map(|(i, _)| i).find_map(|i| {
        let (date, time) = (&s[..i], &s[i + 1..]);
        let is_date = matches!(date, "today" | "tomorrow")
            || date.as_bytes().first().is_some_and(u8::is_ascii_digit) && !date.contains(':');
        is_date.then_some((date, time))
    })
}

fn looks_like_time(s: &str) -> bool {
    matches!(s, "midnight" | "noon" | "elevenses" | "fika" | "teatime")
        || (s.contains(':') && !s.contains(['-', '/', '.']))
}

/// `YYYY-MM-DD`, `MM/DD[/YY]`, `MM.DD[.YY]`, `MMDD[YY]`; a year left out is this year's date
/// or, once that has passed, next year's (as Slurm reads it).
fn parse_date(s: &str, today: jiff::civil::Date) -> Result<jiff::civil::Date, String> {
    if let Ok(d) = s.parse::<jiff::civil::Date>() {
        return Ok(d);
    }
    let parts: Vec<&str> = if s.contains('/') {
        s.split('/').collect()
    } else if s.contains('.') {
        s.split('.').collect()
    } else if (s.len() == 4 || s.len() == 6) && s.bytes().all(|b| b.is_ascii_digit()) {
        (0..s.len()).step_by(2).map(|i| &s[i..i + 2]).collect()
    } else {
        return Err("not a date".into());
    };
    let number = |p: &str| -> Result<i16, String> {
        if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("'{p}' is not a number"));
        }
        p.parse().map_err(|_| format!("'{p}' is not a number"))
    };
    let (month, day, year) = match parts[..] {
        [m, d] => (number(m)?, number(d)?, None),
        [m, d, y] => {
            let y = number(y)?;
            (
                number(m)?,
                number(d)?,
                Some(if y < 100 { 2000 + y } else { y }),
            )
        }
        _ => return Err("not a date".into()),
    };
    let make = |y: i16| {
        jiff::civil::Date::new(
            y,
            i8::try_from(month).map_err(|_| "no such month".to_string())?,
            i8::try_from(day).map_err(|_| "no such day".to_string())?,
        )
        .map_err(|e| e.to_string())
    };
    match year {
        Some(y) => make(y),
        None => {
            let this_year = make(today.year())?;
            if this_year < today {
                make(today.year() + 1)
            } else {
                Ok(this_year)
            }
        }
    }
}

/// `HH:MM[:SS]` with an optional `am`/`pm`, or a named time of day.
fn parse_clock(s: &str) -> Result<(i8, i8, i8), String> {
    match s {
        "midnight" => return Ok((0, 0, 0)),
        "elevenses" => return Ok((11, 0, 0)),
        "noon" => return Ok((12, 0, 0)),
        "fika" => return Ok((15, 0, 0)),
        "teatime" => return Ok((16, 0, 0)),
        _ => {}
    }
    let (clock, half) = if let Some(c) = s.strip_suffix("am") {
        (c, Some(0))
    } else if let Some(c) = s.strip_suffix("pm") {
        (c, Some(12))
    } else {
        (s, None)
    };
    let parts: Vec<i8> = clock
        .split(':')
        .map(|p| {
            if p.len() != 2 && !(p.len() == 1 && half.is_some()) {
                return Err(format!("'{clock}' is not HH:MM[:SS]"));
            }
            p.parse::<i8>()
                .map_err(|_| format!("'{clock}' is not HH:MM[:SS]"))
        })
        .collect::<Result<_, _>>()?;
    let (mut h, m, sec) = match parts[..] {
        [h, m] => (h, m, 0),
        [h, m, sec] => (h, m, sec),
        _ => return Err(format!("'{clock}' is not HH:MM[:SS]")),
    };
    if let Some(offset) = half {
        if !(1..=12).contains(&h) {
            return Err(format!("'{s}': hour {h} with am/pm"));
        }
        h = h % 12 + offset;
    }
    if !(0..24).contains(&h) || !(0..60).contains(&m) || !(0..60).contains(&sec) {
        return Err(format!("'{s}' is not a time of day"));
    }
    Ok((h, m, sec))
}

/// A local wall-clock time as Slurm prints one: `YYYY-MM-DDTHH:MM:SS`.
pub fn format_local([year, month, day, hour, minute, second]: [i32; 6]) -> String {
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}")
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

    fn now() -> Now {
        // Wednesday 2026-11-25 14:30:00 at a site on UTC.
        Now {
            unix: 1_795_617_000,
            local: [2026, 11, 25, 14, 30, 0],
        }
    }

    #[test]
    fn slurm_time_words_resolve_as_for_begin() {
        let local = |s: &str| match resolve_point(s, now()) {
            Ok(Point::Local(f)) => format_local(f),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(local("tomorrow"), "2026-11-26T00:00:00");
        assert_eq!(local("today"), "2026-11-25T00:00:00");
        assert_eq!(local("16:00"), "2026-11-25T16:00:00");
        assert_eq!(local("teatime"), "2026-11-25T16:00:00");
        assert_eq!(local("fika"), "2026-11-25T15:00:00");
        // Passed today: the next one.
        assert_eq!(local("09:15"), "2026-11-26T09:15:00");
        assert_eq!(local("noon"), "2026-11-26T12:00:00");
        assert_eq!(local("elevenses"), "2026-11-26T11:00:00");
        assert_eq!(local("midnight"), "2026-11-26T00:00:00");
        assert_eq!(local("14:30"), "2026-11-26T14:30:00");
        assert_eq!(local("14:30:01"), "2026-11-25T14:30:01");
        assert_eq!(local("4:00PM"), "2026-11-25T16:00:00");
        assert_eq!(local("12:00am"), "2026-11-26T00:00:00");
        assert_eq!(local("tomorrowT16:00"), "2026-11-26T16:00:00");
        assert_eq!(local("2026-12-01"), "2026-12-01T00:00:00");
        assert_eq!(local("2026-12-01T09:00"), "2026-12-01T09:00:00");
        assert_eq!(local("12/01"), "2026-12-01T00:00:00");
        assert_eq!(local("12/01/27"), "2027-12-01T00:00:00");
        assert_eq!(local("1201"), "2026-12-01T00:00:00");
        // This year's date has passed: next year's.
        assert_eq!(local("01.15"), "2027-01-15T00:00:00");
        let unix = |s: &str| match resolve_point(s, now()) {
            Ok(Point::Unix(t)) => t - now().unix,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(unix("now"), 0);
        assert_eq!(unix("now+90"), 90);
        assert_eq!(unix("now+1hour"), 3600);
        assert_eq!(unix("NOW+2days"), 172_800);
        assert_eq!(unix("now+1week"), 604_800);
        assert_eq!(unix("now-5minutes"), -300);
        assert_eq!(unix("2026-11-25T14:30:00Z"), 0);
        assert_eq!(unix("2026-11-25T15:30:00+01:00"), 0);
        assert_eq!(unix("1795617000"), 0);
        for bad in [
            "",
            "soon",
            "now+",
            "now+1fortnight",
            "nowish",
            "25:00",
            "13:00pm",
            "2026-13-01",
            "13/01",
            "12/32",
            "T",
            "tomorrowT",
            "9:5",
        ] {
            let err = resolve_point(bad, now()).unwrap_err();
            assert!(err.contains("is not a time"), "{bad}: {err}");
            assert!(err.contains("tomorrow"), "{bad}: names the forms: {err}");
        }
    }
}
