//! The order lifecycle: a CREATED order awaits payment until its deadline,
//! then is PAID or CANCELLED; a cancelled order's unit goes back to its own
//! round exactly once and sells again.

use hyper::Method;
use seckill_e2e::http::{signed_now, Client, Reply, WEBHOOK_SECRET};
use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::books::{reconcile, Report};
use seckill_shared::domain::{OrderId, OrderRecord, SaleKey, UserId};
use seckill_shared::orders::cancellation::{self, Cancel, CancelReason, CancelledOrder};
use std::time::Duration;

async fn post(client: &Client, order_id: &str, action: &str, user: i64, key: Option<&str>) -> Reply {
    let body = format!(r#"{{"userId":{user}}}"#);
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    client.send(Method::POST, &format!("/api/seckill/order/{order_id}/{action}"), Some(body.as_bytes()), &headers).await
}

/// Places an order through the edge and waits until it is CREATED.
async fn created_order(client: &Client, sale: SaleKey, user: i64) -> String {
    let placed = client.order(sale.activity.get(), sale.sku.get(), user).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let order_id = placed.json["orderId"].as_str().expect("an order id").to_owned();
    eventually("the order CREATED with its deadline", Duration::from_secs(30), || async {
        let seen = client.get(&format!("/api/seckill/order/{order_id}")).await;
        if seen.json["status"] == "CREATED" && seen.json["payDeadline"].is_string() {
            Ok(())
        } else {
            Err(seen.text)
        }
    })
    .await;
    order_id
}

/// The reconciliation once everything has settled and every event relayed.
async fn settled(env: &TestEnv, sale: SaleKey) -> Report {
    eventually("the sale settled and consistent", Duration::from_secs(60), || async {
        let report = reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true).await.map_err(|e| e.to_string())?;
        if report.consistent {
            Ok(report)
        } else {
            Err(format!("{:?}", report.violations))
        }
    })
    .await
}

async fn db_remaining(env: &TestEnv, sale: SaleKey) -> i64 {
    seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap().remaining_stock
}

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

    let report = settled(&env, sale).await;
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
    assert_eq!(settled(&env, sale).await.refunds_due, 0, "refunded");
    edge.stop().await;
    order.stop().await;
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
async fn a_cancelled_unit_goes_back_once_and_sells_to_another_buyer() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());

    let first = created_order(&client, sale, 1).await;
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 2).await.code(), "SOLD_OUT");
    assert_eq!(post(&client, &first, "cancel", 2, None).await.status, 403, "only its buyer cancels it");
    let cancelled = post(&client, &first, "cancel", 1, None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(
        (cancelled.json["status"].as_str(), cancelled.json["reason"].as_str()),
        (Some("CANCELLED"), Some("BUYER_CANCELLED"))
    );
    assert!(cancelled.json["cancelledAt"].is_string());
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (1, 1), "the unit is back in both");

    // A repeated cancel, and the return replayed (a worker restarted after
    // Redis took the unit but before the row was marked): nothing twice.
    assert_eq!(post(&client, &first, "cancel", 1, None).await.json["status"], "CANCELLED");
    let replay = [CancelledOrder {
        order_id: OrderId::parse(&first).unwrap(),
        user: UserId::new(1).unwrap(),
        reason: CancelReason::BuyerCancelled,
    }];
    assert_eq!(cancellation::return_units(&env.stock, &env.db, &replay).await.unwrap().units, 0);
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (1, 1));
    // Its record delivered again: the order service's follow-up leaves the
    // cancelled order as it is.
    let accepted = env.stock.order_state(&replay[0].order_id).await.unwrap().unwrap().accepted_at;
    env.stock.follow_created(&[(replay[0].order_id.clone(), replay[0].user, accepted)]).await.unwrap();
    let state = env.stock.order_state(&replay[0].order_id).await.unwrap().unwrap();
    assert_eq!((state.status.as_str(), env.redis_stock(sale).await), ("CANCELLED", 1));

    // The payment that comes after: recorded, owed back.
    let late = client.pay(&first, "late-1").await;
    assert_eq!(
        (late.status.as_u16(), late.json["outcome"].as_str(), late.json["refundReason"].as_str()),
        (200, Some("REFUND_DUE"), Some("ORDER_CANCELLED")),
        "{}",
        late.text
    );
    assert_eq!(client.get(&format!("/api/seckill/order/{first}")).await.json["status"], "CANCELLED");

    // The unit sells again, to the buyer this edge had told "sold out".
    let second = created_order(&client, sale, 2).await;
    assert_ne!(first, second);
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 3).await.code(), "SOLD_OUT");
    let report = settled(&env, sale).await;
    assert_eq!(
        (report.orders_created, report.orders_cancelled, report.returned, report.refunds_due, report.redis_remaining),
        (1, 1, 1, 1, 0)
    );

    // Downstream sees each change once, in the events' schema.
    let events = env.read_topic(&env.topics().events, 4, Duration::from_secs(10)).await;
    let values: Vec<_> = events.iter().map(|m| (super::downstream::json(m), "an order event".to_owned())).collect();
    seckill_e2e::schemas::assert_valid("order-events.v1.json", &values);
    let mut seen: Vec<(String, String)> = values
        .iter()
        .map(|(event, _)| {
            (event["eventId"].as_str().unwrap().to_owned(), event["reason"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    seen.sort();
    let mut expected = vec![
        (format!("{first}:CREATED"), String::new()),
        (format!("{first}:CANCELLED"), "BUYER_CANCELLED".to_owned()),
        (format!("{first}:REFUND_DUE:late-1"), "ORDER_CANCELLED".to_owned()),
        (format!("{second}:CREATED"), String::new()),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    env.verify_events(sale).await;
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
    assert_eq!(seckill_compensator::deadlines::poll_once(&deps, 1_000).await.unwrap(), 30);
    assert_eq!(seckill_compensator::deadlines::poll_once(&deps, 1_000).await.unwrap(), 0);
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

/// An order the edge rolled back (its publish definitely failed; the buyer
/// was told 503) never becomes payable: a cancel answers ORDER_FAILED, not
/// ORDER_PENDING forever, and a payment for it is owed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_order_answers_order_failed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let record = env.deduct(sale, 7).await;
    let rolled_back = env
        .stock
        .rollback(
            &record.order_id,
            record.user_id,
            seckill_shared::domain::FailReason::PublishFailed,
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(rolled_back);
    let reply = post(&client, record.order_id.as_str(), "cancel", 7, None).await;
    assert_eq!((reply.status.as_u16(), reply.code()), (409, "ORDER_FAILED"), "{}", reply.text);
    let paid = client.pay(record.order_id.as_str(), "pay_rolled_back").await;
    assert_eq!(paid.json["refundReason"], "ORDER_FAILED", "{}", paid.text);
    edge.stop().await;
}

/// With no identity configured, an order is still placed by the body's
/// user id (the seed's contract), but nobody can act for a user by naming
/// their id: a cancel and a read by user id are refused, and a repeat order
/// does not answer the order id. (Before: a cancel naming another user's id
/// answered 200 and the order became CANCELLED; the look-up by user id and
/// the 409 handed out the user's order id.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_identity_nobody_cancels_or_reads_for_another_user() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let mut settings = env.edge_settings();
    settings.auth.allow_anonymous = false;
    let edge = env.spawn_edge(settings).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    let id = created_order(&client, sale, 5).await;
    let again = client.order(sale.activity.get(), sale.sku.get(), 5).await;
    assert_eq!((again.status.as_u16(), again.code()), (409, "ALREADY_PURCHASED"));
    assert!(again.json.get("orderId").is_none(), "no order id to whoever names the user: {}", again.text);
    let cancel = post(&client, &id, "cancel", 5, None).await;
    assert_eq!((cancel.status.as_u16(), cancel.code()), (401, "UNAUTHORIZED"), "{}", cancel.text);
    let result =
        client.get(&format!("/api/seckill/result?activityId={}&skuId={}&userId=5", sale.activity, sale.sku)).await;
    assert_eq!((result.status.as_u16(), result.code()), (401, "UNAUTHORIZED"), "{}", result.text);
    assert!(!result.text.contains(&id) && !cancel.text.contains(&id));
    assert_eq!(env.count_orders(sale, "CREATED").await, 1, "nothing changed");
    let ready = seckill_e2e::wait_ready(&client).await;
    assert_eq!(ready.text, "ready", "anonymous access is off");
    let bearer = format!("Bearer {}", seckill_e2e::ADMIN_TOKEN);
    let page = client.send(Method::GET, "/admin/dashboard", None, &[("authorization", &bearer)]).await;
    assert!(page.status == 200 && !page.text.contains(r#"id="anonymous""#), "{}", page.text);
    // Turned on, it says so where an operator looks.
    let open = env.spawn_edge(env.edge_settings()).await;
    let open_client = Client::new(open.url());
    let ready = seckill_e2e::wait_ready(&open_client).await;
    assert_eq!(ready.text, "ready (auth.allow_anonymous: no user identity)");
    let page = open_client.send(Method::GET, "/admin/dashboard", None, &[("authorization", &bearer)]).await;
    assert!(page.text.contains(r#"id="anonymous""#), "{}", page.text);
    open.stop().await;
    edge.stop().await;
    order.stop().await;
}
