//! The distributed lock: exclusion, owner check, lease expiry with fencing,
//! and the watchdog.

use seckill_e2e::TestEnv;
use seckill_shared::ops::fence::{check as check_fence, Fence, FenceError};
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_contenders_hold_the_lock_one_at_a_time() {
    let env = TestEnv::new().await;
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let key = format!("{}seckill:{{lock-test}}:exclusive", env.redis.key_prefix);
    let inside = Arc::new(AtomicI32::new(0));
    let most = Arc::new(AtomicI32::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (locks, key, inside, most) = (locks.clone(), key.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                let guard = locks
                    .acquire(&key, Duration::from_secs(5), Duration::from_secs(30))
                    .await
                    .unwrap()
                    .expect("acquired within the wait");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Hand the thread to the others while "inside".
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                let fence = guard.fence();
                assert!(guard.release().await, "the holder releases its own lock");
                fence
            })
        })
        .collect();
    let mut fences = Vec::new();
    for task in tasks {
        fences.push(task.await.unwrap());
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two holders at once");
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 50, "every acquisition has its own fencing token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_holder_deletes_nothing_and_its_stale_writes_are_refused() {
    let env = TestEnv::new().await;
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let key = format!("{}seckill:{{lock-test}}:lease", env.redis.key_prefix);
    // A lease shorter than the work, no watchdog: the lock is lost.
    let first = locks.acquire(&key, Duration::from_millis(100), Duration::ZERO).await.unwrap().expect("free lock");
    assert!(locks.acquire(&key, Duration::from_secs(5), Duration::ZERO).await.unwrap().is_none(), "held");
    // Waits (within its wait) for the first lease to run out.
    let second = locks
        .acquire(&key, Duration::from_secs(5), Duration::from_secs(5))
        .await
        .unwrap()
        .expect("expired lock is free");
    assert!(second.fence() > first.fence(), "the newer holder's token is higher");

    // The newer holder writes; then the stale one tries.
    let mut tx = env.db.begin().await.unwrap();
    let current = Fence { lock: &key, token: second.fence(), holder: second.holder() };
    check_fence(&mut tx, current).await.expect("current token accepted");
    check_fence(&mut tx, current).await.expect("the same holder writes again with its token");
    tx.commit().await.unwrap();
    let mut tx = env.db.begin().await.unwrap();
    let stale = check_fence(&mut tx, Fence { lock: &key, token: first.fence(), holder: first.holder() }).await;
    assert!(matches!(stale, Err(FenceError::Stale { .. })), "stale token refused");
    drop(tx);
    // The same token minted again for another holder (a Redis that lost the
    // counter): refused, not a second writer.
    let mut tx = env.db.begin().await.unwrap();
    let twin = check_fence(&mut tx, Fence { lock: &key, token: second.fence(), holder: "another-holder" }).await;
    assert!(matches!(twin, Err(FenceError::Stale { .. })), "an equal token from another holder is refused");
    drop(tx);

    // Releasing a lock one no longer owns deletes nothing.
    let first_fence = first.fence();
    assert!(!first.release().await, "not the owner any more");
    assert!(
        locks.acquire(&key, Duration::from_secs(5), Duration::ZERO).await.unwrap().is_none(),
        "the second holder still has it"
    );
    assert!(second.release().await);
    assert!(first_fence > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_the_lock_and_stops_with_the_guard() {
    let env = TestEnv::new().await;
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let key = format!("{}seckill:{{lock-test}}:watchdog", env.redis.key_prefix);
    let lease = Duration::from_millis(300);
    let guard = locks.acquire_with_watchdog(&key, lease, Duration::ZERO, 0).await.unwrap().expect("free lock");
    // Wait for four renewals: the lock's time to live goes back up each time.
    let mut conn = env.stock.connection();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut renewals, mut last) = (0, i64::MAX);
    while renewals < 4 {
        assert!(std::time::Instant::now() < deadline, "the watchdog renewed only {renewals} times in 30 s");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap();
        assert!(ttl > 0, "the lease ran out while the watchdog lived");
        if ttl > last {
            renewals += 1;
        }
        last = ttl;
        tokio::time::sleep(lease / 10).await;
    }
    assert!(locks.acquire(&key, lease, Duration::ZERO).await.unwrap().is_none(), "still held after four renewals");
    assert!(!guard.lost().is_cancelled());
    assert!(guard.release().await, "released by its owner");

    // Dropped without release: renewals stop and the lease runs out.
    let guard = locks.acquire_with_watchdog(&key, lease, Duration::ZERO, 0).await.unwrap().expect("free lock");
    drop(guard);
    let again = locks.acquire(&key, lease, lease * 4).await.unwrap();
    assert!(again.is_some(), "the lock frees itself once its watchdog stopped");

    // A lock taken from under the watchdog is reported lost.
    let _ = again.unwrap().release().await;
    let guard = locks.acquire_with_watchdog(&key, lease, Duration::ZERO, 0).await.unwrap().expect("free lock");
    let _: () = redis::cmd("SET").arg(&key).arg("someone-else").query_async(&mut conn).await.unwrap();
    tokio::time::timeout(lease * 3, guard.lost().cancelled()).await.expect("the watchdog notices the loss");
}

/// A holder that goes away without releasing (a request dropped by a client
/// disconnect) frees the lock at once, not after its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_releases_its_lock() {
    let env = TestEnv::new().await;
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let key = format!("{}seckill:{{lock-test}}:dropped", env.redis.key_prefix);
    for watchdog in [false, true] {
        let guard = if watchdog {
            locks.acquire_with_watchdog(&key, Duration::from_secs(60), Duration::ZERO, 0).await
        } else {
            locks.acquire(&key, Duration::from_secs(60), Duration::ZERO).await
        };
        drop(guard.unwrap().expect("a free lock"));
        let again = locks.acquire(&key, Duration::from_secs(60), Duration::from_secs(5)).await.unwrap();
        assert!(again.is_some(), "watchdog {watchdog}: the lock of a dropped guard is free within 5 s, not 60");
        assert!(again.unwrap().release().await);
    }
}

/// The fencing counter lives in Redis; a holder whose storage has seen
/// token N gets a token above N even after Redis lost the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_minted_past_the_floor_storage_has_seen() {
    let env = TestEnv::new().await;
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let key = format!("{}seckill:{{lock-test}}:floor", env.redis.key_prefix);
    let first = locks.acquire(&key, Duration::from_secs(5), Duration::ZERO).await.unwrap().expect("free lock");
    assert!(first.release().await);
    // Redis loses the counter; storage remembers 500.
    let mut conn = env.stock.connection();
    let _: () = redis::cmd("DEL").arg(format!("{key}:fence")).query_async(&mut conn).await.unwrap();
    let second =
        locks.acquire_above(&key, Duration::from_secs(5), Duration::ZERO, 500).await.unwrap().expect("free lock");
    assert_eq!(second.fence(), 501);
    assert!(second.release().await);
    let third = locks.acquire(&key, Duration::from_secs(5), Duration::ZERO).await.unwrap().expect("free lock");
    assert_eq!(third.fence(), 502, "the counter moved past the floor");
    assert!(third.release().await);
}
