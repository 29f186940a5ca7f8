//! The insert of encoded rows into `events`: the enricher's batches and `rivulet-admin
//! replay`'s rewritten rows go in the same way.

use bytes::Bytes;
use rivulet_common::ch::Db;
use rivulet_common::schema::events;
use std::time::Duration;

/// Inserts RowBinary rows (as written by `EventRow::write_row_binary`, in chunks that
/// may split a row) into `events`, with the durability settings of `Db::events` (the
/// cluster's quorum). One attempt: the caller decides how to retry.
pub async fn insert_row_binary(db: &Db, chunks: &[Bytes]) -> Result<(), clickhouse::error::Error> {
    let mut insert = db
        .events
        .insert_formatted_with(events::insert_rowbinary())
        .with_timeouts(Some(Duration::from_secs(30)), Some(Duration::from_secs(60)));
    for chunk in chunks {
        // A cheap reference count: a retry sends the same chunks again.
        insert.send(chunk.clone()).await?;
    }
    insert.end().await
}
