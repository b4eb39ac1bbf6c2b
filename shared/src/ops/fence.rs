//! Fencing tokens in PostgreSQL (`lock_fences`): the storage side of the
//! distributed lock's tokens ([`crate::ops::lock`]). A write the lock guards
//! records its token first in its own transaction and is refused when a
//! higher token was recorded, or the same token by another holder (a Redis
//! that lost its counter can mint a token again). A new holder's token is
//! minted above the newest one recorded, so tokens outlive Redis.
//! [`FencedLock`] is the seat a singleton takes with it ([`crate::ops::leader`]).

use crate::ops::leader::Seat;
use crate::ops::lock::{LockClient, LockGuard};
use sqlx::{PgConnection, PgPool};
use std::time::Duration;

/// The lock a holder writes under, and its token.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    /// The lock's name (its Redis key).
    pub lock: &'a str,
    /// The token of this holder's acquisition.
    pub token: i64,
    /// The holder's unique id.
    pub holder: &'a str,
}

/// Why a fenced write may not happen.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// A newer holder has written since: this holder's lease expired.
    #[error("fencing token {token} for '{lock}' is stale (a newer holder wrote)")]
    Stale { lock: String, token: i64 },
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// Records `fence.token` as the newest for its lock inside the caller's
/// transaction, refusing it when a higher one was seen, or the same one
/// from another holder. Call it first in every transaction a lock guards,
/// so a stale holder's writes roll back.
pub async fn check(tx: &mut PgConnection, fence: Fence<'_>) -> Result<(), FenceError> {
    let accepted = sqlx::query_scalar!(
        "INSERT INTO lock_fences (name, token, holder) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder, updated_at = now()
           WHERE lock_fences.token < EXCLUDED.token
              OR (lock_fences.token = EXCLUDED.token AND lock_fences.holder = EXCLUDED.holder)
         RETURNING token",
        fence.lock,
        fence.token,
        fence.holder
    )
    .fetch_optional(tx)
    .await?;
    match accepted {
        Some(_) => Ok(()),
        None => Err(FenceError::Stale { lock: fence.lock.to_owned(), token: fence.token }),
    }
}

/// The newest token PostgreSQL recorded for `lock` (0 when none): a new
/// holder's token must be above it.
pub async fn newest(db: &PgPool, lock: &str) -> sqlx::Result<i64> {
    let token = sqlx::query_scalar!("SELECT token FROM lock_fences WHERE name = $1", lock).fetch_optional(db).await?;
    Ok(token.unwrap_or(0))
}

/// A Redis lock whose writes are fenced in PostgreSQL: taken with a token
/// above the newest one recorded, kept by its watchdog.
pub struct FencedLock {
    locks: LockClient,
    db: PgPool,
    key: String,
    lease: Duration,
}

impl FencedLock {
    /// The lock `key`, its lease `lease` (renewed every lease/3).
    pub fn new(locks: LockClient, db: PgPool, key: String, lease: Duration) -> Self {
        Self { locks, db, key, lease }
    }

    /// The lock's name.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Seat for FencedLock {
    type Term = LockGuard;

    async fn take(&self) -> anyhow::Result<Option<LockGuard>> {
        let floor = newest(&self.db, &self.key).await?;
        Ok(self.locks.acquire_with_watchdog(&self.key, self.lease, Duration::ZERO, floor).await?)
    }
}
