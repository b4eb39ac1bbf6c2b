//! Every row of the edge's HTTP contract (docs/buyers-api.md). Each refused
//! request is checked to change nothing: stock, buyers, orders.

use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{eventually, Running, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::SaleSnapshot;
use std::time::Duration;

pub(crate) async fn state(env: &TestEnv, sale: SaleKey) -> (SaleSnapshot, i64) {
    let snapshot = env.stock.books().snapshot(sale).await.expect("redis snapshot");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1")
        .bind(sale.activity.get())
        .fetch_one(&env.db)
        .await
        .expect("orders");
    (snapshot, orders)
}

pub(crate) async fn edge_with(env: &TestEnv, change: impl FnOnce(&mut seckill_edge::Settings)) -> (Running, Client) {
    let mut settings = env.edge_settings();
    change(&mut settings);
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    (edge, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let env = TestEnv::new().await;
    let (edge, client) = edge_with(&env, |_| {}).await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let before = state(&env, sale).await;
    let (a, s) = (sale.activity.get(), sale.sku.get());
    let cases: Vec<(String, &str)> = vec![
        ("not json".into(), "bad JSON"),
        (String::new(), "empty body"),
        (format!(r#"{{"activityId":{a},"skuId":{s}}}"#), "missing userId"),
        (format!(r#"{{"activityId":{a},"userId":5}}"#), "missing skuId"),
        (format!(r#"{{"activityId":{a},"skuId":{s},"userId":0}}"#), "user id zero"),
        (format!(r#"{{"activityId":{a},"skuId":{s},"userId":-4}}"#), "negative user id"),
        (format!(r#"{{"activityId":"{a}","skuId":{s},"userId":4}}"#), "activity id as a string"),
        (format!(r#"{{"activityId":{a},"skuId":{s},"userId":4.5}}"#), "fractional user id"),
        (format!(r#"{{"activityId":{a},"skuId":{s},"userId":9223372036854775808}}"#), "user id beyond i64"),
        (format!(r#"{{"activityId":{a},"skuId":{s},"userId":4,"coupon":"x"}}"#), "unknown field"),
        (format!(r#"[{a},{s},4]"#), "an array"),
    ];
    for (body, case) in &cases {
        let reply = client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[]).await;
        assert_error(&reply, 400, "INVALID_REQUEST", case);
    }
    let huge = format!(r#"{{"activityId":{a},"skuId":{s},"userId":4,"pad":"{}"}}"#, "x".repeat(5000));
    let reply = client.send(Method::POST, "/api/seckill/order", Some(huge.as_bytes()), &[]).await;
    assert_error(&reply, 413, "PAYLOAD_TOO_LARGE", "body over 4 KiB");

    for (path, case) in [
        ("/api/seckill/order/not-an-id".to_owned(), "malformed order id"),
        (format!("/api/seckill/result?activityId={a}&skuId={s}"), "result without userId"),
        (format!("/api/seckill/result?activityId={a}&skuId={s}&userId=abc"), "result with a bad userId"),
        (format!("/api/seckill/result?activityId=0&skuId={s}&userId=1"), "result with activity 0"),
    ] {
        assert_error(&client.get(&path).await, 400, "INVALID_REQUEST", case);
    }
    assert_eq!(state(&env, sale).await, before, "no stock, buyer or order changed");
    edge.stop().await;
}

/// A sale's states answer per the contract: unknown (404), before its start
/// and after its end (403), a bad warm-up body (400, nothing warmed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sale_states_answer_per_the_contract() {
    let env = TestEnv::new().await;
    let (edge, client) = edge_with(&env, |_| {}).await;
    let auth = format!("Bearer {ADMIN_TOKEN}");

    // Unknown sale: 404, nothing created.
    let unknown = env.sale();
    assert_error(
        &client.order(unknown.activity.get(), unknown.sku.get(), 1).await,
        404,
        "SALE_NOT_FOUND",
        "unknown sale",
    );
    assert!(!env.stock.books().snapshot(unknown).await.unwrap().exists);

    let console = Client::new(edge.console_url());
    // Not started yet, and already over: 403.
    let future = env.sale();
    let starts = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let body = format!(r#"{{"stock":5,"startsAt":"{starts}"}}"#);
    let path = format!("/admin/sales/{}/{}", future.activity, future.sku);
    let warmed = console.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!(warmed.status.as_u16(), 200, "{}", warmed.text);
    let before = state(&env, future).await;
    assert_error(
        &client.order(future.activity.get(), future.sku.get(), 1).await,
        403,
        "SALE_NOT_ACTIVE",
        "before the start",
    );
    assert_eq!(state(&env, future).await, before);

    // Over: closed (its end moved to now).
    let past = env.sale();
    let (s, e) = (
        (chrono::Utc::now() - chrono::Duration::hours(2)).to_rfc3339(),
        (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339(),
    );
    let body = format!(r#"{{"stock":5,"startsAt":"{s}","endsAt":"{e}"}}"#);
    let path = format!("/admin/sales/{}/{}", past.activity, past.sku);
    assert_eq!(
        console.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await.status.as_u16(),
        200
    );
    let closed = console.send(Method::POST, &format!("{path}/close"), None, &[("authorization", &auth)]).await;
    assert_eq!(closed.status.as_u16(), 200, "{}", closed.text);
    assert_error(&client.order(past.activity.get(), past.sku.get(), 1).await, 403, "SALE_NOT_ACTIVE", "after the end");

    // A bad warm-up body is a 400 and warms nothing.
    let bad = env.sale();
    let path = format!("/admin/sales/{}/{}", bad.activity, bad.sku);
    let reply = console.send(Method::PUT, &path, Some(br#"{"stock":-1}"#), &[("authorization", &auth)]).await;
    assert_error(&reply, 400, "INVALID_REQUEST", "negative stock");
    let reply = console.send(Method::PUT, &path, Some(br#"{"stocks":1}"#), &[("authorization", &auth)]).await;
    assert_error(&reply, 400, "INVALID_REQUEST", "misspelt field");
    // A warm-up that could not be honoured, refused as bad, the field
    // named (before: an end in the past was answered 503 TRY_AGAIN, and
    // the same forever).
    for (body, field) in [
        (r#"{"stock":5,"endsAt":"2000-01-01T00:00:00Z"}"#, "endsAt"),
        (r#"{"stock":5,"startsAt":"2031-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"}"#, "startsAt"),
    ] {
        let reply = console.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
        assert_error(&reply, 400, "INVALID_REQUEST", body);
        assert!(reply.json["message"].as_str().is_some_and(|m| m.contains(field)), "{body}: {}", reply.text);
    }
    assert!(!env.stock.books().snapshot(bad).await.unwrap().exists);
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM warmups WHERE activity_id = $1 AND sku_id = $2")
        .bind(bad.activity.get())
        .bind(bad.sku.get())
        .fetch_one(&env.db)
        .await
        .unwrap();
    assert_eq!(jobs, 0, "a refused warm-up leaves no job behind");
    edge.stop().await;
}

/// One order through the contract: accepted, then already purchased, then
/// sold out (refusals changing nothing); read by order id and by user, from
/// Redis and, once Redis no longer holds it, from PostgreSQL; health,
/// readiness and metrics answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_is_answered_and_read_per_the_contract() {
    let env = TestEnv::new().await;
    let (edge, client) = edge_with(&env, |_| {}).await;
    // Accepted, then already purchased, then sold out.
    let sale = env.sale();
    env.warmup(sale, 1).await;
    let (a, k) = (sale.activity.get(), sale.sku.get());
    let accepted = client.order(a, k, 10).await;
    assert_eq!((accepted.status.as_u16(), accepted.code()), (202, "QUEUED"), "{}", accepted.text);
    let order_id = accepted.json["orderId"].as_str().expect("an order id").to_owned();
    assert!(order_id.starts_with(&format!("{a}-{k}-")), "the id names its sale: {order_id}");
    let before = state(&env, sale).await;
    let again = client.order(a, k, 10).await;
    assert_error(&again, 409, "ALREADY_PURCHASED", "second order of a user");
    assert_eq!(again.json["orderId"], order_id.as_str());
    assert_error(&client.order(a, k, 11).await, 410, "SOLD_OUT", "no stock left");
    assert_error(&client.order(a, k, 12).await, 410, "SOLD_OUT", "no stock left (local flag)");
    assert_eq!(state(&env, sale).await, before, "refusals changed nothing");

    // Status: by order id and by user.
    let status = client.get(&format!("/api/seckill/order/{order_id}")).await;
    assert_eq!(status.status.as_u16(), 200, "{}", status.text);
    assert_eq!(status.json["status"], "QUEUED");
    assert_eq!(status.json["userId"], 10);
    assert_eq!(status.json["activityId"], a);
    let result = client.get(&format!("/api/seckill/result?activityId={a}&skuId={k}&userId=10")).await;
    assert_eq!(result.json["orderId"], order_id.as_str());
    assert_error(
        &client.get(&format!("/api/seckill/result?activityId={a}&skuId={k}&userId=99")).await,
        404,
        "ORDER_NOT_FOUND",
        "no order for that user",
    );
    assert_error(
        &client.get(&format!("/api/seckill/order/{a}-{k}-999-ffff")).await,
        404,
        "ORDER_NOT_FOUND",
        "unknown order",
    );

    // The order service settles it; the status follows, and falls back to
    // PostgreSQL once Redis no longer holds it.
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the order CREATED", Duration::from_secs(30), || async {
        let reply = client.get(&format!("/api/seckill/order/{order_id}")).await;
        if reply.json["status"] == "CREATED" {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    let mut conn = env.stock.connection();
    let _: () = redis::cmd("DEL")
        .arg(format!("{}seckill:{{{a}:{k}}}:orders", env.redis.key_prefix))
        .arg(format!("{}seckill:{{{a}:{k}}}:buyers", env.redis.key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    let fallback = client.get(&format!("/api/seckill/order/{order_id}")).await;
    assert_eq!(
        (fallback.status.as_u16(), fallback.json["status"].as_str()),
        (200, Some("CREATED")),
        "{}",
        fallback.text
    );
    let fallback = client.get(&format!("/api/seckill/result?activityId={a}&skuId={k}&userId=10")).await;
    assert_eq!(fallback.json["orderId"], order_id.as_str(), "{}", fallback.text);
    order.stop().await;

    // Health, readiness, metrics.
    assert_eq!(client.get("/healthz").await.status.as_u16(), 200);
    seckill_e2e::wait_ready(&client).await;
    let metrics = client.get("/metrics").await;
    assert!(metrics.text.contains("seckill_edge_orders_total"), "{}", metrics.text);
    edge.stop().await;
}

/// A publish that definitely fails (the topic does not exist) is rolled back
/// and answered 503 (and the circuit keeps further requests from deducting
/// until a publish succeeds); once the topic exists the sale goes on and
/// sells out exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definite_publish_failures_roll_back_and_the_sale_recovers() {
    let env = TestEnv::new().await;
    // Point the edge at topics that do not exist (yet).
    let mut missing = env.kafka.clone();
    missing.topic_prefix = format!("{}missing.", env.kafka.topic_prefix);
    let (edge, client) = edge_with(&env, |s| {
        s.servers.kafka = missing.clone();
        s.ensure_topics = false;
        s.sold_out_flag_ms = 200;
    })
    .await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let (a, k) = (sale.activity.get(), sale.sku.get());
    for user in 1..=3 {
        let reply = client.order(a, k, user).await;
        assert_error(&reply, 503, "TRY_AGAIN", "publish to a missing topic");
    }
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued),
        (3, 0, 0, 0),
        "every deduction rolled back"
    );
    // The first failure opens the Kafka circuit: the requests after it are
    // answered 503 without deducting at all.
    assert!((1..=3).contains(&snapshot.failed), "the rolled-back orders are FAILED: {}", snapshot.failed);

    seckill_shared::kafka::ensure_topics(&missing).await.expect("creating the topics");
    let mut order_settings = env.order_settings();
    order_settings.servers.kafka = missing.clone();
    let order = env.spawn_order(order_settings).await;
    // Retry with new users until the 3 units sold (bounded).
    let mut accepted = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for user in 100.. {
        assert!(std::time::Instant::now() < deadline, "the sale did not recover: {accepted} accepted");
        let reply = client.order(a, k, user).await;
        match reply.status.as_u16() {
            202 => accepted += 1,
            503 | 410 => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("unexpected {other}: {}", reply.text),
        }
        if accepted == 3 {
            break;
        }
    }
    assert_error(&client.order(a, k, 9999).await, 410, "SOLD_OUT", "sold out exactly");
    eventually("3 orders written", Duration::from_secs(30), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n == 3 {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
    order.stop().await;
    edge.stop().await;
}

/// The seed's approach, a lock around separate commands, sells exactly the
/// stock too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_deduction_sells_exactly_the_stock() {
    use futures::stream::{self, StreamExt};
    let env = TestEnv::new().await;
    let (edge, client) = edge_with(&env, |s| s.deduction = seckill_edge::settings::DeductionMode::Lock).await;
    let order = env.spawn_order(env.order_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let (a, k) = (sale.activity.get(), sale.sku.get());
    // A request that waited the lock's 200 ms in vain is answered 503 with
    // nothing kept, and its buyer tries again, as the seed's client would:
    // how many wait in vain depends on the machine, what is sold does not.
    let mut users: Vec<i64> = (1..=2000).collect();
    let mut accepted = 0;
    for _round in 0..20 {
        let replies: Vec<(i64, Reply)> = stream::iter(users.clone())
            .map(|user| {
                let client = client.clone();
                async move { (user, client.order(a, k, user).await) }
            })
            .buffer_unordered(200)
            .collect()
            .await;
        for (_, reply) in &replies {
            assert!(matches!(reply.status.as_u16(), 202 | 410 | 503), "{} {}", reply.status, reply.text);
        }
        accepted += replies.iter().filter(|(_, r)| r.status == 202).count();
        users = replies.iter().filter(|(_, r)| r.status == 503).map(|(user, _)| *user).collect();
        if users.is_empty() {
            break;
        }
    }
    assert!(users.is_empty(), "{} buyers still answered 503 after 20 tries", users.len());
    assert_eq!(accepted, 100, "exactly the stock is accepted");
    eventually("100 orders written", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n == 100 {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
    assert_eq!(env.redis_stock(sale).await, 0);
    order.stop().await;
    edge.stop().await;
}

/// Bad input of every kind is refused with its code, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let before = env.stock.books().snapshot(sale).await.unwrap();
    let (a, s) = (sale.activity.get(), sale.sku.get());
    let body = format!(r#"{{"activityId":{a},"skuId":{s},"userId":7}}"#);
    let send = |content_type: Option<&'static str>, body: String| {
        let client = client.clone();
        async move {
            let headers: Vec<(&str, &str)> = content_type.map(|c| vec![("content-type", c)]).unwrap_or_default();
            client.send_raw(Method::POST, "/api/seckill/order", Some(body.into_bytes()), &headers).await
        }
    };
    for (content_type, case) in [
        (Some("text/plain"), "a browser's simple cross-origin POST"),
        (Some("application/x-www-form-urlencoded"), "curl -d without a content type"),
        (None, "no content type at all"),
    ] {
        assert_error(&send(content_type, body.clone()).await, 415, "UNSUPPORTED_MEDIA_TYPE", case);
    }
    let ok_with_charset =
        send(Some("application/json; charset=utf-8"), format!(r#"{{"activityId":{a},"skuId":{s},"userId":8}}"#)).await;
    assert_eq!(ok_with_charset.status, 202, "a charset parameter is fine: {}", ok_with_charset.text);
    let after_ok = env.stock.books().snapshot(sale).await.unwrap();
    let duplicate = format!(r#"{{"activityId":{a},"skuId":{s},"userId":1,"userId":2}}"#);
    assert_error(&send(Some("application/json"), duplicate).await, 400, "INVALID_REQUEST", "a duplicate key");
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap(), after_ok, "refusals changed nothing");
    assert_eq!(after_ok.remaining, before.remaining - 1);

    // An oversized or non-printable request id is replaced, never carried.
    let long_id = "x".repeat(8_000);
    for (id, case) in [(long_id.as_str(), "8 KB id"), ("a\tb", "a control character")] {
        let reply = client
            .send(
                Method::POST,
                "/api/seckill/order",
                Some(format!(r#"{{"activityId":{a},"skuId":{s},"userId":9}}"#).as_bytes()),
                &[("x-request-id", id)],
            )
            .await;
        let answered = reply.headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(!answered.is_empty() && answered != id && answered.len() <= 128, "{case}: answered {answered:?}");
    }
    let fine = client.send(Method::GET, "/healthz", None, &[("x-request-id", "client-id-1")]).await;
    assert_eq!(fine.headers.get("x-request-id").unwrap(), "client-id-1", "a well-formed id is kept");
    edge.stop().await;
}
