//! The input as lines: a `BufRead` with a count of the line feeds and bytes consumed, and
//! a line reader whose memory is bounded whatever the length of a line.

use std::io::{self, BufRead};

pub(crate) enum InputError {
    /// The record starting on `line` is over the limit; it was read past, not kept.
    TooLong { line: u64 },
    /// The record starting on `line` is not valid (CSV syntax, UTF-8).
    Malformed { line: u64, reason: String },
    /// Reading failed; `line` is where the record being read started.
    Io { line: u64, error: io::Error },
}

pub(crate) struct Input<R> {
    pub(crate) inner: R,
    /// Line feeds consumed: the line being read is `line + 1`.
    pub(crate) line: u64,
    /// Bytes consumed.
    pub(crate) bytes: u64,
    /// The last line read by [`Input::next_line`], without its `\n` or `\r\n`.
    pub(crate) buf: Vec<u8>,
    eof: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl<R: BufRead> Input<R> {
    pub(crate) fn new(inner: R) -> Self {
        Input {
            inner,
            line: 0,
            bytes: 0,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// The buffered bytes, filling the buffer when it is empty; retried on `Interrupted`.
    /// Empty at the end of the input, which is not read again once reached (a terminal's
    /// end of file is given once).
    pub(crate) fn fill(&mut self) -> io::Result<&[u8]> {
        fill(&mut self.inner, &mut self.eof)
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.bytes += n as u64;
    }

    /// Consumes a UTF-8 byte order mark, if the input starts with one.
    pub(crate) fn skip_bom(&mut self) -> io::Result<()> {
        // The mark may straddle two reads of a small buffer: look at up to 3 bytes.
        let mut seen = 0;
        while seen < BOM.len() {
            let chunk = self.fill()?;
            if chunk.is_empty() {
                return Ok(());
            }
            let n = chunk.len().min(BOM.len() - seen);
            if chunk[..n] != BOM[seen..seen + n] {
                if seen > 0 {
                    // A partial mark already consumed: nothing to give back but an
                    // honest error. No real file starts with the first bytes of a BOM.
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the input starts with a broken UTF-8 byte order mark",
                    ));
                }
                return Ok(());
            }
            self.consume(n);
            seen += n;
        }
        Ok(())
    }

    /// Consumes a byte order mark and any whitespace (blank lines, counted), and returns
    /// the first byte after them without consuming it; `None` at the end of the input.
    pub(crate) fn first_non_blank(&mut self) -> io::Result<Option<u8>> {
        self.skip_bom()?;
        loop {
            let chunk = self.fill()?;
            if chunk.is_empty() {
                return Ok(None);
            }
            match chunk.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(i) => {
                    let first = chunk[i];
                    let feeds = memchr::memchr_iter(b'\n', &chunk[..i]).count() as u64;
                    self.consume(i);
                    self.line += feeds;
                    return Ok(Some(first));
                }
                None => {
                    let n = chunk.len();
                    let feeds = memchr::memchr_iter(b'\n', chunk).count() as u64;
                    self.consume(n);
                    self.line += feeds;
                }
            }
        }
    }

    /// Reads the next line into `buf` (without `\n` or `\r\n`) and returns the number of
    /// the line; `None` at the end of the input. A line over `max` bytes is read past
    /// without being kept, and is an error.
    pub(crate) fn next_line(&mut self, max: usize) -> Option<Result<u64, InputError>> {
        let line = self.line + 1;
        self.buf.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = match fill(&mut self.inner, &mut self.eof) {
                Ok(chunk) => chunk,
                Err(error) => return Some(Err(InputError::Io { line, error })),
            };
            if chunk.is_empty() {
                if !any {
                    return None;
                }
                break;
            }
            any = true;
            let (take, end) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                if self.buf.len() + take > max {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            let used = if end { take + 1 } else { take };
            self.inner.consume(used);
            self.bytes += used as u64;
            if end {
                self.line += 1;
                break;
            }
        }
        if too_long {
            return Some(Err(InputError::TooLong { line }));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Some(Ok(line))
    }
}

/// [`Input::fill`] on the fields it needs, so that the others stay free to borrow.
fn fill<'a, R: BufRead>(inner: &'a mut R, eof: &mut bool) -> io::Result<&'a [u8]> {
    if *eof {
        return Ok(&[]);
    }
    loop {
        match inner.fill_buf() {
            Ok([]) => {
                *eof = true;
                return Ok(&[]);
            }
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    // The buffer holds bytes: this returns them without reading.
    inner.fill_buf()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A reader that hands out its bytes `step` at a time, as a pipe may.
    pub(crate) struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl<'a> Trickle<'a> {
        pub(crate) fn new(data: &'a [u8], step: usize) -> io::BufReader<Self> {
            io::BufReader::with_capacity(step, Trickle { data, step })
        }
    }

    impl io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.data.len().min(self.step).min(out.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn lines(data: &[u8], step: usize, max: usize) -> Vec<Result<(u64, String), u64>> {
        let mut input = Input::new(Trickle::new(data, step));
        let mut out = Vec::new();
        while let Some(r) = input.next_line(max) {
            out.push(match r {
                Ok(line) => Ok((line, String::from_utf8_lossy(&input.buf).into_owned())),
                Err(InputError::TooLong { line }) => Err(line),
                Err(_) => panic!("unexpected error"),
            });
        }
        out
    }

    #[test]
    fn lines_are_numbered_and_lose_their_terminators() {
        for step in [1, 2, 3, 7, 64] {
            assert_eq!(
                lines(b"a\r\nbb\n\nccc", step, 100),
                vec![
                    Ok((1, "a".into())),
                    Ok((2, "bb".into())),
                    Ok((3, "".into())),
                    Ok((4, "ccc".into()))
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_and_the_next_is_read() {
        for step in [1, 3, 64] {
            assert_eq!(
                lines(b"1234\n123456\n12", step, 5),
                vec![Ok((1, "1234".into())), Err(2), Ok((3, "12".into()))],
                "step {step}"
            );
        }
    }

    #[test]
    fn bom_and_blank_lines_before_the_first_byte() {
        for step in [1, 2, 64] {
            let mut input = Input::new(Trickle::new(b"\xEF\xBB\xBF \n\r\n\t{x", step));
            assert_eq!(input.first_non_blank().unwrap(), Some(b'{'));
            assert_eq!(input.line, 2);
            assert_eq!(input.next_line(10).unwrap().ok(), Some(3));
            assert_eq!(input.buf, b"{x");
        }
        let mut input = Input::new(Trickle::new(b"\xEF\xBB\xBF \n", 1));
        assert_eq!(input.first_non_blank().unwrap(), None);
        let mut input = Input::new(Trickle::new(b"\xEF\xBBx", 1));
        assert!(input.skip_bom().is_err());
        let mut input = Input::new(Trickle::new(b"abc", 1));
        input.skip_bom().unwrap();
        assert_eq!(input.bytes, 0);
    }
}
