//! Logging (`tracing`) and metrics (Prometheus), plus the small health and
//! metrics HTTP server the order service and the compensator expose.

use crate::config::TelemetrySettings;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::filter::{dynamic_filter_fn, filter_fn, FilterExt, Targets};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Registry;

/// The log filter: `RUST_LOG` when set, else the settings', else `info`;
/// a level, then `target=level` pairs (`info,seckill_order=debug`). A filter
/// that does not parse falls back to `info` rather than silencing the log.
/// (`Targets` rather than `EnvFilter`: the same directives for targets and
/// levels, without the regex engine EnvFilter compiles in for span filters.)
fn filter(settings: &TelemetrySettings) -> Targets {
    let wanted = std::env::var("RUST_LOG").ok().or_else(|| settings.filter.clone()).unwrap_or_else(|| "info".into());
    wanted.parse().unwrap_or_else(|error| {
        eprintln!("log filter '{wanted}' not understood ({error}); logging at info");
        Targets::new().with_default(tracing::Level::INFO)
    })
}

/// Installs the tracing subscriber: the log, and the spans' export when
/// `telemetry.otlp_endpoint` is set (`service` names them). Call once, from
/// `main`.
pub fn init_tracing(settings: &TelemetrySettings, service: &'static str) {
    let export = match crate::ops::trace_export::layer(settings, service) {
        Ok(export) => export,
        // Checked at start: only a client that cannot be built is left.
        Err(error) => {
            eprintln!("spans are not exported: {error:#}");
            None
        }
    };
    // Each its own filter: the log's level does not decide what is traced
    // (an operator quietening the log to warnings keeps the traces); only
    // the project's spans are exported, with its warnings and errors as
    // their events (an info line a batch would be a cost on every span).
    //
    // A span is exported only inside a kept trace: one made for the trace
    // (an `otel.kind` span: the edge's request of a kept trace, a hop of a
    // sampled record, a write of it) or one inside such a span. Any other
    // (`#[instrument]` on a ledger call, a batch write, a settle) run
    // outside a kept trace would reach the exporter as a root of its own.
    //
    // Each part says the most verbose level it may pass (info): without a
    // hint the combination has none, and then every debug and trace
    // callsite of every crate — the `log` records bridged in included — is
    // asked about on every call, exported or not (measured: about 6,000
    // instructions an order at the edge with one trace in a hundred kept).
    let info = tracing_subscriber::filter::LevelFilter::INFO;
    let exported = Targets::new()
        .with_target("seckill", tracing::Level::INFO)
        .and(filter_fn(|meta| meta.is_span() || *meta.level() <= tracing::Level::WARN).with_max_level_hint(info))
        .and(
            dynamic_filter_fn(|meta, cx| {
                !meta.is_span() || meta.fields().field("otel.kind").is_some() || cx.lookup_current().is_some()
            })
            .with_max_level_hint(info),
        );
    let log = tracing_subscriber::fmt::layer().with_target(true);
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = Vec::new();
    if settings.json {
        layers.push(log.json().with_filter(filter(settings)).boxed());
    } else {
        layers.push(log.with_filter(filter(settings)).boxed());
    }
    if let Some(export) = export {
        layers.push(export.with_filter(exported).boxed());
    }
    // A second init (tests starting several services) keeps the first one.
    let _ = tracing_subscriber::registry().with(layers).try_init();
}

/// The process-wide Prometheus recorder, installed on first use so that
/// several services in one test process share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then our
            // handle renders nothing, which the metrics test would show.
            let _ = metrics::set_global_recorder(recorder);
            start_upkeep(handle.clone());
            handle
        })
        .clone()
}

/// How often histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// Upkeeps done so far (the test waits on it).
static UPKEEPS: AtomicU64 = AtomicU64::new(0);

/// A recorder built without its exporter keeps every histogram sample until
/// `/metrics` is scraped: an edge nobody scrapes would grow by every request
/// it answers (about 45 bytes each: 240 MB after 5 million). A thread of its
/// own folds them into the buckets, whatever runtime is or is not running.
fn start_upkeep(handle: PrometheusHandle) {
    let started = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || loop {
        std::thread::sleep(UPKEEP_EVERY);
        handle.run_upkeep();
        UPKEEPS.fetch_add(1, Ordering::Relaxed);
    });
    if let Err(error) = started {
        tracing::error!(%error, "metrics upkeep thread not started: histograms grow until scraped");
    }
}

/// Why a service is not ready (or not alive): what it is waiting for, in
/// words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(pub String);

/// A readiness probe: resolves to `Ok` when every dependency answers.
pub type ReadinessCheck = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), NotReady>> + Send>> + Send + Sync>;

/// A liveness probe: `Err` when the process should be restarted.
pub type LivenessCheck = Arc<dyn Fn() -> Result<(), NotReady> + Send + Sync>;

/// `/healthz` (alive), `/readyz` (dependencies answer) and `/metrics`.
pub fn health_router(ready: ReadinessCheck, alive: LivenessCheck) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let answer = match alive() {
                    Ok(()) => (StatusCode::OK, "ok".to_owned()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
                };
                async move { answer.into_response() }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    match ready().await {
                        Ok(()) => (StatusCode::OK, "ready".to_owned()).into_response(),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()).into_response(),
                    }
                }
            }),
        )
        .route("/metrics", get(|| async { metrics_handle().render() }))
}

/// Serves [`health_router`] on a bound listener until `shutdown`.
pub async fn serve_health(
    listener: tokio::net::TcpListener,
    ready: ReadinessCheck,
    alive: LivenessCheck,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, health_router(ready, alive))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("VmRSS in kB") * 1024
    }

    fn record(samples: u64) {
        let histogram = metrics::histogram!("seckill_upkeep_test_seconds");
        for i in 0..samples {
            histogram.record((i % 100) as f64 / 1000.0);
        }
    }

    /// Waits (bounded) until two more upkeeps ran, so one ran after now.
    fn upkept() {
        let from = UPKEEPS.load(Ordering::Relaxed);
        for _ in 0..300 {
            if UPKEEPS.load(Ordering::Relaxed) >= from + 2 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no metrics upkeep ran in 30 s");
    }

    /// Samples recorded and never scraped do not stay in memory: once the
    /// upkeep folded the first four million into buckets, four million more
    /// take the memory those took instead of as much again (32 MB of raw
    /// samples each). CI once saw 18 MB in the single round this test had:
    /// other tests of the process allocating meanwhile.
    #[test]
    fn unscraped_histograms_stay_bounded() {
        let handle = metrics_handle();
        const SAMPLES: u64 = 4_000_000;
        record(SAMPLES);
        // The process's other tests run beside this one and allocate too: a
        // round may see their memory. Kept samples would add 32 MB in every
        // round; folded ones add nothing in at least one of three.
        let mut rounds = Vec::new();
        for _ in 0..3 {
            let before = resident_bytes();
            upkept();
            record(SAMPLES);
            rounds.push(resident_bytes().saturating_sub(before));
            if rounds.last().is_some_and(|grown| *grown < 8 << 20) {
                break;
            }
        }
        assert!(
            rounds.last().is_some_and(|grown| *grown < 8 << 20),
            "each further four million samples added bytes to what the first took: {rounds:?}"
        );
        // The memory measured is this recorder's: it holds the samples. (The
        // exact count, (rounds + 1) × four million, was asserted until a
        // fresh-clone CI run saw another: what it was is printed now.)
        let rendered = handle.render();
        let count: u64 = rendered
            .lines()
            .find_map(|l| l.strip_prefix("seckill_upkeep_test_seconds_count "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let expected = (rounds.len() as u64 + 1) * SAMPLES;
        assert!(
            count >= SAMPLES,
            "the samples went to this recorder: count {count}, expected {expected}, rounds {rounds:?}"
        );
        if count != expected {
            eprintln!("the recorder counted {count} samples of {expected} recorded (rounds {rounds:?})");
        }
    }
}
