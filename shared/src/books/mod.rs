//! Reconciliation of one sale (docs/guarantees.md): reads Redis, PostgreSQL
//! and the consumer groups' lag, and checks the invariant
//!
//! `total_stock = redis_remaining + units_created + units_paid + units_in_flight`
//! (the units the CREATED, PAID and in-flight orders hold), `units_created +
//! units_paid ≤ total_stock`, no two live orders in one user's place and no
//! user over the round's limit, compensated (or written-off) orders equal to
//! the FAILED orders Redis had accepted, returned orders equal to the
//! CANCELLED orders Redis had accepted, and PostgreSQL's
//! `remaining_stock = total_stock − units_created − units_paid`.
//!
//! `seckillctl reconcile` and `GET /admin/sales/{a}/{s}` both serve this.

use crate::config::KafkaSettings;
use crate::domain::SaleKey;
use crate::stock::queue::RoomState;
use crate::stock::{SaleSnapshot, Stock};
use sqlx::PgPool;
use std::collections::BTreeMap;

mod judge;
mod reads;
mod reconcile_error;
mod release_books;

use reconcile_error::source;
pub use reconcile_error::ReconcileError;

pub use judge::check;
pub use release_books::{reconcile_release, reconcile_releases, CustomerUnits, ReleaseBooksError, ReleaseReport};

/// Every term of the invariant, and the verdict (`GET /admin/sales/{a}/{s}`
/// answers it; `seckillctl reconcile --json` prints it).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Reconciliation)]
pub struct Report {
    pub activity_id: i64,
    pub sku_id: i64,
    /// Warm-up round (PostgreSQL).
    pub round: i32,
    /// Units on sale (PostgreSQL).
    pub total_stock: i64,
    /// Units left in Redis.
    pub redis_remaining: i64,
    /// Units the database can still write (PostgreSQL).
    pub db_remaining: i64,
    /// CREATED orders this round (awaiting payment).
    pub orders_created: i64,
    /// PAID orders this round.
    pub orders_paid: i64,
    /// The units the CREATED orders hold.
    pub units_created: i64,
    /// The units the PAID orders hold.
    pub units_paid: i64,
    /// CANCELLED orders this round (not paid in time, or by the buyer).
    pub orders_cancelled: i64,
    /// CANCELLED orders by reason.
    pub cancelled_by_reason: BTreeMap<String, i64>,
    /// Of the CANCELLED orders, those whose unit Redis has not been seen to
    /// take back yet (the deadline worker finishes them).
    pub cancels_pending: i64,
    /// Units cancelled orders gave back in Redis.
    pub returned: i64,
    /// CANCELLED orders Redis had accepted (each must have given its unit
    /// back).
    pub cancelled_accepted: i64,
    /// Orders with a payment that came after their cancellation before the
    /// payments ledger (one PAYMENT_LATE event each).
    pub orders_paid_late: i64,
    /// Payments the ledger applied (each made one order PAID): as many as
    /// the PAID orders.
    pub payments_applied: i64,
    /// Payments owed back and not refunded yet (`seckillctl payments refunds`).
    pub refunds_due: i64,
    /// Payments owed back, refunded or not, that have a REFUND_DUE event.
    pub refund_events: i64,
    /// FAILED orders this round.
    pub orders_failed: i64,
    /// FAILED orders by reason.
    pub failed_by_reason: BTreeMap<String, i64>,
    /// Orders accepted but not yet settled (QUEUED in Redis).
    pub orders_in_flight: i64,
    /// The units those orders hold.
    pub units_in_flight: i64,
    /// Of those, reservations the order service has not seen yet.
    pub reservations: i64,
    /// Users holding an order in Redis.
    pub buyers: i64,
    /// Units restored for FAILED orders.
    pub compensated: i64,
    /// Units written off (the database never had them).
    pub written_off: i64,
    /// FAILED orders that Redis had accepted (each must be compensated or
    /// written off).
    pub failed_accepted: i64,
    /// Broken promises: FAILED orders whose buyer had been answered 202 —
    /// they came through the edge (their record carried its request id) or
    /// Redis accepted them — by reason. A part failing must never end a
    /// promised order FAILED: this reads 0.
    pub broken_promises: BTreeMap<String, i64>,
    /// Of this round's FAILED orders, those `seckillctl dlq redrive` placed
    /// again for their buyer (a broken promise mended by an operator).
    pub redriven: i64,
    /// Live (CREATED or PAID) orders beyond one per user's place (one place
    /// per user with a limit of one unit; always 0 unless the schema is
    /// broken).
    pub duplicate_users: i64,
    /// Units one user may hold in the round (as its warm-up recorded it).
    pub per_user_limit: i64,
    /// Users whose live orders hold more units than that (must be 0).
    pub users_over_limit: i64,
    /// This sale's records parked for an operator (never settled).
    pub parked: i64,
    /// Order events of this round written to the outbox (relayed, pending
    /// or pruned).
    pub events: i64,
    /// CREATED events of this round the order service produced itself —
    /// one per order it wrote, no outbox row; delivered before its offsets
    /// were committed, so none is missing once the order lag is 0. With
    /// `events`: one per order and state.
    pub events_created_directly: i64,
    /// Of those, not yet relayed to `seckill.order-events`.
    pub events_pending: i64,
    /// When events (of any sale) have waited more than 10 s behind a
    /// transaction still open on the server: that transaction, named (end
    /// it, and the relay sends them).
    pub events_held_back_by: Option<crate::db::horizon::HeldBack>,
    /// When the balance is off: CREATED orders Redis holds no status for —
    /// deductions Redis acknowledged and then lost (a restart without the
    /// last writes, a failover to a replica that had not received them).
    /// Not read when the balance holds.
    pub created_unknown_to_redis: Option<i64>,
    /// The order service's lag on the orders topic (all sales).
    pub order_lag: Option<i64>,
    /// The compensator's lag on the dead-letter topic (all sales).
    pub compensator_lag: Option<i64>,
    /// Redis's own view of the sale.
    pub redis: SaleSnapshot,
    /// The sale's last warm-up when it is not finished (its caller or its
    /// process stopped short, or the replicas did not confirm it): repeat
    /// it — the same `warmupId` (`seckillctl warmup --id`) — to finish it.
    pub unfinished_warmup: Option<UnfinishedWarmup>,
    /// The sale's waiting room (README "Waiting room"), `None` without
    /// one; its `seed` (SHA-1 of `seed:ticket` orders the pre-queue's
    /// tickets as they were admitted) is shown once the sale has started,
    /// empty before (secret until the shuffle).
    pub waiting_room: Option<RoomState>,
    /// The sale's draw, when it has one: entries, winners, rights used,
    /// promoted, lapsed, lost, and once drawn its seed and the entry
    /// list's digest.
    pub draw: Option<crate::draw::DrawState>,
    /// Whether every check holds.
    pub consistent: bool,
    /// Each failed check, in words, naming the terms that disagree.
    pub violations: Vec<String>,
}

/// A warm-up that stopped short.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnfinishedWarmup {
    pub warmup_id: String,
    /// `STARTED` (its buckets held still) or `COMMITTED` (its round is
    /// PostgreSQL's; Redis partly loaded).
    pub step: String,
    /// Its round, once committed.
    pub round: Option<i32>,
    /// Why its last run stopped, when known.
    pub error: Option<String>,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

impl UnfinishedWarmup {
    fn of(w: crate::sales::warmup_rows::Warmup) -> Self {
        Self {
            warmup_id: w.id,
            step: w.step.as_str().to_owned(),
            round: w.round,
            error: w.error,
            started_at: w.started_at,
        }
    }
}

impl Report {
    /// Whether nothing is in flight anywhere (events relayed too).
    pub fn drained(&self) -> bool {
        self.orders_in_flight == 0
            && self.order_lag.unwrap_or(0) == 0
            && self.compensator_lag.unwrap_or(0) == 0
            && self.events_pending == 0
            && self.cancels_pending == 0
    }
}

/// Reconciles one sale. `require_drained` makes orders still in flight a
/// violation (use it after waiting for the pipeline to drain).
pub async fn reconcile(
    stock: &Stock,
    pool: &PgPool,
    kafka_settings: Option<&KafkaSettings>,
    sale: SaleKey,
    require_drained: bool,
) -> Result<Report, ReconcileError> {
    let pg = source::<sqlx::Error>("postgresql");
    let redis = source::<crate::stock::conn::RedisCallError>("redis");
    // Redis first, then PostgreSQL (reads::sale_and_counts: one snapshot).
    let snapshot = stock.books().snapshot(sale).await.map_err(&redis)?;
    let (row, counts) = reads::sale_and_counts(pool, sale).await?;
    let round = row.round;
    let terms = reads::round_terms(pool, sale, round).await?;
    let (failed_accepted, cancelled_accepted) = reads::accepted(stock, pool, sale, round).await?;
    let (broken_promises, redriven) = reads::broken_promises(stock, pool, sale, round).await?;
    let parked = crate::db::parked::count_for_sale(pool, sale).await.map_err(&pg)?;
    let (order_lag, compensator_lag) = lags(kafka_settings).await?;
    let unfinished_warmup =
        crate::sales::warmup_rows::unfinished(pool, sale).await.map_err(&pg)?.map(UnfinishedWarmup::of);
    let held_back = crate::db::horizon::held_back(pool, crate::db::horizon::HELD_BACK_AFTER).await.map_err(&pg)?;
    let waiting_room = stock.waiting_room().room(sale).await.map_err(&redis)?.map(|r| r.shown_at(crate::now_ms()));
    let draw = stock.draws().draw_state(sale).await.map_err(&redis)?;
    let mut report = Report {
        activity_id: sale.activity.get(),
        sku_id: sale.sku.get(),
        round,
        total_stock: row.total_stock,
        redis_remaining: snapshot.remaining,
        db_remaining: row.remaining_stock,
        orders_created: counts.created,
        orders_paid: counts.paid,
        units_created: counts.units_created,
        units_paid: counts.units_paid,
        orders_cancelled: counts.cancelled,
        cancelled_by_reason: counts.cancelled_by_reason,
        cancels_pending: counts.cancels_pending,
        returned: snapshot.returned,
        cancelled_accepted,
        orders_paid_late: terms.paid_late,
        payments_applied: terms.applied,
        refunds_due: terms.refunds_due,
        refund_events: terms.refund_events,
        orders_failed: counts.failed,
        failed_by_reason: counts.failed_by_reason,
        orders_in_flight: snapshot.queued,
        units_in_flight: snapshot.queued_units,
        reservations: snapshot.reservations,
        buyers: snapshot.buyers,
        compensated: snapshot.compensated,
        written_off: snapshot.written_off,
        failed_accepted,
        broken_promises,
        redriven,
        duplicate_users: terms.duplicate_users,
        per_user_limit: terms.per_user_limit,
        users_over_limit: terms.users_over_limit,
        parked,
        events: terms.events,
        events_created_directly: terms.created_directly,
        events_pending: terms.events_pending,
        events_held_back_by: held_back,
        created_unknown_to_redis: None,
        order_lag,
        compensator_lag,
        redis: snapshot,
        unfinished_warmup,
        waiting_room,
        draw,
        consistent: false,
        violations: Vec::new(),
    };
    if report.balance() != report.total_stock {
        // Explain the difference: which live orders Redis lost.
        report.created_unknown_to_redis = Some(reads::live_unknown_to_redis(stock, pool, sale, round).await?);
    }
    report.judge(require_drained);
    Ok(report)
}

/// The order service's and the compensator's lag, when Kafka is asked.
async fn lags(kafka_settings: Option<&KafkaSettings>) -> Result<(Option<i64>, Option<i64>), ReconcileError> {
    let Some(settings) = kafka_settings else { return Ok((None, None)) };
    let lag = crate::kafka::pipeline_lag(settings).await.map_err(source("kafka"))?;
    Ok((Some(lag.order.total), Some(lag.compensator.total)))
}

/// The most sales [`reconcile_live`] reports on.
pub const LIVE_SALES_SHOWN: usize = 50;

/// Reconciles every live sale (Redis still holds it; a sale's keys expire
/// after its end, payment window and margin), at most [`LIVE_SALES_SHOWN`], in key order. The
/// dashboard and the compensator's audit both watch these.
pub async fn reconcile_live(stock: &Stock, pool: &PgPool) -> Result<Vec<Report>, ReconcileError> {
    let redis = source::<crate::stock::conn::RedisCallError>("redis");
    let mut sales = stock.books().sales().await.map_err(&redis)?;
    sales.sort();
    let mut reports = Vec::new();
    for sale in sales {
        // Expired sales are skipped for one cheap read.
        if !stock.books().snapshot(sale).await.map_err(&redis)?.exists {
            continue;
        }
        match reconcile(stock, pool, None, sale, false).await {
            Ok(report) => reports.push(report),
            Err(ReconcileError::SaleNotFound(_)) => {}
            Err(error) => return Err(error),
        }
        if reports.len() == LIVE_SALES_SHOWN {
            break;
        }
    }
    Ok(reports)
}
