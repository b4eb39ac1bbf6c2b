//! The compensator and the reservation sweeper: every accepted unit ends as
//! exactly one order or exactly one restored unit.

use seckill_e2e::{eventually, Child, Group, TestEnv};
use seckill_shared::domain::{OrderId, OrderRecord, SaleKey, UserId};
use std::time::Duration;

async fn deduct(env: &TestEnv, sale: SaleKey, user: i64) -> OrderRecord {
    env.deduct(sale, user).await
}

async fn order_status(env: &TestEnv, order_id: &OrderId) -> Option<String> {
    env.order_row(order_id).await.map(|(status, _)| status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_restores_exactly_one_unit_however_often_it_comes() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let failed = deduct(&env, sale, 1).await;
    let created = deduct(&env, sale, 2).await;
    assert_eq!(env.redis_stock(sale).await, 3);

    // `created` is written by the order service first.
    env.produce_records(std::slice::from_ref(&created)).await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the order CREATED", Duration::from_secs(30), || async {
        match order_status(&env, &created.order_id).await.as_deref() {
            Some("CREATED") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Three deliveries of the same dead letter, and one for the CREATED order.
    for _ in 0..3 {
        env.dead_letter(&failed, "DB_REJECTED").await;
    }
    env.dead_letter(&created, "DB_REJECTED").await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_drained(Group::Compensator).await;

    assert_eq!(order_status(&env, &failed.order_id).await.as_deref(), Some("FAILED"));
    assert_eq!(order_status(&env, &created.order_id).await.as_deref(), Some("CREATED"), "a CREATED order stays");
    assert_eq!(env.redis_stock(sale).await, 4, "one unit back, not three, and none for the CREATED order");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(snapshot.compensated, 1);
    let state = env.stock.orders().order_state(&failed.order_id).await.unwrap().unwrap();
    assert_eq!((state.status.as_str(), state.reason.as_deref()), ("FAILED", Some("DB_REJECTED")));
    assert!(
        env.stock.orders().user_order(sale, UserId::new(1).unwrap()).await.unwrap().is_none(),
        "the user may buy again"
    );
    // The FAILED status the compensator wrote has an event the order
    // service's relay sends a moment later: the books balance once it has.
    eventually("the books consistent, every event relayed", Duration::from_secs(30), || async {
        let report = seckill_shared::books::reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true)
            .await
            .map_err(|e| e.to_string())?;
        if report.consistent {
            Ok(())
        } else {
            Err(format!("{:?}", report.violations))
        }
    })
    .await;
    compensator.stop().await;
    order.stop().await;
}

/// Dead-letters `records` to a compensator (a process of its own, no
/// sweeper) that halts itself between a record's two steps (its order
/// written FAILED, its units not restored) and is killed (SIGKILL) there,
/// started again, and waited for until it has settled them all; the one
/// running then.
pub(crate) async fn settled_through_a_kill(env: &TestEnv, sale: SaleKey, records: &[OrderRecord]) -> Child {
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__SWEEPER__ENABLED".into(), "false".into()));
    let mut halting = child_env.clone();
    // Stops itself between a record's two steps: its order written
    // FAILED, its units not restored.
    halting.push(("SECKILL_TEST_HALT_AT".into(), "failed-written".into()));
    let child = Child::start("seckill-compensator", &halting);
    env.produce_dead_letters(records, "DB_REJECTED").await;
    eventually("the compensator halted mid-record", Duration::from_secs(60), || async {
        if child.stopped() {
            Ok(())
        } else {
            Err(format!("{} FAILED so far", env.count_orders(sale, "FAILED").await))
        }
    })
    .await;
    // The kill lands on work in hand: an order FAILED whose units are not back.
    let (failed, compensated) =
        (env.count_orders(sale, "FAILED").await, env.stock.books().snapshot(sale).await.expect("the sale").compensated);
    assert!(failed >= 1 && compensated < failed, "mid-record: {failed} FAILED, {compensated} compensated");
    assert!(failed < records.len() as i64, "records left to settle after the kill: {failed} of {}", records.len());
    child.kill9().await;
    let child = Child::start("seckill-compensator", &child_env);
    env.wait_drained(Group::Compensator).await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_record_the_compensator_restores_nothing_twice() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 300).await;
    let mut records = Vec::new();
    for user in 1..=300 {
        records.push(deduct(&env, sale, user).await);
    }
    assert_eq!(env.redis_stock(sale).await, 0);
    let child = settled_through_a_kill(&env, sale, &records).await;
    assert_eq!(env.count_orders(sale, "FAILED").await, 300);
    assert_eq!(env.redis_stock(sale).await, 300, "every unit back exactly once");
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap().compensated, 300);
    assert!(child.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_db_stock_writes_the_unit_off_instead_of_restoring_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let record = deduct(&env, sale, 1).await;
    // The database sold out behind Redis's back (e.g. Redis lost writes).
    sqlx::query("UPDATE sales SET remaining_stock = 0 WHERE activity_id = $1 AND sku_id = $2")
        .bind(sale.activity.get())
        .bind(sale.sku.get())
        .execute(&env.db)
        .await
        .unwrap();
    env.dead_letter(&record, "NO_DB_STOCK").await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_drained(Group::Compensator).await;
    assert_eq!(order_status(&env, &record.order_id).await.as_deref(), Some("FAILED"));
    assert_eq!(env.redis_stock(sale).await, 0, "Redis brought down to what the database has, never up");
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap().written_off, 1);
    compensator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sweeper_leads_and_another_takes_over_when_it_dies() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__KAFKA__MESSAGE_TIMEOUT_MS".into(), "1000".into()));
    child_env.push(("SECKILL__SWEEPER__GRACE_MS".into(), "1000".into()));
    child_env.push(("SECKILL__SWEEPER__INTERVAL_MS".into(), "300".into()));
    child_env.push(("SECKILL__SWEEPER__LOCK_LEASE_MS".into(), "3000".into()));
    let lock_key = env.stock.keys().sweeper_lock();
    let leader = Child::start("seckill-compensator", &child_env);
    let mut conn = env.stock.connection();
    eventually("a sweeper to take the lock", Duration::from_secs(60), || {
        let mut conn = conn.clone();
        let key = lock_key.clone();
        async move {
            let holder: Option<String> =
                redis::cmd("GET").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
            holder.ok_or_else(|| "no holder".to_owned())
        }
    })
    .await;
    let follower = Child::start("seckill-compensator", &child_env);
    let holder: String = redis::cmd("GET").arg(&lock_key).query_async(&mut conn).await.unwrap();
    let fence_before: i64 = redis::cmd("GET").arg(format!("{lock_key}:fence")).query_async(&mut conn).await.unwrap();

    leader.kill9().await;
    let order = env.spawn_order(env.order_settings()).await;
    let lost = deduct(&env, sale, 3).await;
    eventually("the other instance to sweep (the lost publish honoured)", Duration::from_secs(90), || async {
        match order_status(&env, &lost.order_id).await.as_deref() {
            Some("CREATED") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    order.stop().await;
    let new_holder: String = redis::cmd("GET").arg(&lock_key).query_async(&mut conn).await.unwrap();
    let fence_after: i64 = redis::cmd("GET").arg(format!("{lock_key}:fence")).query_async(&mut conn).await.unwrap();
    assert_ne!(holder, new_holder, "the survivor holds the lock");
    assert_eq!(fence_after, fence_before + 1, "one new acquisition: one sweeper at a time");
    assert_eq!(env.redis_stock(sale).await, 1, "the honoured order keeps its unit");
    assert!(follower.terminate().await);
}

/// Redis lost the lock's fencing counter (a restart without persistence, or
/// an AOF that missed the last INCRs) while PostgreSQL remembers token 1000:
/// the sweeper must still get a token PostgreSQL accepts, and sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_outlive_redis_losing_the_counter() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let lock = env.stock.keys().sweeper_lock();
    sqlx::query("INSERT INTO lock_fences (name, token) VALUES ($1, 1000)").bind(&lock).execute(&env.db).await.unwrap();
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let lost = env.deduct(sale, 1).await;
    env.wait_status(&lost.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    assert!(env.fence_of(&lock).await > 1000, "the token was minted past PostgreSQL's newest");
    order.stop().await;
    compensator.stop().await;
}

/// A newer holder wrote with a higher token: the sweeper that holds the lock
/// with an older one must give the lock up, and whoever leads next sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeper_whose_token_is_refused_gives_the_lock_up() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let lock = env.stock.keys().sweeper_lock();
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let first = env.deduct(sale, 1).await;
    env.wait_status(&first.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    let before = env.fence_of(&lock).await;
    sqlx::query("UPDATE lock_fences SET token = token + 100 WHERE name = $1")
        .bind(&lock)
        .execute(&env.db)
        .await
        .unwrap();
    let second = env.deduct(sale, 2).await;
    env.wait_status(&second.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    assert!(env.fence_of(&lock).await > before + 100, "a new acquisition, past the newer holder's token");
    order.stop().await;
    compensator.stop().await;
}

/// The sweeper deals with a reservation only after the edge's own publish
/// deadline (on Redis's clock) has passed, whatever the compensator's
/// settings say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_waits_for_the_edges_publish_deadline() {
    use seckill_compensator::sweeper::Sweeper;
    use seckill_shared::domain::UserId;
    use seckill_shared::ops::fence::Fence;
    use seckill_shared::ops::lock::LockClient;
    use seckill_shared::ops::shutdown::Background;
    use seckill_shared::stock::Deduction;
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let deduct = |user: i64, deadline: Duration| {
        let env = &env;
        async move {
            let nonce = format!("{:016x}", rand::random::<u64>());
            match env.stock.orders().deduct(sale, UserId::new(user).unwrap(), 1, &nonce, deadline).await.unwrap() {
                Deduction::Accepted { order_id, accepted_at, .. } => (order_id, accepted_at),
                other => panic!("{other:?}"),
            }
        }
    };
    // An edge that may wait ten minutes for its delivery report, and one that
    // knew at once.
    let (patient, _) = deduct(1, Duration::from_secs(600)).await;
    let (lost, accepted) = deduct(2, Duration::ZERO).await;
    let settings = std::sync::Arc::new(env.compensator_settings());
    let grace = settings.sweeper.grace_ms as i64;
    eventually("Redis's clock past the lost order's deadline and grace", Duration::from_secs(30), || async {
        let now = env.stock.now_ms().await.map_err(|e| e.to_string())?;
        if now > accepted + grace {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    let sweeper = Sweeper::new(settings, env.connections(), Background::default()).expect("a sweeper");
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let guard = locks
        .acquire(&env.stock.keys().sweeper_lock(), Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let fence = Fence { lock: guard.key(), token: guard.fence(), holder: guard.holder() };
    sweeper.sweep_once(fence).await.expect("a checkpoint");
    let report = sweeper.sweep_once(fence).await.expect("a sweep");
    assert_eq!((report.republished, report.failed, report.created), (1, 0, 0), "{report:?}");
    let republished = env.read_topic(&env.topics().orders, 1, Duration::from_secs(10)).await;
    let ids: Vec<serde_json::Value> = republished
        .iter()
        .map(|m| serde_json::from_slice(rdkafka::Message::payload(m).unwrap_or_default()).unwrap())
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids[0]["orderId"], lost.as_str(), "the lost order's record, published again");
    assert_eq!(env.order_row(&patient).await, None, "the patient edge's order is not swept");
    let state = env.stock.orders().order_state(&patient).await.unwrap().expect("known");
    assert_eq!(state.status.as_str(), "QUEUED");
    assert!(guard.release().await);
}
