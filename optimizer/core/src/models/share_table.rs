//! The site's model table from its own accounting: what Slurm's NVML plugin recorded of each job
//! (`gres/gpumem`, the job's peak GPU memory in bytes, and `gres/gpuutil`, its processes' SM
//! utilisation in percent), grouped by the `app=` and `batch=` hints the jobs gave, turned into
//! cinch.conf's `ShareModelMemory` and `ShareModelBusy` (docs/policies/sharing.md).
//!
//! Input: `sacct -a -P --noconvert --format=JobID,AllocTRES,Comment,TRESUsageInMax,TRESUsageInAve`
//! (columns in any order; Comment needs `AccountingStoreFlags=job_comment`). The job's own line
//! gives its GPUs and hints; its steps' lines (`123.batch`, `123.0`) give what was used. Only
//! jobs of one GPU count: Slurm sums usage over a job's GPUs. Per application and batch size the
//! table keeps the largest peak and the largest average busy fraction any job showed, as cinch
//! predicts from the largest it knows.

use std::collections::BTreeMap;

use crate::models::sharing::{ModelTable, HINT_APP, HINT_BATCH};
use crate::slurm::job_hints::Hints;

/// The columns the input must have.
pub const SACCT_COLUMNS: [&str; 4] = ["JobID", "AllocTRES", "TRESUsageInMax", "TRESUsageInAve"];

/// The `sacct` command whose output [`from_sacct`] reads.
pub const SACCT_COMMAND: &str =
    "sacct -a -P --noconvert -S now-30days --format=JobID,AllocTRES,Comment,TRESUsageInMax,TRESUsageInAve";

/// What the accounting showed, per application and batch size, and what was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareTable {
    /// Peak GPU memory (GiB) by application and batch size.
    pub memory: ModelTable,
    /// Busy fraction alone by application and batch size.
    pub busy: ModelTable,
    /// Jobs that went into the table.
    pub jobs: usize,
    /// Jobs left out, and why (counted).
    pub skipped: BTreeMap<&'static str, usize>,
}

#[derive(Default)]
struct Job {
    gpus: Option<u32>,
    hints: Hints,
    peak_bytes: Option<f64>,
    util_percent: Option<f64>,
}

/// One `name=value` entry of a TRES usage string.
fn tres_value<'a>(tres: &'a str, name: &str) -> Option<&'a str> {
    tres.split(',')
        .filter_map(|item| item.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A size as sacct writes it: bytes with `--noconvert`, else a number with K/M/G/T/P.
fn parse_bytes(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let exp = match c.to_ascii_uppercase() {
                'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                'P' => 5,
                _ => return Err(format!("'{t}' is not a size")),
            };
            (&t[..t.len() - 1], 1024f64.powi(exp))
        }
        _ => (t, 1.0),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v * scale)
        .ok_or_else(|| format!("'{t}' is not a size"))
}

/// Reads `sacct -P` output ([`SACCT_COMMAND`]) into the table.
pub fn from_sacct(text: &str) -> Result<ShareTable, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or("the input is empty (no sacct header line)")?;
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    let column = |name: &str| columns.iter().position(|c| *c == name);
    let mut at = [0usize; 4];
    for (slot, name) in at.iter_mut().zip(SACCT_COLUMNS) {
        *slot = column(name).ok_or_else(|| {
            format!("the sacct header has no {name} column (make it with: {SACCT_COMMAND})")
        })?;
    }
    let [id_at, alloc_at, max_at, ave_at] = at;
    let comment_at = column("Comment");
    let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
    for (n, line) in lines {
        let fields: Vec<&str> = line.split('|').collect();
        if fields.len() != columns.len() {
            return Err(format!(
                "line {}: {} fields where the header has {} (use sacct -P)",
                n + 1,
                fields.len(),
                columns.len()
            ));
        }
        let id = fields[id_at].trim();
        let (base, step) = match id.split_once('.') {
            Some((base, step)) => (base, Some(step)),
            None => (id, None),
        };
        let job = jobs.entry(base.to_string()).or_default();
        if step.is_none() {
            job.gpus = Some(
                crate::slurm::gres::tres_gpus(fields[alloc_at].trim())
                    .map_err(|e| format!("line {}: AllocTRES: {e}", n + 1))?,
            );
            job.hints = Hints::from_comment(comment_at.map(|c| fields[c]));
            continue;
        }
        if let Some(v) = tres_value(fields[max_at], "gres/gpumem") {
            let bytes = parse_bytes(v).map_err(|e| format!("line {}: gres/gpumem: {e}", n + 1))?;
            job.peak_bytes = Some(job.peak_bytes.map_or(bytes, |b| b.max(bytes)));
        }
        if let Some(v) = tres_value(fields[ave_at], "gres/gpuutil") {
            let pct = v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p >= 0.0)
                .ok_or_else(|| format!("line {}: gres/gpuutil: '{v}' is not a percent", n + 1))?;
            job.util_percent = Some(job.util_percent.map_or(pct, |p| p.max(pct)));
        }
    }
    let mut builder = TableBuilder::default();
    for job in jobs.values() {
        builder.add(job.gpus, &job.hints, job.peak_bytes, job.util_percent);
    }
    Ok(builder.table())
}

/// The most applications and batch sizes a [`TableBuilder`] keeps (the hints are users' free
/// text).
pub const MAX_TABLE_KEYS: usize = 1_000;

/// The table built from jobs one at a time: sacct's records ([`from_sacct`]) or what the job
/// watchers read while jobs ran (the optimizer's `GET /v1/share-table`). Per application and
/// batch size it keeps the largest peak and the largest average busy fraction any job showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableBuilder {
    memory: BTreeMap<(String, Option<u32>), f64>,
    busy: BTreeMap<(String, Option<u32>), f64>,
    jobs: usize,
    skipped: BTreeMap<&'static str, usize>,
}

impl TableBuilder {
    /// One job: its GPU count (`None`: unknown), its hints, its peak GPU memory in bytes and its
    /// average busy share in percent, where known. Only jobs of one GPU with an `app=` hint
    /// count; the others are counted as left out, with why.
    pub fn add(
        &mut self,
        gpus: Option<u32>,
        hints: &Hints,
        peak_bytes: Option<f64>,
        util_percent: Option<f64>,
    ) {
        let why = match gpus {
            None => Some("steps without their job's line"),
            Some(1) => None,
            Some(_) => Some("not one GPU"),
        }
        .or_else(|| (!hints.contains_key(HINT_APP)).then_some("no app= hint in the Comment"))
        .or_else(|| {
            (peak_bytes.is_none() && util_percent.is_none())
                .then_some("no gres/gpumem or gres/gpuutil recorded")
        });
        let app = hints
            .get(HINT_APP)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default();
        let batch = hints
            .get(HINT_BATCH)
            .and_then(|b| b.parse::<u32>().ok())
            .filter(|&b| b > 0);
        let key = (app, batch);
        let full = !self.memory.contains_key(&key)
            && !self.busy.contains_key(&key)
            && self.memory.len().max(self.busy.len()) >= MAX_TABLE_KEYS;
        if let Some(why) = why.or(full.then_some("more applications than the table keeps")) {
            *self.skipped.entry(why).or_default() += 1;
            return;
        }
        if let Some(bytes) = peak_bytes.filter(|b| *b > 0.0) {
            let gib = bytes / 1024f64.powi(3);
            let e = self.memory.entry(key.clone()).or_default();
            *e = e.max(gib);
        }
        if let Some(pct) = util_percent.filter(|p| *p > 0.0) {
            let e = self.busy.entry(key).or_default();
            *e = e.max((pct / 100.0).clamp(0.01, 1.0));
        }
        self.jobs += 1;
    }

    /// Jobs that went in.
    pub fn jobs(&self) -> usize {
        self.jobs
    }

    pub fn table(&self) -> ShareTable {
        let mut table = ShareTable {
            jobs: self.jobs,
            skipped: self.skipped.clone(),
            ..ShareTable::default()
        };
        for ((app, batch), gib) in &self.memory {
            // Rounded up to a tenth of a GiB: the table never promises less than was seen.
            table
                .memory
                .push(app, *batch, ((gib * 10.0).ceil() / 10.0).max(0.1));
        }
        for ((app, batch), fraction) in &self.busy {
            table
                .busy
                .push(app, *batch, ((fraction * 100.0).ceil() / 100.0).min(1.0));
        }
        table
    }
}

impl ShareTable {
    /// The cinch.conf lines, with a comment saying what went in and what was left out.
    pub fn conf_lines(&self) -> String {
        let mut out = format!(
            "# cinch share-table: {} job(s) of one GPU with an app= hint",
            self.jobs
        );
        for (why, n) in &self.skipped {
            out.push_str(&format!("; {n} left out: {why}"));
        }
        out.push('\n');
        if !self.memory.is_empty() {
            out.push_str(&format!(
                "ShareModelMemory={}\n",
                self.memory.render(|g| format!("{g:.1}G"))
            ));
        }
        if !self.busy.is_empty() {
            out.push_str(&format!(
                "ShareModelBusy={}\n",
                self.busy.render(|b| format!("{:.0}%", b * 100.0))
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "JobID|AllocTRES|Comment|TRESUsageInMax|TRESUsageInAve";

    #[test]
    fn jobs_of_one_gpu_give_their_applications_largest_peak_and_busy_fraction() {
        let text = format!(
            "{HEADER}\n\
             10|cpu=4,gres/gpu=1,node=1|cinch:app=bert,batch=32||\n\
             10.batch|cpu=4,gres/gpu=1,node=1||cpu=00:00:01,gres/gpumem=7516192768,gres/gpuutil=40|cpu=00:00:01,gres/gpumem=7000000000,gres/gpuutil=55\n\
             11|cpu=4,gres/gpu=1,node=1|cinch:app=BERT,batch=32||\n\
             11.0|cpu=4,gres/gpu=1,node=1||gres/gpumem=6G,gres/gpuutil=70|gres/gpumem=5G,gres/gpuutil=61.5\n\
             12|gres/gpu=1|cinch:app=resnet50||\n\
             12.batch|gres/gpu=1||gres/gpumem=3G|gres/gpuutil=99\n\
             13|gres/gpu=2|cinch:app=bert,batch=32||\n\
             13.batch|gres/gpu=2||gres/gpumem=20G|gres/gpuutil=180\n\
             14|gres/gpu=1|||\n\
             14.batch|gres/gpu=1||gres/gpumem=1G|gres/gpuutil=10\n\
             15|gres/gpu=1|cinch:app=ncf||\n\
             15.batch|gres/gpu=1||cpu=00:00:01|cpu=00:00:01\n"
        );
        let table = from_sacct(&text).unwrap();
        // bert:32's peak is job 10's 7.0 GiB (7516192768 bytes), its busy job 11's 61.5%.
        assert_eq!(table.memory.lookup("bert", Some(32)), Some(7.0));
        assert_eq!(table.busy.lookup("bert", Some(32)), Some(0.62));
        assert_eq!(table.memory.lookup("resnet50", None), Some(3.0));
        assert_eq!(table.busy.lookup("resnet50", Some(64)), Some(0.99));
        assert_eq!(table.jobs, 3);
        assert_eq!(table.skipped["not one GPU"], 1);
        assert_eq!(table.skipped["no app= hint in the Comment"], 1);
        assert_eq!(table.skipped["no gres/gpumem or gres/gpuutil recorded"], 1);
        let conf = table.conf_lines();
        assert!(
            conf.contains("ShareModelMemory=bert:32=7.0G,resnet50=3.0G\n"),
            "{conf}"
        );
        assert!(
            conf.contains("ShareModelBusy=bert:32=62%,resnet50=99%\n"),
            "{conf}"
        );
        // What it writes, cinch.conf reads back.
        let line = conf
            .lines()
            .find(|l| l.starts_with("ShareModelBusy="))
            .unwrap();
        let back = ModelTable::parse_busy(line.trim_start_matches("ShareModelBusy=")).unwrap();
        assert_eq!(back, table.busy);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = from_sacct("").unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let err = from_sacct("JobID|AllocTRES\n1|gres/gpu=1\n").unwrap_err();
        assert!(err.contains("TRESUsageInMax"), "{err}");
        let err = from_sacct(&format!("{HEADER}\n1|gres/gpu=1|x\n")).unwrap_err();
        assert!(err.contains("line 2") && err.contains("fields"), "{err}");
        let err = from_sacct(&format!("{HEADER}\n1.0|||gres/gpumem=lots|\n")).unwrap_err();
        assert!(err.contains("gres/gpumem"), "{err}");
        let err = from_sacct(&format!("{HEADER}\n1.0||||gres/gpuutil=-3\n")).unwrap_err();
        assert!(err.contains("gres/gpuutil"), "{err}");
        // A header alone is an empty table, said so.
        let table = from_sacct(HEADER).unwrap();
        assert_eq!(table.jobs, 0);
        assert!(table
            .conf_lines()
            .starts_with("# cinch share-table: 0 job(s)"));
    }
}
