//! The dead-letter index: one `dead_letters` row per record of the
//! dead-letter topic, keyed by topic, partition and offset, written by the
//! compensator as it reads the record (before settling it), and the counts
//! operators ask for first, read from it by `seckillctl dlq stats`, the
//! compensator's `/metrics` and the edge's dashboard — one source for all
//! three.
//!
//! A record the index does not hold yet is not counted: [`not_indexed`]
//! says how many records on the topic those are, from the topic's own
//! watermarks (not from the compensator's committed offsets, which say
//! nothing of a record that was read and not indexed).

use crate::domain::{OrderRecord, SaleKey};
use crate::kafka::{dlq_header, header_str};
use chrono::{DateTime, Utc};
use rdkafka::Message;
use sqlx::PgPool;
use std::collections::BTreeMap;

/// One dead letter as the index holds it.
struct Indexed<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    reason: &'a str,
    order_id: Option<&'a str>,
    sale: Option<SaleKey>,
    failed_at: DateTime<Utc>,
    replay_count: i32,
}

/// Indexes one dead-letter record (read again, it changes nothing). A
/// record at a position the index holds with other content (its topic was
/// recreated, its offsets started again) replaces that row, logged with
/// what it replaced and counted (`seckill_dead_letters_index_conflicts_total`):
/// the index follows the topic and never drops a record silently.
pub async fn index<M: Message>(db: &PgPool, message: &M) -> sqlx::Result<()> {
    let headers = message.headers();
    let header = |key| headers.and_then(|h| header_str(h, key));
    let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
    let failed_at = header(dlq_header::FAILED_AT)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| message.timestamp().to_millis().and_then(DateTime::from_timestamp_millis))
        .unwrap_or_else(Utc::now);
    let row = Indexed {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        reason: header(dlq_header::REASON).unwrap_or("UNKNOWN"),
        order_id: record.as_ref().map(|r| r.order_id.as_str()),
        sale: record.as_ref().map(|r| r.sale()),
        failed_at,
        replay_count: header(dlq_header::REPLAY_COUNT).and_then(|c| c.parse::<i32>().ok()).unwrap_or(0),
    };
    if write(db, &row, false).await? {
        return Ok(());
    }
    let held = sqlx::query!(
        "SELECT reason, order_id FROM dead_letters WHERE dlq_topic = $1 AND dlq_partition = $2 AND dlq_offset = $3",
        row.topic,
        row.partition,
        row.offset
    )
    .fetch_optional(db)
    .await?;
    match held {
        Some(held) if held.reason == row.reason && held.order_id.as_deref() == row.order_id => Ok(()),
        held => {
            let (reason, order_id) = held.map_or((None, None), |h| (Some(h.reason), h.order_id));
            tracing::warn!(
                topic = row.topic,
                partition = row.partition,
                offset = row.offset,
                held_reason = reason.as_deref().unwrap_or("-"),
                held_order_id = order_id.as_deref().unwrap_or("-"),
                reason = row.reason,
                order_id = row.order_id.unwrap_or("-"),
                "a dead letter at a position the index held with another record (the topic was recreated): indexed in its place"
            );
            metrics::counter!("seckill_dead_letters_index_conflicts_total").increment(1);
            write(db, &row, true).await.map(drop)
        }
    }
}

/// Writes `row`: where its position is held, over what it held when
/// `replace`, else not at all. Whether it was written.
async fn write(db: &PgPool, row: &Indexed<'_>, replace: bool) -> sqlx::Result<bool> {
    let written = sqlx::query!(
        "INSERT INTO dead_letters
                (dlq_topic, dlq_partition, dlq_offset, reason, order_id, activity_id, sku_id, failed_at, replay_count)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (dlq_topic, dlq_partition, dlq_offset) DO UPDATE
            SET reason = EXCLUDED.reason, order_id = EXCLUDED.order_id, activity_id = EXCLUDED.activity_id,
                sku_id = EXCLUDED.sku_id, failed_at = EXCLUDED.failed_at, replay_count = EXCLUDED.replay_count
          WHERE $10",
        row.topic,
        row.partition,
        row.offset,
        row.reason,
        row.order_id,
        row.sale.map(|s| s.activity.get()),
        row.sale.map(|s| s.sku.get()),
        row.failed_at,
        row.replay_count,
        replace
    )
    .execute(db)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// Gives the rows indexed before the index knew topics (`''`, migration
/// 10) to `topic`, with the run records that name them; a row whose
/// position `topic` already holds keeps `''` (logged). How many were
/// adopted.
pub async fn adopt(db: &PgPool, topic: &str) -> sqlx::Result<u64> {
    let mut tx = db.begin().await?;
    let adopted = sqlx::query!(
        "UPDATE dead_letters d SET dlq_topic = $1
          WHERE d.dlq_topic = ''
            AND NOT EXISTS (SELECT 1 FROM dead_letters e
                             WHERE e.dlq_topic = $1 AND e.dlq_partition = d.dlq_partition AND e.dlq_offset = d.dlq_offset)",
        topic
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!("UPDATE dlq_run_records SET dlq_topic = $1 WHERE dlq_topic = ''", topic).execute(&mut *tx).await?;
    let left = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM dead_letters WHERE dlq_topic = ''"#)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    if left > 0 {
        tracing::warn!(topic, left, "dead letters indexed without a topic at positions this topic holds: left unnamed");
    }
    Ok(adopted)
}

/// Records on `topic` the index does not hold: per partition, the records
/// between its low and high watermarks (`marks`) less the index's rows in
/// that range.
pub async fn not_indexed(db: &PgPool, topic: &str, marks: &BTreeMap<i32, (i64, i64)>) -> sqlx::Result<i64> {
    let partitions: Vec<i32> = marks.keys().copied().collect();
    let lows: Vec<i64> = marks.values().map(|m| m.0).collect();
    let highs: Vec<i64> = marks.values().map(|m| m.1).collect();
    let missing = sqlx::query_scalar!(
        r#"SELECT coalesce(sum(missing), 0)::bigint AS "missing!" FROM (
              SELECT (m.high - m.low) - count(d.dlq_offset) AS missing
                FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS m(p, low, high)
                LEFT JOIN dead_letters d
                  ON d.dlq_topic = $1 AND d.dlq_partition = m.p AND d.dlq_offset >= m.low AND d.dlq_offset < m.high
               GROUP BY m.p, m.low, m.high) AS per_partition"#,
        topic,
        &partitions,
        &lows,
        &highs
    )
    .fetch_one(db)
    .await?;
    Ok(missing)
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

/// Counts the dead letters of `topic` indexed in `scope`.
pub async fn stats(db: &PgPool, topic: &str, scope: Scope) -> sqlx::Result<Stats> {
    let (activity, sku) = scope.sale.map_or((None, None), |s| (Some(s.activity.get()), Some(s.sku.get())));
    let groups = sqlx::query!(
        r#"SELECT reason AS "reason!", activity_id, sku_id,
                  to_char(date_trunc('hour', failed_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"') AS "hour!",
                  count(*) AS "count!", min(failed_at) AS "oldest!", max(failed_at) AS "newest!"
             FROM dead_letters
            WHERE dlq_topic = $4
              AND ($1::timestamptz IS NULL OR failed_at >= $1)
              AND ($2::bigint IS NULL OR (activity_id = $2 AND sku_id = $3))
            GROUP BY 1, 2, 3, 4"#,
        scope.since,
        activity,
        sku,
        topic
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
             JOIN dlq_run_records r USING (dlq_topic, dlq_partition, dlq_offset)
             JOIN dlq_runs run ON run.run_id = r.run_id AND NOT run.dry_run
            WHERE d.dlq_topic = $4
              AND r.order_id IS NOT DISTINCT FROM d.order_id
              AND ($1::timestamptz IS NULL OR d.failed_at >= $1)
              AND ($2::bigint IS NULL OR (d.activity_id = $2 AND d.sku_id = $3))"#,
        scope.since,
        activity,
        sku,
        topic
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
