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
}

/// Every metric, in the order the docs list them.
pub const ALL: [Metric; 9] = [
    Metric::Visitors,
    Metric::Visits,
    Metric::Pageviews,
    Metric::ViewsPerVisit,
    Metric::BounceRate,
    Metric::VisitDuration,
    Metric::Events,
    Metric::Percentage,
    Metric::Users,
];

pub(crate) const ALLOWED: &str = "visitors, visits, pageviews, views_per_visit, bounce_rate, \
     visit_duration, events, percentage, users";

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
        }
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
    }
}
