//! Slurm hostlist expressions (`n[1-3,7],gpu[01-02]`, `r[1-2]n[1-3]`): the one reading of them,
//! for the plugin (node lists of jobs and nodes) and the simulator (slurm.conf's `NodeName=`).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad hostlist '{0}'")]
pub struct HostlistError(pub String);

/// Most names one expression may expand to: far beyond any cluster, small enough that a hostile
/// string cannot make the agent allocate without bound.
pub const MAX_NAMES: usize = 100_000;

/// One name pattern: literal text and bracket groups, e.g. `r`, `[1-2]`, `n`, `[01-03,7]`.
enum Part<'a> {
    Text(&'a str),
    /// Each range as (low, high, digits of the low end: zero padding is kept).
    Ranges(Vec<(u64, u64, usize)>),
}

/// A name pattern's parts; `None` when its brackets or ranges are malformed.
fn parts(item: &str) -> Option<Vec<Part<'_>>> {
    let mut out = Vec::new();
    let mut rest = item;
    while !rest.is_empty() {
        match rest.find('[') {
            None => {
                if rest.contains(']') {
                    return None;
                }
                out.push(Part::Text(rest));
                break;
            }
            Some(open) => {
                let close = rest[open..].find(']')? + open;
                if rest[..open].contains(']') {
                    return None;
                }
                if open > 0 {
                    out.push(Part::Text(&rest[..open]));
                }
                let mut ranges = Vec::new();
                for range in rest[open + 1..close].split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let (lo, hi) = (lo.trim(), hi.trim());
                    let (a, b): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
                    if b < a {
                        return None;
                    }
                    ranges.push((a, b, lo.len()));
                }
                out.push(Part::Ranges(ranges));
                rest = &rest[close + 1..];
            }
        }
    }
    Some(out)
}

/// Splits on commas outside brackets.
fn split_top_level(expr: &str) -> Option<Vec<&str>> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return None;
        }
    }
    if depth != 0 {
        return None;
    }
    items.push(&expr[start..]);
    Some(items)
}

/// How many names a pattern's parts stand for (saturating).
fn names_in(parts: &[Part]) -> u64 {
    parts.iter().fold(1u64, |n, part| match part {
        Part::Text(_) => n,
        Part::Ranges(ranges) => {
            let k = ranges
                .iter()
                .fold(0u64, |k, (a, b, _)| k.saturating_add(b - a + 1));
            n.saturating_mul(k)
        }
    })
}

/// How many names `expr` stands for, without expanding it (a cluster's slurm.conf may name
/// more nodes than [`MAX_NAMES`]).
pub fn count(expr: &str) -> Result<u64, HostlistError> {
    let bad = || HostlistError(expr.to_string());
    let mut total = 0u64;
    for item in split_top_level(expr).ok_or_else(bad)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        total = total.saturating_add(names_in(&parts(item).ok_or_else(bad)?));
    }
    Ok(total)
}

/// Expands a hostlist expression, in Slurm's order (the last bracket group varies fastest);
/// ranges keep their zero padding (`[01-03]` -> 01, 02, 03). More than [`MAX_NAMES`] names is
/// an error.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let bad = || HostlistError(expr.to_string());
    let mut names: Vec<String> = Vec::new();
    for item in split_top_level(expr).ok_or_else(bad)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let parts = parts(item).ok_or_else(bad)?;
        if names_in(&parts) > (MAX_NAMES - names.len()) as u64 {
            return Err(bad());
        }
        let mut expanded = vec![String::new()];
        for part in &parts {
            expanded = match part {
                Part::Text(text) => expanded.into_iter().map(|s| s + text).collect(),
                Part::Ranges(ranges) => expanded
                    .iter()
                    .flat_map(|s| {
                        ranges.iter().flat_map(move |&(a, b, width)| {
                            (a..=b).map(move |n| format!("{s}{n:0width$}"))
                        })
                    })
                    .collect(),
            };
        }
        names.extend(expanded);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_what_slurm_prints() {
        assert_eq!(expand("n1").unwrap(), vec!["n1"]);
        assert_eq!(expand("n[1-3]").unwrap(), vec!["n1", "n2", "n3"]);
        assert_eq!(
            expand("n[1-2,5],gpu[08-10]").unwrap(),
            vec!["n1", "n2", "n5", "gpu08", "gpu09", "gpu10"]
        );
        assert_eq!(expand("a,b").unwrap(), vec!["a", "b"]);
        assert_eq!(expand("").unwrap(), Vec::<String>::new());
        assert_eq!(
            expand("rack[1-2]-sw").unwrap(),
            vec!["rack1-sw", "rack2-sw"]
        );
        assert_eq!(
            expand("r[1-2]n[1-2]").unwrap(),
            vec!["r1n1", "r1n2", "r2n1", "r2n2"]
        );
    }

    #[test]
    fn counts_without_expanding() {
        assert_eq!(count("n[1-16]"), Ok(16));
        assert_eq!(count("gpu[01-04,07],login1"), Ok(6));
        assert_eq!(count("r[1-2]n[1-3]"), Ok(6));
        assert_eq!(count("n[1-1000000]"), Ok(1_000_000));
        for expr in ["n[1-2,5],gpu[08-10]", "r[1-2]n[1-3],x", "a,b", ""] {
            assert_eq!(count(expr).unwrap(), expand(expr).unwrap().len() as u64);
        }
    }

    #[test]
    fn refuses_malformed_and_unbounded_expressions() {
        for bad in ["n[1-", "n[3-1]", "n[a-b]", "n]1[", "n]", "n[1-2"] {
            assert!(expand(bad).is_err(), "{bad}");
            assert!(count(bad).is_err(), "{bad}");
        }
        assert!(expand("n[1-1000000]").is_err());
        assert!(expand(&format!("a[1-{MAX_NAMES}],b")).is_err());
        assert_eq!(
            expand(&format!("a[1-{MAX_NAMES}]")).unwrap().len(),
            MAX_NAMES
        );
    }
}
