//! The rows a batch writes: the orders (one insert of arrays), and the
//! stock guard that takes each sale's `remaining_stock` down by them.

use super::batch::{duplicate_user, in_round, sale_of, statuses, BatchOutcome, Sale, SaleState, Sources};
use seckill_shared::domain::OrderRecord;
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};

/// Inserts `candidates` (all of known sales) as CREATED in their sale's
/// round and files each into `outcome`: created, already done (its order id
/// had a row), or a duplicate user (the one-per-place index refused it).
/// Returns how many units the rows of each sale hold.
pub(super) async fn insert(
    tx: &mut PgConnection,
    candidates: &[&OrderRecord],
    sales: &HashMap<Sale, SaleState>,
    sources: &Sources<'_>,
    outcome: &mut BatchOutcome,
) -> Result<HashMap<Sale, i64>, sqlx::Error> {
    let mut written: HashMap<Sale, i64> = HashMap::new();
    if candidates.is_empty() {
        return Ok(written);
    }
    let columns = OrderColumns::new(candidates, sales, sources);
    let inserted: HashSet<String> = insert_orders!(columns, " ON CONFLICT DO NOTHING RETURNING order_id")
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|row| row.order_id)
        .collect();

    // Not inserted: the order id had a row, or the user holds an order.
    let refused: Vec<&str> = columns.order_ids.iter().copied().filter(|id| !inserted.contains(*id)).collect();
    let existing = statuses(tx, &refused).await?;
    for &record in candidates {
        if inserted.contains(record.order_id.as_str()) {
            *written.entry(sale_of(record)).or_insert(0) += i64::from(record.quantity);
            outcome.created.push(in_round(record, sales[&sale_of(record)].round));
        } else if let Some(&(fate, round)) = existing.get(record.order_id.as_str()) {
            outcome.already_done.push((in_round(record, round), fate));
        } else {
            outcome.rejected.push(duplicate_user(record));
        }
    }
    Ok(written)
}

/// The insert of a batch of orders as CREATED, each in its sale's round,
/// `$tail` appended: nothing (a plain insert for the optimistic way, where a
/// conflict is the exception), or `ON CONFLICT DO NOTHING RETURNING
/// order_id` (the rows that conflict with nothing, and which those were).
macro_rules! insert_orders {
    ($columns:expr, $tail:tt) => {{
        let c = &$columns;
        // A CREATED order awaits payment until now + the sale's window.
        sqlx::query!(
            "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at, request_id, traceparent,
                                 pay_deadline, quantity, slot, source_partition, source_offset)
             SELECT b.order_id, b.activity_id, b.sku_id, b.round, b.user_id, 'CREATED', to_timestamp(b.accepted_ms / 1000.0),
                    b.request_id, b.traceparent, now() + make_interval(secs => COALESCE(s.payment_window_seconds, 900)),
                    b.quantity, b.slot, b.source_partition, b.source_offset
               FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[], $7::text[], $8::text[],
                           $9::smallint[], $10::smallint[], $11::int[], $12::bigint[])
                    AS b(order_id, activity_id, sku_id, round, user_id, accepted_ms, request_id, traceparent, quantity, slot,
                         source_partition, source_offset)
               LEFT JOIN sales s ON s.activity_id = b.activity_id AND s.sku_id = b.sku_id" + $tail,
            &c.order_ids as &[&str],
            &c.activities,
            &c.skus,
            &c.rounds,
            &c.users,
            &c.accepted,
            &c.request_ids as &[Option<&str>],
            &c.traceparents as &[Option<&str>],
            &c.quantities,
            &c.slots,
            &c.partitions as &[Option<i32>],
            &c.offsets as &[Option<i64>]
        )
    }};
}
pub(super) use insert_orders;

/// Orders as the insert's array parameters.
pub(super) struct OrderColumns<'a> {
    pub(super) order_ids: Vec<&'a str>,
    pub(super) activities: Vec<i64>,
    pub(super) skus: Vec<i64>,
    pub(super) rounds: Vec<i32>,
    pub(super) users: Vec<i64>,
    pub(super) accepted: Vec<i64>,
    pub(super) request_ids: Vec<Option<&'a str>>,
    pub(super) traceparents: Vec<Option<&'a str>>,
    pub(super) quantities: Vec<i16>,
    pub(super) slots: Vec<i16>,
    pub(super) partitions: Vec<Option<i32>>,
    pub(super) offsets: Vec<Option<i64>>,
}

impl<'a> OrderColumns<'a> {
    pub(super) fn new(orders: &[&'a OrderRecord], sales: &HashMap<Sale, SaleState>, sources: &Sources<'a>) -> Self {
        let source = |r: &OrderRecord| sources.get(r.order_id.as_str()).copied().unwrap_or_default();
        let trace = |r: &OrderRecord| source(r).trace;
        let position = |r: &OrderRecord| source(r).position;
        Self {
            order_ids: orders.iter().map(|r| r.order_id.as_str()).collect(),
            activities: orders.iter().map(|r| r.activity_id.get()).collect(),
            skus: orders.iter().map(|r| r.sku_id.get()).collect(),
            rounds: orders.iter().map(|r| sales[&sale_of(r)].round).collect(),
            users: orders.iter().map(|r| r.user_id.get()).collect(),
            accepted: orders.iter().map(|r| r.accepted_at).collect(),
            request_ids: orders.iter().map(|r| trace(r).request_id).collect(),
            traceparents: orders.iter().map(|r| trace(r).traceparent).collect(),
            // In range: the record was checked when it was read.
            quantities: orders.iter().map(|r| r.quantity as i16).collect(),
            slots: orders.iter().map(|r| r.slot as i16).collect(),
            partitions: orders.iter().map(|r| position(r).map(|(partition, _)| partition)).collect(),
            offsets: orders.iter().map(|r| position(r).map(|(_, offset)| offset)).collect(),
        }
    }
}

pub(super) fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// The stock guard: takes each sale's `remaining_stock` down by the units
/// `written` for it, only if the sale is still in the round the rows were
/// written for and has that many units left. Whether every sale took its
/// count (if not, the caller must roll back).
pub(super) async fn take_stock(
    tx: &mut PgConnection,
    written: &HashMap<Sale, i64>,
    sales: &HashMap<Sale, SaleState>,
) -> Result<bool, sqlx::Error> {
    if written.is_empty() {
        return Ok(true);
    }
    let mut rows: Vec<(&Sale, &i64)> = written.iter().collect();
    rows.sort();
    let activities: Vec<i64> = rows.iter().map(|(s, _)| s.0).collect();
    let skus: Vec<i64> = rows.iter().map(|(s, _)| s.1).collect();
    let rounds: Vec<i32> = rows.iter().map(|(s, _)| sales[s].round).collect();
    let counts: Vec<i64> = rows.iter().map(|(_, n)| **n).collect();
    let taken = sqlx::query!(
        "UPDATE sales s SET remaining_stock = s.remaining_stock - b.n, updated_at = now()
           FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::bigint[]) AS b(activity_id, sku_id, round, n)
          WHERE s.activity_id = b.activity_id AND s.sku_id = b.sku_id
            AND s.round = b.round AND s.remaining_stock >= b.n",
        &activities,
        &skus,
        &rounds,
        &counts
    )
    .execute(tx)
    .await?
    .rows_affected();
    Ok(taken == rows.len() as u64)
}
