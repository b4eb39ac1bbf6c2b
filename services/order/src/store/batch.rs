//! A batch as the writers see it: what became of each record, the sales
//! it touches and their state, where each record came from, and the
//! verdicts on records that can never be written.

use seckill_shared::domain::{FailReason, Fate, OrderRecord};
use seckill_shared::kafka::Trace;
use sqlx::PgConnection;
use std::collections::HashMap;

/// What became of each record of a batch. The records of `created` and
/// `already_done` name the round of their row.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Written now, CREATED.
    pub created: Vec<OrderRecord>,
    /// Already had a row (a duplicate, a replay, or settled FAILED first).
    pub already_done: Vec<(OrderRecord, Fate)>,
    /// Can never be written: to the dead-letter topic.
    pub rejected: Vec<(OrderRecord, FailReason, String)>,
}

/// (activity, sku) of a sale, as PostgreSQL stores it.
pub(super) type Sale = (i64, i64);

/// The sale `record` is for.
pub(super) fn sale_of(record: &OrderRecord) -> Sale {
    (record.activity_id.get(), record.sku_id.get())
}

/// A sale as read at the start of a write: its round and remaining stock.
#[derive(Debug, Clone, Copy)]
pub(super) struct SaleState {
    pub(super) round: i32,
    pub(super) remaining: i64,
}

impl SaleState {
    /// Whether `record` may become an order of this round: it names this
    /// round, or (a record from before rounds travelled) none.
    pub(super) fn takes(&self, record: &OrderRecord) -> bool {
        record.round.is_none_or(|round| round == i64::from(self.round))
    }
}

/// Where one order's record came from: its request id and trace context
/// (stored with its row and carried by its events) and its position in
/// `seckill.orders` (stored with its row: the relay holds the order's later
/// events until the order group's committed offset has passed it — its
/// CREATED event is produced before that commit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Source<'a> {
    pub trace: Trace<'a>,
    /// `None`: a row written without a record (tests); its CREATED event
    /// is then the insert trigger's to write.
    pub position: Option<(i32, i64)>,
}

/// The source of each order (by order id); orders absent have none.
pub type Sources<'a> = HashMap<&'a str, Source<'a>>;

/// The fates and rounds of those of `ids` that have a row.
pub(super) async fn statuses(tx: &mut PgConnection, ids: &[&str]) -> Result<HashMap<String, (Fate, i32)>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(sqlx::query!("SELECT order_id, status, reason, round FROM orders WHERE order_id = ANY($1)", ids as &[&str])
        .fetch_all(tx)
        .await?
        .into_iter()
        .map(|r| {
            let fate = Fate::from_row(&r.status, r.reason.as_deref());
            (r.order_id, (fate, r.round))
        })
        .collect())
}

/// `record` as its row holds it: in `round`.
pub(super) fn in_round(record: &OrderRecord, round: i32) -> OrderRecord {
    OrderRecord { round: Some(i64::from(round)), ..record.clone() }
}

/// The verdict on a record whose sale does not exist.
pub(super) fn sale_not_found(record: &OrderRecord) -> (OrderRecord, FailReason, String) {
    (record.clone(), FailReason::SaleNotFound, format!("sale {} does not exist", record.sale()))
}

/// The verdict on a record whose user already holds an order of its sale.
pub(super) fn duplicate_user(record: &OrderRecord) -> (OrderRecord, FailReason, String) {
    (
        record.clone(),
        FailReason::DuplicateUser,
        format!("user {} already holds an order in sale {}", record.user_id, record.sale()),
    )
}
