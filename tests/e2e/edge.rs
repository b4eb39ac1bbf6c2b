//! The edge, to the HTTP contract (design, section 3).

use futures::stream::{self, StreamExt};
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
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
    let codes: Vec<u16> = stream::iter(1..=2000i64)
        .map(|user| {
            let client = client.clone();
            async move { client.order(sale.activity.get(), sale.sku.get(), user).await.status.as_u16() }
        })
        .buffer_unordered(200)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut counts = BTreeMap::new();
    for code in codes {
        *counts.entry(code).or_insert(0) += 1;
    }
    println!("seed check: {counts:?} in {elapsed:?} ({:.0} req/s)", 2000.0 / elapsed.as_secs_f64());
    assert_eq!(counts, BTreeMap::from([(202, 100), (410, 1900)]));

    let records = env.read_topic(&env.topics().orders, 100, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 100, "the 100 accepted orders are on the topic");
    eventually("100 orders in PostgreSQL", Duration::from_secs(60), || async {
        let created = env.count_orders(sale, "CREATED").await;
        if created == 100 { Ok(()) } else { Err(format!("{created} created")) }
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
    let client = Client::new(edge.url());
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");

    let refused = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":100}"#), &[]).await;
    assert_eq!((refused.status.as_u16(), refused.code()), (401, "UNAUTHORIZED"));
    let wrong = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":100}"#), &[("authorization", "Bearer nope")]).await;
    assert_eq!(wrong.status.as_u16(), 401);
    assert!(!env.stock.snapshot(sale).await.unwrap().exists, "a refused warm-up creates nothing");

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
    env.stock.deduct(sale, user, "abcd0001abcd0001", Duration::from_secs(60)).await.unwrap();
    let busy = client.send(hyper::Method::PUT, &path, Some(br#"{"stock":50}"#), &[("authorization", &auth)]).await;
    assert_eq!((busy.status.as_u16(), busy.code()), (409, "SALE_BUSY"), "{}", busy.text);
    assert_eq!(env.redis_stock(sale).await, 99, "a refused warm-up changes nothing");
    let forced =
        client.send(hyper::Method::PUT, &path, Some(br#"{"stock":50,"force":true}"#), &[("authorization", &auth)]).await;
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
