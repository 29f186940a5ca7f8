//! CSV records (RFC 4180, comma-separated), read straight from the input so that each
//! record knows the line it starts on and no record is held past [`crate::MAX_RECORD_BYTES`].
//!
//! - Fields may be quoted; `""` in a quoted field is a quote; quoted fields may hold
//!   commas and line breaks.
//! - Records end with `\n` or `\r\n`; the last one may have no line end.
//! - Blank lines are skipped.
//! - Lenient where the intent is clear: a quote inside an unquoted field is kept as a
//!   character (as most readers do).
//! - A record is malformed when text follows a closing quote (`"a"b`), when a quoted field
//!   is never closed, or when it is not valid UTF-8.

use std::io::BufRead;

use crate::input::{Input, InputError};

/// One record: its fields' bytes back to back, and where each ends.
#[derive(Default)]
pub(crate) struct Record {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Record {
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The fields as text; an error when the record is not valid UTF-8.
    pub(crate) fn fields(&self) -> Result<Vec<&str>, String> {
        let text = std::str::from_utf8(&self.buf).map_err(|e| {
            format!(
                "not valid UTF-8 (field {})",
                self.field_at(e.valid_up_to()) + 1
            )
        })?;
        let mut out = Vec::with_capacity(self.ends.len());
        let mut start = 0;
        for (i, &end) in self.ends.iter().enumerate() {
            // A field boundary inside a character: the bytes around it were not text.
            match text.get(start..end) {
                Some(field) => out.push(field),
                None => return Err(format!("not valid UTF-8 (field {})", i + 1)),
            }
            start = end;
        }
        Ok(out)
    }

    /// The index of the field holding byte `offset` of `buf`.
    fn field_at(&self, offset: usize) -> usize {
        self.ends
            .iter()
            .position(|&end| offset < end)
            .unwrap_or(self.ends.len().saturating_sub(1))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a field.
    Start,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: the closing one, or the first of `""`.
    QuoteInQuoted,
    /// After a closing quote and a `\r`: only a line end or a comma may follow.
    AfterClose,
}

/// Reads the next record into `rec` and returns the line it starts on; `None` at the end
/// of the input. A record over `max` bytes is read past without being kept.
pub(crate) fn read_record<R: BufRead>(
    input: &mut Input<R>,
    rec: &mut Record,
    max: usize,
) -> Option<Result<u64, InputError>> {
    loop {
        rec.buf.clear();
        rec.ends.clear();
        let line = input.line + 1;
        let mut state = State::Start;
        let mut quote_line = line;
        let mut quoted_any = false;
        let mut too_long = false;
        let mut error: Option<String> = None;
        let mut any = false;
        let ended = loop {
            let base = input.line;
            let chunk = match input.fill() {
                Ok(chunk) => chunk,
                Err(error) => return Some(Err(InputError::Io { line, error })),
            };
            if chunk.is_empty() {
                break false;
            }
            any = true;
            let mut feeds = 0;
            let mut used = 0;
            let mut done = false;
            for &b in chunk {
                used += 1;
                if b == b'\n' {
                    feeds += 1;
                }
                match state {
                    State::Start => match b {
                        b'"' => {
                            state = State::Quoted;
                            quoted_any = true;
                            quote_line = base + feeds + 1;
                        }
                        b',' => rec.ends.push(rec.buf.len()),
                        b'\n' => {
                            done = true;
                            break;
                        }
                        _ => {
                            keep(rec, b, max, &mut too_long);
                            state = State::Unquoted;
                        }
                    },
                    State::Unquoted => match b {
                        b',' => {
                            rec.ends.push(rec.buf.len());
                            state = State::Start;
                        }
                        b'\n' => {
                            let start = rec.ends.last().copied().unwrap_or(0);
                            if rec.buf.len() > start && rec.buf.last() == Some(&b'\r') {
                                rec.buf.pop();
                            }
                            done = true;
                            break;
                        }
                        _ => keep(rec, b, max, &mut too_long),
                    },
                    State::Quoted => match b {
                        b'"' => state = State::QuoteInQuoted,
                        _ => keep(rec, b, max, &mut too_long),
                    },
                    State::QuoteInQuoted | State::AfterClose => match b {
                        b'"' if state == State::QuoteInQuoted => {
                            keep(rec, b'"', max, &mut too_long);
                            state = State::Quoted;
                        }
                        b',' => {
                            rec.ends.push(rec.buf.len());
                            state = State::Start;
                        }
                        b'\n' => {
                            done = true;
                            break;
                        }
                        b'\r' => state = State::AfterClose,
                        _ => {
                            if error.is_none() {
                                error = Some(format!(
                                    "field {} has text after its closing quote (a quote inside a quoted field is written \"\")",
                                    rec.ends.len() + 1
                                ));
                            }
                            keep(rec, b, max, &mut too_long);
                            state = State::Unquoted;
                        }
                    },
                }
            }
            input.consume(used);
            input.line += feeds;
            if done {
                break true;
            }
        };
        if !any {
            return None;
        }
        if !ended && state == State::Quoted {
            return Some(Err(InputError::Malformed {
                line,
                reason: format!(
                    "the quoted field opened on line {quote_line} is never closed: the file ends inside it"
                ),
            }));
        }
        if !ended && state == State::Unquoted {
            let start = rec.ends.last().copied().unwrap_or(0);
            if rec.buf.len() > start && rec.buf.last() == Some(&b'\r') {
                rec.buf.pop();
            }
        }
        rec.ends.push(rec.buf.len());
        if too_long {
            return Some(Err(InputError::TooLong { line }));
        }
        if let Some(reason) = error {
            return Some(Err(InputError::Malformed { line, reason }));
        }
        if rec.ends.len() == 1 && rec.buf.is_empty() && !quoted_any {
            // A blank line.
            if ended {
                continue;
            }
            return None;
        }
        return Some(Ok(line));
    }
}

/// Appends a byte to the field being read, unless the record is over `max` bytes.
fn keep(rec: &mut Record, b: u8, max: usize, too_long: &mut bool) {
    if rec.buf.len() >= max {
        *too_long = true;
    } else if !*too_long {
        rec.buf.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::tests::Trickle;

    type Rows = Vec<Result<(u64, Vec<String>), (u64, String)>>;

    fn read(data: &[u8], step: usize, max: usize) -> Rows {
        let mut input = Input::new(Trickle::new(data, step));
        let mut rec = Record::default();
        let mut out = Vec::new();
        while let Some(r) = read_record(&mut input, &mut rec, max) {
            out.push(match r {
                Ok(line) => match rec.fields() {
                    Ok(f) => Ok((line, f.into_iter().map(String::from).collect())),
                    Err(e) => Err((line, e)),
                },
                Err(InputError::TooLong { line }) => Err((line, "too long".into())),
                Err(InputError::Malformed { line, reason }) => Err((line, reason)),
                Err(InputError::Io { .. }) => panic!("io"),
            });
        }
        out
    }

    fn ok(line: u64, fields: &[&str]) -> Result<(u64, Vec<String>), (u64, String)> {
        Ok((line, fields.iter().map(|s| s.to_string()).collect()))
    }

    fn every_step(data: &[u8], max: usize, expected: Rows) {
        for step in [1, 2, 3, 5, 8, 4096] {
            assert_eq!(read(data, step, max), expected, "step {step}");
        }
    }

    #[test]
    fn plain_and_quoted_fields() {
        every_step(
            b"a,b,c\n1,\"two, 2\",\"say \"\"hi\"\"\"\n,,\n",
            1000,
            vec![
                ok(1, &["a", "b", "c"]),
                ok(2, &["1", "two, 2", "say \"hi\""]),
                ok(3, &["", "", ""]),
            ],
        );
    }

    #[test]
    fn quoted_newlines_keep_the_line_of_the_record_start() {
        every_step(
            b"h1,h2\r\n\"multi\r\nline\nvalue\",x\r\nnext,\"\"\r\nlast,row",
            1000,
            vec![
                ok(1, &["h1", "h2"]),
                ok(2, &["multi\r\nline\nvalue", "x"]),
                ok(5, &["next", ""]),
                ok(6, &["last", "row"]),
            ],
        );
    }

    #[test]
    fn blank_lines_are_skipped_and_counted() {
        every_step(b"a\n\n\r\nb\n\n", 1000, vec![ok(1, &["a"]), ok(4, &["b"])]);
        every_step(b"", 1000, vec![]);
        every_step(b"\n\n", 1000, vec![]);
        // A record of one empty quoted field is not blank.
        every_step(b"\"\"\n", 1000, vec![ok(1, &[""])]);
    }

    #[test]
    fn crlf_after_a_quoted_field_and_a_bare_cr_inside_one() {
        every_step(
            b"\"a\"\r\n\"b\rc\",\"d\"\r\n",
            1000,
            vec![ok(1, &["a"]), ok(2, &["b\rc", "d"])],
        );
    }

    #[test]
    fn a_quote_inside_an_unquoted_field_is_kept() {
        every_step(b"5\"2,x\n", 1000, vec![ok(1, &["5\"2", "x"])]);
    }

    #[test]
    fn text_after_a_closing_quote_is_malformed_and_reading_goes_on() {
        every_step(
            b"\"a\"b,c\nok,1\n\"x\"\ry\n",
            1000,
            vec![
                Err((1, "field 1 has text after its closing quote (a quote inside a quoted field is written \"\")".into())),
                ok(2, &["ok", "1"]),
                Err((3, "field 1 has text after its closing quote (a quote inside a quoted field is written \"\")".into())),
            ],
        );
    }

    #[test]
    fn an_unclosed_quote_is_malformed_at_the_record_start() {
        every_step(
            b"a,b\n1,\"open\n2,3\n",
            1000,
            vec![
                ok(1, &["a", "b"]),
                Err((
                    2,
                    "the quoted field opened on line 2 is never closed: the file ends inside it"
                        .into(),
                )),
            ],
        );
    }

    #[test]
    fn a_record_over_the_limit_is_skipped_whole() {
        every_step(
            b"1,2\n\"123\n456\",7\n8,9\n",
            6,
            vec![
                ok(1, &["1", "2"]),
                Err((2, "too long".into())),
                ok(4, &["8", "9"]),
            ],
        );
    }

    #[test]
    fn invalid_utf8_names_the_field() {
        every_step(
            b"ok,\xff\xfe\n",
            1000,
            vec![Err((1, "not valid UTF-8 (field 2)".into()))],
        );
        // Bytes that are only text when two fields are put together.
        every_step(
            b"a\xC3,\xA9b\n",
            1000,
            vec![Err((1, "not valid UTF-8 (field 1)".into()))],
        );
    }
}
