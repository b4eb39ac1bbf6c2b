//! The spans of a record's hops, named and attributed as OpenTelemetry's
//! messaging conventions say (`messaging.system` kafka, the destination,
//! partition, offset and consumer group), each a child of the span the
//! record's `traceparent` names. Made only when spans are exported
//! ([`trace_export::exporting`]) and that trace is sampled; else
//! [`tracing::Span::none`], at no cost.

use crate::kafka::Trace;
use crate::ops::trace_export;
use rdkafka::message::Message;

/// The span of one record sent to `topic` (a producer span), a child of
/// `parent` (the trace the record comes from). The record carries its
/// context ([`trace_export::traceparent_of`]).
pub fn send(topic: &str, key: &dyn std::fmt::Display, parent: Option<&str>) -> tracing::Span {
    let span = trace_export::span_in(parent, || {
        tracing::info_span!(
            "send",
            otel.name = format!("send {topic}"),
            otel.kind = "producer",
            otel.status_code = tracing::field::Empty,
            messaging.system = "kafka",
            messaging.operation.type = "send",
            messaging.operation.name = "send",
            messaging.destination.name = topic,
            messaging.kafka.message.key = %key,
        )
    });
    trace_export::continue_from(&span, parent);
    span
}

/// The span of one consumed record's processing by `group` (a consumer
/// span), a child of the span its `traceparent` header names.
pub fn process<M: Message>(message: &M, group: &str) -> tracing::Span {
    let parent = Trace::of(message.headers()).traceparent;
    let span = trace_export::span_in(parent, || {
        tracing::info_span!(
            "process",
            otel.name = format!("process {}", message.topic()),
            otel.kind = "consumer",
            otel.status_code = tracing::field::Empty,
            messaging.system = "kafka",
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.destination.name = message.topic(),
            messaging.destination.partition.id = message.partition().to_string(),
            messaging.kafka.offset = message.offset(),
            messaging.consumer.group.name = group,
        )
    });
    trace_export::continue_from(&span, parent);
    span
}
