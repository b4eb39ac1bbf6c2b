//! The order-event outbox as its readers see it: `order_events` rows
//! (written by the triggers of migration `…02_order_events_outbox.sql` in
//! the transaction of each status change), the relay's cursor over them
//! (migration `…04_outbox_relay_cursor.sql`), and each row as the event a
//! consumer of `seckill.order-events` receives. The relay (order service)
//! and `seckillctl events resend` both send events built here.
//!
//! Architecture invariant: rows are ordered by `(xid, id)` as `xid8` and
//! `bigint`, never through a text form (as text, "100000123" sorts before
//! "99999050", and a cursor once jumped past every row of the shorter ids).

use crate::domain::{ActivityId, OrderEvent, OrderId, SkuId, UserId};
use crate::kafka::Trace;
use chrono::{DateTime, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{PgConnection, PgPool, Postgres};

/// A PostgreSQL `xid8`: a 64-bit transaction id that never wraps, compared
/// as a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Xid8(pub u64);

impl sqlx::Type<Postgres> for Xid8 {
    fn type_info() -> PgTypeInfo {
        // xid8's OID is fixed in PostgreSQL's catalog (pg_type.dat).
        PgTypeInfo::with_oid(Oid(5069))
    }
}

impl sqlx::Decode<'_, Postgres> for Xid8 {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(Self(match value.format() {
            PgValueFormat::Binary => u64::from_be_bytes(value.as_bytes()?.try_into()?),
            PgValueFormat::Text => value.as_str()?.parse()?,
        }))
    }
}

impl sqlx::Encode<'_, Postgres> for Xid8 {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }
}

/// Declares the relay's turn query once, for the relay
/// ([`next_after_cursor`]) and for the test that reads its plans
/// ([`NEXT_AFTER_CURSOR`]).
macro_rules! next_after_cursor {
    ($sql:tt) => {
        /// The relay's turn: the next rows after the cursor that no running
        /// transaction can still precede, in `(xid, id)` order, by the
        /// `order_events_relay_order` index (the plan is checked by a test,
        /// custom and generic). `$1`: most rows.
        pub const NEXT_AFTER_CURSOR: &str = $sql;

        /// The next rows after the cursor, at most `limit`.
        pub async fn next_after_cursor(db: &PgPool, limit: i64) -> sqlx::Result<Vec<OutboxRow>> {
            let rows = sqlx::query!($sql, limit).fetch_all(db).await?;
            Ok(rows
                .into_iter()
                .map(|row| OutboxRow {
                    id: row.id,
                    xid: row.xid,
                    source: row.source_partition.zip(row.source_offset),
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
                })
                .collect())
        }
    };
}

next_after_cursor!(
    r#"SELECT id, event_id, type AS kind, order_id, activity_id, sku_id, round, user_id, reason, occurred_at,
              request_id, traceparent, payment_id, redrive_of, quantity, source_partition, source_offset,
              xid AS "xid: Xid8"
         FROM order_events
        WHERE (xid, id) > (SELECT xid, id FROM order_events_relayed)
          AND xid < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY xid, id
        LIMIT $1"#
);

/// Moves the cursor to `(xid, id)`, inside the caller's transaction.
pub async fn move_cursor(tx: &mut PgConnection, xid: Xid8, id: i64) -> sqlx::Result<()> {
    sqlx::query!("UPDATE order_events_relayed SET xid = $1, id = $2", xid as Xid8, id).execute(tx).await?;
    Ok(())
}

/// Deletes relayed events older than `retention_secs`, inside the caller's
/// transaction, keeping their counts per sale round and type
/// (`order_events_pruned`, which the books read); how many went.
pub async fn prune(tx: &mut PgConnection, retention_secs: f64) -> sqlx::Result<u64> {
    let pruned = sqlx::query_scalar!(
        "WITH gone AS (
            DELETE FROM order_events
             WHERE occurred_at < now() - make_interval(secs => $1)
               AND (xid, id) <= (SELECT xid, id FROM order_events_relayed)
         RETURNING activity_id, sku_id, round, type
         ), counted AS (
            INSERT INTO order_events_pruned (activity_id, sku_id, round, type, count)
            SELECT activity_id, sku_id, round, type, count(*) FROM gone GROUP BY 1, 2, 3, 4
            ON CONFLICT (activity_id, sku_id, round, type)
              DO UPDATE SET count = order_events_pruned.count + EXCLUDED.count
            RETURNING count
         )
         SELECT count(*) FROM gone",
        retention_secs
    )
    .fetch_one(tx)
    .await?;
    Ok(pruned.unwrap_or(0) as u64)
}

/// One outbox row: an event and where the relay's cursor orders it.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// The row's id (second in the order).
    pub id: i64,
    /// The transaction that wrote it (first in the order).
    pub xid: Xid8,
    /// A later event of an order the order service wrote: the partition
    /// and offset in `seckill.orders` of the record it came from (the relay
    /// holds the event until the order group has committed past it: its
    /// CREATED was produced first).
    pub source: Option<(i32, i64)>,
    pub event: EventRow,
}

/// The columns of one order event, as the outbox holds them (and as
/// `seckillctl events` derives them from the orders).
#[derive(Debug, Clone)]
pub struct EventRow {
    pub event_id: String,
    /// Its `type`.
    pub kind: String,
    pub order_id: String,
    pub activity_id: i64,
    pub sku_id: i64,
    pub round: i32,
    pub user_id: i64,
    pub reason: Option<String>,
    pub occurred_at: DateTime<Utc>,
    /// The request that placed the order, for the record's headers.
    pub request_id: Option<String>,
    /// Its W3C trace context, for the record's headers.
    pub traceparent: Option<String>,
    /// `PAID` and `REFUND_DUE`: the payment provider's id of the payment.
    pub payment_id: Option<String>,
    /// A redriven order's events: the order it replaces.
    pub redrive_of: Option<String>,
    /// The units the order holds.
    pub quantity: i16,
}

/// An outbox row that cannot be an event (written by hand, or by a tool
/// with ids of its own).
#[derive(Debug, thiserror::Error)]
#[error("{what} of event {event_id} is invalid")]
pub struct NotAnEvent {
    /// The row's event id.
    pub event_id: String,
    /// Which field.
    pub what: &'static str,
}

impl EventRow {
    /// The row as the event consumers receive.
    pub fn event(&self) -> Result<OrderEvent, NotAnEvent> {
        let bad = |what| NotAnEvent { event_id: self.event_id.clone(), what };
        Ok(OrderEvent {
            event_id: self.event_id.clone(),
            kind: self.kind.clone(),
            order_id: OrderId::parse(&self.order_id).map_err(|_| bad("order id"))?,
            activity_id: ActivityId::new(self.activity_id).map_err(|_| bad("activity id"))?,
            sku_id: SkuId::new(self.sku_id).map_err(|_| bad("sku id"))?,
            round: i64::from(self.round),
            user_id: UserId::new(self.user_id).map_err(|_| bad("user id"))?,
            reason: self.reason.clone(),
            payment_id: self.payment_id.clone(),
            redrive_of: self.redrive_of.clone(),
            quantity: u32::try_from(self.quantity).ok().filter(|&n| n >= 1).ok_or_else(|| bad("quantity"))?,
            occurred_at: self.occurred_at.timestamp_millis(),
            v: OrderEvent::VERSION,
        })
    }

    /// The record's trace: the order's request id and trace context.
    pub fn trace(&self) -> Trace<'_> {
        Trace { request_id: self.request_id.as_deref(), traceparent: self.traceparent.as_deref() }
    }

    /// The record's headers: its trace, and the CloudEvents attributes with
    /// `source` as `ce_source`.
    /// With spans exported, the trace context is `sending`'s (the span of
    /// this send, a child of the order's), else the order's own.
    pub fn headers(&self, source: &str, sending: &tracing::Span) -> rdkafka::message::OwnedHeaders {
        let attributes = crate::kafka::cloud_event::Attributes {
            id: &self.event_id,
            kind: &self.kind,
            subject: &self.order_id,
            time: self.occurred_at,
            source,
        };
        let carried = crate::ops::trace_export::traceparent_of(sending);
        let mut trace = self.trace();
        trace.traceparent = carried.as_deref().or(trace.traceparent);
        crate::kafka::cloud_event::headers(trace, attributes)
    }
}

/// An event's record key (its user id: one user's events keep their order)
/// and value.
pub fn keyed(event: &OrderEvent) -> (String, Vec<u8>) {
    let payload = serde_json::to_vec(event).expect("an order event serializes");
    (event.user_id.to_string(), payload)
}
