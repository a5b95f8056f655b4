//! Slurm hostlist expressions (`n[1-3,7],gpu[01-02]`) expanded to node names.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad hostlist '{0}'")]
pub struct HostlistError(pub String);

/// Most names one expression may expand to: far beyond any cluster, small enough that a hostile
/// string cannot make the agent allocate without bound.
pub const MAX_NAMES: usize = 100_000;

/// Expands a hostlist expression; ranges keep their zero padding (`[01-03]` -> 01, 02, 03).
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let bad = || HostlistError(expr.to_string());
    let mut names = Vec::new();
    for item in split_top_level(expr).map_err(|_| bad())? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        match item.find('[') {
            None if names.len() < MAX_NAMES => names.push(item.to_string()),
            None => return Err(bad()),
            Some(open) => {
                let close = item.rfind(']').ok_or_else(bad)?;
                let (prefix, suffix) = (&item[..open], &item[close + 1..]);
                if suffix.contains('[') || close < open {
                    return Err(bad()); // one bracket group per item is what Slurm prints for nodes
                }
                for range in item[open + 1..close].split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let width = lo.len();
                    let lo: u64 = lo.parse().map_err(|_| bad())?;
                    let hi: u64 = hi.parse().map_err(|_| bad())?;
                    if hi < lo || hi - lo >= (MAX_NAMES - names.len()) as u64 {
                        return Err(bad());
                    }
                    for n in lo..=hi {
                        names.push(format!("{prefix}{n:0width$}{suffix}"));
                    }
                }
            }
        }
    }
    Ok(names)
}

/// Splits on commas outside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, ()> {
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
            return Err(());
        }
    }
    if depth != 0 {
        return Err(());
    }
    items.push(&expr[start..]);
    Ok(items)
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
    }

    #[test]
    fn refuses_malformed_expressions() {
        for bad in ["n[1-", "n[3-1]", "n[a-b]", "n]1[", "n[1-2][3-4]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
