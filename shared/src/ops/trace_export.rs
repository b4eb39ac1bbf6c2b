//! Spans exported over OTLP (HTTP/protobuf) when `telemetry.otlp_endpoint`
//! (`SECKILL_OTLP_ENDPOINT`) is set, and the W3C trace context that makes
//! each hop of an order a child of the one before it.
//!
//! Unset, no exporter is built, no layer is installed and [`exporting`] is
//! false: a record carries the `traceparent` it came with, unchanged, and no
//! span is made for the sake of a trace (nothing costs anything). Set, every
//! service's spans go to the endpoint through the SDK's batch processor (a
//! thread of its own: a collector that is down costs dropped spans, never a
//! request's time), and the hops pass on the *new* span's context: the
//! edge's request span continues the buyer's `traceparent` (or starts the
//! trace), its publish span is what the order record carries, the order
//! service's consume span is what the order's row (and so its events)
//! carries, the relay's send span is what an event carries.

use crate::config::TelemetrySettings;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether spans are exported (set once, at start).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The share of the traces started here that are kept (an f64's bits).
static SAMPLE_RATIO: AtomicU64 = AtomicU64::new(0);

/// The provider, kept to flush what is buffered when the service stops.
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);

/// The header a W3C trace context travels in.
const TRACEPARENT: &str = "traceparent";

/// How long one export may take before the batch is dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether this process exports spans: callers make the spans a trace needs
/// (one per record, per event) only then.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The span `make` builds when exporting; else one that records nothing
/// (a span made only for the trace costs nothing then).
pub fn span(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if exporting() {
        make()
    } else {
        tracing::Span::none()
    }
}

/// Whether a W3C `traceparent` says its trace is sampled (its flags' last
/// bit). An unsampled trace is exported by nobody: a hop past the edge
/// makes no span for it (the record carries the trace as it came).
pub fn sampled(traceparent: Option<&str>) -> bool {
    traceparent
        .and_then(|t| t.rsplit('-').next())
        .and_then(|flags| u8::from_str_radix(flags, 16).ok())
        .is_some_and(|flags| flags & 1 == 1)
}

/// Whether a request's trace is kept: what the buyer's `traceparent` says
/// when it has one, else a draw at `telemetry.otlp_sample_ratio`; never
/// when spans are not exported.
pub fn sample(parent: Option<&str>) -> bool {
    exporting()
        && match parent {
            Some(parent) => sampled(Some(parent)),
            None => rand::random::<f64>() < f64::from_bits(SAMPLE_RATIO.load(Ordering::Relaxed)),
        }
}

/// [`span`], made only when the trace `parent` names is sampled.
pub fn span_in(parent: Option<&str>, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if exporting() && sampled(parent) {
        make()
    } else {
        tracing::Span::none()
    }
}

/// The OTLP/HTTP traces URL of an endpoint: the base URL the OpenTelemetry
/// specification's `OTEL_EXPORTER_OTLP_ENDPOINT` names (`http://host:4318`),
/// with `/v1/traces` after it; a URL that already ends so is taken as it is.
pub fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

/// The layer that exports `service`'s spans, when the settings name an
/// endpoint (else `None`, and nothing is exported). Call once, from
/// telemetry's start.
pub fn layer<S>(
    settings: &TelemetrySettings,
    service: &'static str,
) -> anyhow::Result<Option<impl tracing_subscriber::Layer<S>>>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let Some(endpoint) = settings.otlp_endpoint.as_deref() else { return Ok(None) };
    settings.check()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    // A trace's sampled-or-not decision is its first hop's: the edge makes
    // it for a request ([`sample`], at the settings' ratio, or the buyer's
    // own flag), and gives an unsampled request no exported span at all;
    // every span the SDK then sees belongs to a kept trace.
    let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
    SAMPLE_RATIO.store(settings.otlp_sample_ratio.to_bits(), Ordering::Relaxed);
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    let tracer = provider.tracer(service);
    *PROVIDER.lock() = Some(provider);
    EXPORTING.store(true, Ordering::Relaxed);
    // What a span says is its fields and where it was made: not the
    // thread, nor the time it spent idle (recorded on every poll).
    Ok(Some(tracing_opentelemetry::layer().with_tracer(tracer).with_threads(false).with_tracked_inactivity(false)))
}

/// Sends what is buffered and stops the exporter (at the end of `main`).
pub fn flush() {
    if let Some(provider) = PROVIDER.lock().take() {
        if let Err(error) = provider.shutdown() {
            eprintln!("exporting the last spans: {error}");
        }
    }
}

/// Makes `span` a child of a W3C `traceparent` (a record's header, a row's
/// column); nothing when not exporting, for a span that records nothing
/// (an unsampled trace's hop: no parsing per record) or when it does not
/// parse.
pub fn continue_from(span: &tracing::Span, traceparent: Option<&str>) {
    if !exporting() || span.is_none() {
        return;
    }
    let Some(traceparent) = traceparent.filter(|t| !t.is_empty()) else { return };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    // Fails only for a span already started with its own context, which
    // the callers never pass: the span keeps the parent it has.
    let _ = span.set_parent(parent);
}

/// The W3C `traceparent` of `span`, to carry to the next hop (`None` when
/// not exporting, or for a span that records nothing — an unsampled
/// trace's hop: the hop carries what it received).
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !exporting() || span.is_none() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.remove(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_sampled_when_its_flags_say_so() {
        let id = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331";
        assert!(sampled(Some(&format!("{id}-01"))));
        assert!(sampled(Some(&format!("{id}-03"))), "other flags beside");
        assert!(!sampled(Some(&format!("{id}-00"))));
        assert!(!sampled(Some("garbage")) && !sampled(None));
    }

    #[test]
    fn the_traces_url_follows_the_specification() {
        for (endpoint, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
        ] {
            assert_eq!(traces_url(endpoint), url, "{endpoint}");
        }
    }
}
