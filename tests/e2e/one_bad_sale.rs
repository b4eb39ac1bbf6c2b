//! One failing sale stops nothing else: the reservation sweeper and the
//! return of cancelled units settle each sale on its own — one whose Redis
//! fails is logged, counted and tried again next round while the others
//! go on. (Here the failing sale's key is of the wrong type: every call on
//! it fails, as on a shard that does not answer.)

use seckill_e2e::TestEnv;
use seckill_shared::domain::SaleKey;
use seckill_shared::orders::cancellation::{self, Cancel, CancelReason};
use std::time::Duration;

/// Makes one key of `sale` a string: every script and read of it fails.
async fn break_key(env: &TestEnv, sale: SaleKey, key: &str) {
    let name = format!("{}:{key}", env.stock.keys().sale_base(sale));
    let mut conn = env.stock.connection();
    let _: () = redis::pipe().del(&name).set(&name, "broken").query_async(&mut conn).await.expect("breaking a key");
}

/// A sale whose reservations cannot be read (registered first, so swept
/// first) and a sale with a reservation whose record never reached Kafka:
/// the second is honoured — published again and written CREATED — and the
/// failure is counted. (Before: the sweep stopped at the first failing
/// sale, every round, and the second was never swept.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_honours_one_sale_while_another_fails() {
    let env = TestEnv::new().await;
    let (bad, good) = (env.sale(), env.sale());
    env.warmup(bad, 5).await;
    env.warmup(good, 5).await;
    break_key(&env, bad, "reserved").await;
    let lost = env.deduct(good, 7).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_status(&lost.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    let metrics = seckill_e2e::http::Client::new(compensator.url()).get("/metrics").await.text;
    let failures = metrics.lines().find(|l| l.starts_with("seckill_sweeper_sale_failures_total"));
    assert!(failures.is_some_and(|l| !l.ends_with(" 0")), "the failing sale is counted: {failures:?}");
    compensator.stop().await;
    order.stop().await;
}

/// Two cancelled orders of two sales, the first sale's Redis failing: the
/// second's unit goes back and its row is marked; the first's stays
/// unmarked, named as failing, and the next pass skips it instead of
/// meeting it first again. (Before: the first failure ended the return of
/// every sale's units.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_units_go_back_sale_by_sale() {
    let env = TestEnv::new().await;
    let (bad, good) = {
        let (a, b) = (env.sale(), env.sale());
        // The failing one first in the order sales are taken.
        if a < b {
            (a, b)
        } else {
            (b, a)
        }
    };
    env.warmup(bad, 5).await;
    env.warmup(good, 5).await;
    let records = vec![env.deduct(bad, 1).await, env.deduct(good, 1).await];
    let order = env.spawn_order(env.order_settings()).await;
    env.produce_records(&records).await;
    env.wait_orders(bad, "CREATED", 1).await;
    env.wait_orders(good, "CREATED", 1).await;
    order.stop().await;
    let mut cancelled = Vec::new();
    let mut tx = env.db.begin().await.unwrap();
    for record in &records {
        let one = Cancel::One { order_id: record.order_id.as_str(), reason: CancelReason::BuyerCancelled };
        cancelled.extend(cancellation::cancel(&mut tx, one).await.unwrap());
    }
    tx.commit().await.unwrap();
    assert_eq!(cancelled.len(), 2);
    break_key(&env, bad, "returned").await;

    let returned = cancellation::return_units(&env.stock, &env.db, &cancelled).await.expect("the others go on");
    assert_eq!((returned.units, returned.failed.as_slice()), (1, &[bad][..]));
    assert_eq!(env.redis_stock(good).await, 5, "the good sale's unit is back");
    let left = cancellation::unreturned(&env.db, 10, &[]).await.unwrap();
    assert_eq!(left.iter().map(|o| o.order_id.clone()).collect::<Vec<_>>(), [records[0].order_id.clone()]);
    assert!(cancellation::unreturned(&env.db, 10, &[bad]).await.unwrap().is_empty(), "skipped this round");
}
