//! A Redis lock with an owner check, an optional watchdog and a fencing token.
//!
//! - **Acquire**: `SET key token NX PX lease` (in `lua/lock.lua`, which also
//!   increments the lock's fencing counter in the same step), retried with
//!   small jittered sleeps until the wait time runs out. The token is unique
//!   per holder.
//! - **Release**: compare-and-delete (`lua/unlock.lua`): a holder whose lease
//!   ran out deletes nothing, and is warned.
//! - **Watchdog**: renews the lease every lease/3 (`lua/renew.lua`) while the
//!   guard lives; stops at release, at drop, and at the first renewal that
//!   finds the lock gone, cancelling [`LockGuard::lost`].
//! - **Fencing token**: strictly increasing per lock. Holders pass it to the
//!   writes the lock guards (the sweeper's fenced transaction), which refuse
//!   a token lower than one already seen, or equal to it from another
//!   holder. The counter lives in Redis, so a Redis that lost it would mint
//!   old tokens again: a holder whose storage records tokens passes the
//!   newest one recorded (`fence_floor`) and the counter is moved past it.
//! - **Dropped guards** (a request cancelled by a client disconnect) release
//!   their lock in the background at once, instead of holding it for the
//!   rest of the lease.
//!
//! What it does **not** promise: mutual exclusion across a Redis failover that
//! loses the lock key (a replica promoted before replication), or across a
//! holder paused (GC, swap, SIGSTOP) longer than its lease — the holder
//! believes it still owns the lock while another does. The fencing token is
//! the answer to both: storage refuses the stale holder's writes.

use crate::ops::shutdown::Background;
use crate::stock::conn::{RedisCallError, RedisConn};
use crate::stock::protocol;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;
use tokio_util::sync::{CancellationToken, DropGuard};

static LOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/lock.lua")));
static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/renew.lua")));

/// Takes locks.
#[derive(Clone)]
pub struct LockClient {
    conn: RedisConn,
    /// Where watchdogs run, so a stopping service waits for them.
    background: Background,
}

/// A held lock. Release it with [`LockGuard::release`]; dropping it stops the
/// watchdog and lets the lease run out.
pub struct LockGuard {
    conn: RedisConn,
    key: String,
    token: String,
    fence: i64,
    lost: CancellationToken,
    /// Stops the watchdog when the guard goes away.
    _watchdog: Option<DropGuard>,
    /// Where a dropped (unreleased) guard's release runs.
    background: Background,
    released: std::sync::atomic::AtomicBool,
}

impl LockClient {
    /// A lock client over a Redis connection; watchdogs run on `background`.
    pub fn new(conn: RedisConn, background: Background) -> Self {
        Self { conn, background }
    }

    /// Tries to take `key` for `lease`, waiting at most `wait`. `None` when
    /// another holder kept it for the whole wait.
    pub async fn acquire(
        &self,
        key: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<LockGuard>, RedisCallError> {
        self.acquire_above(key, lease, wait, 0).await
    }

    /// [`LockClient::acquire`], with a fencing token greater than
    /// `fence_floor` (the newest token the guarded storage has seen).
    pub async fn acquire_above(
        &self,
        key: &str,
        lease: Duration,
        wait: Duration,
        fence_floor: i64,
    ) -> Result<Option<LockGuard>, RedisCallError> {
        let token = uuid::Uuid::new_v4().to_string();
        let fence_key = fence_key(key);
        let deadline = tokio::time::Instant::now() + wait;
        let lease_ms = lease.as_millis().max(1) as u64;
        loop {
            let mut invocation = LOCK.prepare_invoke();
            invocation.key(key).key(&fence_key).arg(&token).arg(lease_ms).arg(fence_floor);
            let fence: i64 = self.conn.invoke(&invocation).await?;
            // Any other answer is the fencing token.
            if fence != protocol::lock::HELD_ELSEWHERE {
                return Ok(Some(LockGuard {
                    conn: self.conn.clone(),
                    key: key.to_owned(),
                    token,
                    fence,
                    lost: CancellationToken::new(),
                    _watchdog: None,
                    background: self.background.clone(),
                    released: std::sync::atomic::AtomicBool::new(false),
                }));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let jitter = Duration::from_millis(rand::random::<u64>() % 10 + 2);
            tokio::time::sleep(jitter.min(deadline - now)).await;
        }
    }

    /// Like [`LockClient::acquire_above`], with a watchdog renewing the lease
    /// every lease/3 until the guard is released or dropped.
    pub async fn acquire_with_watchdog(
        &self,
        key: &str,
        lease: Duration,
        wait: Duration,
        fence_floor: i64,
    ) -> Result<Option<LockGuard>, RedisCallError> {
        let Some(mut guard) = self.acquire_above(key, lease, wait, fence_floor).await? else { return Ok(None) };
        let stop = CancellationToken::new();
        let watchdog_stop = stop.clone();
        let lost = guard.lost.clone();
        let (conn, key, token) = (guard.conn.clone(), guard.key.clone(), guard.token.clone());
        let lease_ms = lease.as_millis().max(1) as u64;
        self.background.spawn("lock watchdog", async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.tick().await;
            loop {
                tokio::select! {
                    // The guard was released or dropped.
                    _ = watchdog_stop.cancelled() => return Ok::<(), RedisCallError>(()),
                    // Time to renew.
                    _ = tick.tick() => {}
                }
                let mut invocation = RENEW.prepare_invoke();
                invocation.key(&key).arg(&token).arg(lease_ms);
                match conn.invoke::<i64>(&invocation).await {
                    Ok(protocol::renew::RENEWED) => {}
                    Ok(_) => {
                        tracing::warn!(lock = %key, "lock lost: another holder has it, or it expired");
                        lost.cancel();
                        return Ok(());
                    }
                    // A failed renewal is not yet a loss: the lease may still
                    // run; the next tick tries again.
                    Err(error) => tracing::warn!(lock = %key, %error, "lock renewal failed"),
                }
            }
        });
        guard._watchdog = Some(stop.drop_guard());
        Ok(Some(guard))
    }
}

impl LockGuard {
    /// The fencing token of this acquisition: greater than every earlier one.
    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This holder's unique token: who wrote with a fencing token.
    pub fn holder(&self) -> &str {
        &self.token
    }

    /// Cancelled when the watchdog finds the lock lost.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Releases the lock if this holder still owns it; returns whether it did.
    /// A `false` means the lease ran out first — it was too short for the work.
    pub async fn release(self) -> bool {
        self.release_in_place().await
    }

    /// [`LockGuard::release`] through a shared reference (the leader loop
    /// holds its term behind an `Arc`); a second call releases nothing.
    async fn release_in_place(&self) -> bool {
        if self.released.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        unlock(&self.conn, &self.key, &self.token).await
    }
}

impl crate::ops::leader::Term for LockGuard {
    fn fence(&self) -> i64 {
        self.fence
    }

    fn holder(&self) -> &str {
        &self.token
    }

    fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    async fn step_down(&self) {
        self.release_in_place().await;
    }
}

impl Drop for LockGuard {
    /// A guard dropped without [`LockGuard::release`] (its task cancelled)
    /// releases in the background, so the lock is free at once.
    fn drop(&mut self) {
        if *self.released.get_mut() {
            return;
        }
        let (conn, key, token) = (self.conn.clone(), std::mem::take(&mut self.key), std::mem::take(&mut self.token));
        self.background.spawn("lock release", async move {
            unlock(&conn, &key, &token).await;
            Ok::<(), RedisCallError>(())
        });
    }
}

/// Compare-and-delete; whether the lock was still this holder's.
async fn unlock(conn: &RedisConn, key: &str, token: &str) -> bool {
    let mut invocation = UNLOCK.prepare_invoke();
    invocation.key(key).arg(token);
    match conn.invoke::<i64>(&invocation).await {
        Ok(protocol::unlock::RELEASED) => true,
        Ok(_) => {
            tracing::warn!(lock = %key, "released a lock that was no longer ours: the lease was too short");
            false
        }
        Err(error) => {
            tracing::warn!(lock = %key, %error, "lock release failed; the lease will expire");
            false
        }
    }
}

fn fence_key(key: &str) -> String {
    // Same hash tag as the lock when it has one, so the script touches one slot.
    format!("{key}:fence")
}
