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
}

/// Dead-letter headers for a record from `origin` that failed for `reason`;
/// the request id and trace context stay, the attempt count goes up.
pub fn dlq_headers<H: Headers>(original: Option<&H>, reason: &str, error: &str, origin: Origin<'_>) -> OwnedHeaders {
    let attempts =
        original.and_then(|h| header_str(h, dlq_header::ATTEMPTS)).and_then(|a| a.parse::<u32>().ok()).unwrap_or(0) + 1;
    let mut headers = Trace::of(original).headers();
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
    headers
}

/// The last value of a header, as text.
pub fn header_str<'a, H: Headers>(headers: &'a H, key: &str) -> Option<&'a str> {
    headers.iter().filter(|h| h.key == key).last().and_then(|h| h.value).and_then(|v| std::str::from_utf8(v).ok())
}

/// Every header, as text, in order.
pub fn headers_map<H: Headers>(headers: &H) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|h| (h.key.to_owned(), h.value.map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()))
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
            .insert(Header { key: dlq_header::ATTEMPTS, value: Some("2") });
        let origin = Origin { topic: "seckill.orders", partition: 3, offset: 42 };
        let headers = dlq_headers(Some(&original), "MALFORMED", "bad", origin);
        assert_eq!(header_str(&headers, REQUEST_ID_HEADER), Some("r-1"));
        assert!(header_str(&headers, TRACEPARENT_HEADER).is_some());
        assert_eq!(header_str(&headers, dlq_header::ATTEMPTS), Some("3"));
        assert_eq!(header_str(&headers, dlq_header::ORIGINAL_OFFSET), Some("42"));
    }
}
