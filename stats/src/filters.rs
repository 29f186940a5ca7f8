//! Filters: `[op, dimension, [values], {"case_sensitive": false}?]` leaves combined with
//! `["and", [...]]`, `["or", [...]]` and `["not", filter]` (Plausible's shape), read into
//! a tree and checked against the limits; and the SQL condition of a tree, given the
//! expression a source reads each dimension by.
//!
//! Values are always bound, never written into the SQL. For `is`/`is_not`, a value equal
//! to the dimension's empty label (`(not set)`, `(none)`, `Direct / None`) means the
//! empty value, as in the response. A `matches` pattern is RE2 (ClickHouse `match()`),
//! checked here with Rust's regex parser (the same syntax but for a few rarely used
//! items) so that a bad pattern is a 400, not a ClickHouse error.

use crate::dimensions::Dimension;
use crate::error::StatsError;
use crate::limits::{
    MAX_FILTER_DEPTH, MAX_FILTER_LEAVES, MAX_FILTER_VALUES, MAX_PATTERN_CHARS, MAX_PATTERN_NESTING,
    MAX_VALUE_CHARS,
};
use crate::sql::{sql, Sql};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Leaf(Leaf),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    pub op: Op,
    pub dimension: Dimension,
    pub values: Vec<String>,
    pub case_sensitive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Is,
    IsNot,
    Contains,
    ContainsNot,
    Matches,
    MatchesNot,
}

const OPS: [(Op, &str); 6] = [
    (Op::Is, "is"),
    (Op::IsNot, "is_not"),
    (Op::Contains, "contains"),
    (Op::ContainsNot, "contains_not"),
    (Op::Matches, "matches"),
    (Op::MatchesNot, "matches_not"),
];

const ALLOWED_OPS: &str = "is, is_not, contains, contains_not, matches, matches_not, and, or, not";

impl Op {
    pub fn name(self) -> &'static str {
        OPS.iter()
            .find(|(o, _)| *o == self)
            .map(|(_, n)| *n)
            .unwrap_or_default()
    }

    /// The positive operator of a negated one (`is_not` → `is`).
    fn positive(self) -> (Op, bool) {
        match self {
            Op::IsNot => (Op::Is, true),
            Op::ContainsNot => (Op::Contains, true),
            Op::MatchesNot => (Op::Matches, true),
            op => (op, false),
        }
    }
}

impl Filter {
    /// Every leaf of the tree.
    pub fn leaves(&self) -> Vec<&Leaf> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Leaf>) {
        match self {
            Filter::Leaf(l) => out.push(l),
            Filter::And(fs) | Filter::Or(fs) => fs.iter().for_each(|f| f.collect(out)),
            Filter::Not(f) => f.collect(out),
        }
    }

    /// Whether every leaf satisfies `pred`.
    pub fn all_leaves(&self, pred: &impl Fn(&Leaf) -> bool) -> bool {
        self.leaves().into_iter().all(pred)
    }
}

/// The top-level `filters` list (an implicit `and`), checked against the limits.
pub fn parse(value: &Value, field: &str) -> Result<Vec<Filter>, StatsError> {
    let items = value
        .as_array()
        .ok_or_else(|| StatsError::invalid(field, "an array of filters"))?;
    let mut leaves = 0;
    let filters = items
        .iter()
        .enumerate()
        .map(|(i, f)| parse_tree(f, &format!("{field}[{i}]"), 0, &mut leaves))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(filters)
}

/// One tree; `depth` is how many `and`/`or`/`not` enclose it.
fn parse_tree(
    value: &Value,
    field: &str,
    depth: usize,
    leaves: &mut usize,
) -> Result<Filter, StatsError> {
    let shape = "a filter: [operator, dimension, [values]] (with an optional \
                 {\"case_sensitive\": false}), [\"and\" or \"or\", [filters]] or [\"not\", filter]";
    let items = value
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| StatsError::invalid(field, shape))?;
    let op = items[0]
        .as_str()
        .ok_or_else(|| StatsError::invalid(format!("{field}[0]"), "an operator (a string)"))?;
    match op {
        "and" | "or" | "not" => {
            if depth >= MAX_FILTER_DEPTH {
                return Err(StatsError::too_large(
                    field,
                    "the nesting of and/or/not",
                    depth + 1,
                    MAX_FILTER_DEPTH,
                ));
            }
            if items.len() != 2 {
                return Err(StatsError::invalid(field, shape));
            }
            let inner = format!("{field}[1]");
            if op == "not" {
                return Ok(Filter::Not(Box::new(parse_tree(
                    &items[1],
                    &inner,
                    depth + 1,
                    leaves,
                )?)));
            }
            let children = items[1]
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| StatsError::invalid(&inner, "a non-empty array of filters"))?;
            let children = children
                .iter()
                .enumerate()
                .map(|(i, f)| parse_tree(f, &format!("{inner}[{i}]"), depth + 1, leaves))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if op == "and" {
                Filter::And(children)
            } else {
                Filter::Or(children)
            })
        }
        _ => {
            let op = OPS
                .iter()
                .find(|(_, n)| *n == op)
                .map(|(o, _)| *o)
                .ok_or_else(|| StatsError::UnknownOperator {
                    field: format!("{field}[0]"),
                    value: op.to_string(),
                    allowed: ALLOWED_OPS,
                })?;
            *leaves += 1;
            if *leaves > MAX_FILTER_LEAVES {
                return Err(StatsError::too_large(
                    "filters",
                    "the number of filters",
                    *leaves,
                    MAX_FILTER_LEAVES,
                ));
            }
            Ok(Filter::Leaf(parse_leaf(op, items, field, shape)?))
        }
    }
}

fn parse_leaf(op: Op, items: &[Value], field: &str, shape: &str) -> Result<Leaf, StatsError> {
    if !(3..=4).contains(&items.len()) {
        return Err(StatsError::invalid(field, shape));
    }
    let dim_field = format!("{field}[1]");
    let name = items[1]
        .as_str()
        .ok_or_else(|| StatsError::invalid(&dim_field, "a dimension (a string)"))?;
    let dimension = Dimension::parse(name, &dim_field)?;
    if dimension.is_time() {
        return Err(StatsError::incompatible(
            &dim_field,
            format!("{name} cannot be filtered by: the date_range chooses the time"),
        ));
    }
    let values_field = format!("{field}[2]");
    let values = items[2]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| StatsError::invalid(&values_field, "a non-empty array of strings"))?;
    if values.len() > MAX_FILTER_VALUES {
        return Err(StatsError::too_large(
            &values_field,
            "the number of values",
            values.len(),
            MAX_FILTER_VALUES,
        ));
    }
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let f = format!("{values_field}[{i}]");
        let s = v
            .as_str()
            .ok_or_else(|| StatsError::invalid(&f, "a string"))?;
        let chars = s.chars().count();
        let max = if matches!(op, Op::Matches | Op::MatchesNot) {
            MAX_PATTERN_CHARS
        } else {
            MAX_VALUE_CHARS
        };
        if chars > max {
            return Err(StatsError::too_large(&f, "the value's length", chars, max));
        }
        if matches!(op, Op::Matches | Op::MatchesNot) {
            check_pattern(s, &f)?;
        }
        out.push(s.to_string());
    }
    let case_sensitive = match items.get(3) {
        None => true,
        Some(m) => parse_modifiers(m, &format!("{field}[3]"))?,
    };
    Ok(Leaf {
        op,
        dimension,
        values: out,
        case_sensitive,
    })
}

/// `{"case_sensitive": bool}`: the only modifier.
fn parse_modifiers(value: &Value, field: &str) -> Result<bool, StatsError> {
    let map = value
        .as_object()
        .ok_or_else(|| StatsError::invalid(field, "an object: {\"case_sensitive\": false}"))?;
    let mut case_sensitive = true;
    for (k, v) in map {
        match k.as_str() {
            "case_sensitive" => {
                case_sensitive = v.as_bool().ok_or_else(|| {
                    StatsError::invalid(format!("{field}.case_sensitive"), "true or false")
                })?
            }
            other => {
                return Err(StatsError::UnknownField {
                    field: format!("{field}.{other}"),
                    allowed: "case_sensitive",
                })
            }
        }
    }
    Ok(case_sensitive)
}

/// A pattern RE2 accepts: parsed by Rust's regex parser, which refuses what both refuse
/// (look-around, back-references) and bounds the nesting.
fn check_pattern(pattern: &str, field: &str) -> Result<(), StatsError> {
    regex_syntax::ParserBuilder::new()
        .nest_limit(MAX_PATTERN_NESTING)
        .build()
        .parse(pattern)
        .map(|_| ())
        .map_err(|e| StatsError::InvalidPattern {
            field: field.to_string(),
            pattern: pattern.to_string(),
            reason: first_line(&e.to_string()),
        })
}

/// regex_syntax's errors draw the pattern over several lines; the last says what is wrong.
fn first_line(message: &str) -> String {
    message
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.trim_start_matches("error: ").to_string())
        .unwrap_or_default()
}

/// The SQL condition of a tree; `expr` gives the SQL a dimension is read by where the
/// condition is evaluated.
pub fn condition(filter: &Filter, expr: &dyn Fn(&Dimension) -> Sql) -> Sql {
    match filter {
        Filter::Leaf(leaf) => leaf_condition(leaf, &expr(&leaf.dimension)),
        Filter::And(fs) | Filter::Or(fs) => {
            let sep = if matches!(filter, Filter::And(_)) {
                " AND "
            } else {
                " OR "
            };
            let parts: Vec<Sql> = fs.iter().map(|f| condition(f, expr)).collect();
            let mut out = sql("(");
            out.join(&parts, sep).push(")");
            out
        }
        Filter::Not(f) => {
            let mut out = sql("NOT ");
            out.append(&condition(f, expr));
            out
        }
    }
}

/// The conditions of several trees, all of which must hold (`TRUE`-less: empty when
/// there are none).
pub fn conjunction(filters: &[&Filter], expr: &dyn Fn(&Dimension) -> Sql) -> Sql {
    let parts: Vec<Sql> = filters.iter().map(|f| condition(f, expr)).collect();
    let mut out = Sql::new();
    out.join(&parts, " AND ");
    out
}

/// One leaf, over the dimension's expression `e`; always parenthesised.
pub fn leaf_condition(leaf: &Leaf, e: &Sql) -> Sql {
    let (op, negated) = leaf.op.positive();
    let ci = !leaf.case_sensitive;
    let mut out = Sql::new();
    out.push(if negated { "NOT (" } else { "(" });
    match op {
        Op::Is => {
            // The empty label stands for the empty value, as in the response.
            let empty = leaf.dimension.empty_label();
            let value = |v: &String| -> String {
                if Some(v.as_str()) == empty {
                    String::new()
                } else {
                    v.clone()
                }
            };
            if ci {
                out.push("lowerUTF8(").append(e).push(") IN (");
            } else {
                out.append(e).push(" IN (");
            }
            for (i, v) in leaf.values.iter().enumerate() {
                if i > 0 {
                    out.push(", ");
                }
                if ci {
                    out.push("lowerUTF8(").bind_str(&value(v)).push(")");
                } else {
                    out.bind_str(&value(v));
                }
            }
            out.push(")");
        }
        Op::Contains => {
            let function = if ci {
                "positionCaseInsensitiveUTF8("
            } else {
                "position("
            };
            for (i, v) in leaf.values.iter().enumerate() {
                if i > 0 {
                    out.push(" OR ");
                }
                out.push(function)
                    .append(e)
                    .push(", ")
                    .bind_str(v)
                    .push(") > 0");
            }
        }
        Op::Matches => {
            for (i, v) in leaf.values.iter().enumerate() {
                if i > 0 {
                    out.push(" OR ");
                }
                // `(?i:…)`, not a leading `(?i)`: 18.16 prefilters a pattern by its
                // literal prefix, case-sensitively, unless the flag is on a group
                // (`match('/pricing', '(?i)^/PRI')` is 0 there; with the group, 1).
                let pattern = if ci { format!("(?i:{v})") } else { v.clone() };
                out.push("match(")
                    .append(e)
                    .push(", ")
                    .bind_str(&pattern)
                    .push(")");
            }
        }
        Op::IsNot | Op::ContainsNot | Op::MatchesNot => unreachable!("made positive above"),
    }
    out.push(")");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_one(v: Value) -> Result<Filter, StatsError> {
        parse(&json!([v]), "filters").map(|mut f| f.remove(0))
    }

    fn column(d: &Dimension) -> Sql {
        sql(&d.name().replace([':', '.'], "_"))
    }

    fn cond(v: Value) -> String {
        condition(&parse_one(v).unwrap(), &column).inline()
    }

    #[test]
    fn every_operator_s_sql() {
        assert_eq!(
            cond(json!(["is", "event:page", ["/a", "/b"]])),
            "(event_page IN ('/a', '/b'))"
        );
        assert_eq!(
            cond(json!(["is_not", "event:page", ["/a"]])),
            "NOT (event_page IN ('/a'))"
        );
        assert_eq!(
            cond(json!(["contains", "visit:referrer", ["goo", "bing"]])),
            "(position(visit_referrer, 'goo') > 0 OR position(visit_referrer, 'bing') > 0)"
        );
        assert_eq!(
            cond(json!(["contains_not", "event:page", ["/blog"]])),
            "NOT (position(event_page, '/blog') > 0)"
        );
        assert_eq!(
            cond(json!(["matches", "event:page", ["^/blog/\\d+$"]])),
            r"(match(event_page, '^/blog/\\d+$'))"
        );
        assert_eq!(
            cond(json!(["matches_not", "event:page", ["^/a", "^/b"]])),
            "NOT (match(event_page, '^/a') OR match(event_page, '^/b'))"
        );
    }

    #[test]
    fn case_insensitive_variants() {
        let ci = json!({"case_sensitive": false});
        assert_eq!(
            cond(json!(["is", "visit:browser", ["chrome"], ci])),
            "(lowerUTF8(visit_browser) IN (lowerUTF8('chrome')))"
        );
        assert_eq!(
            cond(json!(["contains_not", "event:page", ["Blog"], ci])),
            "NOT (positionCaseInsensitiveUTF8(event_page, 'Blog') > 0)"
        );
        assert_eq!(
            cond(json!(["matches", "event:page", ["^/PRI"], ci])),
            "(match(event_page, '(?i:^/PRI)'))"
        );
        // Explicitly case-sensitive is the default.
        assert_eq!(
            cond(json!(["is", "event:page", ["/A"], {"case_sensitive": true}])),
            "(event_page IN ('/A'))"
        );
    }

    #[test]
    fn empty_labels_mean_the_empty_value_for_is_only() {
        assert_eq!(
            cond(json!([
                "is",
                "visit:source",
                ["Direct / None", "google.com"]
            ])),
            "(visit_source IN ('', 'google.com'))"
        );
        assert_eq!(
            cond(json!(["is_not", "event:props:plan", ["(none)"]])),
            "NOT (event_props_plan IN (''))"
        );
        assert_eq!(
            cond(json!(["is", "visit:country", ["(not set)"]])),
            "(visit_country IN (''))"
        );
        assert_eq!(
            cond(json!(["contains", "visit:country", ["(not set)"]])),
            "(position(visit_country, '(not set)') > 0)"
        );
    }

    #[test]
    fn values_are_bound_never_spliced() {
        let f = parse_one(json!(["is", "event:page", ["x') OR 1=1 --", "?"]])).unwrap();
        let c = condition(&f, &column);
        assert_eq!(c.text(), "(event_page IN (?, ?))");
        assert_eq!(c.binds().len(), 2);
        assert_eq!(c.inline(), r"(event_page IN ('x\') OR 1=1 --', '?'))");
    }

    #[test]
    fn and_or_not_nest() {
        assert_eq!(
            cond(json!(["and", [
                ["is", "visit:country", ["DE"]],
                ["or", [["is", "event:page", ["/a"]], ["not", ["is", "event:name", ["signup"]]]]]
            ]])),
            "((visit_country IN ('DE')) AND ((event_page IN ('/a')) OR NOT (event_name IN ('signup'))))"
        );
        let list = parse(
            &json!([["is", "visit:country", ["DE"]], ["is", "event:page", ["/"]]]),
            "filters",
        )
        .unwrap();
        let refs: Vec<&Filter> = list.iter().collect();
        assert_eq!(
            conjunction(&refs, &column).inline(),
            "(visit_country IN ('DE')) AND (event_page IN ('/'))"
        );
        assert!(conjunction(&[], &column).is_empty());
        let f = &list[0];
        assert_eq!(f.leaves().len(), 1);
        assert!(f.all_leaves(&|l| l.dimension.is_visit()));
    }

    fn err(v: Value) -> StatsError {
        parse(&v, "filters").unwrap_err()
    }

    #[test]
    fn malformed_filters_name_their_place() {
        assert!(matches!(err(json!({})), StatsError::Invalid { field, .. } if field == "filters"));
        assert!(
            matches!(err(json!([[]])), StatsError::Invalid { field, .. } if field == "filters[0]")
        );
        assert!(
            matches!(err(json!([["is", "event:page"]])), StatsError::Invalid { field, .. } if field == "filters[0]")
        );
        assert!(matches!(
            err(json!([["equals", "event:page", ["/"]]])),
            StatsError::UnknownOperator { field, value, .. } if field == "filters[0][0]" && value == "equals"
        ));
        assert!(matches!(
            err(json!([["is", "event:goal", ["x"]]])),
            StatsError::UnknownDimension { field, .. } if field == "filters[0][1]"
        ));
        assert!(matches!(
            err(json!([["is", "time:day", ["2024-01-01"]]])),
            StatsError::Incompatible { field, .. } if field == "filters[0][1]"
        ));
        assert!(matches!(
            err(json!([["is", "event:page", []]])),
            StatsError::Invalid { field, .. } if field == "filters[0][2]"
        ));
        assert!(matches!(
            err(json!([["is", "event:page", ["/", 3]]])),
            StatsError::Invalid { field, .. } if field == "filters[0][2][1]"
        ));
        assert!(matches!(
            err(json!([["is", "event:page", ["/"], {"case_sensitive": "no"}]])),
            StatsError::Invalid { field, .. } if field == "filters[0][3].case_sensitive"
        ));
        assert!(matches!(
            err(json!([["is", "event:page", ["/"], {"wildcard": true}]])),
            StatsError::UnknownField { field, .. } if field == "filters[0][3].wildcard"
        ));
        assert!(matches!(
            err(json!([["is", "event:page", ["/"], {}, 5]])),
            StatsError::Invalid { field, .. } if field == "filters[0]"
        ));
        assert!(matches!(
            err(json!([["and", []]])),
            StatsError::Invalid { field, .. } if field == "filters[0][1]"
        ));
        assert!(matches!(
            err(json!([["not", ["is", "event:page", ["/"]], "extra"]])),
            StatsError::Invalid { field, .. } if field == "filters[0]"
        ));
        assert!(matches!(
            err(json!([["or", [["is", "event:page", ["/"]], ["nope"]]]])),
            StatsError::UnknownOperator { field, .. } if field == "filters[0][1][1][0]"
        ));
    }

    #[test]
    fn limits_are_enforced() {
        let leaf = json!(["is", "event:page", ["/"]]);
        let many = Value::Array(vec![leaf.clone(); MAX_FILTER_LEAVES + 1]);
        assert!(matches!(
            err(many),
            StatsError::TooLarge {
                what: "the number of filters",
                ..
            }
        ));
        let exactly = Value::Array(vec![leaf.clone(); MAX_FILTER_LEAVES]);
        assert_eq!(parse(&exactly, "filters").unwrap().len(), MAX_FILTER_LEAVES);

        // Four connectives around a leaf is the deepest.
        let mut deep = leaf.clone();
        for _ in 0..MAX_FILTER_DEPTH {
            deep = json!(["not", deep]);
        }
        assert!(parse(&json!([deep.clone()]), "filters").is_ok());
        let deeper = json!([["and", [deep]]]);
        assert!(matches!(
            err(deeper),
            StatsError::TooLarge {
                what: "the nesting of and/or/not",
                ..
            }
        ));

        let values: Vec<String> = (0..=MAX_FILTER_VALUES).map(|i| i.to_string()).collect();
        assert!(matches!(
            err(json!([["is", "event:page", values]])),
            StatsError::TooLarge {
                what: "the number of values",
                ..
            }
        ));
        let long = "x".repeat(MAX_VALUE_CHARS + 1);
        assert!(matches!(
            err(json!([["contains", "event:page", [long]]])),
            StatsError::TooLarge {
                what: "the value's length",
                ..
            }
        ));
        let pattern = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(matches!(
            err(json!([["matches", "event:page", [pattern]]])),
            StatsError::TooLarge { what: "the value's length", actual, .. } if actual == (MAX_PATTERN_CHARS + 1) as u64
        ));
    }

    #[test]
    fn patterns_are_checked() {
        for bad in ["(", "a{2,1}", "(?<=x)y", "\\1", "[z-a]"] {
            match err(json!([["matches", "event:page", ["^/ok", bad]]])) {
                StatsError::InvalidPattern {
                    field,
                    pattern,
                    reason,
                } => {
                    assert_eq!(field, "filters[0][2][1]");
                    assert_eq!(pattern, bad);
                    assert!(!reason.is_empty() && !reason.contains('\n'), "{reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let nested = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(matches!(
            err(json!([["matches_not", "event:page", [nested]]])),
            StatsError::InvalidPattern { .. }
        ));
        for good in ["^/blog/[0-9]+$", "(?i)x", "a|b", "\\.html$", "^/(en|de)/"] {
            assert!(
                parse(&json!([["matches", "event:page", [good]]]), "filters").is_ok(),
                "{good}"
            );
        }
        // `contains` values are not patterns.
        assert!(parse(&json!([["contains", "event:page", ["("]]]), "filters").is_ok());
    }
}
