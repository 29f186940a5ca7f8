//! What a 400 says is wrong with a payload, in the tracking API's shape. Its own module,
//! so that the checks of an event (`validate`), of its properties (`properties`) and of
//! an identify call (`identify`) all report into it without importing one another.

use serde::Serialize;
use std::collections::BTreeMap;

/// `details` of a 400 response.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ValidationErrors {
    #[serde(rename = "fieldErrors")]
    pub field_errors: BTreeMap<String, Vec<String>>,
    #[serde(rename = "formErrors")]
    pub form_errors: Vec<String>,
}

impl ValidationErrors {
    pub(crate) fn field(&mut self, name: &str, msg: impl Into<String>) {
        self.field_errors
            .entry(name.to_string())
            .or_default()
            .push(msg.into());
    }
    pub fn is_empty(&self) -> bool {
        self.field_errors.is_empty() && self.form_errors.is_empty()
    }
}
