//! Several units in one order and a limit per user: every decision counts
//! units, all or nothing, and every way back gives an order's units back
//! whole, once.

use crate::contract::state;
use crate::lifecycle::{db_remaining, post, settled};
use futures::StreamExt;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{Group, TestEnv};
use seckill_shared::domain::{FailReason, Limits, SaleKey};
use seckill_shared::stock::{Compensation, CompensationMode};

fn limits(per_user_limit: u32, max_per_order: u32) -> Limits {
    Limits { per_user_limit, max_per_order }
}

async fn order(client: &Client, sale: SaleKey, user: i64, quantity: u32) -> Reply {
    client.order_units(sale.activity.get(), sale.sku.get(), user, quantity).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_asking_for_one_two_or_three_units_buys_exactly_the_stock() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_limited(sale, 25, 900, limits(2, 2)).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let _order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());

    // Users 1..=60 ask for 1, 2 or 3 units (3 is over the most per order).
    let answers: Vec<(u32, Reply)> = futures::stream::iter(1..=60)
        .map(|user| {
            let (client, quantity) = (&client, 1 + (user % 3) as u32);
            async move { (quantity, order(client, sale, user, quantity).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut sold = 0;
    for (quantity, reply) in &answers {
        match (quantity, reply.status.as_u16()) {
            // Over maxPerOrder; once the edge knows the sale sold out, that
            // comes first (nothing is asked of Redis).
            (3, status) => assert!(
                status == 400 || status == 410 && reply.json.get("available").is_none(),
                "three units are over maxPerOrder: {status} {}",
                reply.text
            ),
            (_, 202) => sold += quantity,
            (_, 410) => {
                let available = reply.json["available"].as_u64().unwrap_or(0) as u32;
                assert!(available < *quantity, "refused with {available} left for {quantity}: {}", reply.text);
            }
            (_, status) => panic!("{quantity} units: {status} {}", reply.text),
        }
    }
    // What the crowd left (a unit no order of two could take) goes to
    // buyers of one.
    let mut late = 100;
    while order(&client, sale, late, 1).await.status == 202 {
        (sold, late) = (sold + 1, late + 1);
    }
    assert_eq!(sold, 25, "exactly the stock, to the unit");
    let report = settled(&env, sale).await;
    assert_eq!((report.units_created, report.db_remaining, report.redis_remaining), (25, 0, 0));
    assert_eq!((report.users_over_limit, report.duplicate_users), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_racing_one_users_orders_never_pass_the_limit() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_limited(sale, 50, 900, limits(3, 2)).await;
    let (first, second) = (env.spawn_edge(env.edge_settings()).await, env.spawn_edge(env.edge_settings()).await);
    let _order = env.spawn_order(env.order_settings()).await;
    let clients = [Client::new(first.url()), Client::new(second.url())];

    let answers: Vec<(u32, Reply)> = futures::stream::iter(0..20)
        .map(|i| {
            let (client, quantity) = (&clients[i % 2], 1 + (i % 2) as u32);
            async move { (quantity, order(client, sale, 7, quantity).await) }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    let mut held = 0;
    for (quantity, reply) in &answers {
        match reply.status.as_u16() {
            202 => held += quantity,
            409 => {
                assert_error(reply, 409, "LIMIT_REACHED", "over the limit");
                let (was, limit) = (reply.json["held"].as_u64().unwrap(), reply.json["limit"].as_u64().unwrap());
                assert!(was as u32 + quantity > 3 && limit == 3, "{}", reply.text);
            }
            status => panic!("{quantity} units: {status} {}", reply.text),
        }
    }
    assert!((2..=3).contains(&held), "the user holds {held} units");
    env.wait_orders(sale, "CREATED", answers.iter().filter(|(_, r)| r.status == 202).count() as i64).await;
    let report = settled(&env, sale).await;
    assert_eq!((report.units_created, report.users_over_limit, report.per_user_limit), (i64::from(held), 0, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_at_the_limit_who_cancels_may_buy_again_up_to_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_limited(sale, 10, 900, limits(2, 2)).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let _order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());

    let pair = created_order_of(&client, sale, 5, 2).await;
    let refused = order(&client, sale, 5, 1).await;
    assert_error(&refused, 409, "LIMIT_REACHED", "at the limit");
    assert_eq!((refused.json["held"].as_i64(), refused.json["limit"].as_i64()), (Some(2), Some(2)));
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (8, 8));

    let cancelled = post(&client, &pair, "cancel", 5, None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!((env.redis_stock(sale).await, db_remaining(&env, sale).await), (10, 10), "both units back, once");
    // Cancelled again: nothing more comes back.
    assert_eq!(post(&client, &pair, "cancel", 5, None).await.json["status"], "CANCELLED");
    assert_eq!(env.redis_stock(sale).await, 10);

    // Up to the limit again, in two orders of one.
    created_order_of(&client, sale, 5, 1).await;
    created_order_of(&client, sale, 5, 1).await;
    assert_error(&order(&client, sale, 5, 1).await, 409, "LIMIT_REACHED", "at the limit again");
    let report = settled(&env, sale).await;
    assert_eq!((report.units_created, report.orders_created, report.db_remaining), (2, 2, 8));
    assert_eq!((report.orders_cancelled, report.users_over_limit), (1, 0));
}

/// Places an order of `quantity` units and waits until it is CREATED.
async fn created_order_of(client: &Client, sale: SaleKey, user: i64, quantity: u32) -> String {
    let placed = order(client, sale, user, quantity).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let order_id = placed.json["orderId"].as_str().expect("an order id").to_owned();
    seckill_e2e::eventually("the order CREATED", std::time::Duration::from_secs(30), || async {
        let seen = client.get(&format!("/api/seckill/order/{order_id}")).await;
        if seen.json["status"] == "CREATED" {
            Ok(())
        } else {
            Err(seen.text)
        }
    })
    .await;
    order_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_for_more_units_than_are_left_is_refused_whole_and_changes_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_limited(sale, 2, 900, limits(5, 4)).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let before = state(&env, sale).await;

    let three = order(&client, sale, 1, 3).await;
    assert_error(&three, 410, "SOLD_OUT", "three of two");
    assert_eq!(three.json["available"].as_i64(), Some(2), "{}", three.text);
    assert_error(&order(&client, sale, 1, 5).await, 400, "INVALID_REQUEST", "over maxPerOrder");
    assert_error(&order(&client, sale, 1, 0).await, 400, "INVALID_REQUEST", "no units");
    assert_eq!(state(&env, sale).await, before, "nothing taken, nobody's limit touched");
    let two = order(&client, sale, 1, 2).await;
    assert_eq!(two.status, 202, "the two that are left: {}", two.text);
    // Not written (no order service here): the reservation says its units.
    let queued = client.get(&format!("/api/seckill/order/{}", two.json["orderId"].as_str().unwrap())).await;
    assert_eq!((queued.json["status"].as_str(), queued.json["quantity"].as_i64()), (Some("QUEUED"), Some(2)));
    let gone = order(&client, sale, 2, 1).await;
    assert_error(&gone, 410, "SOLD_OUT", "none left");
    assert!(gone.json.get("available").is_none(), "none left says no count: {}", gone.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_warmed_without_limits_sells_one_unit_per_user_as_before() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let before = state(&env, sale).await;
    assert_error(&order(&client, sale, 1, 2).await, 400, "INVALID_REQUEST", "two of a sale of one per order");
    assert_eq!(state(&env, sale).await, before);
    assert_eq!(order(&client, sale, 1, 1).await.status, 202);
    assert_error(&client.order(sale.activity.get(), sale.sku.get(), 1).await, 409, "ALREADY_PURCHASED", "again");
    assert_eq!(env.redis_stock(sale).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_order_gives_its_units_back_once_and_frees_its_place() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup_limited(sale, 6, 900, limits(3, 3)).await;
    let failed = env.try_deduct_units(sale, 1, 3).await.expect("three units");
    assert_eq!(env.redis_stock(sale).await, 3);
    assert!(env.try_deduct_units(sale, 1, 1).await.is_err(), "the user holds their three");

    // Settled by the compensator from the dead-letter topic, twice over.
    for _ in 0..2 {
        env.dead_letter(&failed, "DB_REJECTED").await;
    }
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_drained(Group::Compensator).await;
    assert_eq!(env.redis_stock(sale).await, 6, "all three back, once");
    // Settled again by hand: nothing more.
    let again = env.stock.orders().compensate(
        &failed.order_id,
        failed.user_id,
        failed.held(),
        FailReason::DbRejected,
        CompensationMode::Restore,
    );
    assert_eq!(again.await.unwrap(), Compensation::AlreadyDone);
    assert_eq!(env.redis_stock(sale).await, 6);
    let two = env.try_deduct_units(sale, 1, 3).await.expect("the place and the units are free again");
    assert_eq!((two.quantity, env.redis_stock(sale).await), (3, 3));
}
