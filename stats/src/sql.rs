//! SQL text with bound values, and the statements of a plan.
//!
//! Every value that comes from a request (filter values, patterns, property names) is a
//! bound value: the text holds a `?` for it and [`Sql::binds`] the value, in the order
//! of the `?`s, as the `clickhouse` crate binds them (`query.bind(value)` for each, in
//! order; it writes each as an escaped SQL literal). [`Sql::push`] refuses text with a
//! `?`, so every `?` of a statement is one of its binds. The only other text made from
//! data is the site's time zone, checked to be an IANA name and quoted by [`quote`].

use serde::ser::{Serialize, Serializer};
use std::fmt::Write as _;

/// ClickHouse's error code when a statement runs past its `max_execution_time`
/// (TIMEOUT_EXCEEDED), on every version: the server answers it with 503.
pub const TIMEOUT_EXCEEDED: u32 = 159;

/// ClickHouse's error code when a statement needs more than its `max_memory_usage`
/// (MEMORY_LIMIT_EXCEEDED): answered 503, with what to narrow.
pub const MEMORY_LIMIT_EXCEEDED: u32 = 241;

/// A value bound to a `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    Str(String),
    UInt(u64),
}

/// `Serialize`, so that the `clickhouse` crate binds it as it is: `query.bind(&bind)`.
impl Serialize for Bind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Bind::Str(v) => s.serialize_str(v),
            Bind::UInt(v) => s.serialize_u64(*v),
        }
    }
}

impl Bind {
    /// The value as a ClickHouse literal.
    pub fn literal(&self) -> String {
        match self {
            Bind::Str(v) => quote(v),
            Bind::UInt(v) => v.to_string(),
        }
    }
}

/// A string as a ClickHouse string literal: in single quotes, with `\` and `'` escaped
/// by a backslash and every control character as `\xHH`, so that no byte of the value
/// can end the literal or be read as anything but itself (on 18.16 and current servers).
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// SQL text and the values bound to its `?`s, built in the order they appear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sql {
    text: String,
    binds: Vec<Bind>,
}

impl Sql {
    pub fn new() -> Self {
        Sql::default()
    }

    /// Text written by the engine. It must not hold a `?` (that would be read as a bind).
    pub fn push(&mut self, text: &str) -> &mut Self {
        assert!(
            !text.contains('?'),
            "SQL text with a `?` that is not a bind: {text}"
        );
        self.text.push_str(text);
        self
    }

    pub fn bind_str(&mut self, value: &str) -> &mut Self {
        self.text.push('?');
        self.binds.push(Bind::Str(value.to_string()));
        self
    }

    pub fn bind_uint(&mut self, value: u64) -> &mut Self {
        self.text.push('?');
        self.binds.push(Bind::UInt(value));
        self
    }

    /// Another piece, its binds after this one's.
    pub fn append(&mut self, other: &Sql) -> &mut Self {
        self.text.push_str(&other.text);
        self.binds.extend(other.binds.iter().cloned());
        self
    }

    /// `items` separated by `sep`.
    pub fn join<'a>(&mut self, items: impl IntoIterator<Item = &'a Sql>, sep: &str) -> &mut Self {
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.push(sep);
            }
            self.append(item);
        }
        self
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn binds(&self) -> &[Bind] {
        &self.binds
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The text with each `?` replaced by its value as a literal: for logs, for
    /// `clickhouse-client`, and for tests. (Binding through the `clickhouse` crate gives
    /// the server the same text.)
    pub fn inline(&self) -> String {
        let mut out = String::with_capacity(self.text.len() + 16 * self.binds.len());
        let mut binds = self.binds.iter();
        for c in self.text.chars() {
            if c == '?' {
                let bind = binds.next().expect("one bind per `?`");
                out.push_str(&bind.literal());
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// Text as SQL, for the engine's own fragments: `sql("count()")`.
pub fn sql(text: &str) -> Sql {
    let mut s = Sql::new();
    s.push(text);
    s
}

/// One statement of a plan: its SQL (to be read as `FORMAT JSONEachRow`, which the caller
/// asks for: with the `clickhouse` crate, `fetch_bytes("JSONEachRow")`), the values to
/// bind in order, the settings to run it with, and the names of its result columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// `stats_main`, `stats_total_rows` or `stats_comparison`: for logs and metrics.
    pub name: &'static str,
    pub sql: String,
    pub binds: Vec<Bind>,
    /// ClickHouse settings, each sent with the query (`with_option(name, value)`).
    pub settings: Vec<(&'static str, String)>,
    /// The result's columns, in order.
    pub columns: Vec<String>,
}

impl Statement {
    pub(crate) fn new(
        name: &'static str,
        body: Sql,
        columns: Vec<String>,
        settings: Vec<(&'static str, String)>,
    ) -> Self {
        Statement {
            name,
            sql: body.text,
            binds: body.binds,
            settings,
            columns,
        }
    }

    /// The SQL with its values written in (see [`Sql::inline`]).
    pub fn inline(&self) -> String {
        Sql {
            text: self.sql.clone(),
            binds: self.binds.clone(),
        }
        .inline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_what_could_end_the_literal() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), r"'it\'s'");
        assert_eq!(quote(r"a\b"), r"'a\\b'");
        assert_eq!(quote(r"\'"), r"'\\\''");
        assert_eq!(quote("a\nb\r\t\0\x7f"), r"'a\x0Ab\x0D\x09\x00\x7F'");
        // Not special in a ClickHouse string literal: kept as they are.
        assert_eq!(quote("? ` \" é %"), "'? ` \" é %'");
        // The classic injection stays one literal.
        assert_eq!(quote("x' OR 1=1 --"), r"'x\' OR 1=1 --'");
    }

    /// Whatever the value, the literal is one token: it starts and ends with a quote and
    /// every quote inside is escaped (preceded by an odd run of backslashes).
    #[test]
    fn a_quoted_literal_has_no_unescaped_quote_inside() {
        let nasty = [
            "'", "\\", "\\'", "'\\", "\\\\'", "''", "a'b'c", "\\x27", "\u{0}'",
        ];
        for v in nasty {
            let q = quote(v);
            let inner = &q[1..q.len() - 1];
            let bytes = inner.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' => i += 2,
                    b'\'' => panic!("unescaped quote in {q} (from {v:?})"),
                    _ => i += 1,
                }
            }
            assert_eq!(i, bytes.len(), "{q} ends inside an escape");
        }
    }

    #[test]
    fn binds_follow_the_text_in_order() {
        let mut a = Sql::new();
        a.push("x = ").bind_str("1");
        let mut b = Sql::new();
        b.push("SELECT ").bind_uint(7).push(" WHERE ").append(&a);
        assert_eq!(b.text(), "SELECT ? WHERE x = ?");
        assert_eq!(b.binds(), &[Bind::UInt(7), Bind::Str("1".into())]);
        assert_eq!(b.inline(), "SELECT 7 WHERE x = '1'");
        let mut j = Sql::new();
        j.join([&a, &a], " OR ");
        assert_eq!(j.inline(), "x = '1' OR x = '1'");
    }

    #[test]
    #[should_panic(expected = "not a bind")]
    fn text_with_a_question_mark_is_refused() {
        Sql::new().push("a = '?'");
    }

    #[test]
    fn binds_serialize_as_plain_values() {
        assert_eq!(
            serde_json::to_string(&Bind::Str("a'b".into())).unwrap(),
            r#""a'b""#
        );
        assert_eq!(serde_json::to_string(&Bind::UInt(42)).unwrap(), "42");
    }
}
