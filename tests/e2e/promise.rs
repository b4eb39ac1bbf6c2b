//! What an answer promises, checked where a part fails under it: a buyer
//! told 202 gets the order; a buyer told 503 holds nothing; a broker that
//! is down is neither slow to hear about nor sold out. (The faults that
//! stop shared servers — a broker hung then killed, Kafka stopped, Redis
//! paused, a lagging failover — run in `make chaos` and `make
//! chaos-cluster`; here the failing part is this test's own: a proxy in
//! front of Redis, a broker address nothing listens on, a replica that
//! does not exist.)

use futures::stream::{self, StreamExt};
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, Running, TestEnv};
use seckill_shared::domain::SaleKey;
use std::time::{Duration, Instant};

/// `n` buyers (users `from..from + n`) order at once.
async fn crowd(client: &Client, sale: SaleKey, from: i64, n: i64) -> Vec<Reply> {
    stream::iter(from..from + n)
        .map(|user| {
            let client = client.clone();
            async move { client.order(sale.activity.get(), sale.sku.get(), user).await }
        })
        .buffer_unordered(64)
        .collect()
        .await
}

fn count(replies: &[Reply], status: u16) -> usize {
    replies.iter().filter(|r| r.status.as_u16() == status).count()
}

/// An edge whose Redis is reached through `proxy`.
async fn edge_through(env: &TestEnv, proxy: &Pausable, change: impl FnOnce(&mut seckill_edge::Settings)) -> Running {
    let mut settings = env.edge_settings();
    settings.servers.redis.url = format!("redis://{}/0", proxy.addr);
    settings.servers.redis.timeout_ms = 500;
    change(&mut settings);
    env.spawn_edge(settings).await
}

fn redis_addr() -> std::net::SocketAddr {
    "127.0.0.1:6379".parse().expect("an address")
}

/// Redis stops answering for two seconds (four times the edge's call
/// timeout) while buyers order: the deductions ran when it came back, so
/// the buyers are told what they decided — 202 with their order — and not
/// a 503 for a unit that is in fact held. (Before: every buyer of the
/// batch was answered 503, and each had an order afterwards.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduction_whose_answer_was_not_heard_is_asked_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |_| {}).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    proxy.pause();
    let (replies, _) = tokio::join!(crowd(&client, sale, 1, 10), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.resume();
    });
    assert_eq!(
        count(&replies, 202),
        10,
        "each buyer hears what was decided: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    env.wait_orders(sale, "CREATED", 10).await;
    assert_eq!(env.redis_stock(sale).await, 10, "ten units sold, once each");
    let report = seckill_shared::reconcile::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(report.broken_promises.is_empty(), "{:?}", report.broken_promises);
    order.stop().await;
    edge.stop().await;
}

/// Redis answers nothing for longer than the edge may wait: the buyers are
/// told 503, and a 503 keeps nothing — the calls, run when Redis returns,
/// are undone (voided), and no unit, buyer or reservation is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_keeps_nothing_even_when_the_deduction_ran_later() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| s.deduct_resolve_ms = 1_000).await;
    let client = Client::new(edge.url());
    proxy.pause();
    let replies = crowd(&client, sale, 1, 5).await;
    assert_eq!(count(&replies, 503), 5, "nothing heard within the resolve time: 503");
    proxy.resume();
    eventually("every unit back, no buyer, no reservation", Duration::from_secs(30), || async {
        let snapshot = env.stock.snapshot(sale).await.map_err(|e| e.to_string())?;
        let whole = (snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued) == (20, 0, 0, 0);
        if whole {
            Ok(())
        } else {
            Err(format!("{snapshot:?}"))
        }
    })
    .await;
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 1).await.status, 202, "the buyer may buy");
    edge.stop().await;
}

/// A sale's queue is bounded: while Redis does not answer, requests beyond
/// it are answered 503 at once, nothing deducted; the ones in it are
/// decided when Redis returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_at_once_and_keeps_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| {
        s.deduct_queue_max = 4;
        s.deduct_batch_max = 4;
    })
    .await;
    let client = Client::new(edge.url());
    proxy.pause();
    let (replies, _) = tokio::join!(crowd(&client, sale, 1, 40), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.resume();
    });
    let (accepted, refused) = (count(&replies, 202), count(&replies, 503));
    assert_eq!(accepted + refused, 40, "202 or 503, nothing else");
    assert!(refused > 0 && accepted > 0, "some waited in the queue, some found it full: {accepted} / {refused}");
    let snapshot = env.stock.snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.remaining, snapshot.buyers),
        (100 - accepted as i64, accepted as i64),
        "the 503s hold nothing"
    );
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
        if metrics.contains("seckill_edge_kafka_circuit_open 1") {
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
    let snapshot = env.stock.snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.reservations), (20, 0, 0), "no unit held");

    // A broker at that address again (a proxy to the real one: the client
    // then learns the broker's own address).
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

/// Where a deduction must be confirmed by a replica and none confirms it
/// (here: there is none), the deduction is undone and answered 503 — never
/// 202 for a write a failover could lose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduction_no_replica_confirmed_is_undone() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let mut settings = env.edge_settings();
    settings.servers.redis.min_replica_acks = Some(1);
    settings.servers.redis.replica_ack_timeout_ms = 100;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let replies = crowd(&client, sale, 1, 5).await;
    assert_eq!(count(&replies, 503), 5, "unconfirmed: 503");
    let snapshot = env.stock.snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued),
        (10, 0, 0, 0),
        "nothing kept"
    );
    edge.stop().await;
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
    let report = seckill_shared::reconcile::reconcile(&env.stock, &env.db, None, sale, true).await.unwrap();
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
    let report = seckill_shared::reconcile::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!(report.broken_promises.get("NO_DB_STOCK"), Some(&1), "{:?}", report.broken_promises);
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}
