//! Payment deadlines: an unpaid order is cancelled at its deadline, once,
//! by whichever compensator comes first — after a crash between the cancel
//! and the return of its unit, after a worker killed mid-way, and ten
//! thousand of them in one second.

use super::lifecycle::{created_order, db_remaining, settled};
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::books::{reconcile, Report};
use seckill_shared::domain::SaleKey;
use seckill_shared::orders::cancellation::{self, Cancel};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpaid_order_is_cancelled_at_its_deadline_and_its_buyer_may_buy_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_with_window(sale, 3, 2).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    let mut ids = Vec::new();
    for user in 1..=3 {
        ids.push(created_order(&client, sale, user).await);
    }
    let paid = client.pay(&ids[0], "pay_0").await;
    assert_eq!(paid.json["outcome"], "APPLIED", "{}", paid.text);
    eventually("the two unpaid orders cancelled", Duration::from_secs(30), || async {
        let n = env.count_orders(sale, "CANCELLED").await;
        if n == 2 {
            Ok(())
        } else {
            Err(format!("{n} cancelled"))
        }
    })
    .await;
    for id in &ids[1..] {
        let seen = client.get(&format!("/api/seckill/order/{id}")).await;
        assert_eq!((seen.json["status"].as_str(), seen.json["reason"].as_str()), (Some("CANCELLED"), Some("EXPIRED")));
    }
    assert_eq!(client.get(&format!("/api/seckill/order/{}", ids[0])).await.json["status"], "PAID", "paid in time");
    let report = settled(&env, sale).await;
    assert_eq!(
        (report.orders_paid, report.orders_cancelled, report.redis_remaining, report.db_remaining),
        (1, 2, 2, 2)
    );
    // A buyer whose order expired may buy again.
    created_order(&client, sale, 2).await;
    compensator.stop().await;
    edge.stop().await;
    order.stop().await;
}

/// `n` CREATED orders of `sale` (through Redis and the order service) whose
/// deadlines are then all moved to `in_ms` from now.
async fn orders_due_together(env: &TestEnv, sale: SaleKey, n: i64, in_ms: i64) {
    let mut records = Vec::new();
    for user in 1..=n {
        records.push(env.deduct(sale, user).await);
    }
    env.produce_records(&records).await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the orders CREATED", Duration::from_secs(120), || async {
        let created = env.count_orders(sale, "CREATED").await;
        if created == n {
            Ok(())
        } else {
            Err(format!("{created} created"))
        }
    })
    .await;
    order.stop().await;
    sqlx::query("UPDATE orders SET pay_deadline = now() + make_interval(secs => $1::float8 / 1000)")
        .bind(in_ms as f64)
        .execute(&env.db)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_cancel_and_the_return_is_finished_once() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 50).await;
    orders_due_together(&env, sale, 50, 0).await;
    // Cancelled and committed in PostgreSQL, then the process died before
    // Redis took the units back.
    let mut tx = env.db.begin().await.unwrap();
    let cancelled = cancellation::cancel(&mut tx, Cancel::Due { limit: 20 }).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!((cancelled.len(), env.redis_stock(sale).await), (20, 0));
    // The next poll cancels the rest and finishes those 20, once.
    let deps = env.connections();
    assert_eq!(seckill_compensator::deadlines::poll_once(&deps, 1_000, Duration::from_secs(15)).await.unwrap(), 30);
    assert_eq!(seckill_compensator::deadlines::poll_once(&deps, 1_000, Duration::from_secs(15)).await.unwrap(), 0);
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (50, 50));
    let report = all_cancelled(&env, sale, 50).await;
    assert_eq!(report.returned, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_worker_killed_mid_way_fires_every_deadline_once_after_restart() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3_000).await;
    orders_due_together(&env, sale, 3_000, 0).await;
    // Small batches, so the kill lands among them.
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__DEADLINES__BATCH".into(), "100".into()));
    child_env.push(("SECKILL__SWEEPER__ENABLED".into(), "false".into()));
    let worker = Child::start("seckill-compensator", &child_env);
    eventually("the worker started cancelling", Duration::from_secs(30), || async {
        let n = env.count_orders(sale, "CANCELLED").await;
        if n > 0 {
            Ok(())
        } else {
            Err("none yet".to_owned())
        }
    })
    .await;
    worker.kill9().await;
    let at_kill = env.count_orders(sale, "CANCELLED").await;
    let restarted = Child::start("seckill-compensator", &child_env);
    let report = all_cancelled(&env, sale, 3_000).await;
    assert_eq!((report.returned, report.redis_remaining, report.db_remaining), (3_000, 3_000, 3_000));
    eprintln!("deadline worker killed after {at_kill} of 3000 cancels; after the restart every unit came back once");
    assert!(restarted.terminate().await, "a clean stop");
}

/// The reconciliation once `n` orders are cancelled and every unit is
/// back (no order service runs: their events stay in the outbox).
async fn all_cancelled(env: &TestEnv, sale: SaleKey, n: i64) -> Report {
    eventually("every deadline fired and every unit back", Duration::from_secs(60), || async {
        let report = reconcile(&env.stock, &env.db, None, sale, false).await.map_err(|e| e.to_string())?;
        if report.consistent && report.orders_cancelled == n && report.cancels_pending == 0 {
            Ok(report)
        } else {
            Err(format!(
                "{} cancelled, {} pending: {:?}",
                report.orders_cancelled, report.cancels_pending, report.violations
            ))
        }
    })
    .await
}

/// Lateness of 10,000 deadlines falling in the same instant: printed, not
/// asserted (timing belongs to `make bench`; this machine is shared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_deadlines_in_one_second_all_fire_once() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10_000).await;
    orders_due_together(&env, sale, 10_000, 2_000).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let report = all_cancelled(&env, sale, 10_000).await;
    assert_eq!((report.returned, report.redis_remaining), (10_000, 10_000));
    // Cancelled (PostgreSQL), and the unit back on sale (Redis).
    for (what, at) in [("cancelled", "cancelled_at"), ("unit back on sale", "unit_returned_at")] {
        let (p50, p99, max): (f64, f64, f64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms)
               FROM (SELECT (extract(epoch FROM {at} - pay_deadline) * 1000)::float8 AS ms FROM orders) late"
        )))
        .fetch_one(&env.db)
        .await
        .unwrap();
        eprintln!("lateness of 10000 deadlines due at once, {what}: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms");
    }
    compensator.stop().await;
}
