//! What an answer promises when the publish is what fails: a rollback
//! answers the order it did not undo, a Kafka outage is answered at once
//! and never SOLD_OUT, a publish that never happened is published again,
//! and a promised order that still fails is counted.

use super::promise::{count, crowd, edge_through, redis_addr};
use seckill_e2e::http::Client;
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, TestEnv};
use std::time::{Duration, Instant};

/// The publish definitely failed (the topic does not exist), but the
/// rollback reached Redis only after the order's publish deadline — when
/// the reservation is the sweeper's, which publishes it again. The rollback
/// gives nothing back, and the buyer hears the truth: 202 with the order,
/// which is written CREATED. (Before: the script's "not undone" was taken
/// for "undone": 503 for an order that exists.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_that_did_not_undo_the_order_answers_the_order() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| {
        s.servers.redis.timeout_ms = 15_000;
        s.servers.kafka.message_timeout_ms = 1_000;
        s.servers.kafka.topic_prefix = format!("{}missing.", s.servers.kafka.topic_prefix);
        s.ensure_topics = false;
    })
    .await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    let buyer = tokio::spawn({
        let client = client.clone();
        async move { client.order(sale.activity.get(), sale.sku.get(), 7).await }
    });
    eventually("the deduction to run", Duration::from_secs(30), || async {
        match env.stock.books().snapshot(sale).await {
            Ok(snapshot) if snapshot.reservations == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // The rollback is held here until the order's publish deadline (1 s +
    // 2 s) has passed by Redis's clock: the reservation is the sweeper's.
    proxy.pause();
    let rollback = seckill_e2e::script_sha("rollback");
    eventually("the rollback held past the publish deadline", Duration::from_secs(30), || async {
        let now = env.stock.now_ms().await.map_err(|e| e.to_string())?;
        let stale = env.stock.orders().stale_reservations(sale, now, 10).await.map_err(|e| e.to_string())?;
        match (proxy.held(&rollback), stale.len()) {
            (1.., 1) => Ok(()),
            seen => Err(format!("(rollbacks held, reservations past their deadline): {seen:?}")),
        }
    })
    .await;
    proxy.resume();
    let reply = buyer.await.expect("the buyer's request");
    assert_eq!((reply.status.as_u16(), reply.code()), (202, "QUEUED"), "the order stands: {}", reply.text);
    let order_id = seckill_shared::domain::OrderId::parse(reply.json["orderId"].as_str().unwrap()).unwrap();
    env.wait_status(&order_id, ("CREATED", None), Duration::from_secs(60)).await;
    env.verify_events(sale).await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, true).await.unwrap();
    assert!(report.consistent && report.broken_promises.is_empty(), "{:?}", report.violations);
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}

/// No broker can be reached: orders are answered 503 without a deduction —
/// no unit held, no SOLD_OUT for a unit that was not sold — and once a
/// broker answers, the edge sells again by itself. (Before: each request
/// deducted, waited the whole delivery timeout and rolled back; meanwhile
/// everyone else was told SOLD_OUT.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_outage_is_answered_at_once_and_never_sold_out() {
    let env = TestEnv::new().await;
    let (sale, empty) = (env.sale(), env.sale());
    env.warmup(sale, 20).await;
    env.warmup(empty, 0).await;
    let free = || std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let (port, http) = (free(), free());
    // An edge of its own process: its /metrics are its own.
    let mut child_env = env.child_env();
    child_env.push(("SECKILL_KAFKA_BROKERS".into(), format!("127.0.0.1:{port}")));
    child_env.push(("SECKILL_HTTP_ADDR".into(), format!("127.0.0.1:{http}")));
    child_env.push(("SECKILL__ENSURE_TOPICS".into(), "false".into()));
    let edge = seckill_e2e::Child::start("seckill-edge", &child_env);
    let client = Client::new(format!("http://127.0.0.1:{http}"));
    // The edge learns from librdkafka that no broker is up (its
    // statistics, once a second): it says so on /metrics.
    eventually("the edge to see no broker up", Duration::from_secs(30), || async {
        let metrics =
            client.try_send(hyper::Method::GET, "/metrics", None, &[]).await.map(|r| r.text).unwrap_or_default();
        if seckill_e2e::http::sample(&metrics, "seckill_edge_kafka_circuit_open") == Some(1.0) {
            Ok(())
        } else {
            Err("closed".into())
        }
    })
    .await;
    let started = Instant::now();
    let replies = crowd(&client, sale, 1, 300).await;
    println!(
        "kafka unreachable: 300 orders answered in {:?}: {} × 503, {} × 410, {} × 202",
        started.elapsed(),
        count(&replies, 503),
        count(&replies, 410),
        count(&replies, 202)
    );
    assert_eq!(count(&replies, 410), 0, "never sold out: nothing was sold");
    assert_eq!(count(&replies, 202), 0);
    assert_eq!(count(&replies, 503), 300);
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.reservations), (20, 0, 0), "no unit held");

    broker_back_at(port).await;
    // The first request let through after the broker is back is the
    // circuit's probe; here it meets a sale with nothing left and publishes
    // nothing. (Before: that probe kept the circuit open for good, and the
    // demo's crowd was answered 503 after its sale sold out.)
    let next_user = std::sync::atomic::AtomicI64::new(2_000);
    eventually("a probe to meet the sold-out sale", Duration::from_secs(30), || async {
        let user = next_user.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let reply = client.order(empty.activity.get(), empty.sku.get(), user).await;
        if reply.status == 410 {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the edge sells again by itself", Duration::from_secs(60), || async {
        let reply = client.order(sale.activity.get(), sale.sku.get(), 1_000).await;
        if reply.status == 202 {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    env.wait_orders(sale, "CREATED", 1).await;
    order.stop().await;
    assert!(edge.terminate().await, "the edge stops cleanly");
}

/// The edge died after the deduction, before the publish: the order is
/// honoured — the sweeper publishes its record again and it is written
/// CREATED — not failed. (Before: FAILED PUBLISH_LOST.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_never_happened_is_published_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let lost = env.deduct(sale, 7).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_status(&lost.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    // The original turns up late after all: it creates nothing more.
    env.produce_records(std::slice::from_ref(&lost)).await;
    env.wait_drained(seckill_e2e::Group::Order).await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, true).await.unwrap();
    assert_eq!(
        (report.orders_created, report.db_remaining, report.redis_remaining),
        (1, 1, 1),
        "{:?}",
        report.violations
    );
    assert!(report.consistent, "{:?}", report.violations);
    env.verify_events(sale).await;
    compensator.stop().await;
    order.stop().await;
}

/// An order the edge answered 202 that still ends FAILED is counted as a
/// broken promise, by reason (here: the database's stock was taken away
/// under it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promised_order_that_fails_is_counted() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    sqlx::query("UPDATE sales SET remaining_stock = 0 WHERE activity_id = $1 AND sku_id = $2")
        .bind(sale.activity.get())
        .bind(sale.sku.get())
        .execute(&env.db)
        .await
        .unwrap();
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 1).await.status, 202);
    env.wait_orders(sale, "FAILED", 1).await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!(report.broken_promises.get("NO_DB_STOCK"), Some(&1), "{:?}", report.broken_promises);
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}

/// A broker at `port` again: a proxy to the real one (the client then
/// learns the broker's own address).
async fn broker_back_at(port: u16) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("the broker port");
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:9092").await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                }
            });
        }
    });
}
