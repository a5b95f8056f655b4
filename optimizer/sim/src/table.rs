//! Delimited text files with a header line (traces, measurements), read with the `csv` crate
//! and wrapped so that every reader's error names the file, the line and the column at fault.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::SimError;

/// A delimited text file with a header line, read whole (traces are megabytes, not gigabytes).
pub(crate) struct CsvTable {
    path: PathBuf,
    header: Vec<String>,
    /// (1-based line number, fields).
    rows: Vec<(usize, csv::StringRecord)>,
}

impl CsvTable {
    pub(crate) fn read(path: &Path) -> Result<CsvTable, SimError> {
        Self::read_with(path, b',')
    }

    /// Reads a file whose fields are separated by `delimiter`. Fields may be double-quoted (with
    /// `""` for a quote) when the delimiter is a comma; other delimiters (`sacct -P`'s `|`) take
    /// quotes literally. Blank lines are skipped; fields are trimmed.
    pub(crate) fn read_with(path: &Path, delimiter: u8) -> Result<CsvTable, SimError> {
        let text = std::fs::read(path).map_err(|e| SimError::io(path, e))?;
        // The csv crate's line numbers skip blank lines; its byte offsets do not. Records come in
        // order, so lines are counted on from the previous one.
        let counted = std::cell::Cell::new((0usize, 1usize));
        let line_at = |byte: u64| {
            let mut at = (byte as usize).min(text.len());
            // A record's offset may sit on the blank lines before it.
            while at < text.len() && matches!(text[at], b'\n' | b'\r') {
                at += 1;
            }
            let (from, line) = counted.get();
            let line = if at >= from {
                line + text[from..at].iter().filter(|&&b| b == b'\n').count()
            } else {
                1 + text[..at].iter().filter(|&&b| b == b'\n').count()
            };
            counted.set((at, line));
            line
        };
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .quoting(delimiter == b',')
            .trim(csv::Trim::All)
            .from_reader(text.as_slice());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| record_error(path, e, &line_at))?
            .iter()
            .map(str::to_string)
            .collect();
        if header.iter().all(String::is_empty) {
            return Err(SimError::parse(
                path,
                1,
                "the file is empty (no header line)",
            ));
        }
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| record_error(path, e, &line_at))?;
            let line = record.position().map_or(0, |p| line_at(p.byte()));
            rows.push((line, record));
        }
        Ok(CsvTable {
            path: path.to_path_buf(),
            header,
            rows,
        })
    }

    /// The index of a required column.
    pub(crate) fn column(&self, name: &str) -> Result<usize, SimError> {
        self.optional_column(name).ok_or_else(|| {
            SimError::parse(
                &self.path,
                1,
                format!(
                    "no '{name}' column (the header has: {})",
                    self.header.join(", ")
                ),
            )
        })
    }

    pub(crate) fn optional_column(&self, name: &str) -> Option<usize> {
        self.header
            .iter()
            .position(|h| h.eq_ignore_ascii_case(name))
    }

    pub(crate) fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|(line, fields)| Row {
            path: &self.path,
            line: *line,
            fields,
            header: &self.header,
        })
    }
}

/// A record the `csv` crate could not read, as an error at its line.
fn record_error(path: &Path, error: csv::Error, line_at: &dyn Fn(u64) -> usize) -> SimError {
    let line = error.position().map_or(1, |p| line_at(p.byte()));
    match error.into_kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => SimError::parse(
            path,
            line,
            format!("{len} fields where the header has {expected_len}"),
        ),
        csv::ErrorKind::Io(io) => SimError::io(path, io),
        csv::ErrorKind::Utf8 { err, .. } => SimError::parse(path, line, err.to_string()),
        other => SimError::parse(path, line, format!("{other:?}")),
    }
}

/// One data row, able to explain what is wrong with it.
pub(crate) struct Row<'a> {
    path: &'a Path,
    pub(crate) line: usize,
    fields: &'a csv::StringRecord,
    header: &'a [String],
}

impl Row<'_> {
    pub(crate) fn get(&self, column: usize) -> &str {
        self.fields.get(column).unwrap_or("")
    }

    pub(crate) fn error(&self, message: impl fmt::Display) -> SimError {
        SimError::parse(self.path, self.line, message.to_string())
    }

    /// The field parsed as `T`, or an error naming the column and the value.
    pub(crate) fn parse<T: FromStr>(&self, column: usize) -> Result<T, SimError>
    where
        T::Err: fmt::Display,
    {
        let value = self.get(column);
        value.parse().map_err(|e| {
            self.error(format!(
                "column '{}': '{value}' is not valid ({e})",
                self.header[column]
            ))
        })
    }

    /// Like [`Row::parse`], `None` for an empty field.
    pub(crate) fn parse_optional<T: FromStr>(&self, column: usize) -> Result<Option<T>, SimError>
    where
        T::Err: fmt::Display,
    {
        if self.get(column).is_empty() {
            Ok(None)
        } else {
            self.parse(column).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;

    #[test]
    fn quoted_fields_and_doubled_quotes_are_read_and_pipes_take_quotes_literally() {
        let path = test_files::write("q.csv", "a,b,c,d\na,\"b,c\",\"say \"\"hi\"\"\",d\n");
        let table = CsvTable::read(&path).unwrap();
        let row = table.rows().next().unwrap();
        let fields: Vec<&str> = (0..4).map(|i| row.get(i)).collect();
        assert_eq!(fields, vec!["a", "b,c", r#"say "hi""#, "d"]);
        let path = test_files::write("p.txt", "A|B|C|D\na|\"b||c\n");
        let table = CsvTable::read_with(&path, b'|').unwrap();
        let row = table.rows().next().unwrap();
        assert_eq!(row.get(1), "\"b");
        assert_eq!(row.get(2), "");
    }

    #[test]
    fn a_short_row_is_an_error_with_its_line_number() {
        let path = test_files::write("short.csv", "a,b,c\n1,2,3\n\n4,5\n");
        let err = CsvTable::read(&path).err().unwrap().to_string();
        assert!(err.contains(":4:") && err.contains("2 fields"), "{err}");
    }

    #[test]
    fn an_empty_file_is_an_error() {
        let path = test_files::write("empty.csv", "");
        let err = CsvTable::read(&path).err().unwrap().to_string();
        assert!(err.contains("empty"), "{err}");
    }
}
