//! The live sale dashboard's figures: once a second, every live sale's
//! reconciliation (its stock in Redis and PostgreSQL, the outcome terms,
//! the verdict), the consumer groups' lag and the dead letters, the records
//! parked, the sweeper's last sweep, and this edge's request rates by
//! outcome and latency quantiles (from its own metrics).
//!
//! One collector per edge, whatever the number of viewers: it runs while
//! at least one watches and stops when the last one leaves. Everything it
//! reads is read by the reconciliation and `/metrics` already; nothing new
//! happens on the request path.

pub mod metrics_text;

use metrics_text::Reading;
use seckill_shared::config::KafkaSettings;
use seckill_shared::stock::Stock;
use serde_json::{json, Value};
use sqlx::PgPool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the figures are taken.
pub const EVERY: Duration = Duration::from_secs(1);

/// The figures, and who watches them.
pub struct Dashboard {
    stock: Stock,
    db: PgPool,
    kafka: KafkaSettings,
    latest: watch::Sender<Arc<Value>>,
    collecting: Mutex<bool>,
}

impl Dashboard {
    /// A dashboard over the edge's connections (not collecting yet).
    pub fn new(stock: Stock, db: PgPool, kafka: KafkaSettings) -> Arc<Self> {
        let (latest, _) = watch::channel(Arc::new(Value::Null));
        Arc::new(Self { stock, db, kafka, latest, collecting: Mutex::new(false) })
    }

    /// Watches the figures (a new set each second), starting the collector
    /// if nobody watched.
    pub fn watch(self: &Arc<Self>) -> watch::Receiver<Arc<Value>> {
        let receiver = self.latest.subscribe();
        let mut collecting = self.collecting.lock().expect("collector flag");
        if !*collecting {
            *collecting = true;
            tokio::spawn(self.clone().collect());
        }
        receiver
    }

    /// The latest figures, waiting for the first set if none was taken yet.
    pub async fn current(self: &Arc<Self>) -> Arc<Value> {
        let mut receiver = self.watch();
        if receiver.borrow().is_null() {
            // The collector sends within a second; it never closes first.
            let _ = receiver.changed().await;
        }
        let value = receiver.borrow().clone();
        value
    }

    async fn collect(self: Arc<Self>) {
        let mut previous: Option<(Instant, Reading)> = None;
        loop {
            let figures = self.take(&mut previous).await;
            self.latest.send_replace(Arc::new(figures));
            tokio::time::sleep(EVERY).await;
            let mut collecting = self.collecting.lock().expect("collector flag");
            if self.latest.receiver_count() == 0 {
                *collecting = false;
                return;
            }
        }
    }

    /// One set of figures; a source that cannot be read says why in its
    /// place, the others still show.
    async fn take(&self, previous: &mut Option<(Instant, Reading)>) -> Value {
        let now = Instant::now();
        let reading = metrics_text::read(&seckill_shared::telemetry::metrics_handle().render());
        let edge = match previous.as_ref() {
            Some((then, before)) => {
                let seconds = now.duration_since(*then).as_secs_f64();
                let ms = |q| metrics_text::quantile(before, &reading, q).map(|s| s * 1000.0);
                json!({
                    "ratePerSecond": metrics_text::rates(before, &reading, seconds),
                    "p50Ms": ms(0.5),
                    "p99Ms": ms(0.99),
                })
            }
            None => json!({ "ratePerSecond": {}, "p50Ms": null, "p99Ms": null }),
        };
        *previous = Some((now, reading));

        let sales = match seckill_shared::reconcile::reconcile_live(&self.stock, &self.db).await {
            Ok(reports) => json!(reports),
            Err(error) => json!({ "error": error.to_string() }),
        };
        let pipeline = match seckill_shared::kafka::pipeline_lag(&self.kafka).await {
            Ok(lag) => json!({
                "orderLag": lag.order.total,
                "compensatorLag": lag.compensator.total,
                "deadLetters": lag.compensator.written,
            }),
            Err(error) => json!({ "error": format!("kafka: {error:#}") }),
        };
        let parked: Result<i64, _> = sqlx::query_scalar("SELECT count(*) FROM parked_records").fetch_one(&self.db).await;
        let sweeper = self.stock.last_sweep().await;
        json!({
            "atMs": chrono::Utc::now().timestamp_millis(),
            "edge": edge,
            "sales": sales,
            "pipeline": pipeline,
            "parked": parked.map(Value::from).unwrap_or_else(|e| json!({ "error": format!("postgresql: {e}") })),
            "sweeper": sweeper.map(|mark| json!(mark)).unwrap_or_else(|e| json!({ "error": format!("redis: {e}") })),
        })
    }
}
