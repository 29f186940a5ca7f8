//! Helpers of the unit tests: a plan of a request at a fixed time.

use crate::{plan, FirstEvent, QueryPlan, Request, SiteContext, StatsError};
use serde_json::{json, Value};

/// 2024-04-15T12:00:00Z: "today" is 2024-04-15 in Berlin and in New York.
pub const NOW: i64 = 1_713_182_400;

/// A request for site 1, visitors in March 2024, with `fields` replacing any of those.
pub fn request(fields: Value) -> Request {
    let mut base =
        json!({"site_id": 1, "metrics": ["visitors"], "date_range": ["2024-03-01", "2024-03-31"]});
    for (k, v) in fields.as_object().expect("an object") {
        base[k] = v.clone();
    }
    Request::from_value(base).expect("a request")
}

pub fn try_plan(fields: Value, tz: &str) -> Result<QueryPlan, StatsError> {
    let site = SiteContext {
        site_id: 1,
        time_zone: tz.into(),
        first_event: FirstEvent::At(1_704_067_200),
        rollup: crate::RollupState::NotLoaded,
    };
    plan(&request(fields), &site, NOW)
}

pub fn planned(fields: Value, tz: &str) -> QueryPlan {
    try_plan(fields, tz).expect("a plan")
}
