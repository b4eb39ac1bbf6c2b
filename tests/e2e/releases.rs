//! A release: an activity whose sizes (each its own sale) share one limit
//! of units per customer. Tried as a customer would — concurrent orders
//! across sizes, through two edges — and through every way back.

use crate::lifecycle::{post, settled};
use futures::StreamExt;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::domain::{ActivityId, Limits, SaleKey};
use seckill_shared::stock::TakeId;
use std::time::Duration;

/// `sizes` sales of one fresh activity, each with `stock` units and the
/// per-sale `limits`.
async fn release_sizes(env: &TestEnv, sizes: i64, stock: i64, limits: Limits) -> Vec<SaleKey> {
    let activity = env.sale().activity.get();
    let mut sales = Vec::new();
    for sku in 1..=sizes {
        let sale = SaleKey::from_raw(activity, 40 + sku).unwrap();
        env.warmup_limited(sale, stock, 900, limits).await;
        sales.push(sale);
    }
    sales
}

/// Declares `activity` a release of `limit` per customer through the
/// operators' API.
async fn declare(console: &Client, activity: ActivityId, limit: u32) -> Reply {
    let body = format!(r#"{{"perCustomerLimit":{limit}}}"#);
    console.admin(hyper::Method::PUT, &format!("/admin/releases/{activity}"), Some(body.as_bytes())).await
}

async fn order(client: &Client, sale: SaleKey, user: i64, quantity: u32) -> Reply {
    client.order_units(sale.activity.get(), sale.sku.get(), user, quantity).await
}

/// The units `user`'s live orders hold across `activity`'s sizes, as
/// PostgreSQL has them.
async fn units_in_orders(env: &TestEnv, activity: ActivityId, user: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(quantity), 0)::bigint FROM orders
          WHERE activity_id = $1 AND user_id = $2 AND status IN ('CREATED', 'PAID')",
    )
    .bind(activity.get())
    .bind(user)
    .fetch_one(&env.db)
    .await
    .unwrap()
}

/// Two edges letting one customer send their bursts (the per-user rate
/// limit is not what these tests try).
async fn two_edges(env: &TestEnv) -> (seckill_e2e::Running, seckill_e2e::Running) {
    let mut settings = env.edge_settings();
    (settings.rate_limit.per_user_per_second, settings.rate_limit.per_user_burst) = (1_000, 1_000);
    (env.spawn_edge(settings.clone()).await, env.spawn_edge(settings).await)
}

/// Waits until the edge behind `client` holds `size`'s release of `limit`
/// (an edge reads the declared releases once a second): asked for one unit
/// more than the limit (more than the size's most per order too), an edge
/// holding it refuses the take (409 naming the release), one that does not
/// yet refuses the deduction (400); neither keeps anything.
async fn until_held(client: &Client, size: SaleKey, limit: u32) {
    eventually("the edge holding the release", Duration::from_secs(10), || async {
        match order(client, size, 999_999, limit + 1).await {
            held if held.json["release"].is_i64() => Ok(()),
            other => Err(other.text),
        }
    })
    .await;
}

/// Waits (a minute at most) until `customer` holds nothing in `activity`'s
/// release: `what` gave it back.
async fn given_back(env: &TestEnv, activity: ActivityId, customer: i64, what: &str) {
    eventually(what, Duration::from_secs(60), || async {
        match env.stock.releases().release_held(activity).await.unwrap().get(&customer) {
            None => Ok(()),
            held => Err(format!("{held:?} still taken")),
        }
    })
    .await;
}

fn one_each() -> Limits {
    Limits { per_user_limit: 1, max_per_order: 1 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_orders_across_fourteen_sizes_and_two_edges_buy_one_pair() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 14, 5, one_each()).await;
    let activity = sizes[0].activity;
    let (first, second) = two_edges(&env).await;
    let _order = env.spawn_order(env.order_settings()).await;
    let declared = declare(&Client::new(first.console_url()), activity, 1).await;
    assert_eq!(declared.status, 200, "{}", declared.text);
    assert_eq!(declared.json["perCustomerLimit"], 1);
    let clients = [Client::new(first.url()), Client::new(second.url())];
    until_held(&clients[1], sizes[0], 1).await;

    let answers: Vec<Reply> = futures::stream::iter(0..50)
        .map(|i| order(&clients[i % 2], sizes[i % 14], 7, 1))
        .buffer_unordered(50)
        .collect()
        .await;
    let accepted = answers.iter().filter(|r| r.status == 202).count();
    assert_eq!(accepted, 1, "one pair per customer: {:?}", answers.iter().map(|r| r.status).collect::<Vec<_>>());
    for refused in answers.iter().filter(|r| r.status != 202) {
        // Another size of the release, or the same size again.
        if refused.json["code"] == "LIMIT_REACHED" {
            assert_eq!(refused.json["release"].as_i64(), Some(activity.get()), "{}", refused.text);
            assert_eq!((refused.json["held"].as_i64(), refused.json["limit"].as_i64()), (Some(1), Some(1)));
        } else {
            assert_error(refused, 409, "ALREADY_PURCHASED", "the size bought");
        }
    }
    // Another customer still buys: the limit is per customer.
    assert_eq!(order(&clients[1], sizes[3], 8, 1).await.status, 202);
    eventually("both orders written", Duration::from_secs(30), || async {
        match units_in_orders(&env, activity, 7).await + units_in_orders(&env, activity, 8).await {
            2 => Ok(()),
            n => Err(format!("{n} units in orders")),
        }
    })
    .await;
    let books = env.stock.releases().release_held(activity).await.unwrap();
    assert_eq!((books.get(&7), books.get(&8)), (Some(&1), Some(&1)));
    let report = seckill_shared::books::reconcile_release(&env.stock, &env.db, activity).await.unwrap();
    assert!(report.consistent && report.most_held == 1, "{report:?}");
    let books = env.ctl(&["reconcile", "--release", &activity.to_string()]).await;
    assert_eq!(books.code, 0, "{books:?}");
    // The console reads the same books: its API and its dashboard.
    let console = Client::new(first.console_url());
    let read = console.admin(hyper::Method::GET, &format!("/admin/releases/{activity}"), None).await;
    assert_eq!((read.status.as_u16(), read.json["mostHeld"].as_i64()), (200, Some(1)), "{}", read.text);
    let figures = console.admin(hyper::Method::GET, "/admin/dashboard/snapshot", None).await;
    let shown = figures.json["releases"].as_array().into_iter().flatten().find(|r| r["activityId"] == activity.get());
    assert_eq!(shown.map(|r| (r["customers"].as_i64(), r["consistent"].as_bool())), Some((Some(2), Some(true))));
    let line =
        |term: &str| books.stdout.lines().find(|l| l.starts_with(term)).map(|l| l[term.len()..].trim().to_owned());
    assert_eq!((line("customers over the limit"), line("verdict")), (Some("0".into()), Some("consistent".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_name_a_customer_who_bought_sizes_before_the_release_was_declared() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 2, 5, one_each()).await;
    let activity = sizes[0].activity;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let _order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    for size in &sizes {
        assert_eq!(order(&client, *size, 31, 1).await.status, 202);
    }
    env.wait_orders(sizes[1], "CREATED", 1).await;
    env.wait_orders(sizes[0], "CREATED", 1).await;
    let declared = env.ctl(&["release", "--activity", &activity.to_string(), "--per-customer-limit", "1"]).await;
    assert_eq!(declared.code, 0, "{declared:?}");
    let books = env.ctl(&["reconcile", "--release", &activity.to_string(), "--json"]).await;
    assert_eq!(books.code, 1, "a customer over the limit is NOT consistent: {books:?}");
    let report: serde_json::Value = serde_json::from_str(&books.stdout).unwrap();
    assert_eq!(report["overLimit"][0]["userId"], 31, "{report}");
    assert_eq!(report["overLimit"][0]["unitsInOrders"], 2, "{report}");
    assert_eq!(report["undercounted"][0]["unitsTaken"], 0, "orders placed before it are not counted: {report}");
    // From now on (the edge reads it within a second) the release holds: a
    // new customer buys one size, and no second.
    until_held(&client, sizes[0], 1).await;
    let customer = 40;
    assert_eq!(order(&client, sizes[0], customer, 1).await.status, 202);
    assert_error(&order(&client, sizes[1], customer, 1).await, 409, "LIMIT_REACHED", "the release holds now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_of_one_to_three_units_across_sizes_never_pass_four() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 6, 20, Limits { per_user_limit: 3, max_per_order: 3 }).await;
    let activity = sizes[0].activity;
    let (first, second) = two_edges(&env).await;
    let _order = env.spawn_order(env.order_settings()).await;
    assert_eq!(declare(&Client::new(second.console_url()), activity, 4).await.status, 200);
    let clients = [Client::new(first.url()), Client::new(second.url())];
    until_held(&clients[0], sizes[0], 4).await;

    for user in 1..=5 {
        let answers: Vec<(u32, Reply)> = futures::stream::iter(0..24)
            .map(|i| {
                let quantity = 1 + (i as u32 + user as u32) % 3;
                let reply = order(&clients[i % 2], sizes[i % 6], user, quantity);
                async move { (quantity, reply.await) }
            })
            .buffer_unordered(24)
            .collect()
            .await;
        let mut held = 0;
        for (quantity, reply) in &answers {
            match reply.status.as_u16() {
                202 => held += quantity,
                409 if reply.json["release"].is_i64() => {
                    let was = reply.json["held"].as_u64().unwrap() as u32;
                    assert!(was + quantity > 4 && reply.json["limit"] == 4, "{}", reply.text);
                }
                409 => assert_error(reply, 409, "LIMIT_REACHED", "the size's own limit"),
                status => panic!("{quantity} units: {status} {}", reply.text),
            }
        }
        assert!((2..=4).contains(&held), "customer {user} holds {held} units of a release of four");
    }
    let report = seckill_shared::books::reconcile_release(&env.stock, &env.db, activity).await.unwrap();
    assert!(report.over_limit.is_empty() && report.most_held <= 4, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_expired_pair_gives_the_release_back_and_the_customer_buys_another_size() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 3, 5, one_each()).await;
    let activity = sizes[0].activity;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let _order = env.spawn_order(env.order_settings()).await;
    assert_eq!(declare(&Client::new(edge.console_url()), activity, 1).await.status, 200);
    let client = Client::new(edge.url());

    let order_id = crate::lifecycle::created_order(&client, sizes[0], 9).await;
    assert_error(&order(&client, sizes[1], 9, 1).await, 409, "LIMIT_REACHED", "one per customer");
    // Another customer's pair is not paid within its window (2 s, size 3):
    // cancelled at its deadline, its release unit back with its size's.
    env.warmup_limited(sizes[2], 5, 2, one_each()).await;
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    let unpaid = crate::lifecycle::created_order(&client, sizes[2], 10).await;
    let unpaid = seckill_shared::domain::OrderId::parse(&unpaid).unwrap();
    env.wait_status(&unpaid, ("CANCELLED", Some("EXPIRED")), Duration::from_secs(60)).await;
    given_back(&env, activity, 10, "the expired pair's release unit back").await;
    let cancelled = post(&client, &order_id, "cancel", 9, None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(env.stock.releases().release_held(activity).await.unwrap().get(&9), None, "the release's unit is back");
    // Given back once: the size's unit and the release's.
    let again = order(&client, sizes[1], 9, 1).await;
    assert_eq!(again.status, 202, "{}", again.text);
    assert_eq!(env.stock.releases().release_held(activity).await.unwrap().get(&9), Some(&1));
    let _ = settled(&env, sizes[1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_whose_order_never_came_is_given_back_by_the_sweep() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 2, 5, one_each()).await;
    let activity = sizes[0].activity;
    env.stock.releases().declare_release(activity, 1).await.unwrap();
    // The edge died between its take and its deduction: a take, no order.
    let take = TakeId::new(sizes[0].sku, "00000000000000aa");
    let user = seckill_shared::domain::UserId::new(11).unwrap();
    let taken = env.stock.releases().release_take(activity, &take, user, 1, Duration::from_millis(500)).await.unwrap();
    assert!(matches!(taken, seckill_shared::stock::Take::Taken { held: 1, limit: 1 }), "{taken:?}");
    let refused =
        env.stock.releases().release_take(activity, &TakeId::new(sizes[1].sku, "bb"), user, 1, Duration::ZERO).await;
    assert!(matches!(refused, Ok(seckill_shared::stock::Take::LimitReached { .. })), "counts against them meanwhile");
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    given_back(&env, activity, 11, "the sweep gave the take back").await;
    // Once: the customer may buy now, and the take is not given twice.
    let edge = env.spawn_edge(env.edge_settings()).await;
    assert_eq!(order(&Client::new(edge.url()), sizes[1], 11, 1).await.status, 202);
    assert_eq!(env.stock.releases().release_held(activity).await.unwrap().get(&11), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_order_gives_the_release_back_and_a_redrive_takes_it_again() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 2, 5, one_each()).await;
    let activity = sizes[0].activity;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let _order = env.spawn_order(env.order_settings()).await;
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    assert_eq!(declare(&Client::new(edge.console_url()), activity, 1).await.status, 200);
    let client = Client::new(edge.url());
    // A bad release of the database refuses user 1001's orders, then is
    // fixed: the order is dead-lettered and settled FAILED.
    sqlx::query(
        "ALTER TABLE orders ADD CONSTRAINT bad_db_release CHECK (status <> 'CREATED' OR user_id < 1000) NOT VALID",
    )
    .execute(&env.db)
    .await
    .unwrap();
    assert_eq!(order(&client, sizes[0], 1001, 1).await.status, 202);
    env.wait_orders(sizes[0], "FAILED", 1).await;
    eventually("the release's unit back with the size's", Duration::from_secs(60), || async {
        let held = env.stock.releases().release_held(activity).await.unwrap();
        match (held.get(&1001), env.redis_stock(sizes[0]).await) {
            (None, 5) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    sqlx::query("ALTER TABLE orders DROP CONSTRAINT bad_db_release").execute(&env.db).await.unwrap();
    // Placed again, twice asked: its release's unit taken once.
    let sale_arg = sizes[0].to_string();
    for run in 0..2 {
        let redrive = env.ctl(&["dlq", "redrive", "--sale", &sale_arg]).await;
        assert_eq!(redrive.code, 0, "run {run}: {redrive:?}");
    }
    env.wait_orders(sizes[0], "CREATED", 1).await;
    assert_eq!(env.stock.releases().release_held(activity).await.unwrap().get(&1001), Some(&1));
    assert_error(&order(&client, sizes[1], 1001, 1).await, 409, "LIMIT_REACHED", "the redriven pair counts");
    let report = seckill_shared::books::reconcile_release(&env.stock, &env.db, activity).await.unwrap();
    assert!(report.consistent && report.most_held == 1 && report.takes_pending == 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_dead_before_its_keep_leaves_an_order_the_sweeper_keeps_or_fails() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 2, 5, one_each()).await;
    let activity = sizes[0].activity;
    env.stock.releases().declare_release(activity, 1).await.unwrap();
    let deadline = Duration::from_secs(1);
    // Customer 21: taken and deducted, neither kept nor published. Customer
    // 22: the same, but the take was given back before the sweeper came (as
    // the releases' sweep does with a take it found no order of).
    let mut orders = Vec::new();
    for (user, nonce) in [(21, "00000000000000c1"), (22, "00000000000000c2")] {
        let take = TakeId::new(sizes[0].sku, nonce);
        let customer = seckill_shared::domain::UserId::new(user).unwrap();
        env.stock.releases().release_take(activity, &take, customer, 1, Duration::from_secs(600)).await.unwrap();
        let deduction = env.stock.orders().deduct(sizes[0], customer, 1, nonce, deadline).await.unwrap();
        let seckill_shared::stock::Deduction::Accepted { order_id, .. } = deduction else { panic!("{deduction:?}") };
        orders.push(order_id);
    }
    env.stock.releases().release_give(activity, &[TakeId::new(sizes[0].sku, "00000000000000c2")], false).await.unwrap();
    let _order = env.spawn_order(env.order_settings()).await;
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_orders(sizes[0], "CREATED", 1).await;
    env.wait_orders(sizes[0], "FAILED", 1).await;
    let status = |id: &seckill_shared::domain::OrderId| {
        sqlx::query_scalar::<_, String>("SELECT status FROM orders WHERE order_id = $1").bind(id.as_str().to_owned())
    };
    assert_eq!(status(&orders[0]).fetch_one(&env.db).await.unwrap(), "CREATED", "its take kept, published");
    assert_eq!(status(&orders[1]).fetch_one(&env.db).await.unwrap(), "FAILED", "its take gone: never published");
    let held = env.stock.releases().release_held(activity).await.unwrap();
    assert_eq!((held.get(&21), held.get(&22)), (Some(&1), None));
    let report = seckill_shared::books::reconcile_release(&env.stock, &env.db, activity).await.unwrap();
    assert!(report.consistent && report.takes_pending == 0, "{report:?}");
    let _ = settled(&env, sizes[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_rewarmed_under_an_order_gives_its_release_unit_back() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 2, 5, one_each()).await;
    let activity = sizes[0].activity;
    let edge = env.spawn_edge(env.edge_settings()).await;
    assert_eq!(declare(&Client::new(edge.console_url()), activity, 1).await.status, 200);
    let client = Client::new(edge.url());
    // Placed in round 1 (its record on the topic, nobody writing it yet),
    // then the size warmed again over it: the order can never be round 2's.
    let placed = order(&client, sizes[0], 51, 1).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let order_id = seckill_shared::domain::OrderId::parse(placed.json["orderId"].as_str().unwrap()).unwrap();
    env.warmup_limited(sizes[0], 5, 900, one_each()).await;
    assert_error(&order(&client, sizes[1], 51, 1).await, 409, "LIMIT_REACHED", "its take counts meanwhile");
    let _order = env.spawn_order(env.order_settings()).await;
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_status(&order_id, ("FAILED", Some("ROUND_REPLACED")), Duration::from_secs(60)).await;
    given_back(&env, activity, 51, "the release's unit back").await;
    assert_eq!(order(&client, sizes[1], 51, 1).await.status, 202, "the customer buys another size");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_take_whose_order_was_rolled_back_is_given_back_by_the_sweep() {
    let env = TestEnv::new().await;
    let sizes = release_sizes(&env, 1, 5, one_each()).await;
    let activity = sizes[0].activity;
    env.stock.releases().declare_release(activity, 1).await.unwrap();
    // An edge took, deducted and kept; its publish failed and its rollback
    // landed, but it never heard so (202 UNCONFIRMED) and gave nothing back.
    let (nonce, customer) = ("00000000000000d1", seckill_shared::domain::UserId::new(61).unwrap());
    let take = TakeId::new(sizes[0].sku, nonce);
    env.stock.releases().release_take(activity, &take, customer, 1, Duration::from_secs(600)).await.unwrap();
    let deduction = env.stock.orders().deduct(sizes[0], customer, 1, nonce, Duration::from_secs(30)).await.unwrap();
    let seckill_shared::stock::Deduction::Accepted { order_id, .. } = deduction else { panic!("{deduction:?}") };
    assert!(env.stock.releases().release_keep(&take, &order_id).await.unwrap());
    let held = seckill_shared::domain::Holding::ONE;
    let failed = seckill_shared::domain::FailReason::PublishFailed;
    assert!(env.stock.orders().rollback(&order_id, customer, held, failed, Duration::from_secs(30)).await.unwrap());
    assert_eq!(env.stock.releases().release_held(activity).await.unwrap().get(&61), Some(&1), "counted against them");
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    given_back(&env, activity, 61, "the kept take given back").await;
}
