//! A job's predicted peak GPU memory and busy fraction, and where each comes from.

use super::*;

/// Where a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// The user's `gpu_mem=`.
    Stated,
    /// The site's model table.
    Table,
    /// The largest peak that this many similar jobs reported.
    Observed(u32),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Stated => f.write_str("stated"),
            Source::Table => f.write_str("model table"),
            Source::Observed(1) => f.write_str("observed peak of 1 similar job"),
            Source::Observed(n) => write!(f, "observed peak of {n} similar jobs"),
        }
    }
}

/// A predicted peak: the largest of what is known (a low estimate must not squeeze a job that
/// has been seen to need more).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub gib: f64,
    pub source: Source,
}

impl fmt::Display for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}G ({})", self.gib, self.source)
    }
}

/// The largest of the stated estimate, the table's entry and the observed peak of similar jobs;
/// `None` when none is known (the job then keeps a GPU of its own).
pub fn predict(
    stated: Option<f64>,
    table: Option<f64>,
    observed: Option<(f64, u32)>,
) -> Option<Prediction> {
    let candidates = [
        stated.map(|gib| Prediction {
            gib,
            source: Source::Stated,
        }),
        table.map(|gib| Prediction {
            gib,
            source: Source::Table,
        }),
        observed.map(|(gib, n)| Prediction {
            gib,
            source: Source::Observed(n),
        }),
    ];
    candidates
        .into_iter()
        .flatten()
        .fold(None, |best: Option<Prediction>, p| match best {
            Some(b) if b.gib >= p.gib => Some(b),
            _ => Some(p),
        })
}

/// A job's prediction from its hints, a site's table and the observed peaks.
pub fn predict_job(
    key: Option<&str>,
    job_id: u32,
    hints: &crate::slurm::job_hints::Hints,
    table: &ModelTable,
    book: &ReportBook,
) -> Option<Prediction> {
    let stated = hints.get(HINT_GPU_MEM).and_then(|v| parse_gib(v).ok());
    let batch = hints.get(HINT_BATCH).and_then(|b| b.parse().ok());
    let from_table = hints.get(HINT_APP).and_then(|app| table.lookup(app, batch));
    let observed = key.and_then(|k| book.observed_peak(k, job_id));
    predict(stated, from_table, observed)
}

/// Where a busy fraction came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BusySource {
    /// The job's own `gpu_busy=` (the helper's measurement, or the user's).
    Reported,
    /// The largest that this many similar jobs reported.
    Observed(u32),
    /// The site's model table (`ShareModelBusy`).
    Table,
    /// Nothing known: taken as fully busy, the most slowdown.
    Unknown,
}

/// How busy a job keeps its GPU alone, and where that came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub fraction: f64,
    pub source: BusySource,
}

impl Busy {
    /// Nothing known: fully busy ([`crate::models::corun::UNKNOWN_BUSY`]).
    pub const UNKNOWN: Busy = Busy {
        fraction: crate::models::corun::UNKNOWN_BUSY,
        source: BusySource::Unknown,
    };
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = (self.fraction * 100.0).round();
        match self.source {
            BusySource::Reported => write!(f, "busy {pct}% (reported)"),
            BusySource::Observed(1) => write!(f, "busy {pct}% (1 similar job)"),
            BusySource::Observed(n) => write!(f, "busy {pct}% ({n} similar jobs)"),
            BusySource::Table => write!(f, "busy {pct}% (model table)"),
            BusySource::Unknown => write!(f, "busy unknown, taken as {pct}%"),
        }
    }
}

/// A job's busy fraction: its own report when it has one (it measured itself), else the largest
/// of what similar jobs reported and the site's table lists, else [`Busy::UNKNOWN`].
pub fn busy_of(
    key: Option<&str>,
    job_id: u32,
    hints: &crate::slurm::job_hints::Hints,
    table: &ModelTable,
    book: &ReportBook,
) -> Busy {
    if let Some(fraction) = hints.get(HINT_GPU_BUSY).and_then(|v| parse_busy(v).ok()) {
        return Busy {
            fraction,
            source: BusySource::Reported,
        };
    }
    let batch = hints.get(HINT_BATCH).and_then(|b| b.parse().ok());
    let from_table = hints.get(HINT_APP).and_then(|app| table.lookup(app, batch));
    let observed = key.and_then(|k| book.observed_busy(k, job_id));
    match (observed, from_table) {
        (Some((o, n)), t) if t.is_none_or(|t| o >= t) => Busy {
            fraction: o,
            source: BusySource::Observed(n),
        },
        (_, Some(t)) => Busy {
            fraction: t,
            source: BusySource::Table,
        },
        _ => Busy::UNKNOWN,
    }
}
