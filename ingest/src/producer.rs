//! A Kafka producer whose delivery reports are served on the tokio runtime.
//!
//! rdkafka's `FutureProducer` runs a thread of its own that polls librdkafka and wakes
//! each waiting request from there: every acknowledged batch wakes that thread, and every
//! request is then woken across threads, through the runtime's shared queue. Here
//! librdkafka calls back, from its own thread, only when its report queue goes from empty
//! to non-empty; that wakes one task on the runtime, which serves every report queued so
//! far and completes each request's `Delivery` from a runtime worker, where a wake-up is
//! a push onto that worker's own queue.
#![allow(unsafe_code)]

use rdkafka::bindings as rdsys;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use std::ffi::c_void;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;
use tokio::sync::Notify;

/// The broker's answer for one message.
pub type Ack = Result<(), KafkaError>;

/// Where the broker's answer for one message lands, and the task waiting for it.
/// Shared by the message (as its opaque) and the request that sent it.
#[derive(Default)]
pub struct Delivery(Mutex<DeliveryState>);

#[derive(Default)]
struct DeliveryState {
    ack: Option<Ack>,
    waker: Option<Waker>,
}

impl Delivery {
    fn complete(&self, ack: Ack) {
        let waker = {
            let mut state = lock(&self.0);
            state.ack = Some(ack);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Waits for the broker's answer.
    pub fn ack(self: Arc<Self>) -> impl Future<Output = Ack> {
        std::future::poll_fn(move |cx| {
            let mut state = lock(&self.0);
            match state.ack.take() {
                Some(ack) => Poll::Ready(ack),
                None => {
                    if !state
                        .waker
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        state.waker = Some(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
    }
}

fn lock(m: &Mutex<DeliveryState>) -> std::sync::MutexGuard<'_, DeliveryState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Completes each message's `Delivery` with its delivery report.
pub struct AckContext;

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Arc<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Self::DeliveryOpaque) {
        // The request may have stopped waiting (its client went away): then nobody reads it.
        delivery.complete(match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.clone()),
        });
    }
}

/// A producer, plus its report queue's wake-up hooked to `wake`.
/// Dereferences to the `BaseProducer`, for sending and for the client's other calls.
pub struct AckProducer {
    producer: BaseProducer<AckContext>,
    queue: MainQueue,
    // Kept alive for as long as librdkafka may call `on_reports` with its address.
    _wake: Arc<Notify>,
}

/// librdkafka's handle on the producer's main queue (where delivery reports land).
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queue handles may be used from any thread (its queues lock
// internally); the handle is only destroyed once, in `AckProducer::drop`.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

/// Called by librdkafka, from one of its threads and under the queue's lock, when a
/// report lands on an empty queue. It must not call librdkafka: it only wakes the task.
unsafe extern "C" fn on_reports(_rk: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Notify` of an `AckProducer`, which clears this callback
    // (under the same queue lock) before it releases the `Notify`.
    let wake = unsafe { &*(opaque as *const Notify) };
    wake.notify_one();
}

/// Most report events served in one turn before the serving task yields to others.
const EVENTS_PER_TURN: usize = 256;

impl AckProducer {
    pub fn create(config: &ClientConfig, wake: Arc<Notify>) -> KafkaResult<Self> {
        let producer: BaseProducer<AckContext> = config.create_with_context(AckContext)?;
        // SAFETY: the client pointer is valid for the producer's life; the queue handle
        // we get is our own reference, released in `drop`.
        let queue =
            MainQueue(unsafe { rdsys::rd_kafka_queue_get_main(producer.client().native_ptr()) });
        // SAFETY: the `Notify` outlives the callback registration (see `drop`).
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(
                queue.0,
                Some(on_reports),
                Arc::as_ptr(&wake) as *mut c_void,
            )
        };
        Ok(AckProducer {
            producer,
            queue,
            _wake: wake,
        })
    }

    /// Serves the delivery reports queued so far, up to `EVENTS_PER_TURN` events (each
    /// carries a whole acknowledged batch). Returns whether the queue was left empty;
    /// if not, the caller must come back: librdkafka only calls back on an empty queue.
    pub fn serve_reports(&self) -> bool {
        for _ in 0..EVENTS_PER_TURN {
            // SAFETY: the handle is valid until `drop`.
            if unsafe { rdsys::rd_kafka_queue_length(self.queue.0) } == 0 {
                return true;
            }
            self.producer.poll(Duration::ZERO);
        }
        false
    }
}

impl std::ops::Deref for AckProducer {
    type Target = BaseProducer<AckContext>;

    fn deref(&self) -> &Self::Target {
        &self.producer
    }
}

impl Drop for AckProducer {
    fn drop(&mut self) {
        // SAFETY: clearing the callback takes the queue's lock, so no call of
        // `on_reports` is running once it returns; then our queue reference is released.
        // The producer itself (a field) is dropped after this: it purges and flushes.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue.0, None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue.0);
        }
    }
}
