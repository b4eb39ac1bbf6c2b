//! A producer that is made anew after a fatal error. The idempotent
//! producer raises one when it can no longer keep its promise of order and
//! no duplicates (a sequence the broker refuses, a producer id fenced):
//! from then on it fails every send, for good. The edge retires such a
//! producer and makes another (`services/edge/src/publish/`); every other
//! producer of the project — the relay's, the CREATED events', the dead
//! letters', the sweeper's, the draws', `seckillctl dlq replay`'s — does it
//! through [`Renewing`].
//! What the old one had in flight failed with it; its sender's own retry
//! sends it again on the new one (a relay turn, a batch, a sweep, a run).

use parking_lot::RwLock;
use rdkafka::error::KafkaError;
use rdkafka::message::ToBytes;
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::util::Timeout;
use rdkafka::ClientContext;
use std::sync::Arc;

/// A producer whose fatal error can be read.
pub trait Fatal: Send + Sync + 'static {
    /// The fatal error it raised, if any.
    fn fatal(&self) -> Option<String>;
    /// Raises one with librdkafka's own test hook (tests only).
    #[cfg(feature = "fault-injection")]
    fn inject_fatal_error(&self);
}

impl<C: ProducerContext + 'static> Fatal for ThreadedProducer<C> {
    fn fatal(&self) -> Option<String> {
        self.client().fatal_error().map(|(code, why)| format!("{code:?}: {why}"))
    }
    #[cfg(feature = "fault-injection")]
    fn inject_fatal_error(&self) {
        inject(self.client());
    }
}

impl<C: ClientContext + 'static> Fatal for FutureProducer<C> {
    fn fatal(&self) -> Option<String> {
        self.client().fatal_error().map(|(code, why)| format!("{code:?}: {why}"))
    }
    #[cfg(feature = "fault-injection")]
    fn inject_fatal_error(&self) {
        inject(self.client());
    }
}

/// Raises a fatal error in `client` with librdkafka's test hook (panics
/// when librdkafka refuses: a test must not go on with no fault placed).
#[cfg(feature = "fault-injection")]
#[allow(unsafe_code)]
pub fn inject<C: ClientContext>(client: &rdkafka::client::Client<C>) {
    let reason = c"injected by a test";
    // SAFETY: the handle is the live client's, valid while `client` is
    // borrowed; the reason is a NUL-terminated string librdkafka copies.
    let answer = unsafe {
        rdkafka::bindings::rd_kafka_test_fatal_error(
            client.native_ptr(),
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
            reason.as_ptr(),
        )
    };
    assert_eq!(
        answer,
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
        "the fatal error was not raised"
    );
}

/// Makes a producer.
type Make<P> = Arc<dyn Fn() -> anyhow::Result<P> + Send + Sync>;

/// A producer, made again once it failed fatally.
pub struct Renewing<P> {
    current: RwLock<Arc<P>>,
    make: Make<P>,
    /// Whose producer, for the log and the metric.
    what: &'static str,
}

impl<P: Fatal> Renewing<P> {
    /// The first producer, made now by `make` (which makes the next ones).
    pub fn new(
        what: &'static str,
        make: impl Fn() -> anyhow::Result<P> + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let first = make()?;
        Ok(Self { current: RwLock::new(Arc::new(first)), make: Arc::new(make), what })
    }

    /// The producer to send with: the current one, or a new one when the
    /// current one failed fatally (one caller makes it; the others wait).
    /// Should making one fail, the old one is answered and the next call
    /// tries again.
    pub fn get(&self) -> Arc<P> {
        let current = self.current.read().clone();
        if current.fatal().is_none() {
            return current;
        }
        let mut slot = self.current.write();
        if let Some(why) = slot.fatal() {
            match (self.make)() {
                Ok(fresh) => {
                    tracing::warn!(producer = self.what, fatal = %why, "the producer failed fatally; a new one replaces it");
                    metrics::counter!("seckill_producers_renewed_total", "producer" => self.what).increment(1);
                    *slot = Arc::new(fresh);
                }
                Err(error) => {
                    tracing::warn!(producer = self.what, error = %format!("{error:#}"), "the producer failed fatally; a new one could not be made yet")
                }
            }
        }
        slot.clone()
    }

    /// The fatal error of the current producer, if any (none once a new
    /// one replaced it).
    pub fn fatal(&self) -> Option<String> {
        self.current.read().fatal()
    }

    /// Raises a fatal error in the current producer (tests only).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fatal_error(&self) {
        self.current.read().inject_fatal_error();
    }
}

impl Renewing<FutureProducer> {
    /// Sends the record `record` makes and waits for the broker (room in
    /// the queue waited for up to `queue_timeout`); should the producer fail
    /// fatally meanwhile, sends it once more on a new one.
    pub async fn send<'a, K, P>(
        &self,
        record: impl Fn() -> FutureRecord<'a, K, P>,
        queue_timeout: Timeout,
    ) -> Result<Delivery, KafkaError>
    where
        K: ToBytes + ?Sized + 'a,
        P: ToBytes + ?Sized + 'a,
    {
        let producer = self.get();
        match producer.send(record(), queue_timeout).await {
            Ok(delivery) => Ok(delivery),
            Err(_) if producer.fatal().is_some() => {
                self.get().send(record(), queue_timeout).await.map_err(|(error, _)| error)
            }
            Err((error, _)) => Err(error),
        }
    }
}
