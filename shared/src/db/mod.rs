//! PostgreSQL access shared by the services: the pool, migrations, the
//! sales table, and telling a verdict on the data from a database that is
//! unwell. SQL that only one service runs lives in that service.

pub mod dead_letters;
pub mod horizon;
pub mod hosts;
pub mod outbox;
pub mod parked;
pub mod socket;

use crate::config::DbSettings;
use crate::domain::SaleKey;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::time::Duration;

/// The project's migrations, embedded. A database migrated by a newer
/// version is not refused: during a rolling upgrade (or a rollback) an
/// older binary keeps starting on it — every migration keeps the binaries
/// before it working (migrations/README.md says how).
pub static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> = std::sync::LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations");
    migrator.set_ignore_missing(true);
    migrator
});

/// The name every session of this process gives PostgreSQL
/// (`application_name`): the binary's (`seckill-order`, …), so
/// `pg_stat_activity` says which service holds a session.
static APPLICATION_NAME: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names this process's sessions (called once, by the host, before any
/// pool is made); a process that never calls it is `seckill`.
pub fn name_sessions(binary: &'static str) {
    let _ = APPLICATION_NAME.set(binary);
}

/// The `application_name` of this process's sessions.
pub fn application_name() -> &'static str {
    APPLICATION_NAME.get().copied().unwrap_or("seckill")
}

/// Opens a pool. Connections are made lazily, so a service starts even while
/// PostgreSQL is down and catches up when it returns. A URL of several
/// hosts follows the primary ([`hosts`]). Every session is bounded as
/// `settings` say: the server ends a long statement, a long lock wait and
/// a transaction left idle; TCP ends a connection to a host that vanished
/// (both ends); a connection given back to the pool is checked within the
/// call deadline, else closed (sqlx's own check would wait on a frozen
/// server for good, holding its place in the pool).
pub fn connect_lazy(settings: &DbSettings) -> anyhow::Result<PgPool> {
    // Server side: keepalives asked of the server, per session (PostgreSQL's
    // tcp_keepalives_*), so a client that vanished — a frozen or cut-off
    // leader — loses its session, its locks and its transaction in about
    // 25 s; and the session's own bounds.
    let keepalive = crate::config::TCP_KEEPALIVE;
    let mut parsed =
        hosts::parse(&settings.url).map_err(|error| anyhow::anyhow!("database.url (SECKILL_DATABASE_URL): {error}"))?;
    let ms = |value: u64| value.to_string();
    parsed.options = parsed
        .options
        .into_iter()
        .map(|options| {
            options.application_name(application_name()).options([
                ("tcp_keepalives_idle", keepalive.idle.as_secs().to_string()),
                ("tcp_keepalives_interval", keepalive.interval.as_secs().to_string()),
                ("tcp_keepalives_count", keepalive.probes.to_string()),
                ("tcp_user_timeout", ms(settings.tcp_user_timeout_ms)),
                ("statement_timeout", ms(settings.statement_timeout_ms)),
                ("lock_timeout", ms(settings.lock_timeout_ms)),
                ("idle_in_transaction_session_timeout", ms(settings.idle_in_transaction_timeout_ms)),
            ])
        })
        .collect();
    let socket = socket::SocketBounds {
        peers: parsed
            .options
            .iter()
            .map(|o| (o.get_host().trim_matches(['[', ']']).parse().ok(), o.get_port()))
            .collect(),
        keepalive,
        user_timeout: Duration::from_millis(settings.tcp_user_timeout_ms),
    };
    let deadline = settings.call_deadline();
    let options = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_millis(settings.acquire_timeout_ms))
        .after_release(move |connection, _| {
            Box::pin(async move {
                // An error closes the connection without a goodbye; sqlx's
                // own check that follows is then answered at once.
                within::<_, sqlx::Error>(deadline, sqlx::Connection::ping(connection)).await?;
                Ok(true)
            })
        });
    Ok(hosts::pool(parsed, options, socket))
}

/// `call`, bounded by `deadline`: past it the wait is given up and answered
/// as an I/O timeout — transient, like any error that is not a verdict on
/// the data ([`is_data_error`]), so the caller's retry takes it. What the
/// call held is dropped: a transaction it had open is rolled back by the
/// server (or ended by its `idle_in_transaction_session_timeout`), and its
/// connection leaves the pool unless it answers within the deadline.
pub async fn within<T, E: From<sqlx::Error>>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer,
        Err(_) => Err(deadline_passed(deadline).into()),
    }
}

/// The error of a call whose deadline passed.
pub fn deadline_passed(deadline: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("PostgreSQL did not answer within {} ms (database.call_deadline_ms)", deadline.as_millis()),
    ))
}

/// Applies the migrations (idempotent; concurrent callers are serialised by
/// sqlx's advisory lock), saying which ones of a newer version the database
/// has that this binary does not know. A migration may rightly run long (an
/// index built under a live sale): its session has no statement or lock
/// timeout.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    // sqlx's own table (absent before the first migration), not the
    // project's schema: checked at run time, not against .sqlx/.
    let newer = sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(pool)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|version| !MIGRATOR.version_exists(*version))
        .collect::<Vec<_>>();
    if !newer.is_empty() {
        tracing::warn!(?newer, "the database has migrations of a newer version; this binary runs on them");
    }
    let mut delays = crate::ops::retry::RetrySettings::default().delays();
    for attempt in 1.. {
        match migrate_once(pool).await {
            Err(error) if attempt < MIGRATION_ATTEMPTS && waited_for_a_lock(&error) => {
                let wait = delays.next().unwrap_or(MIGRATION_LOCK_TIMEOUT);
                tracing::warn!(
                    attempt,
                    ?wait,
                    "a migration waited past its lock timeout (a long transaction holds what it locks); trying again"
                );
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
    unreachable!("the attempts end with an answer")
}

/// How long a migration waits for a lock (its table's, or the migrator's
/// own) before it gives up and is tried again: behind a migration's
/// request for an exclusive lock every other session's statement on that
/// table queues, so the wait must be short.
pub const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// Tries of the migrations, each bounded by [`MIGRATION_LOCK_TIMEOUT`],
/// before the caller is answered the error (the services retry on, the
/// edge starts without them).
const MIGRATION_ATTEMPTS: usize = 10;

/// Whether `error` is a lock wait that ran out (SQLSTATE 55P03).
fn waited_for_a_lock(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let failed = match cause.downcast_ref::<sqlx::migrate::MigrateError>() {
            Some(
                sqlx::migrate::MigrateError::Execute(error) | sqlx::migrate::MigrateError::ExecuteMigration(error, _),
            ) => Some(error),
            _ => cause.downcast_ref::<sqlx::Error>(),
        };
        failed.and_then(sqlx::Error::as_database_error).and_then(|db| db.code()).is_some_and(|code| code == "55P03")
    })
}

/// One run of the migrations on a connection of its own: no statement
/// bound (a migration may rewrite a table), each lock waited for at most
/// [`MIGRATION_LOCK_TIMEOUT`].
async fn migrate_once(pool: &PgPool) -> anyhow::Result<()> {
    let mut connection = pool.acquire().await?;
    let lock_timeout = MIGRATION_LOCK_TIMEOUT.as_millis().to_string();
    sqlx::query!(
            r#"SELECT set_config('statement_timeout', '0', false) AS "statement!", set_config('lock_timeout', $1, false) AS "lock!""#,
            lock_timeout
        )
        .fetch_one(&mut *connection)
        .await?;
    let migrated = MIGRATOR.run_direct(None, &mut *connection, false).await;
    // Not given back with the migrations' settings.
    connection.close_on_drop();
    migrated?;
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
pub async fn find_sale<'e>(db: impl sqlx::PgExecutor<'e>, sale: SaleKey) -> sqlx::Result<Option<SaleRow>> {
    sqlx::query_as!(
        SaleRow,
        "SELECT activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at, payment_window_seconds
           FROM sales WHERE activity_id = $1 AND sku_id = $2",
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_optional(db)
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

/// The span of one write of `table` (a PostgreSQL client span), a child of
/// `parent`: made only when spans are exported (else none, at no cost).
pub fn write_span(parent: &tracing::Span, operation: &'static str, table: &'static str) -> tracing::Span {
    if parent.is_none() {
        // An unsampled trace: nothing to be a child of.
        return tracing::Span::none();
    }
    crate::ops::trace_export::span(|| {
        tracing::info_span!(
            parent: parent,
            "write",
            otel.name = format!("{operation} {table}"),
            otel.kind = "client",
            db.system.name = "postgresql",
            db.operation.name = operation,
            db.collection.name = table,
        )
    })
}
