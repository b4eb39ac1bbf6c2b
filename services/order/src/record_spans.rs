//! One order's hop through the order service, as a trace shows it: when
//! spans are exported, each record of a batch gets a consume span (a child
//! of the edge's publish, which its `traceparent` names) and, under it, the
//! span of the batch's insert; the order's row — and so every event of the
//! order the relay sends — carries the consume span's context. Not
//! exported, nothing is made and each record keeps the trace it came with.

use rdkafka::message::{Message, OwnedMessage};
use seckill_shared::domain::{OrderRecord, RecordError};
use seckill_shared::kafka::{spans, Trace};
use seckill_shared::ops::trace_export;

/// The spans of a batch's records (empty when spans are not exported).
pub struct RecordSpans {
    /// One consume span per record, in the batch's order.
    process: Vec<tracing::Span>,
    /// Each one's context, as the order's row stores it.
    carried: Vec<Option<String>>,
}

impl RecordSpans {
    /// The spans of `sources` read by `group`.
    pub fn of(sources: &[&OwnedMessage], group: &str) -> Self {
        if !trace_export::exporting() {
            return Self { process: Vec::new(), carried: Vec::new() };
        }
        let process: Vec<tracing::Span> = sources.iter().map(|message| spans::process(*message, group)).collect();
        let carried = process.iter().map(trace_export::traceparent_of).collect();
        Self { process, carried }
    }

    /// The trace the `index`th record's row stores: its consume span's when
    /// exported, else the one its headers carry.
    pub fn trace<'a>(&'a self, index: usize, message: &'a OwnedMessage) -> Trace<'a> {
        let mut trace = Trace::of(message.headers());
        if let Some(carried) = self.carried.get(index).and_then(Option::as_deref) {
            trace.traceparent = Some(carried);
        }
        trace
    }

    /// A span per record for a write of `table` the whole batch shares; it
    /// ends when the returned spans are dropped.
    pub fn writes(&self, operation: &'static str, table: &'static str) -> Vec<tracing::Span> {
        self.process.iter().map(|parent| seckill_shared::db::write_span(parent, operation, table)).collect()
    }
}

/// Decodes one record, in a span (debug level: one per record) that carries
/// its order id, request id and trace context.
pub fn decode(message: &OwnedMessage) -> Result<OrderRecord, RecordError> {
    let decoded = message.payload().map_or(Err(RecordError::Empty), OrderRecord::decode);
    if tracing::enabled!(tracing::Level::DEBUG) {
        let trace = Trace::of(message.headers());
        let order_id = decoded.as_ref().map(|r| r.order_id.as_str()).unwrap_or("");
        tracing::debug_span!(
            "record",
            order_id,
            request_id = trace.request_id.unwrap_or(""),
            traceparent = trace.traceparent.unwrap_or(""),
            partition = message.partition(),
            offset = message.offset()
        )
        .in_scope(|| tracing::debug!("consumed"));
    }
    decoded
}
