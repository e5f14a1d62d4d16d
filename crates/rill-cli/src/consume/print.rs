//! How `rill consume` prints records (`--format value|json|hex|template`), counts
//! them against `--count`, and reports records it cannot deliver.
//!
//! Output goes through one buffered writer, flushed before offsets are stored (so a
//! stored offset never covers a record that did not reach stdout) and before anything
//! is said on stderr (so the two streams stay in order). A write to a closed stdout
//! (`| head`) is [`StdoutClosed`](crate::failure::StdoutClosed): the command stops and
//! stores nothing more.

use std::io::Write as _;

use clap::ValueEnum;
use indicatif::ProgressBar;
use rill_client::{ClientError, Record};

use super::template::{Template, hex};
use crate::failure::stdout_error;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Each value as a line.
    Value,
    /// One JSON object per record.
    Json,
    /// Each value as a line of lower-case hex.
    Hex,
    /// Each record as a line made from --template.
    Template,
}

/// A format with what it needs.
#[derive(Debug, Clone)]
pub(crate) enum Style {
    Value,
    Json,
    Hex,
    Template(Template),
}

/// Prints records and counts them against `--count`.
#[derive(Debug)]
pub(crate) struct Printer {
    style: Style,
    remaining: Option<u64>,
    stdout: std::io::BufWriter<std::io::Stdout>,
    /// One record's line, reused.
    line: Vec<u8>,
    /// Towards `--count`, on a terminal only.
    progress: Option<ProgressBar>,
}

impl Printer {
    pub(crate) fn new(style: Style, count: Option<u64>) -> Self {
        Self {
            style,
            remaining: count,
            stdout: std::io::BufWriter::new(std::io::stdout()),
            line: Vec::new(),
            progress: count.map(|n| crate::progress::bar(n, "records")),
        }
    }

    /// Whether `--count` records were printed.
    pub(crate) fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    pub(crate) fn print(&mut self, record: &Record) -> anyhow::Result<()> {
        self.line.clear();
        match &self.style {
            Style::Value => self.line.extend_from_slice(&record.value),
            Style::Json => {
                serde_json::to_writer(&mut self.line, &crate::record_json::to_json(record))?
            }
            Style::Hex => self.line.extend_from_slice(hex(&record.value).as_bytes()),
            Style::Template(t) => t.render(record, &mut self.line),
        }
        self.line.push(b'\n');
        self.stdout.write_all(&self.line).map_err(stdout_error)?;
        if let Some(n) = self.remaining.as_mut() {
            *n = n.saturating_sub(1);
        }
        if let Some(p) = &self.progress {
            p.inc(1);
        }
        Ok(())
    }

    /// Reports records that cannot be delivered (`DataLoss`, `Corrupt`) as one line on
    /// stderr, after what was printed before them, and returns the last offset of the
    /// range (to store past it); any other error is returned.
    pub(crate) fn lost(&mut self, e: ClientError) -> anyhow::Result<Option<(u32, u64)>> {
        let Some((partition, _, to)) = e.lost_range() else {
            return Err(e.into());
        };
        self.flush()?;
        let said = format!(
            "rill: {}; reading goes on after them",
            e.to_string().replace('\n', " ")
        );
        match &self.progress {
            Some(p) => p.suspend(|| eprintln!("{said}")),
            None => eprintln!("{said}"),
        }
        Ok(to
            .and_then(|t| t.checked_sub(1))
            .map(|last| (partition, last)))
    }

    /// Writes out what is buffered; a closed stdout is [`crate::failure::StdoutClosed`].
    pub(crate) fn flush(&mut self) -> anyhow::Result<()> {
        self.stdout.flush().map_err(stdout_error)
    }

    /// Takes the progress bar off the terminal.
    pub(crate) fn finish(&self) {
        if let Some(p) = &self.progress {
            p.finish_and_clear();
        }
    }
}
