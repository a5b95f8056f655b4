//! Slurm's GRES and TRES strings, read in one place: the GPU part of a job's TRES request
//! (`tres_per_job/node/task/socket`), a node's GRES (`Gres=` in slurm.conf, `gres` and
//! `gres_used` as slurmctld reports them) and an allocated-TRES string (`AllocTRES` in sacct).
//!
//! sbatch turns `--gres=gpu:2` / `--gpus-per-node=2` into `tres_per_node = "gres:gpu:2"`,
//! `--gpus=8` into `tres_per_job = "gres:gpu:8"`, `--gpus-per-task=1` into
//! `tres_per_task = "gres:gpu:1"`, and typed requests into `gres:gpu:a100:2`. Slurm 23.11+ spells
//! the prefix `gres/` and may use `=` before the count. Entries are separated by `,` (the header
//! comments say `;`, both are accepted). Other TRES (`cpu`, `mem`, `gres:shard`, licenses, ...)
//! are not GPUs and are skipped.

use std::fmt;

/// GPUs asked for in one TRES string (one scope: per job, node, task or socket).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuSpec {
    /// Total GPUs across the string's `gpu` entries.
    pub count: u64,
    /// GPU types named (`a100` in `gres:gpu:a100:2`), in order, without repeats.
    pub types: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TresError {
    #[error("GPU entry '{entry}' has a bad count '{count}'")]
    BadCount { entry: String, count: String },
    #[error("GPU entry '{entry}' has too many fields")]
    TooManyFields { entry: String },
}

/// Parses one TRES string; `Ok(None)` when it names no GPU at all.
pub fn parse_gpu_spec(tres: &str) -> Result<Option<GpuSpec>, TresError> {
    let mut spec: Option<GpuSpec> = None;
    for entry in tres
        .split([',', ';'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let Some(gres) = entry
            .strip_prefix("gres:")
            .or_else(|| entry.strip_prefix("gres/"))
        else {
            continue; // cpu=4, mem=..., license: not GPUs
        };
        let fields: Vec<&str> = gres.split([':', '=']).collect();
        if fields[0] != "gpu" {
            continue; // gres:shard, gres:mps, ...
        }
        let (gpu_type, count) = match fields.as_slice() {
            [_] => (None, 1),
            [_, last] => match parse_count(last) {
                Some(count) => (None, count),
                // `gres:gpu:a100` asks for one GPU of that type.
                None if is_type_name(last) => (Some(*last), 1),
                None => return Err(bad_count(entry, last)),
            },
            [_, gpu_type, count] => match parse_count(count) {
                Some(count) => (Some(*gpu_type), count),
                None => return Err(bad_count(entry, count)),
            },
            _ => {
                return Err(TresError::TooManyFields {
                    entry: entry.to_string(),
                })
            }
        };
        let spec = spec.get_or_insert_with(GpuSpec::default);
        spec.count = spec.count.saturating_add(count);
        if let Some(t) = gpu_type {
            if !spec.types.iter().any(|known| known == t) {
                spec.types.push(t.to_string());
            }
        }
    }
    Ok(spec)
}

fn bad_count(entry: &str, count: &str) -> TresError {
    TresError::BadCount {
        entry: entry.to_string(),
        count: count.to_string(),
    }
}

/// A GRES count: digits with an optional k/m/g suffix (x1024 each), as Slurm accepts.
fn parse_count(text: &str) -> Option<u64> {
    let (digits, multiplier) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&text[..i], 1u64 << 20),
        (i, 'g' | 'G') => (&text[..i], 1u64 << 30),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

/// Slurm GRES type names start with a letter (`a100`, `tesla_v100`); a bare number is a count.
fn is_type_name(text: &str) -> bool {
    text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// How many of the GRES `name` (`gpu`, `shard`) a node's GRES string holds: `gpu:a100:4(S:0-1),
/// shard:64`, `gpu:(null):2(IDX:0-1)`, `gpu:0`. Details in brackets and `(null)` types are
/// dropped; a bare `gpu` or `gpu:TYPE` is one; an entry whose count does not parse counts none.
pub fn node_count(gres: &str, name: &str) -> u32 {
    gres.split(',')
        .filter_map(|entry| {
            let entry = entry.replace("(null)", "");
            let entry = entry.split('(').next()?.trim().trim_end_matches(':');
            let fields: Vec<&str> = entry.split(':').filter(|f| !f.is_empty()).collect();
            match fields.as_slice() {
                [first, ..] if *first != name => None,
                [_] => Some(1),
                [_, last] if is_type_name(last) => Some(1),
                [_, .., last] => parse_count(last).map(|c| c.min(u64::from(u32::MAX)) as u32),
                [] => None,
            }
        })
        .fold(0u32, u32::saturating_add)
}

/// GPUs in a node's GRES string ([`node_count`] of `gpu`).
pub fn node_gpus(gres: &str) -> u32 {
    node_count(gres, "gpu")
}

/// GPUs in an allocated TRES given as (name, count) entries (`gres/gpu`, `gres/gpu:a100`,
/// `cpu`, ...): the untyped `gres/gpu` count where Slurm gives one (it includes the typed ones),
/// else the sum of the typed counts. [`tres_gpus`] reads the text form, sacct's JSON reader the
/// structured one, by this one rule.
pub fn allocated_gpus<'a>(entries: impl IntoIterator<Item = (&'a str, f64)>) -> f64 {
    let (mut total, mut typed) = (None, 0.0);
    for (name, count) in entries {
        if name == "gres/gpu" {
            total = Some(count);
        } else if name.starts_with("gres/gpu:") {
            typed += count;
        }
    }
    total.unwrap_or(typed)
}

/// GPUs in an allocated-TRES string such as `billing=4,cpu=4,gres/gpu=2,gres/gpu:a100=2,node=1`
/// ([`allocated_gpus`]).
pub fn tres_gpus(tres: &str) -> Result<u32, String> {
    let mut entries = Vec::new();
    for item in tres.split(',').filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("'{item}' is not name=count"));
        };
        if key == "gres/gpu" || key.starts_with("gres/gpu:") {
            let count = value
                .parse::<u32>()
                .map_err(|_| format!("'{item}': '{value}' is not a count"))?;
            entries.push((key, f64::from(count)));
        }
    }
    Ok(allocated_gpus(entries).min(f64::from(u32::MAX)) as u32)
}

/// The GPU request of a job across all four TRES scopes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuRequest {
    pub per_job: Option<GpuSpec>,
    pub per_node: Option<GpuSpec>,
    pub per_task: Option<GpuSpec>,
    pub per_socket: Option<GpuSpec>,
}

impl GpuRequest {
    /// Parses each scope's TRES string (absent strings mean no GPUs in that scope).
    pub fn parse(
        per_job: Option<&str>,
        per_node: Option<&str>,
        per_task: Option<&str>,
        per_socket: Option<&str>,
    ) -> Result<Self, TresError> {
        let parse = |s: Option<&str>| s.map(parse_gpu_spec).transpose().map(Option::flatten);
        Ok(GpuRequest {
            per_job: parse(per_job)?,
            per_node: parse(per_node)?,
            per_task: parse(per_task)?,
            per_socket: parse(per_socket)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.per_job.is_none()
            && self.per_node.is_none()
            && self.per_task.is_none()
            && self.per_socket.is_none()
    }

    /// Total GPUs the job needs, given its node and task counts as known at submit time.
    /// `None` when that cannot be known before Slurm places the job (per-socket requests, or a
    /// per-task request without a task count).
    pub fn total(&self, min_nodes: Option<u32>, num_tasks: Option<u32>) -> Option<u64> {
        if let Some(job) = &self.per_job {
            return Some(job.count);
        }
        if let Some(node) = &self.per_node {
            return Some(
                node.count
                    .saturating_mul(u64::from(min_nodes.unwrap_or(1).max(1))),
            );
        }
        if let Some(task) = &self.per_task {
            return num_tasks.map(|n| task.count.saturating_mul(u64::from(n)));
        }
        if self.per_socket.is_some() {
            return None;
        }
        Some(0)
    }

    /// GPU types named in any scope, without repeats.
    pub fn types(&self) -> Vec<&str> {
        let mut types: Vec<&str> = Vec::new();
        for spec in [
            &self.per_job,
            &self.per_node,
            &self.per_task,
            &self.per_socket,
        ]
        .into_iter()
        .flatten()
        {
            for t in &spec.types {
                if !types.contains(&t.as_str()) {
                    types.push(t);
                }
            }
        }
        types
    }
}

impl fmt::Display for GpuRequest {
    /// `per_node:4` / `per_job:8` / `per_task:1,per_node:2`; `none` without GPUs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scopes = [
            ("per_job", &self.per_job),
            ("per_node", &self.per_node),
            ("per_task", &self.per_task),
            ("per_socket", &self.per_socket),
        ];
        let mut first = true;
        for (name, spec) in scopes {
            if let Some(spec) = spec {
                if !first {
                    f.write_str(",")?;
                }
                write!(f, "{name}:{}", spec.count)?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_gpus_and_shards_in_a_nodes_gres() {
        assert_eq!(node_gpus("gpu:8"), 8);
        assert_eq!(node_gpus("gpu:a100:8(S:0-1)"), 8);
        assert_eq!(node_gpus("gpu:4(IDX:0-3)"), 4);
        assert_eq!(node_gpus("gpu:(null):2(IDX:0-1)"), 2);
        assert_eq!(node_gpus("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:4)"), 3);
        assert_eq!(node_gpus("gpu:0"), 0);
        assert_eq!(node_gpus("shard:4,gpu:2"), 2);
        assert_eq!(node_gpus(""), 0);
        assert_eq!(node_gpus("(null)"), 0);
        // slurm.conf's Gres=: a bare name or a type alone is one.
        assert_eq!(node_gpus("gpu:a100:4,shard:64"), 4);
        assert_eq!(node_gpus("gpu"), 1);
        assert_eq!(node_gpus("gpu:a100"), 1);
        assert_eq!(node_count("gpu:2,shard:16", "shard"), 16);
        assert_eq!(
            node_count("gpu:a100:2(S:0),shard:(null):8(IDX:0-1)", "shard"),
            8
        );
        assert_eq!(node_count("gpu:8", "shard"), 0);
    }

    #[test]
    fn an_allocated_tres_counts_its_gpus_once() {
        assert_eq!(tres_gpus("cpu=4,gres/gpu=2"), Ok(2));
        assert_eq!(tres_gpus("gres/gpu=2,gres/gpu:a100=2"), Ok(2));
        assert_eq!(tres_gpus("gres/gpu:a100=2,gres/gpu:v100=1"), Ok(3));
        assert_eq!(tres_gpus("billing=4,cpu=4,node=1"), Ok(0));
        assert!(tres_gpus("gres/gpu=many").is_err());
        assert!(tres_gpus("cpu").is_err());
        assert_eq!(
            allocated_gpus([("cpu", 8.0), ("gres/gpu:a100", 2.0), ("gres/gpu:v100", 1.0)]),
            3.0
        );
    }

    fn spec(count: u64, types: &[&str]) -> Option<GpuSpec> {
        Some(GpuSpec {
            count,
            types: types.iter().map(|t| t.to_string()).collect(),
        })
    }

    #[test]
    fn parses_the_spellings_sbatch_produces() {
        assert_eq!(parse_gpu_spec("gres:gpu:2"), Ok(spec(2, &[])));
        assert_eq!(parse_gpu_spec("gres:gpu:a100:4"), Ok(spec(4, &["a100"])));
        assert_eq!(parse_gpu_spec("gres/gpu:8"), Ok(spec(8, &[])));
        assert_eq!(parse_gpu_spec("gres/gpu=3"), Ok(spec(3, &[])));
        assert_eq!(parse_gpu_spec("gres/gpu:h100=2"), Ok(spec(2, &["h100"])));
        assert_eq!(parse_gpu_spec("gres:gpu"), Ok(spec(1, &[])));
        assert_eq!(parse_gpu_spec("gres:gpu:v100"), Ok(spec(1, &["v100"])));
        assert_eq!(parse_gpu_spec("gres:gpu:0"), Ok(spec(0, &[])));
    }

    #[test]
    fn skips_entries_that_are_not_gpus() {
        assert_eq!(parse_gpu_spec("cpu=4"), Ok(None));
        assert_eq!(parse_gpu_spec("gres:shard:2"), Ok(None));
        assert_eq!(parse_gpu_spec(""), Ok(None));
        assert_eq!(
            parse_gpu_spec("cpu=4,gres:gpu:2,gres:mps:100"),
            Ok(spec(2, &[]))
        );
        // A GRES merely starting with "gpu" is not a GPU.
        assert_eq!(parse_gpu_spec("gres:gpumem:2"), Ok(None));
    }

    #[test]
    fn sums_several_gpu_entries_and_keeps_their_types() {
        assert_eq!(
            parse_gpu_spec("gres:gpu:a100:2,gres:gpu:v100:1;gres:gpu:a100:1"),
            Ok(spec(4, &["a100", "v100"]))
        );
    }

    #[test]
    fn accepts_slurm_count_suffixes() {
        assert_eq!(parse_gpu_spec("gres:gpu:1k"), Ok(spec(1024, &[])));
        assert_eq!(
            parse_gpu_spec("gres:gpu:a100:2K"),
            Ok(spec(2048, &["a100"]))
        );
    }

    #[test]
    fn rejects_malformed_gpu_entries_with_the_offending_text() {
        assert_eq!(
            parse_gpu_spec("gres:gpu:a100:two"),
            Err(TresError::BadCount {
                entry: "gres:gpu:a100:two".into(),
                count: "two".into()
            })
        );
        assert!(matches!(
            parse_gpu_spec("gres:gpu:2x"),
            Err(TresError::BadCount { .. })
        ));
        assert!(matches!(
            parse_gpu_spec("gres:gpu:a:b:3"),
            Err(TresError::TooManyFields { .. })
        ));
        assert!(matches!(
            parse_gpu_spec("gres:gpu:99999999999999999999"),
            Err(TresError::BadCount { .. })
        ));
    }

    #[test]
    fn totals_follow_the_scope() {
        let per_node = GpuRequest::parse(None, Some("gres:gpu:4"), None, None).unwrap();
        assert_eq!(per_node.total(Some(2), None), Some(8));
        assert_eq!(
            per_node.total(None, None),
            Some(4),
            "unset node count means one node"
        );
        assert_eq!(per_node.to_string(), "per_node:4");

        let per_job = GpuRequest::parse(Some("gres:gpu:8"), None, None, None).unwrap();
        assert_eq!(per_job.total(Some(3), Some(5)), Some(8));

        let per_task = GpuRequest::parse(None, None, Some("cpu=2,gres:gpu:1"), None).unwrap();
        assert_eq!(per_task.total(Some(1), Some(6)), Some(6));
        assert_eq!(per_task.total(Some(1), None), None);

        let per_socket = GpuRequest::parse(None, None, None, Some("gres:gpu:1")).unwrap();
        assert_eq!(per_socket.total(Some(1), Some(1)), None);

        let none = GpuRequest::parse(None, None, Some("cpu=1"), None).unwrap();
        assert!(none.is_empty());
        assert_eq!(none.total(None, None), Some(0));
        assert_eq!(none.to_string(), "none");
    }

    #[test]
    fn lists_types_across_scopes() {
        let req = GpuRequest::parse(Some("gres:gpu:a100:8"), Some("gres:gpu:a100:4"), None, None)
            .unwrap();
        assert_eq!(req.types(), vec!["a100"]);
        assert_eq!(req.to_string(), "per_job:8,per_node:4");
    }
}
