//! `rivulet-admin erase`: records an erasure request and prints its receipt; waits, with
//! `--wait`, until the enricher's lifecycle runner has done it (docs/privacy.md).
//!
//! A request is acknowledged only once its ledger rows and its receipt are in ClickHouse:
//! while ClickHouse cannot take them, the command waits (up to `--timeout`) and says so.
//! Kafka is not needed: the ledger is what keeps events that are still there from coming
//! back.

use crate::error::AdminError;
use crate::output;
use rivulet_common::ch::Db;
use rivulet_common::privacy::{self, SubjectKind};
use serde_json::Value;
use std::time::{Duration, Instant};

pub async fn request(
    db: &Db,
    redis_url: &str,
    site_id: u32,
    (kind, subject): (SubjectKind, String),
    suppress: bool,
    wait: bool,
    timeout: Duration,
) -> Result<Value, AdminError> {
    let started = Instant::now();
    let mut said = false;
    let receipt = loop {
        match privacy::request_erasure(db, site_id, kind, &subject, suppress).await {
            Ok(r) => break r,
            Err(rivulet_common::CommonError::Invalid(e)) => return Err(AdminError::Usage(e)),
            Err(e) if started.elapsed() < timeout => {
                if !said {
                    eprintln!("erase: ClickHouse cannot record the request yet ({e}); waiting for it (up to {} s)", timeout.as_secs());
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                return Err(AdminError::Usage(format!(
                    "ClickHouse could not record the erasure within {} s ({e}); nothing was recorded: try again when it answers",
                    timeout.as_secs()
                )))
            }
        }
    };
    crate::cache::forget_profile(redis_url, site_id, &subject).await;
    eprintln!(
        "erase: request {} recorded; the enricher erases it in the next seconds",
        receipt.request_id
    );
    if wait {
        return status(db, &receipt.request_id, true, timeout).await;
    }
    Ok(output::receipt(&receipt))
}

/// One receipt; with `wait`, once it is done or failed.
pub async fn status(
    db: &Db,
    request_id: &str,
    wait: bool,
    timeout: Duration,
) -> Result<Value, AdminError> {
    let started = Instant::now();
    loop {
        let receipt = privacy::receipt(db, request_id)
            .await?
            .ok_or_else(|| AdminError::NotFound(format!("no erasure request {request_id}")))?;
        if !wait || receipt.is_finished() {
            return Ok(output::receipt(&receipt));
        }
        if started.elapsed() >= timeout {
            return Err(AdminError::Usage(format!(
                "request {request_id} is still {} after {} s: is an enricher running? (the one that holds partition 0 of the raw topic runs erasures)",
                receipt.state,
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn list(db: &Db, site_id: Option<u32>) -> Result<Value, AdminError> {
    Ok(Value::Array(
        privacy::receipts(db, site_id)
            .await?
            .iter()
            .map(output::receipt)
            .collect(),
    ))
}
