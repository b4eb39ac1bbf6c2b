//! Record headers: the request id and W3C trace context every record carries
//! from the edge on, and the dead-letter headers (contract: section 4).

use rdkafka::message::{Header, Headers, OwnedHeaders};
use std::collections::BTreeMap;

/// The edge's request id, carried through the pipeline (also the HTTP header).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// W3C trace context (`00-<trace id>-<span id>-<flags>`), carried through
/// the pipeline so a user's tracing can stitch one order's path together.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Dead-letter headers (contract: section 4).
pub mod dlq_header {
    /// Stable reason code.
    pub const REASON: &str = "dlq.reason";
    /// Human-readable error.
    pub const ERROR: &str = "dlq.error";
    /// Topic the record came from.
    pub const ORIGINAL_TOPIC: &str = "dlq.original.topic";
    /// Its partition.
    pub const ORIGINAL_PARTITION: &str = "dlq.original.partition";
    /// Its offset.
    pub const ORIGINAL_OFFSET: &str = "dlq.original.offset";
    /// How many times it has been dead-lettered.
    pub const ATTEMPTS: &str = "dlq.attempts";
    /// When (RFC 3339).
    pub const FAILED_AT: &str = "dlq.failed.at";
    /// Set by `seckillctl dlq replay`: `topic:partition:offset` it came from.
    pub const REPLAYED_FROM: &str = "dlq.replayed-from";
    /// Set by `seckillctl dlq replay` and `redrive`: the run that
    /// re-produced the record (kept when it is dead-lettered again).
    pub const REPLAY_ID: &str = "dlq.replay-id";
    /// How many runs re-produced it (kept when it is dead-lettered again).
    pub const REPLAY_COUNT: &str = "dlq.replay-count";
    /// Set by `seckillctl dlq redrive`: the order the new one replaces.
    pub const REDRIVE_OF: &str = "dlq.redrive-of";
    /// The headers a record keeps when it is dead-lettered again.
    pub const CARRIED: [&str; 2] = [REPLAY_ID, REPLAY_COUNT];
}

/// The headers Spring Kafka's `DeadLetterPublishingRecoverer` writes, so a
/// Java team's dead-letter tooling reads ours: text, except the partition
/// (a 4-byte big-endian int), the offset and the timestamp (8-byte
/// big-endian longs), as Spring encodes them.
pub mod spring_dlt {
    pub const ORIGINAL_TOPIC: &str = "kafka_dlt-original-topic";
    pub const ORIGINAL_PARTITION: &str = "kafka_dlt-original-partition";
    pub const ORIGINAL_OFFSET: &str = "kafka_dlt-original-offset";
    pub const ORIGINAL_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
    pub const ORIGINAL_TIMESTAMP_TYPE: &str = "kafka_dlt-original-timestamp-type";
    pub const ORIGINAL_CONSUMER_GROUP: &str = "kafka_dlt-original-consumer-group";
    pub const EXCEPTION_FQCN: &str = "kafka_dlt-exception-fqcn";
    pub const EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";

    /// The binary ones and their widths.
    pub const BINARY: [(&str, usize); 3] = [(ORIGINAL_PARTITION, 4), (ORIGINAL_OFFSET, 8), (ORIGINAL_TIMESTAMP, 8)];
}

/// What follows an order from its HTTP request on: the request id and the
/// W3C trace context, carried as record headers and stored with the order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trace<'a> {
    pub request_id: Option<&'a str>,
    pub traceparent: Option<&'a str>,
}

impl<'a> Trace<'a> {
    /// The trace a record's headers carry.
    pub fn of<H: Headers>(headers: Option<&'a H>) -> Self {
        Self {
            request_id: headers.and_then(|h| header_str(h, REQUEST_ID_HEADER)),
            traceparent: headers.and_then(|h| header_str(h, TRACEPARENT_HEADER)),
        }
    }

    /// As record headers.
    pub fn headers(&self) -> OwnedHeaders {
        let mut headers = OwnedHeaders::new_with_capacity(2);
        for (key, value) in [(REQUEST_ID_HEADER, self.request_id), (TRACEPARENT_HEADER, self.traceparent)] {
            if let Some(value) = value {
                headers = headers.insert(Header { key, value: Some(value) });
            }
        }
        headers
    }
}

/// Where a record came from, for its dead-letter headers.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Its timestamp (ms), when it has one.
    pub timestamp: Option<i64>,
    /// The consumer group that read it.
    pub group: &'a str,
}

/// Dead-letter headers for a record from `origin` that failed for `reason`;
/// the request id and trace context stay (exported spans: the context of
/// the span sending it, a child of the record's), the attempt count goes up.
pub fn dlq_headers<H: Headers>(original: Option<&H>, reason: &str, error: &str, origin: Origin<'_>) -> OwnedHeaders {
    let attempts =
        original.and_then(|h| header_str(h, dlq_header::ATTEMPTS)).and_then(|a| a.parse::<u32>().ok()).unwrap_or(0) + 1;
    let sending = crate::ops::trace_export::traceparent_of(&tracing::Span::current());
    let mut trace = Trace::of(original);
    trace.traceparent = sending.as_deref().or(trace.traceparent);
    let mut headers = trace.headers();
    for (key, value) in [
        (dlq_header::REASON, reason.to_owned()),
        (dlq_header::ERROR, error.to_owned()),
        (dlq_header::ORIGINAL_TOPIC, origin.topic.to_owned()),
        (dlq_header::ORIGINAL_PARTITION, origin.partition.to_string()),
        (dlq_header::ORIGINAL_OFFSET, origin.offset.to_string()),
        (dlq_header::ATTEMPTS, attempts.to_string()),
        (dlq_header::FAILED_AT, chrono::Utc::now().to_rfc3339()),
    ] {
        headers = headers.insert(Header { key, value: Some(value.as_bytes()) });
    }
    for key in dlq_header::CARRIED {
        if let Some(value) = original.and_then(|h| header_str(h, key)) {
            headers = headers.insert(Header { key, value: Some(value) });
        }
    }
    let fqcn = format!("seckill.dlq.{reason}");
    for (key, value) in [
        (spring_dlt::ORIGINAL_TOPIC, origin.topic.as_bytes()),
        (spring_dlt::ORIGINAL_CONSUMER_GROUP, origin.group.as_bytes()),
        (spring_dlt::EXCEPTION_FQCN, fqcn.as_bytes()),
        (spring_dlt::EXCEPTION_MESSAGE, error.as_bytes()),
    ] {
        headers = headers.insert(Header { key, value: Some(value) });
    }
    let partition = origin.partition.to_be_bytes();
    let offset = origin.offset.to_be_bytes();
    headers = headers
        .insert(Header { key: spring_dlt::ORIGINAL_PARTITION, value: Some(&partition[..]) })
        .insert(Header { key: spring_dlt::ORIGINAL_OFFSET, value: Some(&offset[..]) });
    if let Some(timestamp) = origin.timestamp {
        let timestamp = timestamp.to_be_bytes();
        headers = headers
            .insert(Header { key: spring_dlt::ORIGINAL_TIMESTAMP, value: Some(&timestamp[..]) })
            .insert(Header { key: spring_dlt::ORIGINAL_TIMESTAMP_TYPE, value: Some("CreateTime") });
    }
    headers
}

/// A Spring binary header's value as a decimal number (a width it does not
/// have: lossy text, as any other header).
fn spring_binary(key: &str, value: &[u8]) -> Option<String> {
    let (_, width) = spring_dlt::BINARY.iter().find(|(name, _)| *name == key)?;
    match (*width, value.len()) {
        (4, 4) => Some(i32::from_be_bytes(value.try_into().ok()?).to_string()),
        (8, 8) => Some(i64::from_be_bytes(value.try_into().ok()?).to_string()),
        _ => None,
    }
}

/// The last value of a header, as text.
pub fn header_str<'a, H: Headers>(headers: &'a H, key: &str) -> Option<&'a str> {
    headers.iter().filter(|h| h.key == key).last().and_then(|h| h.value).and_then(|v| std::str::from_utf8(v).ok())
}

/// Every header, as text, in order (Spring's binary numbers in decimal).
pub fn headers_map<H: Headers>(headers: &H) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|h| {
            let text = h
                .value
                .map(|v| spring_binary(h.key, v).unwrap_or_else(|| String::from_utf8_lossy(v).into_owned()))
                .unwrap_or_default();
            (h.key.to_owned(), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_headers_keep_the_trace_and_count_attempts() {
        let original = OwnedHeaders::new()
            .insert(Header { key: REQUEST_ID_HEADER, value: Some("r-1") })
            .insert(Header {
                key: TRACEPARENT_HEADER,
                value: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            })
            .insert(Header { key: dlq_header::ATTEMPTS, value: Some("2") })
            .insert(Header { key: dlq_header::REPLAY_COUNT, value: Some("1") })
            .insert(Header { key: dlq_header::REPLAY_ID, value: Some("7") });
        let origin = Origin {
            topic: "seckill.orders",
            partition: 3,
            offset: 42,
            timestamp: Some(1_700_000_000_000),
            group: "g",
        };
        let headers = dlq_headers(Some(&original), "MALFORMED", "bad", origin);
        assert_eq!(header_str(&headers, REQUEST_ID_HEADER), Some("r-1"));
        assert!(header_str(&headers, TRACEPARENT_HEADER).is_some());
        assert_eq!(header_str(&headers, dlq_header::ATTEMPTS), Some("3"));
        assert_eq!(header_str(&headers, dlq_header::ORIGINAL_OFFSET), Some("42"));
        assert_eq!(header_str(&headers, dlq_header::REPLAY_COUNT), Some("1"), "a replayed record's count stays");
        assert_eq!(header_str(&headers, dlq_header::REPLAY_ID), Some("7"));
        // Spring's, in its encoding: a Java DLT tool reads them.
        let raw = |key| headers.iter().find(|h| h.key == key).and_then(|h| h.value).unwrap().to_vec();
        assert_eq!(raw(spring_dlt::ORIGINAL_PARTITION), 3i32.to_be_bytes());
        assert_eq!(raw(spring_dlt::ORIGINAL_OFFSET), 42i64.to_be_bytes());
        assert_eq!(raw(spring_dlt::ORIGINAL_TIMESTAMP), 1_700_000_000_000i64.to_be_bytes());
        assert_eq!(header_str(&headers, spring_dlt::ORIGINAL_TOPIC), Some("seckill.orders"));
        assert_eq!(header_str(&headers, spring_dlt::EXCEPTION_FQCN), Some("seckill.dlq.MALFORMED"));
        assert_eq!(header_str(&headers, spring_dlt::ORIGINAL_CONSUMER_GROUP), Some("g"));
        let shown = headers_map(&headers);
        assert_eq!(
            (shown[spring_dlt::ORIGINAL_PARTITION].as_str(), shown[spring_dlt::ORIGINAL_OFFSET].as_str()),
            ("3", "42"),
            "shown as numbers"
        );
    }
}
