//! The live sale dashboard's figures: once a second, every live sale's
//! reconciliation (its stock in Redis and PostgreSQL, the outcome terms,
//! the verdict), the consumer groups' lag and the dead letters (their
//! counts by reason and sale, replayed and redriven), the records parked, the sweeper's last sweep, and this edge's request rates by
//! outcome and latency quantiles (from its own metrics).
//!
//! One collector per edge, whatever the number of viewers: it runs while
//! at least one watches and stops when the last one leaves. Everything it
//! reads is read by the reconciliation and `/metrics` already; nothing new
//! happens on the request path.

pub mod metrics_text;

use metrics_text::Reading;
use parking_lot::Mutex;
use seckill_shared::books::Report;
use seckill_shared::config::KafkaSettings;
use seckill_shared::kafka::Topics;
use seckill_shared::stock::{Stock, SweepMark};
use serde::Serialize;
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the figures are taken.
pub const EVERY: Duration = Duration::from_secs(1);

/// One set of figures, as the page (and `/admin/dashboard/snapshot`)
/// receives it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// When they were taken (ms since the epoch, this edge's clock).
    pub at_ms: i64,
    /// This edge's own rates and latency.
    pub edge: EdgeFigures,
    /// Every live sale's reconciliation.
    pub sales: Readout<Vec<Report>>,
    /// Every release's books (a limit per customer across its sizes).
    pub releases: Readout<Vec<seckill_shared::books::ReleaseReport>>,
    /// The consumer groups' lag and the dead letters.
    pub pipeline: Readout<PipelineFigures>,
    /// Records parked for an operator.
    pub parked: Readout<i64>,
    /// The dead letters the compensator indexed: by reason and sale,
    /// oldest and newest, replayed and redriven (as `seckillctl dlq stats`).
    pub dead_letters: Readout<seckill_shared::db::dead_letters::Stats>,
    /// The sweeper's last sweep, if one was recorded.
    pub sweeper: Readout<Option<SweepMark>>,
}

/// A figure, or why its source could not be read (the others still show).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Readout<T> {
    Read(T),
    Unreadable { error: String },
}

impl<T> Readout<T> {
    fn of<E: std::fmt::Display>(result: Result<T, E>, source: &str) -> Self {
        match result {
            Ok(value) => Self::Read(value),
            Err(error) => Self::Unreadable { error: format!("{source}: {error:#}") },
        }
    }
}

/// This edge's requests per second by outcome, and its latency quantiles
/// over the last interval (none before the second set).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeFigures {
    pub rate_per_second: BTreeMap<String, f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// The pipeline behind the edge.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineFigures {
    pub order_lag: i64,
    pub compensator_lag: i64,
    /// Records ever written to the dead-letter topic.
    pub dead_letters: i64,
}

/// The figures, and who watches them.
pub struct Dashboard {
    stock: Stock,
    db: PgPool,
    kafka: KafkaSettings,
    latest: watch::Sender<Option<Arc<Figures>>>,
    collecting: Mutex<bool>,
}

impl Dashboard {
    /// A dashboard over the edge's connections (not collecting yet).
    pub fn new(stock: Stock, db: PgPool, kafka: KafkaSettings) -> Arc<Self> {
        let (latest, _) = watch::channel(None);
        Arc::new(Self { stock, db, kafka, latest, collecting: Mutex::new(false) })
    }

    /// Watches the figures (a new set each second), starting the collector
    /// if nobody watched.
    pub fn watch(self: &Arc<Self>) -> watch::Receiver<Option<Arc<Figures>>> {
        let receiver = self.latest.subscribe();
        let mut collecting = self.collecting.lock();
        if !*collecting {
            *collecting = true;
            tokio::spawn(self.clone().collect());
        }
        receiver
    }

    /// The latest figures, waiting for the first set if none was taken yet.
    pub async fn current(self: &Arc<Self>) -> Option<Arc<Figures>> {
        let mut receiver = self.watch();
        if receiver.borrow().is_none() {
            // The collector sends within a second; it never closes first.
            let _ = receiver.changed().await;
        }
        let figures = receiver.borrow().clone();
        figures
    }

    async fn collect(self: Arc<Self>) {
        let mut previous: Option<(Instant, Reading)> = None;
        loop {
            let figures = self.take(&mut previous).await;
            self.latest.send_replace(Some(Arc::new(figures)));
            tokio::time::sleep(EVERY).await;
            let mut collecting = self.collecting.lock();
            if self.latest.receiver_count() == 0 {
                *collecting = false;
                return;
            }
        }
    }

    /// One set of figures; a source that cannot be read says why in its
    /// place, the others still show.
    async fn take(&self, previous: &mut Option<(Instant, Reading)>) -> Figures {
        let now = Instant::now();
        let reading = metrics_text::read(&seckill_shared::ops::telemetry::metrics_handle().render());
        let edge = match previous.as_ref() {
            Some((then, before)) => {
                let seconds = now.duration_since(*then).as_secs_f64();
                let ms = |q| metrics_text::quantile(before, &reading, q).map(|s| s * 1000.0);
                EdgeFigures {
                    rate_per_second: metrics_text::rates(before, &reading, seconds),
                    p50_ms: ms(0.5),
                    p99_ms: ms(0.99),
                }
            }
            None => EdgeFigures::default(),
        };
        *previous = Some((now, reading));
        let sales = seckill_shared::books::reconcile_live(&self.stock, &self.db).await;
        let pipeline = seckill_shared::kafka::pipeline_lag(&self.kafka).await.map(|lag| PipelineFigures {
            order_lag: lag.order.total,
            compensator_lag: lag.compensator.total,
            dead_letters: lag.compensator.written,
        });
        Figures {
            at_ms: chrono::Utc::now().timestamp_millis(),
            edge,
            sales: Readout::of(sales, "reconciliation"),
            releases: Readout::of(seckill_shared::books::reconcile_releases(&self.stock, &self.db).await, "releases"),
            pipeline: Readout::of(pipeline, "kafka"),
            parked: Readout::of(seckill_shared::db::parked::count(&self.db).await, "postgresql"),
            dead_letters: Readout::of(
                seckill_shared::db::dead_letters::stats(&self.db, &Topics::new(&self.kafka).dlq, Default::default())
                    .await,
                "postgresql",
            ),
            sweeper: Readout::of(self.stock.books().last_sweep().await, "redis"),
        }
    }
}
