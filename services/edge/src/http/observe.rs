//! What wraps every request: its request id (the client's when it is at
//! most 128 visible ASCII characters, else one made here, so a client can
//! never make the pipeline carry kilobytes in every header of its order)
//! and W3C trace context (the client's, or a new trace), a span that
//! carries both (and the order id once one is minted), the latency metric,
//! and the one log line of a failed request.

use super::errors::ErrorDetail;
use crate::client_addr::FromTrustedProxy;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use seckill_shared::kafka::{REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use seckill_shared::ops::trace_export;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;
use tracing::Instrument;

/// Request ids for requests that come without one: a random per-process
/// prefix and a counter (`1f3a9c2e-4d2`). Unique enough to follow a request
/// through the logs and the Kafka header, and costs no system call (a UUID v4
/// asks the kernel for randomness on every request).
struct SequentialRequestId {
    prefix: u32,
    next: AtomicU64,
}

static REQUEST_IDS: LazyLock<SequentialRequestId> =
    LazyLock::new(|| SequentialRequestId { prefix: rand::random(), next: AtomicU64::new(1) });

impl SequentialRequestId {
    fn make(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // `prefix-n`: the prefix's 8 hex digits, the counter's without
        // leading zeros (written by hand: `format!` was a cost on every
        // request).
        let mut id = [0u8; 8 + 1 + 16];
        hex_into(&mut id[..8], u128::from(self.prefix));
        id[8] = b'-';
        let digits = (16 - n.leading_zeros() as usize / 4).max(1);
        hex_into(&mut id[9..9 + digits], u128::from(n));
        HeaderValue::from_bytes(&id[..9 + digits]).expect("hex and a dash are a valid header")
    }
}

/// Writes the low `out.len()` hex digits of `value` (lower case) into `out`.
fn hex_into(out: &mut [u8], mut value: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for digit in out.iter_mut().rev() {
        *digit = DIGITS[(value & 0xf) as usize];
        value >>= 4;
    }
}

/// The header names the middleware writes, made once.
const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);
const TRACEPARENT: HeaderName = HeaderName::from_static(TRACEPARENT_HEADER);

/// Whether a client's request id may be carried: 1 to 128 visible ASCII
/// characters.
fn valid_request_id(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    (1..=128).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// A `traceparent` of a new trace (version 00), `sampled` or not.
fn new_traceparent(sampled: bool) -> HeaderValue {
    let mut value = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex_into(&mut value[3..35], rand::random::<u128>() | 1);
    hex_into(&mut value[36..52], u128::from(rand::random::<u64>() | 1));
    if sampled {
        value[54] = b'1';
    }
    HeaderValue::from_bytes(&value).expect("hex and dashes are a valid header")
}

/// Whether a client's `traceparent` is valid W3C trace context
/// (`vv-<32 hex>-<16 hex>-<2 hex>`, the version not `ff`, neither id all
/// zeros); an invalid one starts a new trace.
fn valid_traceparent(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    let hex =
        |range: std::ops::Range<usize>| bytes[range].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    let zeros = |range: std::ops::Range<usize>| bytes[range].iter().all(|b| *b == b'0');
    bytes.len() == 55
        && bytes[2] == b'-'
        && bytes[35] == b'-'
        && bytes[52] == b'-'
        && hex(0..2)
        && hex(3..35)
        && hex(36..52)
        && hex(53..55)
        && &bytes[0..2] != b"ff"
        && !zeros(3..35)
        && !zeros(36..52)
}

/// Whether the request's `traceparent` is taken (its trace continued, its
/// sampled flag obeyed): only from a trusted proxy (the shop's, which
/// decided it), and never on a probe, `/metrics` or a path no route
/// matches. Anyone else's starts a new trace the edge samples at
/// `telemetry.otlp_sample_ratio`: a client cannot make the pipeline
/// export its requests.
fn honoured(request: &Request) -> bool {
    let trusted = request.extensions().get::<FromTrustedProxy>().is_some_and(|t| t.0);
    let routed = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    trusted && routed.is_some_and(|route| !matches!(route, "/healthz" | "/readyz" | "/metrics"))
}

/// A span's name of low cardinality (OpenTelemetry's HTTP conventions: the
/// method and the route): a path segment with a digit in it is an id.
fn span_name(method: &axum::http::Method, path: &str) -> String {
    let route: Vec<&str> = path
        .split('/')
        .map(|segment| if segment.bytes().any(|b| b.is_ascii_digit()) { "{id}" } else { segment })
        .collect();
    format!("{method} {}", route.join("/"))
}

/// Gives every request its ids, runs it in its span, records its latency
/// and logs a 5xx once, with its detail.
pub async fn observe(mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let headers = request.headers_mut();
    let request_id = match headers.get(REQUEST_ID_HEADER).filter(|id| valid_request_id(id)) {
        Some(id) => id.clone(),
        None => {
            let id = REQUEST_IDS.make();
            headers.insert(REQUEST_ID, id.clone());
            id
        }
    };
    let client_trace = honoured(&request)
        .then(|| request.headers().get(TRACEPARENT_HEADER).filter(|t| valid_traceparent(t)).cloned())
        .flatten();
    let client = client_trace.as_ref().and_then(|t| t.to_str().ok());
    // A kept trace's request span is exported (and logged at info); any
    // other request's span is a debug one: built only when the log asks
    // for debug (RUST_LOG), never exported. Built for every request at the
    // default level, it was a quarter of the edge's work on an order
    // (formatting its fields for a log that shows them only beside a line
    // the request logs). The one line of a failure carries the ids itself.
    let traced = trace_export::sample(client);
    macro_rules! request_span {
        ($level:expr) => {
            tracing::span!(
                target: "seckill_edge::http::observe",
                $level,
                "request",
                otel.name = tracing::field::Empty,
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                http.request.method = %request.method(),
                url.path = request.uri().path(),
                http.response.status_code = tracing::field::Empty,
                request_id = request_id.to_str().unwrap_or(""),
                order_id = tracing::field::Empty,
            )
        };
    }
    let span = if traced { request_span!(tracing::Level::INFO) } else { request_span!(tracing::Level::DEBUG) };
    // For the line of a failure (cheap clones: shared bytes).
    let (method, uri) = (request.method().clone(), request.uri().clone());
    // The trace the request carries on: kept, this span's context (a child
    // of the buyer's); else the buyer's, or a new trace (unsampled when
    // spans are exported: nobody keeps it).
    let carried = if traced {
        span.record("otel.name", span_name(request.method(), request.uri().path()));
        trace_export::continue_from(&span, client);
        trace_export::traceparent_of(&span).and_then(|t| HeaderValue::from_str(&t).ok())
    } else {
        client_trace
    };
    let fresh = || new_traceparent(!trace_export::exporting());
    request.headers_mut().insert(TRACEPARENT, carried.unwrap_or_else(fresh));
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(detail) = response.extensions().get::<ErrorDetail>() {
        let request_id = request_id.to_str().unwrap_or("");
        span.in_scope(|| {
            let path = uri.path();
            tracing::error!(status = status.as_u16(), request_id, %method, path, error = %detail.0, "request failed")
        });
    }
    response.headers_mut().insert(REQUEST_ID, request_id);
    crate::hot_metrics::REQUEST_SECONDS.record(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_short_and_visible() {
        let long = "x".repeat(129);
        for (id, ok) in
            [("abc-123", true), ("x", true), ("a b", false), ("a\tb", false), ("é", false), (long.as_str(), false)]
        {
            let value = HeaderValue::from_bytes(id.as_bytes()).unwrap();
            assert_eq!(valid_request_id(&value), ok, "{id:?}");
        }
        assert!(valid_request_id(&HeaderValue::from_str(&"y".repeat(128)).unwrap()));
    }

    #[test]
    fn made_ids_are_hex_as_format_writes_it() {
        let ids = SequentialRequestId { prefix: 0x00c0ffee, next: AtomicU64::new(0) };
        for expected in ["00c0ffee-0", "00c0ffee-1", "00c0ffee-2"] {
            assert_eq!(ids.make(), expected);
        }
        ids.next.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(ids.make(), "00c0ffee-ffffffffffffffff");
        ids.next.store(0x10, Ordering::Relaxed);
        assert_eq!(ids.make(), "00c0ffee-10");
        let mut out = [0u8; 32];
        hex_into(&mut out, 0x0af7651916cd43dd8448eb211c80319c);
        assert_eq!(&out, b"0af7651916cd43dd8448eb211c80319c");
        assert!(new_traceparent(true).to_str().unwrap().ends_with("-01"));
        assert!(new_traceparent(false).to_str().unwrap().ends_with("-00"));
    }

    #[test]
    fn span_names_leave_the_ids_out() {
        for (path, name) in [
            ("/api/seckill/order", "POST /api/seckill/order"),
            ("/api/seckill/order/1001-2001-3-k7", "POST /api/seckill/order/{id}"),
            ("/admin/sales/1001/2001", "POST /admin/sales/{id}/{id}"),
        ] {
            assert_eq!(span_name(&axum::http::Method::POST, path), name, "{path}");
        }
    }

    #[test]
    fn traceparents_are_checked_for_shape() {
        let good = HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert!(valid_traceparent(&good));
        assert!(valid_traceparent(&new_traceparent(true)) && valid_traceparent(&new_traceparent(false)));
        for bad in [
            "",
            "00-xyz",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            // W3C: version ff is invalid, and so are all-zero ids.
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        ] {
            assert!(!valid_traceparent(&HeaderValue::from_static(bad)), "{bad}");
        }
    }
}
