//! The metrics a query can ask for, their names on the wire, and how each value is
//! rounded in the response (as Plausible rounds them).

/// One metric. Definitions: docs/stats-api.md, "Metrics".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Distinct `user_id`s: the caller's user id, or the enricher's daily visitor id.
    Visitors,
    /// Distinct sessions.
    Visits,
    /// `pageview` events.
    Pageviews,
    /// Mean pageviews of the visits counted (each visit's pageviews, all of them).
    ViewsPerVisit,
    /// Percentage of the visits counted that bounced: one pageview and no engagement.
    BounceRate,
    /// Mean seconds between a visit's first and last event.
    VisitDuration,
    /// Events of any type.
    Events,
    /// A row's visitors as a percentage of all visitors of the query's range and filters.
    Percentage,
    /// Distinct identified people (an anonymous id claimed by a user counts as the user).
    Users,
    /// The 75th percentile of a web vital over the `performance` events that measured it.
    P75(Vital),
}

/// A web vital: a column of `events`, set on `performance` events (NULL: not measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vital {
    /// Largest Contentful Paint, milliseconds.
    Lcp,
    /// Cumulative Layout Shift, unitless.
    Cls,
    /// Interaction to Next Paint, milliseconds.
    Inp,
    /// First Contentful Paint, milliseconds.
    Fcp,
    /// Time to First Byte, milliseconds.
    Ttfb,
}

impl Vital {
    /// The column of `events` that holds it.
    pub fn column(self) -> &'static str {
        match self {
            Vital::Lcp => "lcp",
            Vital::Cls => "cls",
            Vital::Inp => "inp",
            Vital::Fcp => "fcp",
            Vital::Ttfb => "ttfb",
        }
    }
}

/// The 75th percentile as ClickHouse's `quantileExact(0.75)` picks it: of `n` values
/// sorted ascending, the one at 0-based index `floor(n * 3 / 4)` (`n` at least 1).
pub fn p75_index(n: usize) -> usize {
    n * 3 / 4
}

/// Every metric, in the order the docs list them.
pub const ALL: [Metric; 14] = [
    Metric::Visitors,
    Metric::Visits,
    Metric::Pageviews,
    Metric::ViewsPerVisit,
    Metric::BounceRate,
    Metric::VisitDuration,
    Metric::Events,
    Metric::Percentage,
    Metric::Users,
    Metric::P75(Vital::Lcp),
    Metric::P75(Vital::Cls),
    Metric::P75(Vital::Inp),
    Metric::P75(Vital::Fcp),
    Metric::P75(Vital::Ttfb),
];

pub(crate) const ALLOWED: &str = "visitors, visits, pageviews, views_per_visit, bounce_rate, \
     visit_duration, events, percentage, users, lcp_p75, cls_p75, inp_p75, fcp_p75, ttfb_p75";

/// How a metric's value is written in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A whole number (counts, and the rounded bounce rate and duration).
    Integer,
    /// A number rounded to this many decimals.
    Decimal(u32),
}

impl Metric {
    pub fn parse(name: &str) -> Option<Metric> {
        ALL.into_iter().find(|m| m.name() == name)
    }

    /// The name on the wire, which is also the column's name in every statement.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Visitors => "visitors",
            Metric::Visits => "visits",
            Metric::Pageviews => "pageviews",
            Metric::ViewsPerVisit => "views_per_visit",
            Metric::BounceRate => "bounce_rate",
            Metric::VisitDuration => "visit_duration",
            Metric::Events => "events",
            Metric::Percentage => "percentage",
            Metric::Users => "users",
            Metric::P75(v) => match v {
                Vital::Lcp => "lcp_p75",
                Vital::Cls => "cls_p75",
                Vital::Inp => "inp_p75",
                Vital::Fcp => "fcp_p75",
                Vital::Ttfb => "ttfb_p75",
            },
        }
    }

    /// The web vital a percentile metric reads, if it is one.
    pub fn vital(self) -> Option<Vital> {
        match self {
            Metric::P75(v) => Some(v),
            _ => None,
        }
    }

    /// Whether the metric can have no value (`null`): a percentile of no measurement.
    /// Counts and ratios are 0 then.
    pub fn is_nullable(self) -> bool {
        self.vital().is_some()
    }

    /// A measure of whole visits (averaged per visit), which needs each visit's events
    /// in one place: the planner reads sessions for it.
    pub fn is_visit_measure(self) -> bool {
        matches!(
            self,
            Metric::ViewsPerVisit | Metric::BounceRate | Metric::VisitDuration
        )
    }

    pub fn value_kind(self) -> ValueKind {
        match self {
            Metric::ViewsPerVisit => ValueKind::Decimal(2),
            Metric::Percentage => ValueKind::Decimal(1),
            // CLS is a small unitless score (good below 0.1); the others are milliseconds.
            Metric::P75(Vital::Cls) => ValueKind::Decimal(3),
            _ => ValueKind::Integer,
        }
    }

    /// How a comparison's change is computed: the difference in percentage points for a
    /// rate (Plausible's rule for bounce_rate), the relative change in percent otherwise.
    pub(crate) fn change_is_difference(self) -> bool {
        self == Metric::BounceRate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_the_allowed_list_names_them_all() {
        for m in ALL {
            assert_eq!(Metric::parse(m.name()), Some(m));
            assert!(ALLOWED.contains(m.name()), "{}", m.name());
        }
        assert_eq!(Metric::parse("conversion_rate"), None);
        assert_eq!(Metric::parse("Visitors"), None);
        assert_eq!(Metric::parse("lcp_p75"), Some(Metric::P75(Vital::Lcp)));
        assert!(Metric::P75(Vital::Inp).is_nullable() && !Metric::Events.is_nullable());
    }

    #[test]
    fn the_p75_index_is_quantile_exact_s() {
        // ClickHouse: `level * size` truncated; for 0.75 that is floor(3n / 4).
        let index: Vec<usize> = (1..=8).map(p75_index).collect();
        assert_eq!(index, [0, 1, 2, 3, 3, 4, 5, 6]);
    }
}
