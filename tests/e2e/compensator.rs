//! The compensator and the reservation sweeper: every accepted unit ends as
//! exactly one order or exactly one restored unit.

use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::domain::{OrderId, OrderRecord, SaleKey, UserId};
use seckill_shared::kafka::dlq_header;
use std::time::Duration;

async fn deduct(env: &TestEnv, sale: SaleKey, user: i64) -> OrderRecord {
    env.deduct(sale, user).await
}

async fn dead_letter(env: &TestEnv, record: &OrderRecord, reason: &str) {
    let payload = serde_json::to_vec(record).unwrap();
    let topics = env.topics();
    env.produce(&topics.dlq, &record.user_id.to_string(), &payload, &[(dlq_header::REASON, reason), (dlq_header::ATTEMPTS, "1")]).await;
}

async fn order_status(env: &TestEnv, order_id: &OrderId) -> Option<String> {
    env.order_row(order_id).await.map(|(status, _)| status)
}

async fn wait_compensator_drained(env: &TestEnv) {
    eventually("the compensator to commit every dead letter", Duration::from_secs(60), || async {
        let lag = env.compensator_lag().await;
        if lag == 0 { Ok(()) } else { Err(format!("lag {lag}")) }
    })
    .await;
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
        dead_letter(&env, &failed, "DB_REJECTED").await;
    }
    dead_letter(&env, &created, "DB_REJECTED").await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    wait_compensator_drained(&env).await;

    assert_eq!(order_status(&env, &failed.order_id).await.as_deref(), Some("FAILED"));
    assert_eq!(order_status(&env, &created.order_id).await.as_deref(), Some("CREATED"), "a CREATED order stays");
    assert_eq!(env.redis_stock(sale).await, 4, "one unit back, not three, and none for the CREATED order");
    let snapshot = env.stock.snapshot(sale).await.unwrap();
    assert_eq!(snapshot.compensated, 1);
    let state = env.stock.order_state(&failed.order_id).await.unwrap().unwrap();
    assert_eq!((state.status.as_str(), state.reason.as_deref()), ("FAILED", Some("DB_REJECTED")));
    assert!(env.stock.user_order(sale, UserId::new(1).unwrap()).await.unwrap().is_none(), "the user may buy again");
    let report = seckill_shared::reconcile::reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true).await.unwrap();
    assert!(report.consistent, "{:?}", report.violations);
    compensator.stop().await;
    order.stop().await;
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
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__SWEEPER__ENABLED".into(), "false".into()));
    let child = Child::start("seckill-compensator", &child_env);
    for record in &records {
        dead_letter(&env, record, "DB_REJECTED").await;
    }
    eventually("some dead letters settled", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "FAILED").await;
        if n > 20 { Ok(()) } else { Err(n.to_string()) }
    })
    .await;
    child.kill9().await;
    let child = Child::start("seckill-compensator", &child_env);
    wait_compensator_drained(&env).await;
    assert_eq!(env.count_orders(sale, "FAILED").await, 300);
    assert_eq!(env.redis_stock(sale).await, 300, "every unit back exactly once");
    assert_eq!(env.stock.snapshot(sale).await.unwrap().compensated, 300);
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
    dead_letter(&env, &record, "NO_DB_STOCK").await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    wait_compensator_drained(&env).await;
    assert_eq!(order_status(&env, &record.order_id).await.as_deref(), Some("FAILED"));
    assert_eq!(env.redis_stock(sale).await, 0, "Redis brought down to what the database has, never up");
    assert_eq!(env.stock.snapshot(sale).await.unwrap().written_off, 1);
    compensator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_settles_a_deduction_that_was_never_published() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1).await;
    // The edge died after the deduction: no record was ever sent.
    let lost = deduct(&env, sale, 7).await;
    assert_eq!(env.redis_stock(sale).await, 0);
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    eventually("the sweeper to restore the unit", Duration::from_secs(60), || async {
        let stock = env.redis_stock(sale).await;
        if stock == 1 { Ok(()) } else { Err(format!("stock {stock}")) }
    })
    .await;
    let (status, reason) = env.order_row(&lost.order_id).await.expect("a FAILED row");
    assert_eq!((status.as_str(), reason.as_deref()), ("FAILED", Some("PUBLISH_LOST")));
    let again = deduct(&env, sale, 7).await;
    assert_ne!(again.order_id, lost.order_id, "the user may buy again");

    // The lost record turns up late: it creates nothing.
    env.produce_records(std::slice::from_ref(&lost)).await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the late record consumed", Duration::from_secs(30), || async {
        let lag = env.order_lag().await;
        if lag == 0 { Ok(()) } else { Err(format!("lag {lag}")) }
    })
    .await;
    assert_eq!(order_status(&env, &lost.order_id).await.as_deref(), Some("FAILED"), "first row wins");
    assert_eq!(seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap().remaining_stock, 1);
    order.stop().await;
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
            let holder: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
            holder.ok_or_else(|| "no holder".to_owned())
        }
    })
    .await;
    let follower = Child::start("seckill-compensator", &child_env);
    let holder: String = redis::cmd("GET").arg(&lock_key).query_async(&mut conn).await.unwrap();
    let fence_before: i64 = redis::cmd("GET").arg(format!("{lock_key}:fence")).query_async(&mut conn).await.unwrap();

    leader.kill9().await;
    let lost = deduct(&env, sale, 3).await;
    eventually("the other instance to sweep", Duration::from_secs(90), || async {
        match order_status(&env, &lost.order_id).await.as_deref() {
            Some("FAILED") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let new_holder: String = redis::cmd("GET").arg(&lock_key).query_async(&mut conn).await.unwrap();
    let fence_after: i64 = redis::cmd("GET").arg(format!("{lock_key}:fence")).query_async(&mut conn).await.unwrap();
    assert_ne!(holder, new_holder, "the survivor holds the lock");
    assert_eq!(fence_after, fence_before + 1, "one new acquisition: one sweeper at a time");
    assert_eq!(env.redis_stock(sale).await, 2);
    assert!(follower.terminate().await);
}
