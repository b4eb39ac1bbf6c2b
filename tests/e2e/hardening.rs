//! Every accepted order settles, whatever Redis, rounds, old records and
//! clients do: each test names the trigger and the property that must hold
//! afterwards.

use hyper::Method;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::{OrderId, SaleKey};
use std::time::Duration;

async fn wait_status(env: &TestEnv, order_id: &OrderId, want: (&str, Option<&str>), within: Duration) {
    eventually(&format!("order {order_id} {want:?}"), within, || async {
        match env.order_row(order_id).await {
            Some((status, reason)) if (status.as_str(), reason.as_deref()) == want => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

async fn fence_of(env: &TestEnv, lock: &str) -> i64 {
    sqlx::query_scalar("SELECT token FROM lock_fences WHERE name = $1").bind(lock).fetch_one(&env.db).await.expect("a fence row")
}

/// Redis lost the lock's fencing counter (a restart without persistence, or
/// an AOF that missed the last INCRs) while PostgreSQL remembers token 1000:
/// the sweeper must still get a token PostgreSQL accepts, and sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_outlive_redis_losing_the_counter() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let lock = env.stock.keys().sweeper_lock();
    sqlx::query("INSERT INTO lock_fences (name, token) VALUES ($1, 1000)").bind(&lock).execute(&env.db).await.unwrap();
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let lost = env.deduct(sale, 1).await;
    wait_status(&env, &lost.order_id, ("FAILED", Some("PUBLISH_LOST")), Duration::from_secs(60)).await;
    assert!(fence_of(&env, &lock).await > 1000, "the token was minted past PostgreSQL's newest");
    assert_eq!(env.redis_stock(sale).await, 2, "the unit is back");
    compensator.stop().await;
}

/// A newer holder wrote with a higher token: the sweeper that holds the lock
/// with an older one must give the lock up, and whoever leads next sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeper_whose_token_is_refused_gives_the_lock_up() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let lock = env.stock.keys().sweeper_lock();
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let first = env.deduct(sale, 1).await;
    wait_status(&env, &first.order_id, ("FAILED", Some("PUBLISH_LOST")), Duration::from_secs(60)).await;
    let before = fence_of(&env, &lock).await;
    sqlx::query("UPDATE lock_fences SET token = token + 100 WHERE name = $1").bind(&lock).execute(&env.db).await.unwrap();
    let second = env.deduct(sale, 2).await;
    wait_status(&env, &second.order_id, ("FAILED", Some("PUBLISH_LOST")), Duration::from_secs(60)).await;
    assert!(fence_of(&env, &lock).await > before + 100, "a new acquisition, past the newer holder's token");
    compensator.stop().await;
}

/// A record of round 1 consumed after the sale was re-warmed (round 2) is
/// never an order of round 2: it ends FAILED, and round 2's stock is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_a_replaced_round_ends_failed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let old = env.deduct(sale, 1).await;
    env.warmup(sale, 5).await; // forced: round 2
    let mut value = serde_json::to_value(&old).unwrap();
    value["round"] = serde_json::json!(1);
    env.produce(&env.topics().orders, "1", value.to_string().as_bytes(), &[]).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    wait_status(&env, &old.order_id, ("FAILED", Some("ROUND_REPLACED")), Duration::from_secs(60)).await;
    let sale_row = seckill_shared::db::find_sale(&env.db, sale).await.unwrap().unwrap();
    assert_eq!((sale_row.round, sale_row.remaining_stock), (2, 5), "round 2 lost no unit");
    assert_eq!(env.count_orders(sale, "CREATED").await, 0);
    compensator.stop().await;
    order.stop().await;
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
    for _ in 0..2 {
        let warmed = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
        assert_eq!(warmed.status, 200, "{}", warmed.text);
    }
    let seq = format!("{}seckill:{{{}:{}}}:seq", env.redis.key_prefix, sale.activity, sale.sku);
    let stock = format!("{}seckill:{{{}:{}}}:stock", env.redis.key_prefix, sale.activity, sale.sku);
    let accepted = client.order(sale.activity.get(), sale.sku.get(), 1).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text);
    let mut conn = env.stock.connection();
    let seq_ttl: i64 = redis::cmd("PTTL").arg(&seq).query_async(&mut conn).await.unwrap();
    let stock_ttl: i64 = redis::cmd("PTTL").arg(&stock).query_async(&mut conn).await.unwrap();
    assert_eq!(seq_ttl, -1, "the order counter never expires");
    assert!(stock_ttl > 0, "the sale's other keys expire after its end");
    let order_id = accepted.json["orderId"].as_str().unwrap();
    let nonce = order_id.rsplit('-').next().unwrap();
    assert!(nonce.len() >= 16 && nonce.chars().all(|c| c.is_ascii_hexdigit()), "64 random bits: {order_id}");
    edge.stop().await;
}

/// The sweeper (or the compensator) wrote the order FAILED but stopped
/// before settling Redis; then the record arrives: the order service must
/// settle Redis too — the unit back exactly once, the order FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_record_of_a_failed_order_gives_its_unit_back() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let record = env.deduct(sale, 1).await;
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, reason)
         VALUES ($1, $2, $3, 1, $4, 'FAILED', 'PUBLISH_LOST')",
    )
    .bind(record.order_id.as_str())
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(record.user_id.get())
    .execute(&env.db)
    .await
    .unwrap();
    env.produce_records(std::slice::from_ref(&record)).await;
    env.produce_records(std::slice::from_ref(&record)).await; // and once more
    let order = env.spawn_order(env.order_settings()).await;
    eventually("the unit back and the order FAILED in Redis", Duration::from_secs(60), || async {
        let state = env.stock.order_state(&record.order_id).await.map_err(|e| e.to_string())?;
        let stock = env.redis_stock(sale).await;
        match state {
            Some(state) if state.status.as_str() == "FAILED" && stock == 3 => Ok(()),
            other => Err(format!("{other:?}, stock {stock}")),
        }
    })
    .await;
    eventually("the group drained", Duration::from_secs(30), || async {
        if env.order_lag().await == 0 { Ok(()) } else { Err("lag".into()) }
    })
    .await;
    assert_eq!(env.redis_stock(sale).await, 3, "restored once, not twice");
    let snapshot = env.stock.snapshot(sale).await.unwrap();
    assert_eq!((snapshot.reservations, snapshot.queued, snapshot.compensated), (0, 0, 1));
    order.stop().await;
}

/// A record from a newer producer (one more field, same major version) is an
/// order like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_with_an_unknown_field_is_read() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let record = env.deduct(sale, 1).await;
    let mut value = serde_json::to_value(&record).unwrap();
    value["channel"] = serde_json::json!("app");
    env.produce(&env.topics().orders, "1", value.to_string().as_bytes(), &[]).await;
    let order = env.spawn_order(env.order_settings()).await;
    wait_status(&env, &record.order_id, ("CREATED", None), Duration::from_secs(60)).await;
    order.stop().await;
}

fn assert_refused(reply: &Reply, status: u16, code: &str, case: &str) {
    assert_eq!((reply.status.as_u16(), reply.code()), (status, code), "{case}: {}", reply.text);
    assert!(reply.json["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: a message");
}

/// Bad input of every kind is refused with its code, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let before = env.stock.snapshot(sale).await.unwrap();
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
        assert_refused(&send(content_type, body.clone()).await, 415, "UNSUPPORTED_MEDIA_TYPE", case);
    }
    let ok_with_charset = send(Some("application/json; charset=utf-8"), format!(r#"{{"activityId":{a},"skuId":{s},"userId":8}}"#)).await;
    assert_eq!(ok_with_charset.status, 202, "a charset parameter is fine: {}", ok_with_charset.text);
    let after_ok = env.stock.snapshot(sale).await.unwrap();
    let duplicate = format!(r#"{{"activityId":{a},"skuId":{s},"userId":1,"userId":2}}"#);
    assert_refused(&send(Some("application/json"), duplicate).await, 400, "INVALID_REQUEST", "a duplicate key");
    assert_eq!(env.stock.snapshot(sale).await.unwrap(), after_ok, "refusals changed nothing");
    assert_eq!(after_ok.remaining, before.remaining - 1);

    // An oversized or non-printable request id is replaced, never carried.
    let long_id = "x".repeat(8_000);
    for (id, case) in [(long_id.as_str(), "8 KB id"), ("a\tb", "a control character")] {
        let reply = client
            .send(Method::POST, "/api/seckill/order", Some(format!(r#"{{"activityId":{a},"skuId":{s},"userId":9}}"#).as_bytes()), &[("x-request-id", id)])
            .await;
        let answered = reply.headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(!answered.is_empty() && answered != id && answered.len() <= 128, "{case}: answered {answered:?}");
    }
    let fine = client.send(Method::GET, "/healthz", None, &[("x-request-id", "client-id-1")]).await;
    assert_eq!(fine.headers.get("x-request-id").unwrap(), "client-id-1", "a well-formed id is kept");
    edge.stop().await;
}

/// An empty secret is a misconfiguration, never "HMAC with an empty key" or
/// "an admin token nobody can send".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_secrets_refuse_to_start() {
    let env = TestEnv::new().await;
    for (change, name) in [
        (Box::new(|s: &mut seckill_edge::Settings| s.user_jwt_secret = Some(String::new())) as Box<dyn Fn(&mut seckill_edge::Settings)>, "SECKILL_USER_JWT_SECRET"),
        (Box::new(|s: &mut seckill_edge::Settings| s.admin_token = Some(String::new())), "SECKILL_ADMIN_TOKEN"),
    ] {
        let mut settings = env.edge_settings();
        change(&mut settings);
        let built = seckill_edge::Application::build(settings).await;
        let error = built.err().unwrap_or_else(|| panic!("an empty {name} must refuse to start"));
        assert!(format!("{error:#}").contains(name), "{error:#}");
    }
}

/// With user auth on, an order's status is revealed to its owner only — the
/// token is checked before the lookup — and status reads are rate-limited
/// like orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_check_the_token_first_and_are_rate_limited() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.user_jwt_secret = Some("status-secret".into());
    settings.rate_limit.per_user_per_second = 1;
    settings.rate_limit.per_user_burst = 2;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    let (a, s) = (sale.activity.get(), sale.sku.get());
    let unknown = format!("/api/seckill/order/{a}-{s}-999-00000000000000ff");
    assert_refused(&client.get(&unknown).await, 401, "UNAUTHORIZED", "no token, unknown order: existence not revealed");

    let token = {
        let claims = serde_json::json!({ "sub": "5", "exp": chrono::Utc::now().timestamp() + 600 });
        let key = jsonwebtoken::EncodingKey::from_secret(b"status-secret").unwrap();
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    let bearer = format!("Bearer {token}");
    let path = format!("/api/seckill/result?activityId={a}&skuId={s}&userId=5");
    let headers = [("authorization", bearer.as_str())];
    let replies = futures::future::join_all((0..6).map(|_| client.send(Method::GET, &path, None, &headers))).await;
    let limited = replies.iter().filter(|r| r.status == 429).count();
    assert!(limited >= 3, "a burst of 6 reads over a burst of 2: {:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
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
    let snapshot = env.stock.snapshot(sale).await.unwrap();
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
        if n == 2 { Ok(()) } else { Err(n.to_string()) }
    })
    .await;
    order.stop().await;
    env.stock.rollback(&records[2].order_id, records[2].user_id, seckill_shared::domain::FailReason::PublishFailed).await.unwrap();
    eventually("statuses settled in redis", Duration::from_secs(30), || async {
        let snapshot = env.stock.snapshot(sale).await.map_err(|e| e.to_string())?;
        let counts = (snapshot.queued, snapshot.created, snapshot.failed, snapshot.remaining);
        if counts == (1, 2, 1, 7) { Ok(()) } else { Err(format!("{counts:?}")) }
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
    let before = env.stock.snapshot(sale).await.unwrap();
    assert_refused(&client.order(a, s, 2).await, 503, "TRY_AGAIN", "an order while the producer is retired");
    assert_eq!(env.stock.snapshot(sale).await.unwrap(), before, "nothing was deducted");
    let again = client.order(a, s, 2).await;
    assert_eq!(again.status, 202, "a new producer took over: {}", again.text);

    publisher.inject_fatal_error();
    assert_eq!(client.get("/readyz").await.status, 503, "not ready while the producer is retired");
    eventually("ready again with a new producer", Duration::from_secs(30), || async {
        let status = client.get("/readyz").await.status;
        if status == 200 { Ok(()) } else { Err(status.to_string()) }
    })
    .await;
    edge.stop().await;
}

/// The sweeper settles a reservation only after the edge's own publish
/// deadline (on Redis's clock) has passed, whatever the compensator's
/// settings say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_waits_for_the_edges_publish_deadline() {
    use seckill_shared::fence::Fence;
    use seckill_compensator::sweeper::Sweeper;
    use seckill_shared::domain::UserId;
    use seckill_shared::lock::LockClient;
    use seckill_shared::shutdown::Background;
    use seckill_shared::stock::Deduction;
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let deduct = |user: i64, deadline: Duration| {
        let env = &env;
        async move {
            let nonce = format!("{:016x}", rand::random::<u64>());
            match env.stock.deduct(sale, UserId::new(user).unwrap(), &nonce, deadline).await.unwrap() {
                Deduction::Accepted { order_id, accepted_at, .. } => (order_id, accepted_at),
                other => panic!("{other:?}"),
            }
        }
    };
    // An edge that may wait ten minutes for its delivery report, and one that
    // knew at once.
    let (patient, _) = deduct(1, Duration::from_secs(600)).await;
    let (lost, accepted) = deduct(2, Duration::ZERO).await;
    let settings = std::sync::Arc::new(env.compensator_settings());
    let grace = settings.sweeper.grace_ms as i64;
    eventually("Redis's clock past the lost order's deadline and grace", Duration::from_secs(30), || async {
        let now = env.stock.now_ms().await.map_err(|e| e.to_string())?;
        if now > accepted + grace { Ok(()) } else { Err(format!("{now}")) }
    })
    .await;
    let sweeper = Sweeper::new(settings, env.connections(), Background::default());
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let guard = locks.acquire(&env.stock.keys().sweeper_lock(), Duration::from_secs(30), Duration::ZERO).await.unwrap().unwrap();
    let fence = Fence { lock: guard.key(), token: guard.fence(), holder: guard.holder() };
    sweeper.sweep_once(fence).await.expect("a checkpoint");
    let report = sweeper.sweep_once(fence).await.expect("a sweep");
    assert_eq!((report.failed, report.created), (1, 0), "{report:?}");
    wait_status(&env, &lost, ("FAILED", Some("PUBLISH_LOST")), Duration::from_secs(5)).await;
    assert_eq!(env.order_row(&patient).await, None, "the patient edge's order is not swept");
    let state = env.stock.order_state(&patient).await.unwrap().expect("known");
    assert_eq!(state.status.as_str(), "QUEUED");
    assert!(guard.release().await);
}
