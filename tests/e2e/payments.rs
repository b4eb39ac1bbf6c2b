//! Paying: the provider's signed notification pays a CREATED order once,
//! and every other payment is recorded and owed back; forged or stale
//! notifications change nothing; a payment and a cancel racing have one
//! winner.

use super::lifecycle::{created_order, post, settled};
use hyper::Method;
use seckill_e2e::http::{signed_now, Client, WEBHOOK_SECRET};
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::domain::OrderRecord;
use seckill_shared::domain::SaleKey;
use std::time::Duration;

/// PAID comes only from the provider's signed notification, applied once
/// by payment id: a repeat answers the same, a second payment of the order
/// is owed back, a payment for an unknown order too. (Before: the buyer's
/// own `…/pay` marked the order PAID with no payment anywhere, and a second
/// payment was answered ALREADY_PAID and recorded nowhere.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_payment_pays_once_and_every_other_payment_is_owed_back() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());

    // Accepted, not written yet: the provider is asked to notify again.
    let placed = client.order(sale.activity.get(), sale.sku.get(), 1).await;
    let pending_id = placed.json["orderId"].as_str().unwrap().to_owned();
    let early = client.pay(&pending_id, "pay_1").await;
    assert_eq!((early.status.as_u16(), early.code()), (409, "ORDER_PENDING"), "{}", early.text);
    assert_eq!(early.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));

    let order = env.spawn_order(env.order_settings()).await;
    eventually("the order written", Duration::from_secs(30), || async {
        let seen = client.get(&format!("/api/seckill/order/{pending_id}")).await;
        if seen.json["status"] == "CREATED" {
            Ok(())
        } else {
            Err(seen.text)
        }
    })
    .await;
    let seen = client.get(&format!("/api/seckill/order/{pending_id}")).await;
    assert!(chrono::DateTime::parse_from_rfc3339(seen.json["payDeadline"].as_str().unwrap()).is_ok(), "{}", seen.text);
    // The deadline is written with the row: its time plus the default window.
    let window: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM pay_deadline - created_at)::float8 FROM orders WHERE order_id = $1",
    )
    .bind(&pending_id)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(window, 900.0, "the default payment window");

    // The buyer cannot mark an order paid: the route is gone.
    let by_buyer = post(&client, &pending_id, "pay", 1, Some("pay-1")).await;
    assert_eq!((by_buyer.status.as_u16(), by_buyer.code()), (404, "NOT_FOUND"), "{}", by_buyer.text);
    assert_eq!(client.get(&format!("/api/seckill/order/{pending_id}")).await.json["status"], "CREATED");

    let paid = client.pay(&pending_id, "pay_1").await;
    assert_eq!((paid.status.as_u16(), paid.json["outcome"].as_str()), (200, Some("APPLIED")), "{}", paid.text);
    let seen = client.get(&format!("/api/seckill/order/{pending_id}")).await;
    assert_eq!(seen.json["status"], "PAID");
    assert!(seen.json["paidAt"].is_string());
    let again = client.pay(&pending_id, "pay_1").await;
    assert_eq!((again.status.as_u16(), &again.json), (200, &paid.json), "the same payment answers the same");
    let second = client.pay(&pending_id, "pay_2").await;
    assert_eq!(
        (second.status.as_u16(), second.json["outcome"].as_str(), second.json["refundReason"].as_str()),
        (200, Some("REFUND_DUE"), Some("ALREADY_PAID")),
        "{}",
        second.text
    );
    assert_eq!(client.pay(&pending_id, "pay_2").await.json, second.json, "recorded once");
    let cancel = post(&client, &pending_id, "cancel", 1, None).await;
    assert_eq!((cancel.status.as_u16(), cancel.code()), (409, "ALREADY_PAID"), "a paid order is not cancelled");
    let unknown = client.pay(&format!("{}-{}-999-abc", sale.activity, sale.sku), "pay_3").await;
    assert_eq!(
        (unknown.json["outcome"].as_str(), unknown.json["refundReason"].as_str()),
        (Some("REFUND_DUE"), Some("ORDER_UNKNOWN"))
    );
    let reused = client.pay(&format!("{}-{}-998-abc", sale.activity, sale.sku), "pay_1").await;
    assert_eq!((reused.status.as_u16(), reused.code()), (409, "PAYMENT_CONFLICT"), "{}", reused.text);
    notifications_without_money_or_shape_record_nothing(&client, &pending_id).await;
    ledger_events_and_refunds_agree(&env, sale).await;
    edge.stop().await;
    order.stop().await;
}

/// A notification of a payment that took no money is acknowledged and
/// recorded nowhere; one without a payment id, or not JSON, is a 400.
async fn notifications_without_money_or_shape_record_nothing(client: &Client, order_id: &str) {
    let pending_id = order_id;
    // Not money taken: acknowledged, nothing recorded.
    let body = format!(r#"{{"paymentId":"pay_4","orderId":"{pending_id}","status":"FAILED"}}"#);
    let failed = client.notify(&body, &signed_now(&body)).await;
    assert_eq!((failed.status.as_u16(), failed.json["outcome"].as_str()), (200, Some("IGNORED")), "{}", failed.text);
    for (body, why) in [
        (r#"{"paymentId":"","orderId":"1-1-1-a","status":"SUCCEEDED"}"#, "an empty payment id"),
        (r#"{"orderId":"1-1-1-a","status":"SUCCEEDED"}"#, "no payment id"),
        ("{", "not JSON"),
    ] {
        let bad = client.notify(body, &signed_now(body)).await;
        assert_eq!((bad.status.as_u16(), bad.code()), (400, "INVALID_REQUEST"), "{why}");
    }
}

/// The ledger, the refunds `seckillctl` lists, the books and the events
/// topic tell one story: pay_1 applied, pay_2 and pay_3 owed back.
async fn ledger_events_and_refunds_agree(env: &TestEnv, sale: SaleKey) {
    let ledger: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT payment_id, outcome, refund_reason FROM payments ORDER BY payment_id")
            .fetch_all(&env.db)
            .await
            .unwrap();
    let ledger: Vec<_> = ledger.iter().map(|(p, o, r)| (p.as_str(), o.as_str(), r.as_deref())).collect();
    assert_eq!(
        ledger,
        [
            ("pay_1", "APPLIED", None),
            ("pay_2", "REFUND_DUE", Some("ALREADY_PAID")),
            ("pay_3", "REFUND_DUE", Some("ORDER_UNKNOWN"))
        ]
    );
    let refunds = env.ctl(&["payments", "refunds", "--json"]).await;
    let refunds: serde_json::Value = serde_json::from_str(&refunds.stdout).expect(&refunds.stderr);
    let listed: Vec<_> = refunds.as_array().unwrap().iter().map(|r| r["paymentId"].as_str().unwrap()).collect();
    assert_eq!(listed, ["pay_2", "pay_3"]);

    let report = settled(env, sale).await;
    assert_eq!((report.orders_paid, report.payments_applied, report.refunds_due), (1, 1, 1), "{report:?}");
    assert_eq!((report.orders_created, report.db_remaining, report.redis_remaining), (0, 4, 4));
    // Downstream: the PAID event carries its payment, the refund has its own.
    let events = env.read_topic(&env.topics().events, 3, Duration::from_secs(10)).await;
    let values: Vec<_> = events.iter().map(|m| (super::downstream::json(m), "an order event".to_owned())).collect();
    seckill_e2e::schemas::assert_valid("order-events.v1.json", &values);
    let mut seen: Vec<_> = values
        .iter()
        .map(|(e, _)| (e["type"].as_str().unwrap().to_owned(), e["paymentId"].as_str().unwrap_or("").to_owned()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("CREATED".into(), String::new()), ("PAID".into(), "pay_1".into()), ("REFUND_DUE".into(), "pay_2".into())]
    );
    env.verify_events(sale).await;
    assert_eq!(env.ctl(&["payments", "refunded", "pay_2"]).await.code, 0);
    assert_eq!(settled(env, sale).await.refunds_due, 0, "refunded");
}

/// A notification that is not the provider's changes nothing: a wrong
/// secret, a signed time more than five minutes away, no signature, a body
/// altered after signing, or an edge with no secret configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_stale_notification_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    let id = created_order(&client, sale, 1).await;
    let body = format!(r#"{{"paymentId":"pay_f","orderId":"{id}","status":"SUCCEEDED"}}"#);
    let now = chrono::Utc::now().timestamp();
    let sign =
        |secret: &str, at: i64, body: &str| seckill_edge::signature::sign(secret.as_bytes(), at, body.as_bytes());
    let altered = body.replace("pay_f", "pay_g");
    for (signature, sent, why) in [
        (sign("whsec_an_attackers_guess_0123456789abcdef", now, &body), body.as_str(), "another secret"),
        (sign(WEBHOOK_SECRET, now - 301, &body), body.as_str(), "signed 301 s ago"),
        (sign(WEBHOOK_SECRET, now + 301, &body), body.as_str(), "signed 301 s ahead"),
        (sign(WEBHOOK_SECRET, now, &body), altered.as_str(), "altered after signing"),
        (String::new(), body.as_str(), "an empty signature"),
    ] {
        let reply = client.notify(sent, &signature).await;
        assert_eq!((reply.status.as_u16(), reply.code()), (401, "UNAUTHORIZED"), "{why}: {}", reply.text);
        assert!(!reply.text.contains("v1") && !reply.text.contains("secret"), "no detail answered: {}", reply.text);
    }
    let unsigned = client.send(Method::POST, "/api/payments/notify", Some(body.as_bytes()), &[]).await;
    assert_eq!(unsigned.status, 401, "no signature");
    let mut settings = env.edge_settings();
    settings.payment_webhook_secret = None;
    let unconfigured = env.spawn_edge(settings).await;
    let reply = Client::new(unconfigured.url()).notify(&body, &sign(WEBHOOK_SECRET, now, &body)).await;
    assert_eq!(reply.status, 401, "no secret configured: nothing is trusted");
    let payments: i64 = sqlx::query_scalar("SELECT count(*) FROM payments").fetch_one(&env.db).await.unwrap();
    assert_eq!((payments, env.count_orders(sale, "CREATED").await), (0, 1), "nothing changed");
    assert_eq!(client.pay(&id, "pay_f").await.json["outcome"], "APPLIED", "the provider's own still pays");
    unconfigured.stop().await;
    edge.stop().await;
    order.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_user_auth_only_the_buyers_token_cancels_and_the_provider_pays() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let mut settings = env.edge_settings();
    settings.user_jwt_secret = Some("lifecycle-secret-of-at-least-32-bytes".into());
    let edge = env.spawn_edge(settings).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    let bearer = |user: i64| {
        let claims = serde_json::json!({ "sub": user.to_string(), "exp": chrono::Utc::now().timestamp() + 600 });
        let key = jsonwebtoken::EncodingKey::from_secret(b"lifecycle-secret-of-at-least-32-bytes").unwrap();
        format!("Bearer {}", jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap())
    };
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":7}}"#, sale.activity, sale.sku);
    let seven = bearer(7);
    let placed =
        client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[("authorization", &seven)]).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let id = placed.json["orderId"].as_str().unwrap().to_owned();
    eventually("the order written", Duration::from_secs(30), || async {
        let seen =
            client.send(Method::GET, &format!("/api/seckill/order/{id}"), None, &[("authorization", &seven)]).await;
        if seen.json["status"] == "CREATED" {
            Ok(())
        } else {
            Err(seen.text)
        }
    })
    .await;
    let ask = |action: &'static str, user: i64, token: Option<String>| {
        let (client, id) = (client.clone(), id.clone());
        async move {
            let body = format!(r#"{{"userId":{user}}}"#);
            let headers: Vec<(&str, &str)> = token.as_deref().map(|t| ("authorization", t)).into_iter().collect();
            client
                .send(Method::POST, &format!("/api/seckill/order/{id}/{action}"), Some(body.as_bytes()), &headers)
                .await
        }
    };
    assert_eq!(ask("cancel", 7, None).await.status, 401, "no token");
    assert_eq!(ask("cancel", 7, Some(bearer(8))).await.code(), "FORBIDDEN", "another user's token");
    assert_eq!(ask("cancel", 8, Some(bearer(8))).await.code(), "FORBIDDEN", "another user's order");
    assert_eq!(ask("pay", 7, Some(seven.clone())).await.code(), "NOT_FOUND", "the buyer's token pays nothing");
    assert_eq!(env.count_orders(sale, "CREATED").await, 1, "nothing changed");
    // The provider's notification carries no user token: its signature.
    let paid = client.pay(&id, "pay_7").await;
    assert_eq!((paid.status.as_u16(), paid.json["outcome"].as_str()), (200, Some("APPLIED")), "{}", paid.text);
    edge.stop().await;
    order.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_and_a_cancel_racing_for_one_order_have_one_winner() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let mut records: Vec<OrderRecord> = Vec::new();
    for user in 1..=100 {
        records.push(env.deduct(sale, user).await);
    }
    env.produce_records(&records).await;
    let order = env.spawn_order(env.order_settings()).await;
    eventually("100 orders CREATED", Duration::from_secs(60), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n == 100 {
            Ok(())
        } else {
            Err(format!("{n} created"))
        }
    })
    .await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let races = records.iter().map(|record| {
        let client = client.clone();
        let (id, user) = (record.order_id.to_string(), record.user_id.get());
        tokio::spawn(async move {
            let payment = format!("pay_{user}");
            let (pay, cancel) = tokio::join!(client.pay(&id, &payment), post(&client, &id, "cancel", user, None));
            (pay, cancel)
        })
    });
    let (mut paid, mut cancelled) = (0, 0);
    for race in races.collect::<Vec<_>>() {
        let (pay, cancel) = race.await.unwrap();
        match (pay.json["outcome"].as_str(), cancel.status.as_u16()) {
            (Some("APPLIED"), 409) => {
                assert_eq!(cancel.code(), "ALREADY_PAID");
                paid += 1;
            }
            (Some("REFUND_DUE"), 200) => {
                assert_eq!(pay.json["refundReason"], "ORDER_CANCELLED");
                cancelled += 1;
            }
            other => panic!("one winner per order, got {other:?}: {} / {}", pay.text, cancel.text),
        }
    }
    assert_eq!(paid + cancelled, 100);
    assert_eq!((env.count_orders(sale, "PAID").await, env.count_orders(sale, "CANCELLED").await), (paid, cancelled));
    let report = settled(&env, sale).await;
    assert_eq!((report.redis_remaining, report.returned, report.refunds_due), (cancelled, cancelled, cancelled));
    assert_eq!(report.payments_applied, paid);
    edge.stop().await;
    order.stop().await;
}
