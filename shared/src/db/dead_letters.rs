//! The dead-letter index: one `dead_letters` row per record of the
//! dead-letter topic, written by the compensator as it reads the record
//! (before settling it), and the counts operators ask for first, read from
//! it by `seckillctl dlq stats`, the compensator's `/metrics` and the
//! edge's dashboard — one source for all three.
//!
//! A record the compensator has not read yet is not counted: `dlq stats`
//! says how many those are (the compensator's lag on the topic).

use crate::domain::{OrderRecord, SaleKey};
use crate::kafka::{dlq_header, header_str};
use chrono::{DateTime, Utc};
use rdkafka::Message;
use sqlx::PgPool;
use std::collections::BTreeMap;

/// Indexes one dead-letter record (read again, it changes nothing).
pub async fn index<M: Message>(db: &PgPool, message: &M) -> sqlx::Result<()> {
    let headers = message.headers();
    let header = |key| headers.and_then(|h| header_str(h, key));
    let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
    let failed_at = header(dlq_header::FAILED_AT)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| message.timestamp().to_millis().and_then(DateTime::from_timestamp_millis))
        .unwrap_or_else(Utc::now);
    let replay_count = header(dlq_header::REPLAY_COUNT).and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
    sqlx::query!(
        "INSERT INTO dead_letters (dlq_partition, dlq_offset, reason, order_id, activity_id, sku_id, failed_at, replay_count)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (dlq_partition, dlq_offset) DO NOTHING",
        message.partition(),
        message.offset(),
        header(dlq_header::REASON).unwrap_or("UNKNOWN"),
        record.as_ref().map(|r| r.order_id.as_str()),
        record.as_ref().map(|r| r.activity_id.get()),
        record.as_ref().map(|r| r.sku_id.get()),
        failed_at,
        replay_count
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Which records [`stats`] counts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope {
    /// Dead-lettered at or after.
    pub since: Option<DateTime<Utc>>,
    /// Of this sale only.
    pub sale: Option<SaleKey>,
}

/// The counts of the indexed dead letters in a [`Scope`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Records.
    pub records: i64,
    /// By `dlq.reason`.
    pub by_reason: BTreeMap<String, i64>,
    /// By sale (`A:S`; `-` for a record that names no order).
    pub by_sale: BTreeMap<String, i64>,
    /// By the hour they were dead-lettered in (`YYYY-MM-DDTHH:00Z`).
    pub by_hour: BTreeMap<String, i64>,
    pub oldest: Option<DateTime<Utc>>,
    pub newest: Option<DateTime<Utc>>,
    /// Records a replay run (not a dry run) re-produced.
    pub replayed: i64,
    /// Records a redrive run placed a new order for.
    pub redriven: i64,
    /// Records parked for an operator (every topic, this scope's sale).
    pub parked: i64,
}

/// Counts the indexed dead letters in `scope`.
pub async fn stats(db: &PgPool, scope: Scope) -> sqlx::Result<Stats> {
    let (activity, sku) = scope.sale.map_or((None, None), |s| (Some(s.activity.get()), Some(s.sku.get())));
    let groups = sqlx::query!(
        r#"SELECT reason AS "reason!", activity_id, sku_id,
                  to_char(date_trunc('hour', failed_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"') AS "hour!",
                  count(*) AS "count!", min(failed_at) AS "oldest!", max(failed_at) AS "newest!"
             FROM dead_letters
            WHERE ($1::timestamptz IS NULL OR failed_at >= $1)
              AND ($2::bigint IS NULL OR (activity_id = $2 AND sku_id = $3))
            GROUP BY 1, 2, 3, 4"#,
        scope.since,
        activity,
        sku
    )
    .fetch_all(db)
    .await?;
    let mut stats = Stats::default();
    for g in groups {
        let sale = match (g.activity_id, g.sku_id) {
            (Some(a), Some(s)) => format!("{a}:{s}"),
            _ => "-".to_owned(),
        };
        stats.records += g.count;
        *stats.by_reason.entry(g.reason).or_default() += g.count;
        *stats.by_sale.entry(sale).or_default() += g.count;
        *stats.by_hour.entry(g.hour).or_default() += g.count;
        stats.oldest = Some(stats.oldest.map_or(g.oldest, |t| t.min(g.oldest)));
        stats.newest = Some(stats.newest.map_or(g.newest, |t| t.max(g.newest)));
    }
    let acted = sqlx::query!(
        r#"SELECT count(DISTINCT (d.dlq_partition, d.dlq_offset)) FILTER (WHERE r.outcome = 'SENT') AS "replayed!",
                  count(DISTINCT (d.dlq_partition, d.dlq_offset)) FILTER (WHERE r.outcome = 'PLACED') AS "redriven!"
             FROM dead_letters d
             JOIN dlq_run_records r USING (dlq_partition, dlq_offset)
             JOIN dlq_runs run ON run.run_id = r.run_id AND NOT run.dry_run
            WHERE ($1::timestamptz IS NULL OR d.failed_at >= $1)
              AND ($2::bigint IS NULL OR (d.activity_id = $2 AND d.sku_id = $3))"#,
        scope.since,
        activity,
        sku
    )
    .fetch_one(db)
    .await?;
    stats.replayed = acted.replayed;
    stats.redriven = acted.redriven;
    stats.parked = match scope.sale {
        Some(sale) => crate::db::parked::count_for_sale(db, sale).await?,
        None => crate::db::parked::count(db).await?,
    };
    Ok(stats)
}
