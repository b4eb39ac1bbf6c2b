//! The order lifecycle: a CREATED order awaits payment until its deadline,
//! then is PAID or CANCELLED; a cancelled order's unit goes back to its own
//! round exactly once and sells again.

use hyper::Method;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::books::{reconcile, Report};
use seckill_shared::domain::{Holding, OrderId, SaleKey, UserId};
use seckill_shared::orders::cancellation::{self, CancelReason, CancelledOrder};
use std::time::Duration;

pub(crate) async fn post(client: &Client, order_id: &str, action: &str, user: i64, key: Option<&str>) -> Reply {
    let body = format!(r#"{{"userId":{user}}}"#);
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    client.send(Method::POST, &format!("/api/seckill/order/{order_id}/{action}"), Some(body.as_bytes()), &headers).await
}

/// Places an order through the edge and waits until it is CREATED.
pub(crate) async fn created_order(client: &Client, sale: SaleKey, user: i64) -> String {
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
pub(crate) async fn settled(env: &TestEnv, sale: SaleKey) -> Report {
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

pub(crate) async fn db_remaining(env: &TestEnv, sale: SaleKey) -> i64 {
    seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap().remaining_stock
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
    let (order_id, user, reason) =
        (OrderId::parse(&first).unwrap(), UserId::new(1).unwrap(), CancelReason::BuyerCancelled);
    let replay = [CancelledOrder { order_id, user, reason, held: Holding::ONE }];
    assert_eq!(cancellation::return_units(&env.stock, &env.db, &replay).await.unwrap().units, 0);
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (1, 1));
    // Its record delivered again: the order service's follow-up leaves the
    // cancelled order as it is.
    let orders = env.stock.orders();
    let accepted = orders.order_state(&replay[0].order_id).await.unwrap().unwrap().accepted_at;
    orders.follow_created(&[(replay[0].order_id.clone(), replay[0].user, accepted, Holding::ONE)]).await.unwrap();
    let state = orders.order_state(&replay[0].order_id).await.unwrap().unwrap();
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
        .orders()
        .rollback(
            &record.order_id,
            record.user_id,
            Holding::ONE,
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
    let console = Client::new(edge.console_url());
    let page = console.send(Method::GET, "/admin/dashboard", None, &[("authorization", &bearer)]).await;
    assert!(page.status == 200 && !page.text.contains(r#"id="anonymous""#), "{}", page.text);
    // Turned on, it says so where an operator looks.
    let open = env.spawn_edge(env.edge_settings()).await;
    let open_client = Client::new(open.url());
    let ready = seckill_e2e::wait_ready(&open_client).await;
    assert_eq!(ready.text, "ready (auth.allow_anonymous: no user identity)");
    let open_console = Client::new(open.console_url());
    let page = open_console.send(Method::GET, "/admin/dashboard", None, &[("authorization", &bearer)]).await;
    assert!(page.text.contains(r#"id="anonymous""#), "{}", page.text);
    open.stop().await;
    edge.stop().await;
    order.stop().await;
}
