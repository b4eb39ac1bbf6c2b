//! The Kafka circuit: while no broker can take the sale's records, the edge
//! deducts nothing and answers 503 at once, instead of deducting, waiting
//! the whole delivery timeout and rolling back (units held meanwhile read as
//! sold out to everyone else).
//!
//! It opens on librdkafka's own word — every broker down (its error
//! callback), no broker up in two statistics in a row (once a second each:
//! one alone may catch a connection being made) — and on a delivery that
//! failed. While it is open, one request at a time is let
//! through as a probe, once a second or as soon as the statistics show a
//! broker up again; a probe delivered closes the circuit, a probe failed
//! keeps it open. So it closes by itself when a broker answers. A probe
//! that ends without publishing (sold out, already purchased, voided) gives
//! its turn back when it is dropped: the next request probes instead.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long an open circuit waits before it lets a probe through (when the
/// statistics have not already seen a broker up).
const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Records go through.
    Closed,
    /// No broker takes records; since when, whether a probe is out, and
    /// whether a broker was seen up since.
    Open { since: Instant, probing: bool, broker_up: bool },
}

/// The circuit of one producer.
#[derive(Debug)]
pub struct Circuit {
    state: Mutex<State>,
    /// Whether the last statistics saw no broker up.
    none_up_before: AtomicBool,
}

/// What [`Circuit::admit`] lets a request do.
#[derive(Debug)]
pub enum Admission<'a> {
    /// The circuit is closed.
    Through,
    /// The circuit is open and this request is its probe.
    Probe(Probe<'a>),
}

/// The open circuit's one probe. Dropped without [`Probe::delivered`] or
/// [`Probe::failed`] (the request ended before publishing), it gives the
/// turn back at once; without that, a probe whose sale was sold out kept
/// the circuit open for good.
#[derive(Debug)]
pub struct Probe<'a> {
    circuit: &'a Circuit,
    settled: bool,
}

impl Probe<'_> {
    /// The probe's record was delivered: the circuit closes.
    pub fn delivered(mut self) {
        self.settled = true;
        self.circuit.delivered();
    }

    /// The probe's record was not delivered: the circuit stays open and the
    /// next probe waits its interval.
    pub fn failed(mut self) {
        self.settled = true;
        self.circuit.probe_failed();
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.circuit.probe_unused();
        }
    }
}

/// The circuit is open: nothing would reach a broker.
#[derive(Debug, thiserror::Error)]
#[error("no Kafka broker takes records now (circuit open for {0:?})")]
pub struct CircuitOpen(pub Duration);

impl Default for Circuit {
    fn default() -> Self {
        Self { state: Mutex::new(State::Closed), none_up_before: AtomicBool::new(false) }
    }
}

impl Circuit {
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Whether a request may deduct now.
    pub fn admit(&self) -> Result<Admission<'_>, CircuitOpen> {
        let mut state = self.state();
        match *state {
            State::Closed => Ok(Admission::Through),
            State::Open { since, probing: false, broker_up } if broker_up || since.elapsed() >= PROBE_EVERY => {
                *state = State::Open { since, probing: true, broker_up };
                Ok(Admission::Probe(Probe { circuit: self, settled: false }))
            }
            State::Open { since, .. } => Err(CircuitOpen(since.elapsed())),
        }
    }

    /// Whether it is open (for `/readyz` and the metrics).
    pub fn is_open(&self) -> bool {
        !matches!(*self.state(), State::Closed)
    }

    /// No broker can take records (every broker down, a delivery failed, a
    /// probe failed). Returns whether it was closed until now.
    pub fn open(&self, why: &str) -> bool {
        let mut state = self.state();
        let was_closed = *state == State::Closed;
        let since = match *state {
            State::Open { since, .. } => since,
            State::Closed => Instant::now(),
        };
        *state = State::Open { since, probing: false, broker_up: false };
        drop(state);
        if was_closed {
            tracing::warn!(why, "kafka circuit open: orders are answered 503 without deducting");
            metrics::counter!("seckill_edge_kafka_circuit_opened_total").increment(1);
            metrics::gauge!("seckill_edge_kafka_circuit_open").set(1.0);
        }
        was_closed
    }

    /// A record was delivered: brokers take records.
    pub fn delivered(&self) {
        let mut state = self.state();
        if *state != State::Closed {
            *state = State::Closed;
            drop(state);
            tracing::info!("kafka circuit closed: a broker took a record");
            metrics::gauge!("seckill_edge_kafka_circuit_open").set(0.0);
        }
    }

    /// A probe ended before publishing anything: the next request may probe
    /// at once (the interval and the brokers' state are as they were).
    fn probe_unused(&self) {
        let mut state = self.state();
        if let State::Open { since, broker_up, .. } = *state {
            *state = State::Open { since, probing: false, broker_up };
        }
    }

    /// A probe ended without a delivery (it was not even sent, or failed).
    fn probe_failed(&self) {
        let mut state = self.state();
        if let State::Open { broker_up, .. } = *state {
            *state = State::Open { since: Instant::now(), probing: false, broker_up };
        }
    }

    /// librdkafka's statistics: whether any broker is up.
    pub fn brokers_seen(&self, any_up: bool) {
        let none_up_before = self.none_up_before.swap(!any_up, Ordering::SeqCst);
        let mut state = self.state();
        match *state {
            State::Open { since, probing, .. } => *state = State::Open { since, probing, broker_up: any_up },
            State::Closed if !any_up && none_up_before => {
                drop(state);
                self.open("no broker is up (librdkafka statistics)");
            }
            State::Closed => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_circuit_lets_one_probe_through_and_closes_on_a_delivery() {
        let circuit = Circuit::default();
        assert!(matches!(circuit.admit().unwrap(), Admission::Through));
        assert!(circuit.open("test"));
        assert!(!circuit.open("again"), "opened once");
        assert!(circuit.admit().is_err(), "no probe within the first second");
        circuit.brokers_seen(true);
        let first = probe(circuit.admit());
        assert!(circuit.admit().is_err(), "one probe at a time");
        first.failed();
        circuit.brokers_seen(false);
        assert!(circuit.admit().is_err(), "the probe failed and no broker is up");
        circuit.brokers_seen(true);
        probe(circuit.admit()).delivered();
        assert!(matches!(circuit.admit().unwrap(), Admission::Through));
        assert!(!circuit.is_open());
        circuit.brokers_seen(false);
        assert!(!circuit.is_open(), "one statistics with no broker up may catch a connection being made");
        circuit.brokers_seen(true);
        circuit.brokers_seen(false);
        assert!(!circuit.is_open(), "not two in a row");
        circuit.brokers_seen(false);
        assert!(circuit.is_open(), "two statistics in a row with no broker up open it");
    }

    /// The demo's failure: the circuit opened, its probe met a sold-out
    /// sale and never published, and every later request was answered 503.
    #[test]
    fn a_probe_that_never_publishes_gives_its_turn_back() {
        let circuit = Circuit::default();
        circuit.open("test");
        circuit.brokers_seen(true);
        drop(probe(circuit.admit()));
        let next = probe(circuit.admit());
        assert!(circuit.admit().is_err(), "still one probe at a time");
        next.delivered();
        assert!(!circuit.is_open());
    }

    fn probe(admission: Result<Admission<'_>, CircuitOpen>) -> Probe<'_> {
        match admission {
            Ok(Admission::Probe(probe)) => probe,
            other => panic!("expected the probe, got {other:?}"),
        }
    }
}
