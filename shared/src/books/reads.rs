//! What the books read: the round's counts in PostgreSQL, its other terms
//! (payments, events, users with two orders), which orders Redis had
//! accepted, and the promises broken. The checks on what is read are
//! [`super::judge`].

use super::reconcile_error::{source, ReconcileError};
use crate::domain::SaleKey;
use crate::stock::Stock;
use sqlx::PgPool;
use std::collections::BTreeMap;

/// The round's orders by status (and the FAILED and CANCELLED by reason).
#[derive(Debug, Default)]
pub(super) struct StatusCounts {
    pub created: i64,
    pub paid: i64,
    /// The units the CREATED and the PAID orders hold.
    pub units_created: i64,
    pub units_paid: i64,
    pub failed: i64,
    pub cancelled: i64,
    /// CANCELLED orders whose unit Redis has not been seen to take back.
    pub cancels_pending: i64,
    pub failed_by_reason: BTreeMap<String, i64>,
    pub cancelled_by_reason: BTreeMap<String, i64>,
}

/// The sale's row (its stock in PostgreSQL) and its round's orders by
/// status, from one snapshot, read after Redis's figures. An order is
/// deducted in Redis, written in PostgreSQL, then followed in Redis: read in
/// this order, one written meanwhile is either still in flight in Redis (not
/// drained yet) or in both of PostgreSQL's figures — never among the orders
/// and not taken from the stock (two reads apart once showed the stock one
/// unit above the orders'), nor gone from Redis and missing from PostgreSQL.
pub(super) async fn sale_and_counts(
    pool: &PgPool,
    sale: SaleKey,
) -> Result<(crate::db::SaleRow, StatusCounts), ReconcileError> {
    let pg = source::<sqlx::Error>("postgresql");
    let mut books = pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").await.map_err(&pg)?;
    let row = crate::db::find_sale(&mut *books, sale).await.map_err(&pg)?.ok_or(ReconcileError::SaleNotFound(sale))?;
    let counts = status_counts(&mut *books, sale, row.round).await?;
    books.commit().await.map_err(&pg)?;
    Ok((row, counts))
}

/// Per status and reason: how many orders of the round.
async fn status_counts<'e>(
    db: impl sqlx::PgExecutor<'e>,
    sale: SaleKey,
    round: i32,
) -> Result<StatusCounts, ReconcileError> {
    let by_status = sqlx::query!(
        r#"SELECT status, reason, count(*) AS "count!", sum(quantity)::bigint AS "units!",
                  count(*) FILTER (WHERE status = 'CANCELLED' AND unit_returned_at IS NULL) AS "pending!"
             FROM orders
            WHERE activity_id = $1 AND sku_id = $2 AND round = $3
            GROUP BY status, reason"#,
        sale.activity.get(),
        sale.sku.get(),
        round
    )
    .fetch_all(db)
    .await
    .map_err(source::<sqlx::Error>("postgresql"))?;
    let mut counts = StatusCounts::default();
    for by in by_status {
        let (reason, count) = (by.reason.unwrap_or_default(), by.count);
        match by.status.as_str() {
            "CREATED" => {
                (counts.created, counts.units_created) = (counts.created + count, counts.units_created + by.units)
            }
            "PAID" => (counts.paid, counts.units_paid) = (counts.paid + count, counts.units_paid + by.units),
            "CANCELLED" => {
                counts.cancelled += count;
                counts.cancels_pending += by.pending;
                *counts.cancelled_by_reason.entry(reason).or_insert(0) += count;
            }
            _ => {
                counts.failed += count;
                *counts.failed_by_reason.entry(reason).or_insert(0) += count;
            }
        }
    }
    Ok(counts)
}

/// The round's other terms in PostgreSQL.
#[derive(Debug)]
pub(super) struct RoundTerms {
    pub duplicate_users: i64,
    pub users_over_limit: i64,
    pub per_user_limit: i64,
    pub paid_late: i64,
    pub applied: i64,
    pub refunds_due: i64,
    pub refund_events: i64,
    /// Events written (relayed or not, and pruned).
    pub events: i64,
    /// CREATED events the order service produced itself (no outbox row).
    pub created_directly: i64,
    /// Events not relayed yet.
    pub events_pending: i64,
}

/// Live orders beyond one per user's place, users whose live orders hold
/// more units than the round's limit (as the warm-up that committed the
/// round recorded it; 1 for a round warmed before limits), orders
/// paid late, the payments ledger, and
/// the round's events (written, relayed or not, and pruned), the CREATED
/// events the order service produced itself, and those not relayed yet:
/// one statement.
pub(super) async fn round_terms(pool: &PgPool, sale: SaleKey, round: i32) -> Result<RoundTerms, ReconcileError> {
    let terms = sqlx::query!(
        r#"WITH lim AS (
              SELECT COALESCE((SELECT (request->'limits'->>'perUserLimit')::bigint FROM warmups
                                WHERE activity_id = $1 AND sku_id = $2 AND round = $3
                                ORDER BY created_at DESC LIMIT 1), 1) AS n)
           SELECT (SELECT count(*) - count(DISTINCT (user_id, slot)) FROM orders
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status IN ('CREATED', 'PAID')) AS "duplicate_users!",
                  (SELECT count(*) FROM (SELECT user_id FROM orders
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status IN ('CREATED', 'PAID')
                    GROUP BY user_id HAVING sum(quantity) > (SELECT n FROM lim)) AS over) AS "users_over_limit!",
                  (SELECT n FROM lim) AS "per_user_limit!",
                  (SELECT count(DISTINCT order_id) FROM late_payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3) AS "paid_late!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'APPLIED') AS "applied!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'REFUND_DUE'
                      AND refunded_at IS NULL) AS "refunds_due!",
                  (SELECT count(*) FROM payments
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND outcome = 'REFUND_DUE'
                      AND payment_id NOT LIKE 'legacy:%') AS "refund_events!",
                  (SELECT count(*) FROM order_events WHERE activity_id = $1 AND sku_id = $2 AND round = $3)
                + (SELECT COALESCE(sum(count), 0)::bigint FROM order_events_pruned
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3) AS "events!",
                  (SELECT count(*) FROM orders
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status <> 'FAILED'
                      AND source_offset IS NOT NULL) AS "created_directly!",
                  (SELECT count(*) FROM order_events
                    WHERE activity_id = $1 AND sku_id = $2 AND round = $3
                      AND (xid, id) > (SELECT xid, id FROM order_events_relayed)) AS "events_pending!""#,
        sale.activity.get(),
        sale.sku.get(),
        round
    )
    .fetch_one(pool)
    .await
    .map_err(source::<sqlx::Error>("postgresql"))?;
    Ok(RoundTerms {
        duplicate_users: terms.duplicate_users,
        users_over_limit: terms.users_over_limit,
        per_user_limit: terms.per_user_limit,
        paid_late: terms.paid_late,
        applied: terms.applied,
        refunds_due: terms.refunds_due,
        refund_events: terms.refund_events,
        events: terms.events,
        created_directly: terms.created_directly,
        events_pending: terms.events_pending,
    })
}

/// Of the round's FAILED and CANCELLED orders, how many Redis had accepted
/// (each must have had its unit restored, written off or given back):
/// their ids streamed from PostgreSQL and asked of Redis a chunk at a
/// time, so a round of a million orders costs a chunk of memory, not a
/// million ids.
pub(super) async fn accepted(
    stock: &Stock,
    pool: &PgPool,
    sale: SaleKey,
    round: i32,
) -> Result<(i64, i64), ReconcileError> {
    let (activity, sku) = (sale.activity.get(), sale.sku.get());
    let (_, failed) = known_to_redis(
        stock,
        sale,
        sqlx::query_scalar!(
            "SELECT order_id FROM orders WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'FAILED'",
            activity,
            sku,
            round
        )
        .fetch(pool),
    )
    .await?;
    let (_, cancelled) = known_to_redis(
        stock,
        sale,
        sqlx::query_scalar!(
            "SELECT order_id FROM orders
              WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'CANCELLED'",
            activity,
            sku,
            round
        )
        .fetch(pool),
    )
    .await?;
    Ok((failed, cancelled))
}

/// Of the round's live orders (CREATED, PAID), how many Redis does not
/// know: what explains books that do not balance.
pub(super) async fn live_unknown_to_redis(
    stock: &Stock,
    pool: &PgPool,
    sale: SaleKey,
    round: i32,
) -> Result<i64, ReconcileError> {
    let (live, known) = known_to_redis(
        stock,
        sale,
        sqlx::query_scalar!(
            "SELECT order_id FROM orders
              WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status IN ('CREATED', 'PAID')",
            sale.activity.get(),
            sale.sku.get(),
            round
        )
        .fetch(pool),
    )
    .await?;
    Ok(live - known)
}

/// The FAILED orders of a round whose buyer was answered 202, by reason:
/// those whose record came through the edge (it carries the request's id),
/// and of the others those Redis accepted; and how many of the round's
/// FAILED orders a redrive placed again (one scan of them for both).
pub(super) async fn broken_promises(
    stock: &Stock,
    pool: &PgPool,
    sale: SaleKey,
    round: i32,
) -> Result<(BTreeMap<String, i64>, i64), ReconcileError> {
    let reasons = sqlx::query!(
        r#"SELECT o.reason AS "reason!", count(*) FILTER (WHERE o.request_id IS NOT NULL) AS "via_edge!",
                  count(r.new_order_id) AS "redriven!"
             FROM orders o LEFT JOIN dlq_redrives r ON r.original_order_id = o.order_id
            WHERE o.activity_id = $1 AND o.sku_id = $2 AND o.round = $3 AND o.status = 'FAILED'
            GROUP BY o.reason"#,
        sale.activity.get(),
        sale.sku.get(),
        round
    )
    .fetch_all(pool)
    .await
    .map_err(source::<sqlx::Error>("postgresql"))?;
    let mut broken = BTreeMap::new();
    let redriven = reasons.iter().map(|row| row.redriven).sum();
    for row in reasons {
        let (_, accepted) = known_to_redis(
            stock,
            sale,
            sqlx::query_scalar!(
                "SELECT order_id FROM orders
                  WHERE activity_id = $1 AND sku_id = $2 AND round = $3 AND status = 'FAILED' AND reason = $4
                    AND request_id IS NULL",
                sale.activity.get(),
                sale.sku.get(),
                round,
                row.reason
            )
            .fetch(pool),
        )
        .await?;
        let count = row.via_edge + accepted;
        if count > 0 {
            broken.insert(row.reason, count);
        }
    }
    Ok((broken, redriven))
}

/// Order ids streamed from PostgreSQL and asked of Redis a chunk at a time.
const KNOWN_CHUNK: usize = 10_000;

/// How many order ids `ids` streams, and how many of them Redis holds a
/// status for.
async fn known_to_redis(
    stock: &Stock,
    sale: SaleKey,
    ids: impl futures::Stream<Item = sqlx::Result<String>>,
) -> Result<(i64, i64), ReconcileError> {
    use futures::TryStreamExt;
    let mut chunks = std::pin::pin!(ids.try_chunks(KNOWN_CHUNK));
    let (mut seen, mut known) = (0, 0);
    while let Some(chunk) = chunks.try_next().await.map_err(|error| source::<sqlx::Error>("postgresql")(error.1))? {
        seen += chunk.len() as i64;
        known += stock
            .books()
            .count_known_orders(sale, &chunk)
            .await
            .map_err(source::<crate::stock::conn::RedisCallError>("redis"))?;
    }
    Ok((seen, known))
}
