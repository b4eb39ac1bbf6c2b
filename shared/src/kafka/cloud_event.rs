//! The CloudEvents 1.0 Kafka binary-mode headers every record of
//! `seckill.order-events` carries beside its trace headers: the value stays
//! the event's JSON (`schemas/order-events.v1.json`), and a consumer using
//! a CloudEvents SDK (Java's `CloudEventDeserializer`, Python's
//! `cloudevents.kafka.from_binary`) reads the same record as a CloudEvent.

use super::headers::Trace;
use chrono::{DateTime, SecondsFormat, Utc};
use rdkafka::message::{Header, OwnedHeaders};

/// `ce_specversion`.
pub const SPEC_VERSION: &str = "1.0";
/// `ce_dataschema`: the schema's `$id`.
pub const DATA_SCHEMA: &str = "https://seckill.dev/schemas/order-events.v1.json";

/// `ce_type` of an event of `kind` (`CREATED` → `com.seckill.order.created`;
/// the schema lists each).
pub fn event_type(kind: &str) -> String {
    format!("com.seckill.order.{}", kind.to_ascii_lowercase())
}

/// What one event's CloudEvents headers say.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// `ce_id`: the event's `eventId`.
    pub id: &'a str,
    /// Its `type`.
    pub kind: &'a str,
    /// `ce_subject`: the order id.
    pub subject: &'a str,
    /// `ce_time`: when the change was written.
    pub time: DateTime<Utc>,
    /// `ce_source`: the pipeline (`kafka.cloudevents_source`).
    pub source: &'a str,
}

/// The record's headers: the trace's, then the CloudEvents attributes and
/// `content-type: application/json`.
pub fn headers(trace: Trace<'_>, event: Attributes<'_>) -> OwnedHeaders {
    binary_headers(trace, event, &event_type(event.kind), DATA_SCHEMA)
}

/// A record's headers as [`headers`] makes them, for an event of any topic:
/// `ce_type` is `kind` as given, `ce_dataschema` is `schema`.
pub fn binary_headers(trace: Trace<'_>, event: Attributes<'_>, kind: &str, schema: &str) -> OwnedHeaders {
    let time = event.time.to_rfc3339_opts(SecondsFormat::Millis, true);
    let mut headers = trace.headers();
    for (key, value) in [
        ("ce_specversion", SPEC_VERSION),
        ("ce_id", event.id),
        ("ce_source", event.source),
        ("ce_type", kind),
        ("ce_time", time.as_str()),
        ("ce_subject", event.subject),
        ("ce_dataschema", schema),
        ("content-type", "application/json"),
    ] {
        headers = headers.insert(Header { key, value: Some(value) });
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    #[test]
    fn every_attribute_is_a_header() {
        let trace = Trace { request_id: Some("r-1"), traceparent: None };
        let time = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let event =
            Attributes { id: "1-2-3-ab:CREATED", kind: "REFUND_DUE", subject: "1-2-3-ab", time, source: "urn:x" };
        let headers = headers(trace, event);
        let found: Vec<(String, String)> = headers
            .iter()
            .map(|h| (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()))
            .collect();
        let get = |k: &str| found.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ce_type"), Some("com.seckill.order.refund_due"));
        assert_eq!(get("ce_time"), Some("2023-11-14T22:13:20.123Z"));
        assert_eq!((get("ce_specversion"), get("content-type")), (Some("1.0"), Some("application/json")));
        assert_eq!(get("x-request-id"), Some("r-1"));
    }
}
