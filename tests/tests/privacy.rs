//! The data's lifecycle on the single node, through the real services and `rivulet-admin`
//! (the scenarios are in `rivulet_tests::lifecycle`; the cluster suite runs them too):
//!
//! - a person erased while some of their events wait in Kafka with the enricher down: gone
//!   after the restart, after `replay` and after a new consumer group reads the topic from
//!   its beginning; everyone else's rows exactly as they were;
//! - 10,000 people erased in one burst: a few mutations per table, not one per person
//!   (figures in `$RIVULET_STACK_DIR/artifacts/erasure-burst.json`);
//! - retention over three months: one site's rows before its cutoff removed, another
//!   site's kept;
//! - an export of a million rows in constant memory, equal to the table
//!   (`artifacts/export-1m.json`).
//!
//! Whole months dropped by retention need every site of the registry to have a
//! retention, which a registry shared with other tests never has: the cluster suite
//! tests that path on its own stack.

use rivulet_tests::lifecycle;

#[tokio::test]
async fn an_erased_person_stays_erased_across_a_restart_a_replay_and_a_new_consumer_group() {
    lifecycle::erasure_with_events_in_flight(3).await;
}

#[tokio::test]
async fn ten_thousand_erasures_in_one_burst_take_a_few_mutations() {
    // One batch: a mutation per table. Every running enricher of the stack has a runner
    // (the other tests of this file start some), and any of them may take the same due
    // requests at the same time, or erase another test's person meanwhile: a few more.
    lifecycle::erasure_burst(10_000, 6).await;
}

#[tokio::test]
async fn retention_removes_what_is_older_than_a_sites_cutoff_and_nothing_else() {
    lifecycle::retention_by_site().await;
}

#[tokio::test]
async fn a_million_rows_are_exported_in_constant_memory_and_equal_the_table() {
    lifecycle::export_rows(1_000_000, 100, Some("export-1m.json")).await;
}
