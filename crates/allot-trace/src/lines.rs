//! Line numbers of CSV records.
//!
//! The `csv` reader's record positions are taken before it consumes what is
//! left of the previous line's end: with CRLF line ends (what spreadsheets
//! and Python's `csv` module write) that is the `\n`, so every record after
//! the first would be reported one line too early; after blank lines, on
//! the first blank line. [`LineIndex`] reads the input as it passes and
//! gives the line of a record's first byte: the first byte at or after its
//! position that is not a line end.

use std::collections::VecDeque;
use std::io::{self, Read};

/// A run of line-end bytes (`\r`, `\n`) in the input.
#[derive(Copy, Clone, Debug)]
struct Run {
    start: u64,
    /// The first byte after the run.
    end: u64,
    /// `\n` bytes of the input up to the end of the run.
    newlines: u64,
}

/// A reader that remembers where lines end in what it has read, so that
/// [`LineIndex::line_of`] can give the line a record starts on.
pub(crate) struct LineIndex<R> {
    inner: R,
    /// Bytes read so far.
    offset: u64,
    /// `\n` bytes read so far.
    newlines: u64,
    /// The run being read, if the last byte read was a line end.
    open: Option<u64>,
    /// Runs not yet passed by a query, in input order.
    runs: VecDeque<Run>,
    /// `\n` bytes up to the end of the last run passed.
    passed: u64,
}

impl<R: Read> LineIndex<R> {
    pub(crate) fn new(inner: R) -> LineIndex<R> {
        LineIndex { inner, offset: 0, newlines: 0, open: None, runs: VecDeque::new(), passed: 0 }
    }

    fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match (b, self.open) {
                (b'\r' | b'\n', open) => {
                    self.open = open.or(Some(self.offset));
                    self.newlines += u64::from(b == b'\n');
                }
                (_, Some(start)) => {
                    self.runs.push_back(Run { start, end: self.offset, newlines: self.newlines });
                    self.open = None;
                }
                (_, None) => {}
            }
            self.offset += 1;
        }
    }

    /// The line (from 1) of the first byte at or after `byte` that is not a
    /// line end. Queries must not go backwards (records are read in order).
    pub(crate) fn line_of(&mut self, byte: u64) -> u64 {
        while let Some(run) = self.runs.front().copied().filter(|r| r.end <= byte) {
            self.passed = run.newlines;
            self.runs.pop_front();
        }
        match self.runs.front() {
            Some(run) if run.start <= byte => run.newlines + 1,
            _ if self.open.is_some_and(|start| start <= byte) => self.newlines + 1,
            _ => self.passed + 1,
        }
    }
}

impl<R: Read> Read for LineIndex<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.scan(&buf[..n]);
        Ok(n)
    }
}

/// The line a record (or an error about one) at `pos` starts on, read
/// through a [`LineIndex`].
pub(crate) fn record_line<R: Read>(rdr: &mut csv::Reader<LineIndex<R>>, pos: &csv::Position) -> u64 {
    rdr.get_mut().line_of(pos.byte())
}

/// A csv reader with a header line, reading through a [`LineIndex`].
pub(crate) fn csv_reader<R: Read>(builder: &mut csv::ReaderBuilder, reader: R) -> csv::Reader<LineIndex<R>> {
    builder.from_reader(LineIndex::new(reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line of every record of `text`, read by the csv reader.
    fn lines(text: &str) -> Vec<u64> {
        let mut rdr = csv::ReaderBuilder::new().has_headers(false).from_reader(LineIndex::new(text.as_bytes()));
        let mut rec = csv::StringRecord::new();
        let mut out = Vec::new();
        while rdr.read_record(&mut rec).unwrap() {
            out.push(record_line(&mut rdr, rec.position().unwrap()));
        }
        out
    }

    #[test]
    fn records_start_on_their_own_line() {
        let cases = [
            ("lf", "h\na\nb\n", vec![1, 2, 3]),
            ("crlf", "h\r\na\r\nb\r\n", vec![1, 2, 3]),
            ("crlf, no final line end", "h\r\na\r\nb", vec![1, 2, 3]),
            ("blank lines", "h\n\n\na\r\n\r\nb\n", vec![1, 4, 6]),
            ("quoted line end", "h\r\n\"a\r\nx\"\r\nb\r\n", vec![1, 2, 4]),
            ("leading blank line", "\r\nh\r\na\r\n", vec![2, 3]),
        ];
        for (name, text, want) in cases {
            assert_eq!(lines(text), want, "case {name}");
        }
    }
}
