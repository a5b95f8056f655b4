//! A site's table of known models (cinch.conf `ShareModelMemory`, `ShareModelBusy`).

use super::*;

/// A site's table of known models: one value (peak GPU memory, or busy fraction alone) by
/// application and batch size (cinch.conf `ShareModelMemory=bert:32=10G,resnet50=8G`,
/// `ShareModelBusy=bert=58%,resnet50=99%`; an entry without a batch size covers every batch size
/// the table does not list).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTable {
    entries: Vec<(String, Option<u32>, f64)>,
}

impl ModelTable {
    /// Parses `app[:batch]=size` entries separated by commas.
    pub fn parse(text: &str) -> Result<ModelTable, String> {
        Self::parse_with(text, "size", parse_gib)
    }

    /// Parses `app[:batch]=busy` entries (`0.58` or `58%`) separated by commas.
    pub fn parse_busy(text: &str) -> Result<ModelTable, String> {
        Self::parse_with(text, "busy", parse_busy)
    }

    fn parse_with(
        text: &str,
        what: &str,
        value: fn(&str) -> Result<f64, String>,
    ) -> Result<ModelTable, String> {
        let mut entries = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (model, size) = entry
                .split_once('=')
                .ok_or_else(|| format!("'{entry}' is not app[:batch]={what}"))?;
            let (app, batch) = match model.split_once(':') {
                Some((app, batch)) => (
                    app.trim(),
                    Some(
                        batch
                            .trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|&b| b > 0)
                            .ok_or_else(|| {
                                format!("'{entry}': batch '{batch}' is not a positive whole number")
                            })?,
                    ),
                ),
                None => (model.trim(), None),
            };
            if app.is_empty() {
                return Err(format!("'{entry}' names no application"));
            }
            let v = value(size).map_err(|e| format!("'{entry}': {e}"))?;
            entries.push((app.to_ascii_lowercase(), batch, v));
        }
        Ok(ModelTable { entries })
    }

    /// The entries as cinch.conf writes them, `app[:batch]=value` joined by commas, each value
    /// written by `value`.
    pub fn render(&self, value: impl Fn(f64) -> String) -> String {
        self.entries
            .iter()
            .map(|(app, batch, v)| match batch {
                Some(b) => format!("{app}:{b}={}", value(*v)),
                None => format!("{app}={}", value(*v)),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Adds an entry (the caller keeps entries unique).
    pub fn push(&mut self, app: &str, batch: Option<u32>, value: f64) {
        self.entries.push((app.to_ascii_lowercase(), batch, value));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table's peak for `app` at `batch`: the exact entry, else the application's entry
    /// without a batch size.
    pub fn lookup(&self, app: &str, batch: Option<u32>) -> Option<f64> {
        let app = app.to_ascii_lowercase();
        let exact = batch.and_then(|b| {
            self.entries
                .iter()
                .find(|(a, eb, _)| *a == app && *eb == Some(b))
        });
        exact
            .or_else(|| {
                self.entries
                    .iter()
                    .find(|(a, eb, _)| *a == app && eb.is_none())
            })
            .map(|&(_, _, gib)| gib)
    }
}
