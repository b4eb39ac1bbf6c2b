//! A finished sale leaves nothing behind in Redis: every key of a sale with
//! an end expires after the end, the payment window and the margin,
//! whichever script created it; a sale without an end can be closed, which
//! schedules the same; the registry the sweeper, audit and dashboard go
//! through forgets what expired.

use chrono::{DateTime, Duration as Span, Utc};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client};
use seckill_e2e::{binary, eventually, TestEnv, ADMIN_TOKEN};
use seckill_shared::config::{LockSettings, RedisSettings};
use seckill_shared::domain::{FailReason, Holding, SaleKey, UserId};
use seckill_shared::ops::lock::LockClient;
use seckill_shared::sales::{warmup, WarmupRequest};
use seckill_shared::stock::{Cancelled, CompensationMode, Stock};
use std::time::Duration;

/// Every key of `sale` and its time to live (ms; -1: none).
async fn keys_of(env: &TestEnv, sale: SaleKey) -> Vec<(String, i64)> {
    let mut conn = env.stock.connection();
    let pattern = format!("{}seckill:{{{}:{}}}:*", env.redis.key_prefix, sale.activity, sale.sku);
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
    let mut ttls = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap();
        ttls.push((key, ttl));
    }
    ttls
}

async fn warm(env: &TestEnv, stock: &Stock, sale: SaleKey, units: i64, ends_at: Option<DateTime<Utc>>, window: i64) {
    let request = WarmupRequest {
        id: None,
        sale,
        stock: units,
        starts_at: None,
        ends_at,
        force: true,
        payment_window_seconds: window,
        buckets: 1,
        admission: None,
        draw: None,
        limits: Default::default(),
    };
    let locks = LockClient::new(stock.connection(), Default::default());
    warmup(stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &LockSettings::warmup(), &request)
        .await
        .expect("warming up");
}

/// Every key a sale's life creates — buyers, orders, reservations, traces,
/// the counter, returned, compensated and written-off units — ends with
/// the sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_sale_with_an_end_expires() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    warm(&env, &env.stock, sale, 20, Some(Utc::now() + Span::minutes(10)), 600).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    for user in 1..=12 {
        assert_eq!(client.order(sale.activity.get(), sale.sku.get(), user).await.status, 202);
    }
    env.wait_orders(sale, "CREATED", 12).await;
    // A cancelled order's unit goes back (the returned set), a failed one's
    // is restored (compensated) and another's written off.
    let cancelled = env.deduct(sale, 100).await;
    env.stock
        .orders()
        .cancel(
            sale,
            &[Cancelled {
                order_id: cancelled.order_id,
                user: cancelled.user_id,
                reason: "BUYER_CANCELLED",
                held: Holding::ONE,
            }],
        )
        .await
        .unwrap();
    for (user, mode) in [(101, CompensationMode::Restore), (102, CompensationMode::WriteOff { db_remaining: 0 })] {
        let failed = env.deduct(sale, user).await;
        env.stock
            .orders()
            .compensate(&failed.order_id, failed.user_id, Holding::ONE, FailReason::DbRejected, mode)
            .await
            .unwrap();
    }
    let keys = keys_of(&env, sale).await;
    let without: Vec<&(String, i64)> = keys.iter().filter(|(_, ttl)| *ttl < 0).collect();
    assert!(keys.len() >= 10, "the sale's keys: {keys:?}");
    assert!(without.is_empty(), "keys of a sale with an end that never expire: {without:?}");
    // Its end plus its payment window plus the margin (an hour).
    let longest = keys.iter().map(|(_, ttl)| *ttl).max().unwrap();
    assert!(longest <= (600 + 600 + 3_600) * 1000, "{keys:?}");
    order.stop().await;
    edge.stop().await;
}

/// A sale without an end keeps its keys until it is closed; closing ends it
/// now (an order is then refused) and schedules the expiry of every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_sale_ends_it_and_schedules_its_keys_expiry() {
    let env = TestEnv::new().await;
    let (by_api, by_ctl) = (env.sale(), env.sale());
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    for sale in [by_api, by_ctl] {
        warm(&env, &env.stock, sale, 5, None, 60).await;
        assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 1).await.status, 202);
        let forever: Vec<(String, i64)> = keys_of(&env, sale).await.into_iter().filter(|k| k.1 < 0).collect();
        assert!(!forever.is_empty(), "a sale without an end keeps its keys");
    }

    let console = Client::new(edge.console_url());
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let path = format!("/admin/sales/{}/{}/close", by_api.activity, by_api.sku);
    let closed = console.send(Method::POST, &path, None, &[("authorization", &auth)]).await;
    assert_eq!(closed.status, 200, "{}", closed.text);
    assert!(closed.json["endsAt"].is_string(), "{}", closed.text);
    let again = console.send(Method::POST, &path, None, &[("authorization", &auth)]).await;
    assert_eq!(again.json["endsAt"], closed.json["endsAt"], "closing again moves nothing");
    let unauthorized = console.send(Method::POST, &path, None, &[]).await;
    assert_error(&unauthorized, 401, "UNAUTHORIZED", "closing needs the admin token");
    let unknown = env.sale();
    let missing = console
        .send(
            Method::POST,
            &format!("/admin/sales/{}/{}/close", unknown.activity, unknown.sku),
            None,
            &[("authorization", &auth)],
        )
        .await;
    assert_error(&missing, 404, "SALE_NOT_FOUND", "an unknown sale");

    let ctl = std::process::Command::new(binary("seckillctl"))
        .args(["sale", "close", "--activity", &by_ctl.activity.to_string(), "--sku", &by_ctl.sku.to_string()])
        .envs(env.child_env())
        .output()
        .unwrap();
    assert!(ctl.status.success(), "{}", String::from_utf8_lossy(&ctl.stderr));

    for sale in [by_api, by_ctl] {
        let refused = client.order(sale.activity.get(), sale.sku.get(), 2).await;
        assert_error(&refused, 403, "SALE_NOT_ACTIVE", "an order after the close");
        let keys = keys_of(&env, sale).await;
        assert!(keys.iter().all(|(_, ttl)| *ttl > 0), "every key expires after a close: {keys:?}");
    }
    edge.stop().await;
}

/// 1,000 sales that ended leave no key behind once their margin passed,
/// and the registry forgets them; a cancel arriving after that recreates
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_finished_sales_leave_nothing_behind() {
    let env = TestEnv::new().await;
    // No margin and a short call outcome: the keys end a second after the
    // payment window.
    let settings = RedisSettings { sale_key_margin_secs: 0, call_outcome_ms: 1_000, ..env.redis.clone() };
    let stock = Stock::connect(&settings).await.unwrap();
    let used_memory = || async {
        let mut conn = env.stock.connection();
        // One server's text, or a Redis Cluster's map of node to text: the
        // sum over the primaries.
        let info: redis::Value = redis::cmd("INFO").arg("memory").query_async(&mut conn).await.unwrap();
        let texts: Vec<String> = match info {
            redis::Value::Map(nodes) => {
                nodes.into_iter().map(|(_, text)| redis::from_redis_value(text).unwrap()).collect()
            }
            text => vec![redis::from_redis_value(text).unwrap()],
        };
        texts
            .iter()
            .map(|info| {
                info.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse::<i64>().unwrap()
            })
            .sum::<i64>()
    };
    let before = used_memory().await;
    let sales: Vec<SaleKey> = (0..1_000).map(|_| env.sale()).collect();
    let mut orders = Vec::new();
    // One end for all, ahead of the last warm-up (a thousand warm-ups on a
    // Redis Cluster of a busy machine took over 30 s): the keys expire a
    // second after it.
    let ends = Utc::now() + Span::seconds(75);
    for (i, sale) in sales.iter().enumerate() {
        warm(&env, &stock, *sale, 3, Some(ends), 1).await;
        let user = UserId::new(1 + i as i64).unwrap();
        let deduction =
            stock.orders().deduct(*sale, user, 1, &format!("{:016x}", i), Duration::from_secs(1)).await.unwrap();
        let seckill_shared::stock::Deduction::Accepted { order_id, .. } = deduction else { panic!("{deduction:?}") };
        orders.push((*sale, order_id, user));
    }
    let loaded = used_memory().await;
    let registered = stock.books().sales().await.unwrap().len();

    // Left: only the warm-up locks' fencing counters, which expire an hour
    // after the last warm-up (lua/lock.lua).
    eventually("the finished sales' keys expired", Duration::from_secs(200), || async {
        let mut conn = env.stock.connection();
        let left: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}seckill:{{*", settings.key_prefix)).query_async(&mut conn).await.unwrap();
        let left: Vec<&String> = left.iter().filter(|k| !k.ends_with(":warmup:fence")).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{} keys left, e.g. {}", left.len(), left[0]))
        }
    })
    .await;
    assert!(stock.books().sales().await.unwrap().is_empty(), "the registry forgets expired sales");
    // A late cancel (the deadline worker after the keys expired) recreates
    // nothing.
    for (sale, order_id, user) in orders.iter().take(10) {
        let expired = Cancelled { order_id: order_id.clone(), user: *user, reason: "EXPIRED", held: Holding::ONE };
        let given_back = stock.orders().cancel(*sale, &[expired]).await.unwrap();
        assert_eq!(given_back, 0);
        let keys = keys_of(&env, *sale).await;
        assert!(
            keys.iter().all(|(key, ttl)| key.ends_with(":warmup:fence") && *ttl > 0),
            "a late cancel recreated keys of {sale}: {keys:?}"
        );
    }
    let after = used_memory().await;
    println!(
        "Redis used_memory: {before} B before, {loaded} B with 1,000 sales loaded ({registered} still registered \
         then), {after} B after they expired ({:+} B against before; other tests share this Redis)",
        after - before
    );
}
