//! The edge, to the HTTP contract (docs/buyers-api.md).

use futures::stream::{self, StreamExt};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::SaleKey;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The seed's check: 2,000 distinct users, 200 at a time, on 100 units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_check_sells_exactly_the_stock() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let client = Client::new(edge.url());

    let started = Instant::now();
    let counts = client.order_each(sale.activity.get(), sale.sku.get(), 1..=2000, 200).await;
    let elapsed = started.elapsed();
    println!("seed check: {counts:?} in {elapsed:?} ({:.0} req/s)", 2000.0 / elapsed.as_secs_f64());
    assert_eq!(counts, BTreeMap::from([(202, 100), (410, 1900)]));

    let records = env.read_topic(&env.topics().orders, 100, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 100, "the 100 accepted orders are on the topic");
    eventually("100 orders in PostgreSQL", Duration::from_secs(60), || async {
        let created = env.count_orders(sale, "CREATED").await;
        if created == 100 {
            Ok(())
        } else {
            Err(format!("{created} created"))
        }
    })
    .await;
    assert_eq!(env.redis_stock(sale).await, 0);
    order.stop().await;
    edge.stop().await;
}

/// A user pressing "buy" 50 times at once gets exactly one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_fifty_concurrent_requests_one_order() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let client = Client::new(edge.url());
    let replies: Vec<_> = stream::iter(0..50)
        .map(|_| {
            let client = client.clone();
            async move { client.order(sale.activity.get(), sale.sku.get(), 77).await }
        })
        .buffer_unordered(50)
        .collect()
        .await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    assert_eq!(accepted, 1, "{:?}", replies.iter().map(|r| r.code().to_owned()).collect::<Vec<_>>());
    for reply in &replies {
        assert!(
            matches!(reply.code(), "QUEUED" | "ALREADY_PURCHASED" | "RATE_LIMITED"),
            "unexpected answer {} {}",
            reply.status,
            reply.text
        );
    }
    assert_eq!(env.redis_stock(sale).await, 9, "exactly one unit left the sale");
    edge.stop().await;
}

/// Re-warming sets the stock, never adds; warm-up needs the admin token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_sets_stock_and_requires_the_admin_token() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let sale = env.sale();
    let client = Client::new(edge.console_url());
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");

    let refused = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":100}"#), &[]).await;
    assert_eq!((refused.status.as_u16(), refused.code()), (401, "UNAUTHORIZED"));
    let wrong =
        client.send(hyper::Method::PUT, &path, Some(br#"{"stock":100}"#), &[("authorization", "Bearer nope")]).await;
    assert_eq!(wrong.status.as_u16(), 401);
    assert!(!env.stock.books().snapshot(sale).await.unwrap().exists, "a refused warm-up creates nothing");

    for _ in 0..2 {
        let ok = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":100}"#), &[("authorization", &auth)]).await;
        assert_eq!(ok.status.as_u16(), 200, "{}", ok.text);
        assert_eq!(ok.json["totalStock"], 100);
    }
    assert_eq!(env.redis_stock(sale).await, 100, "warming twice leaves 100, not 200");
    let report = client.get(&path).await;
    assert_eq!(report.status.as_u16(), 401, "the report needs the token too");
    let report = client.send(hyper::Method::GET, &path, None, &[("authorization", &auth)]).await;
    assert_eq!(report.status.as_u16(), 200, "{}", report.text);
    assert_eq!(report.json["consistent"], true, "{}", report.text);

    // An order still in flight: a re-warm is refused unless forced.
    let user = seckill_shared::domain::UserId::new(5).unwrap();
    env.stock.orders().deduct(sale, user, 1, "abcd0001abcd0001", Duration::from_secs(60)).await.unwrap();
    let busy = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":50}"#), &[("authorization", &auth)]).await;
    assert_eq!((busy.status.as_u16(), busy.code()), (409, "SALE_BUSY"), "{}", busy.text);
    assert_eq!(env.redis_stock(sale).await, 99, "a refused warm-up changes nothing");
    let forced = client
        .send(hyper::Method::PUT, &path, Some(br#"{"stock":50,"force":true}"#), &[("authorization", &auth)])
        .await;
    assert_eq!(forced.status.as_u16(), 200, "{}", forced.text);
    assert_eq!(env.redis_stock(sale).await, 50);
    edge.stop().await;
}

/// Every answer carries an `x-request-id`: the client's own, or one the edge
/// made (distinct per request); an accepted order's record carries it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_answered_and_carried_to_kafka() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let client = Client::new(edge.url());
    let request_id = |reply: &seckill_e2e::http::Reply| {
        reply.headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
    };

    let first = client.order(sale.activity.get(), sale.sku.get(), 1).await;
    let second = client.order(sale.activity.get(), sale.sku.get(), 2).await;
    assert_eq!((first.status.as_u16(), second.status.as_u16()), (202, 202));
    let (made_first, made_second) = (request_id(&first), request_id(&second));
    assert!(!made_first.is_empty() && !made_second.is_empty(), "the edge made ids: {made_first:?} {made_second:?}");
    assert_ne!(made_first, made_second, "one id per request");

    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":3}}"#, sale.activity, sale.sku);
    let own = client
        .send(hyper::Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[("x-request-id", "client-chosen-7")])
        .await;
    assert_eq!(own.status.as_u16(), 202);
    assert_eq!(request_id(&own), "client-chosen-7", "the client's id is answered back");

    let records = env.read_topic(&env.topics().orders, 3, Duration::from_secs(30)).await;
    let mut carried: Vec<String> = records
        .iter()
        .filter_map(|m| {
            let headers = rdkafka::message::Message::headers(m)?;
            seckill_shared::kafka::header_str(headers, seckill_shared::kafka::REQUEST_ID_HEADER).map(str::to_owned)
        })
        .collect();
    carried.sort();
    let mut expected = vec![made_first, made_second, "client-chosen-7".to_owned()];
    expected.sort();
    assert_eq!(carried, expected, "each record carries its request's id");
    edge.stop().await;
}

/// Order ids never repeat: the order counter never expires, and each id
/// carries at least 64 random bits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_ids_never_repeat() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    let ends = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let body = format!(r#"{{"stock":5,"endsAt":"{ends}"}}"#);
    let console = Client::new(edge.console_url());
    for _ in 0..2 {
        let warmed = console.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
        assert_eq!(warmed.status, 200, "{}", warmed.text);
    }
    let seq = format!("{}seckill:{{{}:{}}}:seq", env.redis.key_prefix, sale.activity, sale.sku);
    let stock = format!("{}seckill:{{{}:{}}}:stock", env.redis.key_prefix, sale.activity, sale.sku);
    let accepted = client.order(sale.activity.get(), sale.sku.get(), 1).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text);
    let mut conn = env.stock.connection();
    let seq_ttl: i64 = redis::cmd("PTTL").arg(&seq).query_async(&mut conn).await.unwrap();
    let stock_ttl: i64 = redis::cmd("PTTL").arg(&stock).query_async(&mut conn).await.unwrap();
    assert!(seq_ttl > 0 && stock_ttl > 0, "the sale's keys, its order counter too, expire after its end");
    let order_id = accepted.json["orderId"].as_str().unwrap();
    // Unique whatever the counter says (it starts again after it expired):
    // 64 random bits.
    let nonce = order_id.rsplit('-').next().unwrap();
    assert!(nonce.len() >= 16 && nonce.chars().all(|c| c.is_ascii_hexdigit()), "64 random bits: {order_id}");
    edge.stop().await;
}

/// The seed's lock-based deduction on two edges, one of them on a slow
/// network to Redis (5 ms per command) with a lease far shorter than its
/// work: holders overlap, and still no unit is sold twice and no user buys
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_deduction_never_oversells_when_its_lease_runs_out() {
    use futures::stream::{self, StreamExt};
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.deduction = seckill_edge::settings::DeductionMode::Lock;
    settings.lock.lease_ms = 2;
    settings.lock.wait_ms = 5_000;
    let slow_redis = seckill_e2e::proxy::delaying("127.0.0.1:6379".parse().unwrap(), Duration::from_millis(5)).await;
    let mut slow = settings.clone();
    slow.servers.redis.url = format!("redis://{slow_redis}/0");
    let edges = [env.spawn_edge(slow).await, env.spawn_edge(settings).await];
    let clients = [Client::new(edges[0].url()), Client::new(edges[1].url())];
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let (a, s) = (sale.activity.get(), sale.sku.get());
    let replies: Vec<Reply> = stream::iter(1..=600i64)
        .map(|user| {
            let client = clients[(user % 2) as usize].clone();
            async move { client.order(a, s, user).await }
        })
        .buffer_unordered(60)
        .collect()
        .await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert!(accepted <= 100, "oversold: {accepted} accepted for 100 units");
    assert!(snapshot.remaining >= 0, "redis stock went negative: {}", snapshot.remaining);
    assert_eq!(snapshot.remaining + accepted as i64, 100, "every unit either left or was sold, once");
    assert_eq!(snapshot.buyers, accepted as i64, "one order per user");
    for edge in edges {
        edge.stop().await;
    }
}

/// A sale whose books are read while it runs: the counters agree with the
/// orders (the snapshot no longer reads every order's status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_counts_orders_by_status() {
    let env = TestEnv::new().await;
    let sale: SaleKey = env.sale();
    env.warmup(sale, 10).await;
    let records = futures::future::join_all((1..=4).map(|user| env.deduct(sale, user))).await;
    env.produce_records(&records[..2]).await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("two orders CREATED", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n == 2 {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
    order.stop().await;
    env.stock
        .orders()
        .rollback(
            &records[2].order_id,
            records[2].user_id,
            seckill_shared::domain::Holding::ONE,
            seckill_shared::domain::FailReason::PublishFailed,
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    eventually("statuses settled in redis", Duration::from_secs(30), || async {
        let snapshot = env.stock.books().snapshot(sale).await.map_err(|e| e.to_string())?;
        let counts = (snapshot.queued, snapshot.created, snapshot.failed, snapshot.remaining);
        if counts == (1, 2, 1, 7) {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
}

/// A fatal error of the idempotent producer: the edge says it is not ready,
/// answers 503 without deducting anything, and a new producer takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_producer_error_deducts_nothing_and_the_producer_is_rebuilt() {
    let env = TestEnv::new().await;
    let app = seckill_edge::Application::build(env.edge_settings()).await.expect("an edge");
    let publisher = app.publisher();
    let edge = TestEnv::run_edge(app);
    let client = Client::new(edge.url());
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let (a, s) = (sale.activity.get(), sale.sku.get());
    assert_eq!(client.order(a, s, 1).await.status, 202);

    publisher.inject_fatal_error();
    let before = env.stock.books().snapshot(sale).await.unwrap();
    assert_error(&client.order(a, s, 2).await, 503, "TRY_AGAIN", "an order while the producer is retired");
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap(), before, "nothing was deducted");
    // Replaced off the request path: a moment later a new one takes orders.
    eventually("a new producer took over", Duration::from_secs(30), || async {
        let again = client.order(a, s, 2).await;
        match again.status.as_u16() {
            202 => Ok(()),
            503 => Err(again.text),
            other => panic!("{other}: {}", again.text),
        }
    })
    .await;

    publisher.inject_fatal_error();
    assert_eq!(client.get("/readyz").await.status, 503, "not ready while the producer is retired");
    // Ready again with a new producer.
    seckill_e2e::wait_ready(&client).await;
    edge.stop().await;
}

/// `/readyz` says what is unreachable in a word or two, never the error
/// itself (it names hosts, ports and versions to whoever reaches the port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_says_what_is_unreachable_not_why() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.servers.kafka.brokers = "127.0.0.1:1".into();
    settings.servers.kafka.admin_timeout_ms = 500;
    settings.ensure_topics = false;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    // `starting` until the background check has run once.
    let reply = eventually("the first readiness check", Duration::from_secs(30), || async {
        let reply = client.get("/readyz").await;
        if reply.text == "starting" {
            Err(reply.text)
        } else {
            Ok(reply)
        }
    })
    .await;
    assert_eq!((reply.status.as_u16(), reply.text.as_str()), (503, "kafka unreachable"));
    edge.stop().await;
}

/// Ready means records can be sent: an edge whose orders topic the brokers
/// do not have (here: a prefix nobody created, topics not ensured) is not
/// ready, though the broker answers. (Before: `/readyz` answered 200 and
/// every order then waited out its delivery timeout. The same held for a
/// broker just restarted with thousands of partitions still loading, their
/// leaders -1 and producer ids refused: the demo's first orders timed out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_that_cannot_send_records_is_not_ready() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.servers.kafka.topic_prefix = format!("{}never-created.", settings.servers.kafka.topic_prefix);
    settings.ensure_topics = false;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    // Given the time a producer needs to get its producer id (its first
    // statistics), it still is not ready.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reply = client.get("/readyz").await;
    assert_eq!((reply.status.as_u16(), reply.text.as_str()), (503, "kafka not taking records"));
    edge.stop().await;

    // The same edge with the topic there is ready once its producer has an id.
    let edge = env.spawn_edge(env.edge_settings()).await;
    seckill_e2e::wait_ready(&Client::new(edge.url())).await;
    edge.stop().await;
}
