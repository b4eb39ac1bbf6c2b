//! Order events in PostgreSQL's write-ahead log (migration
//! `…09_order_events_from_the_wal.sql`): the triggers write each
//! statement's events as one transactional logical decoding message, and
//! the relay reads them from a logical replication slot of this database.
//! This module owns the names (slot, publication, message prefix), makes
//! them before the migration that starts writing messages, and keeps the
//! relay's position (`order_events_stream`) and its counts per sale round
//! (`order_events_relayed_counts`).
//!
//! Architecture invariant: the slot exists before the first message is
//! written (a message written while no slot holds the WAL is gone). Before
//! migration 09, [`prepare`] makes it; after, a relay that finds it gone
//! (dropped, or invalidated by `max_slot_wal_keep_size` after the relay was
//! away too long) makes a new one and sends again every event the orders
//! call for since its last position ([`Position::relayed_up_to`]).

use crate::domain::SaleKey;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use std::collections::HashMap;

/// The publication the relay's slot streams with (it publishes no table:
/// only the messages, which pgoutput sends whatever the publication holds).
pub const PUBLICATION: &str = "seckill_order_events";

/// The prefix of the triggers' messages.
pub const MESSAGE_PREFIX: &str = "seckill.order-events";

/// The migration after which events go to the WAL.
pub const WAL_MIGRATION: i64 = 20261203000009;

/// A log sequence number (a position in the WAL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// PostgreSQL's text form, `X/Y` in hex.
    pub fn parse(text: &str) -> Option<Self> {
        let (high, low) = text.split_once('/')?;
        Some(Self((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?))
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// The slot of the database named `database`: slots are the whole server's,
/// one per database that has events (letters, digits and `_` only).
pub fn slot_name(database: &str) -> String {
    let clean: String =
        database.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    let mut name = format!("seckill_events_{clean}");
    name.truncate(63);
    name
}

/// This database's slot name.
pub async fn this_slot(db: &PgPool) -> sqlx::Result<String> {
    let database: Option<String> = sqlx::query_scalar!("SELECT current_database()::text").fetch_one(db).await?;
    Ok(slot_name(&database.unwrap_or_default()))
}

/// Before the migration that writes events to the WAL: checks the server
/// writes logical WAL, and makes the publication and this database's slot
/// (idempotent; concurrent callers make each once). Nothing once the
/// migration has run: from then on the relay keeps the slot.
pub async fn prepare(db: &PgPool) -> anyhow::Result<()> {
    // sqlx's own table (absent before the first migration): checked at run
    // time, not against .sqlx/.
    let applied = sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1)")
        .bind(WAL_MIGRATION)
        .fetch_one(db)
        .await
        .unwrap_or(false);
    if applied {
        return Ok(());
    }
    let level: Option<String> = sqlx::query_scalar!("SELECT current_setting('wal_level')").fetch_one(db).await?;
    let level = level.unwrap_or_default();
    anyhow::ensure!(
        level == "logical",
        "order events are read from the WAL: PostgreSQL must run with wal_level = logical (it is {level}); \
         set it in postgresql.conf (or -c wal_level=logical) and restart the server"
    );
    ensure_publication(db).await?;
    let slot = this_slot(db).await?;
    if self::slot(db, &slot).await?.is_none() {
        create_slot(db, &slot).await?;
        tracing::info!(slot, "made the order events' replication slot");
    }
    Ok(())
}

/// Makes the publication when it is missing.
pub async fn ensure_publication(db: &PgPool) -> sqlx::Result<()> {
    let exists = sqlx::query_scalar!("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", PUBLICATION)
        .fetch_one(db)
        .await?;
    if exists == Some(true) {
        return Ok(());
    }
    // A name, not a value: PUBLICATION is this module's constant.
    match sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE PUBLICATION {PUBLICATION}"))).execute(db).await {
        Err(error) if duplicate(&error) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Whether `error` says the object exists already (made meanwhile by
/// another process).
fn duplicate(error: &sqlx::Error) -> bool {
    error.as_database_error().and_then(|e| e.code()).is_some_and(|code| code == "42710" || code == "23505")
}

/// A slot as PostgreSQL reports it.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Where a new stream of it starts: every transaction committed before
    /// was confirmed by a reader.
    pub confirmed_flush: Option<Lsn>,
    /// The WAL it needs was removed (`max_slot_wal_keep_size`): it can
    /// never stream again.
    pub lost: bool,
    /// The backend streaming it, if one is.
    pub active_pid: Option<i32>,
    /// Bytes of WAL written since its confirmed position.
    pub lag_bytes: i64,
}

/// The slot `name`, if it exists.
pub async fn slot(db: &PgPool, name: &str) -> sqlx::Result<Option<Slot>> {
    let row = sqlx::query!(
        r#"SELECT confirmed_flush_lsn::text AS confirmed_flush, wal_status, active_pid,
                  COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint AS "lag_bytes!"
             FROM pg_replication_slots WHERE slot_name = $1"#,
        name
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|row| Slot {
        confirmed_flush: row.confirmed_flush.as_deref().and_then(Lsn::parse),
        lost: row.wal_status.as_deref() == Some("lost"),
        active_pid: row.active_pid,
        lag_bytes: row.lag_bytes,
    }))
}

/// Makes the slot `name` (pgoutput) and returns where it starts. It waits
/// for the transactions running at that moment to end. One made meanwhile
/// by another process is taken as it is.
pub async fn create_slot(db: &PgPool, name: &str) -> sqlx::Result<Lsn> {
    let made = sqlx::query_scalar!("SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", name)
        .fetch_one(db)
        .await;
    match made {
        Ok(lsn) => Ok(lsn.as_deref().and_then(Lsn::parse).unwrap_or_default()),
        Err(error) if duplicate(&error) => {
            Ok(slot(db, name).await?.and_then(|slot| slot.confirmed_flush).unwrap_or_default())
        }
        Err(error) => Err(error),
    }
}

/// Drops the slot `name` (a lost one, or a test database's before the
/// database goes); nothing when it is gone already.
pub async fn drop_slot(db: &PgPool, name: &str) -> sqlx::Result<()> {
    sqlx::query!("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
        .fetch_all(db)
        .await?;
    Ok(())
}

/// Where the relay is.
#[derive(Debug, Clone)]
pub struct Position {
    /// The outbox holds nothing more to send, and never will: the relay
    /// reads the WAL.
    pub outbox_drained: bool,
    /// The end of the last transaction whose events were delivered (`None`:
    /// the slot's own position).
    pub lsn: Option<Lsn>,
    /// That transaction's commit time.
    pub relayed_up_to: DateTime<Utc>,
}

/// The relay's position.
pub async fn position(db: &PgPool) -> sqlx::Result<Position> {
    let row = sqlx::query!(r#"SELECT outbox_drained, lsn::text AS lsn, relayed_up_to FROM order_events_stream"#)
        .fetch_one(db)
        .await?;
    Ok(Position {
        outbox_drained: row.outbox_drained,
        lsn: row.lsn.as_deref().and_then(Lsn::parse),
        relayed_up_to: row.relayed_up_to,
    })
}

/// Events delivered, by (activity, sku, round, type).
pub type Counts = HashMap<(i64, i64, i32, String), i64>;

/// Moves the relay's position to `lsn` (a transaction committed at
/// `relayed_up_to`, or the end of a quiet stretch) and adds the counts of
/// the events delivered up to there, inside the caller's transaction (the
/// one that checked the relay's lease).
pub async fn record(
    tx: &mut PgConnection,
    lsn: Lsn,
    relayed_up_to: Option<DateTime<Utc>>,
    counts: &Counts,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE order_events_stream SET lsn = $1::text::pg_lsn, relayed_up_to = COALESCE($2, relayed_up_to)",
        lsn.to_string(),
        relayed_up_to
    )
    .execute(&mut *tx)
    .await?;
    add_counts(tx, counts).await
}

/// Adds to the relayed counts (the relay's deliveries, and events an
/// operator sent again that the relay had passed).
pub async fn add_counts(tx: &mut PgConnection, counts: &Counts) -> sqlx::Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let (mut activities, mut skus, mut rounds, mut kinds, mut numbers) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ((activity, sku, round, kind), count) in counts {
        activities.push(*activity);
        skus.push(*sku);
        rounds.push(*round);
        kinds.push(kind.clone());
        numbers.push(*count);
    }
    sqlx::query!(
        "INSERT INTO order_events_relayed_counts (activity_id, sku_id, round, type, count)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::bigint[])
         ON CONFLICT (activity_id, sku_id, round, type)
           DO UPDATE SET count = order_events_relayed_counts.count + EXCLUDED.count",
        &activities,
        &skus,
        &rounds,
        &kinds,
        &numbers
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Replaces the relayed counts of the sale rounds in `counts` (after events
/// were sent again from the orders: what the topic holds of those rounds).
pub async fn replace_counts(tx: &mut PgConnection, counts: &Counts) -> sqlx::Result<()> {
    for (activity, sku, round, _) in counts.keys() {
        sqlx::query!(
            "DELETE FROM order_events_relayed_counts WHERE activity_id = $1 AND sku_id = $2 AND round = $3",
            activity,
            sku,
            round
        )
        .execute(&mut *tx)
        .await?;
    }
    add_counts(tx, counts).await
}

/// A sale's events counted in the outbox (its rows, relayed or not, and
/// those pruned), by (round, type): the events of before the WAL.
pub async fn outbox_counts(db: &PgPool, sale: SaleKey) -> sqlx::Result<Vec<(i32, String, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT round AS "round!", type AS "kind!", sum(n)::bigint AS "count!" FROM (
               SELECT round, type, count(*) AS n FROM order_events
                WHERE activity_id = $1 AND sku_id = $2 GROUP BY round, type
               UNION ALL
               SELECT round, type, count FROM order_events_pruned WHERE activity_id = $1 AND sku_id = $2
           ) c GROUP BY round, type"#,
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|row| (row.round, row.kind, row.count)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_and_write_postgresql_s_form() {
        for (text, value) in [("0/0", 0u64), ("0/16B3748", 0x16B3748), ("1A/FF", (0x1A << 32) | 0xFF)] {
            assert_eq!(Lsn::parse(text), Some(Lsn(value)), "{text}");
            assert_eq!(Lsn(value).to_string(), text, "{value:#x}");
        }
        assert_eq!(Lsn::parse("16B3748"), None, "no slash");
        assert_eq!(Lsn::parse("0/xyz"), None, "not hex");
    }

    #[test]
    fn slot_names_keep_to_what_postgresql_takes() {
        assert_eq!(slot_name("seckill"), "seckill_events_seckill");
        assert_eq!(slot_name("Shop-DB.1"), "seckill_events_shop_db_1");
        assert_eq!(slot_name(&"x".repeat(100)).len(), 63, "at most 63 characters");
    }
}
