//! The import's Kafka producer: records are sent in order, and it tells how far they are
//! acknowledged (every record up to there stored with `acks=all`), which is where a
//! resumed import goes on from.
//!
//! A `BaseProducer` whose delivery reports are served on the import's own thread
//! (`poll`), each landing in a slot of a ring indexed by the send's sequence number. No
//! future, channel or allocation per message: at a million events the per-message
//! machinery of rdkafka's `FutureProducer` cost the import about a quarter of its CPU.

use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const WAITING: u8 = 0;
const STORED: u8 = 1;
const FAILED: u8 = 2;

/// Where delivery reports land: one slot per message in flight, by sequence number.
struct Reports {
    slots: Box<[AtomicU8]>,
    failure: Mutex<Option<KafkaError>>,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let state = match result {
            Ok(_) => STORED,
            Err((e, _)) => {
                let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
                failure.get_or_insert_with(|| e.clone());
                FAILED
            }
        };
        self.slots[seq % self.slots.len()].store(state, Ordering::Release);
    }
}

/// What a call of [`ImportProducer::settle`] found acknowledged.
#[derive(Debug, Default, PartialEq)]
pub struct Settled {
    /// Messages newly acknowledged.
    pub stored: u64,
    /// The record of the last of them: every record up to it is done.
    pub through: Option<u64>,
}

pub struct ImportProducer {
    producer: BaseProducer<Reports>,
    topic: String,
    /// The record of each message in flight, in send order; the front's sequence number
    /// is `first_seq`.
    in_flight: VecDeque<u64>,
    first_seq: u64,
}

impl ImportProducer {
    /// `max_in_flight`: messages sent and not yet settled, at most; `send` waits for
    /// acknowledgements beyond that.
    pub fn create(
        config: &ClientConfig,
        topic: &str,
        max_in_flight: usize,
    ) -> Result<Self, KafkaError> {
        let reports = Reports {
            slots: (0..max_in_flight).map(|_| AtomicU8::new(WAITING)).collect(),
            failure: Mutex::new(None),
        };
        Ok(ImportProducer {
            producer: config.create_with_context(reports)?,
            topic: topic.to_string(),
            in_flight: VecDeque::with_capacity(max_in_flight),
            first_seq: 0,
        })
    }

    fn capacity(&self) -> usize {
        self.producer.context().slots.len()
    }

    /// No message waits for its acknowledgement.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Sends one record's message; when too many are in flight, or librdkafka's queue
    /// is full, serves delivery reports until there is room (their tally goes to
    /// `settled`).
    pub fn send(
        &mut self,
        record: u64,
        key: &[u8],
        payload: &[u8],
        settled: &mut impl FnMut(Settled),
    ) -> Result<(), KafkaError> {
        while self.in_flight.len() >= self.capacity() {
            self.wait_for_reports(settled)?;
        }
        let seq = self.first_seq + self.in_flight.len() as u64;
        loop {
            let message = BaseRecord::with_opaque_to(&self.topic, seq as usize)
                .key(key)
                .payload(payload);
            match self.producer.send(message) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.wait_for_reports(settled)?;
                }
                Err((e, _)) => return Err(e),
            }
        }
        self.in_flight.push_back(record);
        Ok(())
    }

    fn wait_for_reports(&mut self, settled: &mut impl FnMut(Settled)) -> Result<(), KafkaError> {
        self.producer.poll(Duration::from_millis(10));
        settled(self.take_acknowledged()?);
        Ok(())
    }

    /// Serves the delivery reports that have arrived, without waiting.
    pub fn settle(&mut self) -> Result<Settled, KafkaError> {
        self.producer.poll(Duration::ZERO);
        self.take_acknowledged()
    }

    /// The acknowledged messages at the front, in send order; a failed one is an error
    /// (the import stops there: its state says where to go on from).
    fn take_acknowledged(&mut self) -> Result<Settled, KafkaError> {
        let mut settled = Settled::default();
        let slots = &self.producer.context().slots;
        while let Some(&record) = self.in_flight.front() {
            let slot = &slots[(self.first_seq % slots.len() as u64) as usize];
            match slot.load(Ordering::Acquire) {
                WAITING => break,
                STORED => {
                    slot.store(WAITING, Ordering::Relaxed);
                    self.in_flight.pop_front();
                    self.first_seq += 1;
                    settled.stored += 1;
                    settled.through = Some(record);
                }
                _ => {
                    let failure = &self.producer.context().failure;
                    let e = failure.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    return Err(e.unwrap_or(KafkaError::MessageProduction(RDKafkaErrorCode::Fail)));
                }
            }
        }
        Ok(settled)
    }

    /// Waits until every message sent is acknowledged (or one failed).
    pub fn finish(&mut self, settled: &mut impl FnMut(Settled)) -> Result<(), KafkaError> {
        while !self.in_flight.is_empty() {
            self.wait_for_reports(settled)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer that never reaches a broker: the test writes the reports itself.
    fn producer(capacity: usize) -> ImportProducer {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", "127.0.0.1:9");
        ImportProducer::create(&c, "t", capacity).unwrap()
    }

    fn report(p: &ImportProducer, seq: u64, state: u8) {
        let slots = &p.producer.context().slots;
        slots[(seq % slots.len() as u64) as usize].store(state, Ordering::Release);
    }

    #[test]
    fn records_are_done_only_up_to_the_first_unacknowledged_one() {
        let mut p = producer(4);
        p.in_flight.extend([10, 11, 13]);
        // Acknowledged out of order (two partitions): nothing is done before the first.
        report(&p, 1, STORED);
        report(&p, 2, STORED);
        assert_eq!(p.take_acknowledged().unwrap(), Settled::default());
        report(&p, 0, STORED);
        assert_eq!(
            p.take_acknowledged().unwrap(),
            Settled {
                stored: 3,
                through: Some(13)
            }
        );
        assert!(p.is_idle());
        // The ring goes round: the next sequence numbers reuse the slots, cleared.
        p.in_flight.extend([14, 15, 16, 17]);
        assert_eq!(p.take_acknowledged().unwrap(), Settled::default());
        report(&p, 3, STORED);
        report(&p, 4, STORED);
        assert_eq!(p.take_acknowledged().unwrap().through, Some(15));
    }

    #[test]
    fn a_failed_message_stops_the_import_there() {
        let mut p = producer(4);
        p.in_flight.extend([1, 2, 3]);
        report(&p, 0, STORED);
        report(&p, 1, FAILED);
        report(&p, 2, STORED);
        assert!(p.take_acknowledged().is_err());
        assert_eq!(
            p.in_flight.front(),
            Some(&2),
            "record 1 stays done, 2 does not"
        );
    }
}
