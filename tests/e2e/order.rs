//! The order service: at-least-once consumption, idempotent batched writes,
//! the database stock guard, dead-letter routing, crashes and outages.

use rdkafka::message::Message;
use seckill_e2e::{eventually, Child, Group, TestEnv};
use seckill_order::consumer::{Outcome, ProcessError, Worker};
use seckill_order::store::WriteError;
use seckill_shared::domain::{OrderRecord, SaleKey};
use seckill_shared::kafka::{dlq_header, header_str};
use std::time::Duration;

async fn remaining(env: &TestEnv, sale: SaleKey) -> i64 {
    seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap().remaining_stock
}

async fn total_rows(env: &TestEnv, sale: SaleKey) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2")
        .bind(sale.activity.get())
        .bind(sale.sku.get())
        .fetch_one(&env.db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_become_ten_thousand_orders_once() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20_000).await;
    // One order the edge accepted (Redis knows it), the rest straight to the
    // topic.
    let accepted = env.deduct(sale, 10_000).await;
    env.produce_records(std::slice::from_ref(&accepted)).await;
    let records = env.produce_orders(sale, 1..10_000).await;
    let order = env.spawn_order(env.order_settings()).await;
    env.wait_orders(sale, "CREATED", 10_000).await;
    env.wait_drained(Group::Order).await;
    assert_eq!(remaining(&env, sale).await, 10_000, "remaining_stock fell by exactly the rows written");

    // The same records again: duplicates change nothing.
    env.produce_records(&records[..2_000]).await;
    env.wait_drained(Group::Order).await;
    assert_eq!(total_rows(&env, sale).await, 10_000, "one row per order id");
    assert_eq!(remaining(&env, sale).await, 10_000);
    let status = env.stock.orders().order_state(&accepted.order_id).await.unwrap().expect("status in redis");
    assert_eq!(status.status.as_str(), "CREATED");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.queued, snapshot.created, snapshot.reservations),
        (0, 1, 0),
        "Redis counts the order it accepted"
    );
    assert_eq!(
        env.stock.orders().order_state(&records[0].order_id).await.unwrap(),
        None,
        "and adds none it never accepted"
    );
    order.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_records_go_to_the_dead_letter_topic_with_their_reason() {
    // One partition: the records are processed in the order produced, so
    // which one finds the stock gone is known.
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let unknown = env.sale();
    let topics = env.topics();

    let good = env.produce_orders(sale, 1..3).await; // users 1, 2
    env.produce(&topics.orders, "9", b"{not json", &[("x-request-id", "poison")]).await;
    let unknown_sale = env.produce_orders(unknown, 5..6).await;
    // A second order of user 1, with another order id.
    let second = env.produce_orders(sale, 1..2).await;
    let third_user = env.produce_orders(sale, 3..4).await; // takes the last unit
    let beyond = env.produce_orders(sale, 4..5).await; // no stock left in the database

    let order = env.spawn_order(env.order_settings()).await;
    env.wait_orders(sale, "CREATED", 3).await;
    let dead = env.read_topic(&topics.dlq, 4, Duration::from_secs(60)).await;
    assert_eq!(dead.len(), 4, "four records dead-lettered");
    let reason_of = |order_id: Option<&str>| -> String {
        let message = dead
            .iter()
            .find(|m| match order_id {
                Some(id) => {
                    m.payload().and_then(|p| OrderRecord::decode(p).ok()).is_some_and(|r| r.order_id.as_str() == id)
                }
                None => m.payload() == Some(&b"{not json"[..]),
            })
            .expect("the record is in the dead-letter topic");
        let headers = message.headers().expect("headers");
        for key in [
            dlq_header::ERROR,
            dlq_header::ORIGINAL_TOPIC,
            dlq_header::ORIGINAL_PARTITION,
            dlq_header::ORIGINAL_OFFSET,
            dlq_header::ATTEMPTS,
            dlq_header::FAILED_AT,
        ] {
            assert!(header_str(headers, key).is_some(), "header {key} present");
        }
        assert_eq!(header_str(headers, dlq_header::ORIGINAL_TOPIC), Some(topics.orders.as_str()));
        assert_eq!(header_str(headers, dlq_header::ATTEMPTS), Some("1"));
        header_str(headers, dlq_header::REASON).unwrap().to_owned()
    };
    assert_eq!(reason_of(None), "MALFORMED");
    assert_eq!(reason_of(Some(unknown_sale[0].order_id.as_str())), "SALE_NOT_FOUND");
    assert_eq!(reason_of(Some(second[0].order_id.as_str())), "DUPLICATE_USER");
    assert_eq!(reason_of(Some(beyond[0].order_id.as_str())), "NO_DB_STOCK");
    let poison = dead.iter().find(|m| m.payload() == Some(&b"{not json"[..])).unwrap();
    assert_eq!(poison.key(), Some(&b"9"[..]), "the original key is kept");
    assert_eq!(header_str(poison.headers().unwrap(), "x-request-id"), Some("poison"));

    // The good records around them were written.
    for record in good.iter().chain(&third_user) {
        let (status, _) = env.order_row(&record.order_id).await.expect("written");
        assert_eq!(status, "CREATED");
    }
    assert_eq!(remaining(&env, sale).await, 0);
    env.wait_drained(Group::Order).await;
    order.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_batch_the_service_loses_and_duplicates_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 30_000).await;
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__BATCH_SIZE".into(), "200".into()));
    let child = Child::start("seckill-order", &child_env);
    env.produce_orders(sale, 1..20_001).await;
    // Kill it while it is writing: some batches done, the rest not.
    eventually("the service to be mid-way", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n > 0 {
            Ok(())
        } else {
            Err(format!("{n} created"))
        }
    })
    .await;
    child.kill9().await;
    let after_kill = env.count_orders(sale, "CREATED").await;
    let child = Child::start("seckill-order", &child_env);
    env.wait_orders(sale, "CREATED", 20_000).await;
    env.wait_drained(Group::Order).await;
    assert_eq!(total_rows(&env, sale).await, 20_000, "nothing duplicated");
    assert_eq!(remaining(&env, sale).await, 10_000);
    println!("killed with {after_kill} of 20000 written");
    assert!(child.terminate().await, "the restarted service stops cleanly on SIGTERM");
}

/// Drives one worker turn by turn until `done` holds (bounded).
async fn drive_until(env: &TestEnv, worker: &Worker, what: &str, done: impl Fn(i64) -> bool, sale: SaleKey) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let created = env.count_orders(sale, "CREATED").await;
        if done(created) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {created} created");
        worker.try_execute_batch(Duration::from_secs(1)).await.expect("a turn with the database up");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_nothing_is_committed_or_lost() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1_000).await;
    let worker = env.order_worker().await;
    env.produce_orders(sale, 1..101).await;
    drive_until(&env, &worker, "the first 100 orders", |n| n == 100, sale).await;
    assert_eq!(env.order_lag().await, 0);

    env.set_database_reachable(false).await;
    env.produce_orders(sale, 101..501).await;
    for turn in 0..3 {
        let error = worker.try_execute_batch(Duration::from_secs(10)).await.expect_err("the database is down");
        assert!(matches!(error, ProcessError::Write(WriteError::Transient(_))), "turn {turn}: {error}");
        assert_eq!(env.order_lag().await, 400, "turn {turn}: no offset committed while the database is down");
    }

    env.set_database_reachable(true).await;
    drive_until(&env, &worker, "all 500 orders", |n| n == 500, sale).await;
    while worker.try_execute_batch(Duration::from_secs(1)).await.expect("a turn") != Outcome::Empty {}
    assert_eq!(env.order_lag().await, 0, "everything committed once written");
    assert_eq!(remaining(&env, sale).await, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_one_of_two_instances_dies_the_other_takes_its_partitions() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20_000).await;
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__CONSUMERS".into(), "1".into()));
    child_env.push(("SECKILL__BATCH_SIZE".into(), "100".into()));
    let first = Child::start("seckill-order", &child_env);
    let second = Child::start("seckill-order", &child_env);
    env.produce_orders(sale, 1..10_001).await;
    eventually("both instances working", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n > 500 {
            Ok(())
        } else {
            Err(format!("{n} created"))
        }
    })
    .await;
    first.kill9().await;
    env.produce_orders(sale, 10_001..12_001).await;
    env.wait_orders(sale, "CREATED", 12_000).await;
    env.wait_drained(Group::Order).await;
    assert_eq!(total_rows(&env, sale).await, 12_000);
    assert_eq!(remaining(&env, sale).await, 8_000);
    assert!(second.terminate().await);
}

/// `store::write_batch` retried on transient errors, as the service does (a
/// locked writer and an optimistic one holding the same user can deadlock;
/// PostgreSQL aborts one of them).
async fn write(env: &TestEnv, batch: &[OrderRecord]) -> seckill_order::store::BatchOutcome {
    loop {
        match seckill_order::store::write_batch(&env.db, batch, &Default::default()).await {
            Ok(outcome) => return outcome,
            Err(seckill_order::store::WriteError::Transient(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(error) => panic!("{error}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_racing_for_the_last_units_never_oversell() {
    // Four writers at once, 60 orders each, for 100 units: the optimistic
    // writes overlap, the stock guard refuses whoever would oversell, and
    // those batches are written again under the sale's lock, order by order.
    // User 1 is in every batch: one CREATED order at most.
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let batches: Vec<Vec<OrderRecord>> = (0..4)
        .map(|i| {
            let mut batch = env.order_records(sale, 1_000 * (i + 1)..1_000 * (i + 1) + 59);
            batch.extend(env.order_records(sale, 1..2));
            batch
        })
        .collect();
    let outcomes = futures::future::join_all(batches.iter().map(|batch| write(&env, batch))).await;

    let created: usize = outcomes.iter().map(|o| o.created.len()).sum();
    let reasons: Vec<&str> =
        outcomes.iter().flat_map(|o| o.rejected.iter().map(|(_, reason, _)| reason.code())).collect();
    assert_eq!(created, 100, "exactly the stock");
    assert_eq!(created + reasons.len(), 240, "every record has a fate: {reasons:?}");
    assert!(outcomes.iter().all(|o| o.already_done.is_empty()));
    assert_eq!(env.count_orders(sale, "CREATED").await, 100);
    assert_eq!(remaining(&env, sale).await, 0);
    let user_one: i64 =
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2 AND user_id = 1")
            .bind(sale.activity.get())
            .bind(sale.sku.get())
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert!(user_one <= 1, "user 1 holds {user_one} orders");
    assert!(reasons.iter().all(|r| *r == "NO_DB_STOCK" || *r == "DUPLICATE_USER"), "{reasons:?}");
    assert!(reasons.iter().filter(|r| **r == "DUPLICATE_USER").count() >= 3, "user 1's other orders: {reasons:?}");

    // The same batches again: everything is already done, nothing changes.
    for batch in &batches {
        let again = write(&env, batch).await;
        assert!(again.created.is_empty());
    }
    assert_eq!(env.count_orders(sale, "CREATED").await, 100);
    assert_eq!(remaining(&env, sale).await, 0);
}

/// A record of round 1 consumed after the sale was re-warmed (round 2) is
/// never an order of round 2: it ends FAILED, and round 2's stock is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_a_replaced_round_ends_failed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let old = env.deduct(sale, 1).await;
    env.warmup(sale, 5).await; // forced: round 2
    let mut value = serde_json::to_value(&old).unwrap();
    value["round"] = serde_json::json!(1);
    env.produce(&env.topics().orders, "1", value.to_string().as_bytes(), &[]).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_status(&old.order_id, ("FAILED", Some("ROUND_REPLACED")), Duration::from_secs(60)).await;
    let sale_row = seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap();
    assert_eq!((sale_row.round, sale_row.remaining_stock), (2, 5), "round 2 lost no unit");
    assert_eq!(env.count_orders(sale, "CREATED").await, 0);
    compensator.stop().await;
    order.stop().await;
}

/// The sweeper (or the compensator) wrote the order FAILED but stopped
/// before settling Redis; then the record arrives: the order service must
/// settle Redis too — the unit back exactly once, the order FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_record_of_a_failed_order_gives_its_unit_back() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let record = env.deduct(sale, 1).await;
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, reason)
         VALUES ($1, $2, $3, 1, $4, 'FAILED', 'PUBLISH_LOST')",
    )
    .bind(record.order_id.as_str())
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(record.user_id.get())
    .execute(&env.db)
    .await
    .unwrap();
    env.produce_records(std::slice::from_ref(&record)).await;
    env.produce_records(std::slice::from_ref(&record)).await; // and once more
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the unit back and the order FAILED in Redis", Duration::from_secs(60), || async {
        let state = env.stock.orders().order_state(&record.order_id).await.map_err(|e| e.to_string())?;
        let stock = env.redis_stock(sale).await;
        match state {
            Some(state) if state.status.as_str() == "FAILED" && stock == 3 => Ok(()),
            other => Err(format!("{other:?}, stock {stock}")),
        }
    })
    .await;
    eventually("the group drained", Duration::from_secs(30), || async {
        if env.order_lag().await == 0 {
            Ok(())
        } else {
            Err("lag".into())
        }
    })
    .await;
    assert_eq!(env.redis_stock(sale).await, 3, "restored once, not twice");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.reservations, snapshot.queued, snapshot.compensated), (0, 0, 1));
    order.stop().await;
}

/// A record from a newer producer (one more field, same major version) is an
/// order like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_with_an_unknown_field_is_read() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let record = env.deduct(sale, 1).await;
    let mut value = serde_json::to_value(&record).unwrap();
    value["channel"] = serde_json::json!("app");
    env.produce(&env.topics().orders, "1", value.to_string().as_bytes(), &[]).await;
    let order = env.spawn_order(env.order_settings()).await;
    env.wait_status(&record.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    order.stop().await;
}
