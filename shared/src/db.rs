//! PostgreSQL access shared by the services: the pool, migrations, the
//! sales table, and telling a verdict on the data from a database that is
//! unwell. SQL that only one service runs lives in that service.

use crate::config::DbSettings;
use crate::domain::SaleKey;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::time::Duration;

/// The project's migrations, embedded.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Opens a pool. Connections are made lazily, so a service starts even while
/// PostgreSQL is down and catches up when it returns.
pub fn connect_lazy(settings: &DbSettings) -> anyhow::Result<PgPool> {
    // sqlx leaves its sockets' options alone: the keepalives are asked of
    // the server, per session (PostgreSQL's tcp_keepalives_*), so a client
    // that vanished — a frozen or cut-off leader — loses its session, its
    // locks and its transaction in about 25 s.
    let keepalive = crate::config::TCP_KEEPALIVE;
    let options = PgConnectOptions::from_str(&settings.url)?.application_name("seckill").options([
        ("tcp_keepalives_idle", keepalive.idle.as_secs().to_string()),
        ("tcp_keepalives_interval", keepalive.interval.as_secs().to_string()),
        ("tcp_keepalives_count", keepalive.probes.to_string()),
    ]);
    Ok(PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_millis(settings.acquire_timeout_ms))
        .connect_lazy_with(options))
}

/// Migrations corrected after they were released: (version, the checksum
/// of the version first released). A database that applied the first
/// version is not migrated again — the correction concerns the moment of
/// the upgrade, long past there — but its record is brought to the
/// corrected file's checksum, so the migrator does not refuse it.
const CORRECTED: [(i64, &str); 1] = [
    // 04, the relay's cursor: its first version started the cursor at its
    // own transaction id (an event of a transaction running across the
    // upgrade fell behind it; `seckillctl events verify` finds such events,
    // `events resend` sends them).
    (
        20261201000004,
        "538f2e985e36c949cccc52928f006ff5613be4ebf67f05bce51bc15baa0251206b5b164c383ad1e11c0de2b3117c10de",
    ),
];

/// Applies the migrations (idempotent; concurrent callers are serialised by
/// sqlx's advisory lock).
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    accept_corrections(pool).await?;
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Brings the records of corrected migrations applied in their first
/// version to the corrected checksum ([`CORRECTED`]).
async fn accept_corrections(pool: &PgPool) -> anyhow::Result<()> {
    let applied: bool = sqlx::query_scalar!(r#"SELECT to_regclass('_sqlx_migrations') IS NOT NULL AS "applied!""#)
        .fetch_one(pool)
        .await?;
    if !applied {
        return Ok(());
    }
    for (version, first) in CORRECTED {
        let Some(migration) = MIGRATOR.iter().find(|m| m.version == version) else { continue };
        let first: Vec<u8> =
            (0..first.len()).step_by(2).map(|i| u8::from_str_radix(&first[i..i + 2], 16)).collect::<Result<_, _>>()?;
        // Not a compile-time query: the table is the migrator's, made at
        // run time.
        let corrected = sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2 AND checksum = $3")
            .bind(migration.checksum.as_ref())
            .bind(version)
            .bind(first)
            .execute(pool)
            .await?;
        if corrected.rows_affected() > 0 {
            tracing::warn!(
                version,
                "a migration applied in its first version: its record now names the corrected file"
            );
        }
    }
    Ok(())
}

/// A sale as PostgreSQL holds it (the admin API answers it after a warm-up).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Sale)]
pub struct SaleRow {
    pub activity_id: i64,
    pub sku_id: i64,
    /// Warm-up round; each warm-up starts a new one.
    pub round: i32,
    /// Units on sale this round.
    pub total_stock: i64,
    /// Units the database can still write orders for.
    pub remaining_stock: i64,
    /// Sale window start.
    pub starts_at: Option<DateTime<Utc>>,
    /// Sale window end.
    pub ends_at: Option<DateTime<Utc>>,
    /// How long a CREATED order of this sale awaits payment.
    pub payment_window_seconds: i32,
}

/// Reads one sale.
pub async fn find_sale(pool: &PgPool, sale: SaleKey) -> sqlx::Result<Option<SaleRow>> {
    sqlx::query_as!(
        SaleRow,
        "SELECT activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at, payment_window_seconds
           FROM sales WHERE activity_id = $1 AND sku_id = $2",
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_optional(pool)
    .await
}

/// Creates a sale or starts its next round: stock is set, never added.
pub async fn upsert_sale(
    db: &mut sqlx::PgConnection,
    sale: SaleKey,
    stock: i64,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    payment_window_seconds: i32,
) -> sqlx::Result<SaleRow> {
    sqlx::query_as!(
        SaleRow,
        "INSERT INTO sales (activity_id, sku_id, total_stock, remaining_stock, starts_at, ends_at, payment_window_seconds)
         VALUES ($1, $2, $3, $3, $4, $5, $6)
         ON CONFLICT (activity_id, sku_id) DO UPDATE
            SET round = sales.round + 1, total_stock = $3, remaining_stock = $3,
                starts_at = $4, ends_at = $5, payment_window_seconds = $6, updated_at = now()
         RETURNING activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at, payment_window_seconds",
        sale.activity.get(),
        sale.sku.get(),
        stock,
        starts_at,
        ends_at,
        payment_window_seconds
    )
    .fetch_one(db)
    .await
}

/// Ends a sale now (an end only moves earlier); `None` for an unknown sale.
pub async fn close_sale(pool: &PgPool, sale: SaleKey) -> sqlx::Result<Option<SaleRow>> {
    sqlx::query_as!(
        SaleRow,
        "UPDATE sales SET ends_at = LEAST(COALESCE(ends_at, now()), now()), updated_at = now()
          WHERE activity_id = $1 AND sku_id = $2
         RETURNING activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at, payment_window_seconds",
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_optional(pool)
    .await
}

/// Whether a database error is a verdict on the data (SQLSTATE class 22,
/// data exception, or 23, integrity constraint violation) rather than on the
/// database's health: only these are worth giving up on. Both consumers
/// (the order store and the compensator) split their errors with it.
pub fn is_data_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            code.starts_with("22") || code.starts_with("23")
        }
        _ => false,
    }
}
