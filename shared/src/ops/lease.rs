//! A lease in PostgreSQL (table `leases`): the seat of a singleton whose
//! writes go to the same database, so the lease, the writes and the clock
//! that expires the lease are one. Taken when free or expired, with a
//! fencing token one above the last; renewed every length/3 by a watchdog
//! while the holder lives; lost by a holder that stops renewing (frozen,
//! cut off) once the length passes. A write the lease guards calls
//! [`LeaseTerm::check`] first in its own transaction: a holder whose lease
//! was taken over writes nothing.

use crate::ops::leader::{Seat, Term};
use crate::ops::shutdown::Background;
use sqlx::{PgConnection, PgPool};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};

/// How long a holder stepping down waits for the database to expire its
/// lease at once.
const STEP_DOWN_WITHIN: Duration = Duration::from_secs(5);

/// One lease, by name.
#[derive(Clone)]
pub struct Lease {
    db: PgPool,
    name: Arc<str>,
    length: Duration,
    /// Where the watchdog runs.
    background: Background,
}

/// A term of a lease.
pub struct LeaseTerm {
    db: PgPool,
    name: Arc<str>,
    holder: String,
    fence: i64,
    lost: CancellationToken,
    /// Stops the watchdog when the term ends.
    _watchdog: DropGuard,
}

/// The holder's lease is gone: another instance holds it now.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Taken over (or expired): the write must not happen.
    #[error("lease '{name}' with fence {fence} is no longer this holder's")]
    Lost { name: String, fence: i64 },
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

impl Lease {
    /// The lease `name`, `length` long once taken or renewed.
    pub fn new(db: PgPool, name: &str, length: Duration, background: Background) -> Self {
        Self { db, name: name.into(), length, background }
    }
}

impl Seat for Lease {
    type Term = LeaseTerm;

    async fn take(&self) -> anyhow::Result<Option<LeaseTerm>> {
        let holder = uuid::Uuid::new_v4().to_string();
        let length_ms = self.length.as_millis() as f64;
        let fence = sqlx::query_scalar!(
            "INSERT INTO leases (name, holder, fence, expires_at)
             VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3::float8 / 1000.0))
             ON CONFLICT (name) DO UPDATE
                SET holder = EXCLUDED.holder, fence = leases.fence + 1, expires_at = EXCLUDED.expires_at
              WHERE leases.expires_at < clock_timestamp()
             RETURNING fence",
            &*self.name,
            &holder,
            length_ms
        )
        .fetch_optional(&self.db);
        // Bounded like a renewal: a server that never answers is a seat
        // not taken this time.
        let fence = crate::db::within(self.length, fence).await?;
        let Some(fence) = fence else { return Ok(None) };
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        self.background
            .spawn("lease watchdog", watchdog(self.clone(), holder.clone(), fence, lost.clone(), stop.clone()));
        Ok(Some(LeaseTerm {
            db: self.db.clone(),
            name: self.name.clone(),
            holder,
            fence,
            lost,
            _watchdog: stop.drop_guard(),
        }))
    }
}

/// Renews the term every length/3 until stopped; cancels `lost` when a
/// renewal finds the lease another's, when no renewal succeeded for a
/// whole length (the database unreachable: the lease may have expired), or
/// when a renewal is still unanswered as the lease runs out (the database
/// frozen or cut off: the same).
async fn watchdog(
    lease: Lease,
    holder: String,
    fence: i64,
    lost: CancellationToken,
    stop: CancellationToken,
) -> Result<(), LeaseError> {
    let mut renewed = Instant::now();
    loop {
        // Until the term ends, renew every third of the length.
        if !crate::ops::shutdown::pause(&stop, lease.length / 3).await {
            return Ok(());
        }
        // A renewal is worth waiting for only while the lease may still
        // run: one that hangs past it (a frozen or cut-off server) is a
        // lost lease, since another instance may hold it by then.
        let left = lease.length.saturating_sub(renewed.elapsed());
        let renewal = sqlx::query_scalar!(
            "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000.0)
              WHERE name = $1 AND holder = $2 AND fence = $3 AND expires_at >= clock_timestamp()
             RETURNING fence",
            &*lease.name,
            &holder,
            fence,
            lease.length.as_millis() as f64
        )
        .fetch_optional(&lease.db);
        let Ok(renewal) = tokio::time::timeout(left, renewal).await else {
            tracing::warn!(lease = %lease.name, fence, waited_ms = left.as_millis() as u64, "a lease renewal did not answer before the lease ran out; assuming it lost");
            lost.cancel();
            return Ok(());
        };
        match renewal {
            Ok(Some(_)) => renewed = Instant::now(),
            Ok(None) => {
                tracing::warn!(lease = %lease.name, fence, "lease lost: expired or taken over");
                lost.cancel();
                return Ok(());
            }
            Err(error) if renewed.elapsed() >= lease.length => {
                tracing::warn!(lease = %lease.name, fence, %error, "lease not renewed for its whole length; assuming it lost");
                lost.cancel();
                return Ok(());
            }
            // Not yet a loss: the lease may still run.
            Err(error) => tracing::warn!(lease = %lease.name, fence, %error, "lease renewal failed"),
        }
    }
}

impl LeaseTerm {
    /// Fails unless the lease is still this term's; call it first in every
    /// transaction the lease guards. The row stays share-locked until that
    /// transaction ends, so no one takes the lease over before it commits.
    pub async fn check(&self, tx: &mut PgConnection) -> Result<(), LeaseError> {
        let held = sqlx::query_scalar!(
            "SELECT fence FROM leases WHERE name = $1 AND holder = $2 AND fence = $3 AND expires_at > clock_timestamp() FOR SHARE",
            &*self.name,
            &self.holder,
            self.fence
        )
        .fetch_optional(tx)
        .await?;
        match held {
            Some(_) => Ok(()),
            None => Err(LeaseError::Lost { name: self.name.to_string(), fence: self.fence }),
        }
    }
}

impl Term for LeaseTerm {
    fn fence(&self) -> i64 {
        self.fence
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    async fn step_down(&self) {
        // Expire it now, so the next holder need not wait for its length.
        let released = sqlx::query!(
            "UPDATE leases SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE name = $1 AND holder = $2 AND fence = $3",
            &*self.name,
            &self.holder,
            self.fence
        )
        .execute(&self.db);
        // Bounded: a frozen database must not keep the job from competing
        // again (an unreleased lease expires by itself).
        let released = crate::db::within(STEP_DOWN_WITHIN, released).await;
        if let Err(error) = released {
            tracing::warn!(lease = %self.name, %error, "lease not released; it expires by itself");
        }
    }
}
