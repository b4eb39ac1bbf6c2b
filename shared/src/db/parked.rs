//! Parked records: what no service could process after bounded attempts —
//! a dead letter PostgreSQL can never take, a record too large to be
//! dead-lettered — kept in PostgreSQL so the partition behind it moves on.
//! Each stays until an operator deals with it: `seckillctl dlq parked`
//! lists them and the reconciliation reports a sale's as violations.

use crate::db::outbox::{NotAnEvent, OutboxRow};
use crate::domain::{OrderRecord, SaleKey};
use crate::kafka::headers_map;
use rdkafka::Message;
use sqlx::PgPool;

/// One record to park.
pub struct Parking<'a, M: Message> {
    /// The record, as it was consumed.
    pub message: &'a M,
    /// Why it went wrong: its `dlq.reason`, or what stopped it.
    pub reason: &'a str,
    /// The last error, in words.
    pub error: &'a str,
    /// How many times it was tried.
    pub attempts: u32,
    /// Which service parked it.
    pub parked_by: &'static str,
}

/// Parks a record (a replay of one already parked changes nothing).
pub async fn park<M: Message>(db: &PgPool, parking: &Parking<'_, M>) -> sqlx::Result<()> {
    let message = parking.message;
    let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
    let headers = serde_json::to_value(message.headers().map(headers_map).unwrap_or_default()).unwrap_or_default();
    sqlx::query!(
        r#"INSERT INTO parked_records
             (topic, partition, "offset", key, payload, headers, order_id, activity_id, sku_id, reason, error, attempts, parked_by)
           VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9, $10, $11, $12, $13)
           ON CONFLICT (topic, partition, "offset") DO NOTHING"#,
        message.topic(),
        message.partition(),
        message.offset(),
        message.key(),
        message.payload(),
        headers.to_string(),
        record.as_ref().map(|r| r.order_id.as_str()),
        record.as_ref().map(|r| r.activity_id.get()),
        record.as_ref().map(|r| r.sku_id.get()),
        parking.reason,
        parking.error,
        parking.attempts as i32,
        parking.parked_by
    )
    .execute(db)
    .await?;
    metrics::counter!("seckill_parked_records_total", "by" => parking.parked_by).increment(1);
    tracing::error!(
        topic = message.topic(),
        partition = message.partition(),
        offset = message.offset(),
        order_id = record.as_ref().map(|r| r.order_id.as_str()).unwrap_or(""),
        reason = parking.reason,
        error = parking.error,
        attempts = parking.attempts,
        "record parked: an operator must deal with it"
    );
    Ok(())
}

/// Parks an outbox row that cannot be an event (`BAD_OUTBOX_ROW`), its
/// outbox id as the offset and partition -1, so the events behind it flow.
pub async fn park_outbox_row(db: &PgPool, topic: &str, row: &OutboxRow, error: &NotAnEvent) -> sqlx::Result<()> {
    park_event_row(db, topic, row, "BAD_OUTBOX_ROW", &error.to_string()).await
}

/// Parks an outbox row whose event the broker refuses for good (larger than
/// it takes, a record it calls invalid): retried, it would stop every event
/// behind it. `seckillctl dlq parked` shows it; `events resend` sends it
/// once the cause is fixed.
pub async fn park_undeliverable_event(db: &PgPool, topic: &str, row: &OutboxRow, error: &str) -> sqlx::Result<()> {
    park_event_row(db, topic, row, "UNDELIVERABLE_EVENT", error).await
}

async fn park_event_row(db: &PgPool, topic: &str, row: &OutboxRow, reason: &str, error: &str) -> sqlx::Result<()> {
    let event = &row.event;
    let payload = serde_json::json!({
        "eventId": &event.event_id,
        "type": &event.kind,
        "orderId": &event.order_id,
        "userId": event.user_id,
    });
    sqlx::query!(
        r#"INSERT INTO parked_records
             (topic, partition, "offset", payload, order_id, activity_id, sku_id, reason, error, attempts, parked_by)
           VALUES ($1, -1, $2, $3, $4, $5, $6, $7, $8, 1, 'order-relay')
           ON CONFLICT (topic, partition, "offset") DO NOTHING"#,
        topic,
        row.id,
        payload.to_string().into_bytes(),
        &event.order_id,
        event.activity_id,
        event.sku_id,
        reason,
        error
    )
    .execute(db)
    .await?;
    metrics::counter!("seckill_parked_records_total", "by" => "order-relay").increment(1);
    tracing::error!(outbox_id = row.id, order_id = %event.order_id, reason, error, "outbox row parked");
    Ok(())
}

/// A parked record, as operators see it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkedRow {
    pub id: i64,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub order_id: Option<String>,
    pub activity_id: Option<i64>,
    pub sku_id: Option<i64>,
    pub reason: String,
    pub error: String,
    pub attempts: i32,
    pub parked_by: String,
    pub parked_at: chrono::DateTime<chrono::Utc>,
    /// The value as text (lossy), at most 512 bytes of it.
    pub value: Option<String>,
}

/// The parked records, oldest first, at most `limit`.
pub async fn list(db: &PgPool, limit: i64) -> sqlx::Result<Vec<ParkedRow>> {
    sqlx::query_as!(
        ParkedRow,
        r#"SELECT id, topic, partition, "offset", order_id, activity_id, sku_id, reason, error, attempts, parked_by,
                  parked_at, convert_from(substring(payload from 1 for 512), 'SQL_ASCII') AS value
             FROM parked_records ORDER BY id LIMIT $1"#,
        limit
    )
    .fetch_all(db)
    .await
}

/// How many records are parked, of every sale.
pub async fn count(db: &PgPool) -> sqlx::Result<i64> {
    Ok(sqlx::query_scalar!("SELECT count(*) FROM parked_records").fetch_one(db).await?.unwrap_or(0))
}

/// How many of a sale's records are parked.
pub async fn count_for_sale(db: &PgPool, sale: SaleKey) -> sqlx::Result<i64> {
    let count = sqlx::query_scalar!(
        "SELECT count(*) FROM parked_records WHERE activity_id = $1 AND sku_id = $2",
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_one(db)
    .await?;
    Ok(count.unwrap_or(0))
}
