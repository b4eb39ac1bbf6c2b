//! The events the orders call for, derived from the orders themselves (not
//! from the outbox, whose rows are pruned and whose cursor is what a
//! relay claims): a `CREATED` event for every order that was created (all
//! but those written FAILED), one for its later state (`PAID`,
//! `CANCELLED`, `FAILED`), `REFUND_DUE` for every payment the ledger owes
//! back (of an order PostgreSQL holds), and `PAYMENT_LATE` for an order paid
//! after its cancellation before the ledger. Each with its stable `eventId` and, when the outbox still
//! holds its row, whether the relay has yet to send it.

use chrono::{DateTime, Utc};
use seckill_shared::db::outbox::EventRow;
use seckill_shared::domain::SaleKey;
use sqlx::PgPool;

/// One event the orders call for.
#[derive(Debug, Clone)]
pub struct Expected {
    pub event: EventRow,
    /// The outbox row is ahead of the relay's cursor: the relay sends it.
    pub pending: bool,
}

/// Which orders.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// Every order of one sale, every round.
    Sale(SaleKey),
    /// Events of any sale that happened at or after a time.
    Since(DateTime<Utc>),
}

/// The events `scope`'s orders call for, each order's in the order they
/// happened. `$1`, `$2`: a sale, or NULL; `$3`: a time, or NULL. When the
/// outbox still has the event's row, its time is the event's.
pub async fn expected(db: &PgPool, scope: Scope) -> sqlx::Result<Vec<Expected>> {
    let (activity, sku, since) = match scope {
        Scope::Sale(sale) => (Some(sale.activity.get()), Some(sale.sku.get()), None),
        Scope::Since(at) => (None, None, Some(at)),
    };
    let rows = sqlx::query!(
        r#"WITH o AS (
            SELECT * FROM orders
             WHERE ($1::bigint IS NULL OR (activity_id = $1 AND sku_id = $2))
               AND ($3::timestamptz IS NULL OR created_at >= $3 OR paid_at >= $3 OR cancelled_at >= $3)
        ), derived AS (
            SELECT order_id || ':CREATED' AS event_id, 'CREATED' AS kind, order_id, activity_id, sku_id, round, user_id,
                   NULL::text AS reason, CASE WHEN source_offset IS NULL THEN created_at ELSE accepted_at END AS at,
                   request_id, traceparent, NULL::text AS payment_id, quantity
              FROM o WHERE status <> 'FAILED'
            UNION ALL
            SELECT order_id || ':' || status, status, order_id, activity_id, sku_id, round, user_id, reason,
                   COALESCE(CASE status WHEN 'PAID' THEN paid_at WHEN 'CANCELLED' THEN cancelled_at END, created_at),
                   request_id, traceparent,
                   CASE WHEN status = 'PAID' THEN
                       (SELECT p.payment_id FROM payments p WHERE p.order_id = o.order_id AND p.outcome = 'APPLIED') END,
                   quantity
              FROM o WHERE status <> 'CREATED'
            UNION ALL
            SELECT DISTINCT ON (order_id) order_id || ':PAYMENT_LATE', 'PAYMENT_LATE', order_id, activity_id, sku_id, round,
                   user_id, 'ORDER_CANCELLED', recorded_at, NULL, NULL, NULL, 1::smallint
              FROM late_payments
             WHERE ($1::bigint IS NULL OR (activity_id = $1 AND sku_id = $2)) AND ($3::timestamptz IS NULL OR recorded_at >= $3)
            UNION ALL
            SELECT order_id || ':REFUND_DUE:' || payment_id, 'REFUND_DUE', order_id, activity_id, sku_id, round,
                   user_id, refund_reason, received_at, NULL, NULL, payment_id,
                   COALESCE((SELECT q.quantity FROM orders q WHERE q.order_id = payments.order_id), 1::smallint)
              FROM payments
             WHERE outcome = 'REFUND_DUE' AND round IS NOT NULL AND payment_id NOT LIKE 'legacy:%'
               AND ($1::bigint IS NULL OR (activity_id = $1 AND sku_id = $2)) AND ($3::timestamptz IS NULL OR received_at >= $3)
        )
        SELECT d.event_id AS "event_id!", d.kind AS "kind!", d.order_id AS "order_id!", d.activity_id AS "activity_id!",
               d.sku_id AS "sku_id!", d.round AS "round!", d.user_id AS "user_id!", d.reason,
               COALESCE(e.occurred_at, d.at) AS "occurred_at!", d.request_id, d.traceparent,
               COALESCE(d.payment_id, e.payment_id) AS payment_id,
               COALESCE(e.redrive_of, r.original_order_id) AS redrive_of, COALESCE(e.quantity, d.quantity) AS "quantity!",
               COALESCE((e.xid, e.id) > (SELECT xid, id FROM order_events_relayed), false) AS "pending!"
          FROM derived d
          LEFT JOIN order_events e ON e.event_id = d.event_id
          LEFT JOIN dlq_redrives r ON r.new_order_id = d.order_id AND d.kind NOT IN ('REFUND_DUE', 'PAYMENT_LATE')
         WHERE $3::timestamptz IS NULL OR COALESCE(e.occurred_at, d.at) >= $3
         ORDER BY d.order_id, COALESCE(e.occurred_at, d.at)"#,
        activity,
        sku,
        since
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| Expected {
            event: EventRow {
                event_id: row.event_id,
                kind: row.kind,
                order_id: row.order_id,
                activity_id: row.activity_id,
                sku_id: row.sku_id,
                round: row.round,
                user_id: row.user_id,
                reason: row.reason,
                occurred_at: row.occurred_at,
                request_id: row.request_id,
                traceparent: row.traceparent,
                payment_id: row.payment_id,
                redrive_of: row.redrive_of,
                quantity: row.quantity,
            },
            pending: row.pending,
        })
        .collect())
}
