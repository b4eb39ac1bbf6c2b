//! What holds the relay back. The relay reads only events below the
//! server's oldest running transaction (`pg_snapshot_xmin`: a transaction
//! still open may yet commit an event before them), and that transaction
//! may be anyone's — another database's, an operator's `psql` session left
//! in `BEGIN`, a prepared transaction. While one stays open, events wait
//! and nothing else says why: this names it.
//!
//! The holder is found in `pg_locks` (every transaction holding an id
//! holds the lock on it, visible to any role) and `pg_prepared_xacts`;
//! `pg_stat_activity` adds its database, `application_name`, state and age
//! when the role may read them (its own sessions; all with
//! `pg_read_all_stats`).

use sqlx::PgPool;
use std::time::Duration;

/// How long events may wait behind an open transaction before the wait is
/// reported (the relay's `events.held_back_after_ms` defaults to it; the
/// books use it).
pub const HELD_BACK_AFTER: Duration = Duration::from_secs(10);

/// Events waiting behind an open transaction, and the transaction.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldBack {
    /// Events not relayed because a transaction older than them is open.
    pub events_waiting: i64,
    /// How long the oldest of them has waited, in seconds.
    pub oldest_event_seconds: f64,
    /// The oldest open transaction's backend (`None`: a prepared transaction).
    pub pid: Option<i32>,
    /// Its database.
    pub database: Option<String>,
    /// Its session's `application_name` (`seckill-order`, `psql`, …).
    pub application_name: Option<String>,
    /// Its session's state (`idle in transaction`, `active`, …), or
    /// `prepared`.
    pub state: Option<String>,
    /// How long the transaction has been open, in seconds (when readable).
    pub age_seconds: Option<f64>,
    /// Its transaction id (`backend_xid`).
    pub backend_xid: String,
    /// A prepared transaction's global id (`COMMIT PREPARED '<gid>'` or
    /// `ROLLBACK PREPARED` ends it).
    pub prepared_gid: Option<String>,
}

impl std::fmt::Display for HeldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} events wait ({:.0} s) behind transaction {} of pid {}, database {}, application {}, {} for {}",
            self.events_waiting,
            self.oldest_event_seconds,
            self.backend_xid,
            self.pid.map_or("- (prepared)".to_owned(), |p| p.to_string()),
            self.database.as_deref().unwrap_or("?"),
            self.application_name.as_deref().unwrap_or("?"),
            self.state.as_deref().unwrap_or("?"),
            self.age_seconds.map_or("?".to_owned(), |s| format!("{s:.0} s")),
        )?;
        if let Some(gid) = &self.prepared_gid {
            write!(f, " (prepared '{gid}')")?;
        }
        Ok(())
    }
}

/// The oldest open transaction of the server, when events have waited
/// behind it for more than `after`; `None` when none has.
pub async fn held_back(db: &PgPool, after: Duration) -> sqlx::Result<Option<HeldBack>> {
    let row = sqlx::query!(
        r#"WITH waiting AS (
              SELECT count(*) AS events,
                     EXTRACT(EPOCH FROM clock_timestamp() - min(occurred_at))::float8 AS oldest
                FROM order_events
               WHERE (xid, id) > (SELECT xid, id FROM order_events_relayed)
                 AND xid >= pg_snapshot_xmin(pg_current_snapshot())
           ), holders AS (
              SELECT l.pid, a.datname::text AS database, a.application_name, a.state,
                     EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8 AS age,
                     l.transactionid::text AS xid, NULL::text AS gid, age(l.transactionid) AS xid_age
                FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
                 AND l.pid IS NOT NULL
              UNION ALL
              SELECT NULL, p.database::text, NULL, 'prepared',
                     EXTRACT(EPOCH FROM clock_timestamp() - p.prepared)::float8,
                     p.transaction::text, p.gid, age(p.transaction)
                FROM pg_prepared_xacts p
           ), oldest AS (
              SELECT * FROM holders ORDER BY xid_age DESC LIMIT 1
           )
           SELECT w.events AS "events!", w.oldest AS "oldest!", o.pid, o.database, o.application_name, o.state,
                  o.age, o.xid AS "xid!", o.gid
             FROM waiting w, oldest o
            WHERE w.events > 0 AND w.oldest > $1"#,
        after.as_secs_f64()
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|row| HeldBack {
        events_waiting: row.events,
        oldest_event_seconds: row.oldest,
        pid: row.pid,
        database: row.database,
        application_name: row.application_name.filter(|name| !name.is_empty()),
        state: row.state,
        age_seconds: row.age,
        backend_xid: row.xid,
        prepared_gid: row.gid,
    }))
}
