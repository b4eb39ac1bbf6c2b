//! What an answer promises, checked where a part fails under it: a buyer
//! told 202 gets the order; a buyer told 503 holds nothing; a broker that
//! is down is neither slow to hear about nor sold out. (The faults that
//! stop shared servers — a broker hung then killed, Kafka stopped, Redis
//! paused, a lagging failover — run in `make chaos` and `make
//! chaos-cluster`; here the failing part is this test's own: a proxy in
//! front of Redis, a broker address nothing listens on, a replica that
//! does not exist.)

use futures::stream::{self, StreamExt};
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, Running, TestEnv};
use seckill_shared::domain::SaleKey;
use std::time::Duration;

/// `n` buyers (users `from..from + n`) order at once.
pub(crate) async fn crowd(client: &Client, sale: SaleKey, from: i64, n: i64) -> Vec<Reply> {
    stream::iter(from..from + n)
        .map(|user| {
            let client = client.clone();
            async move { client.order(sale.activity.get(), sale.sku.get(), user).await }
        })
        .buffer_unordered(64)
        .collect()
        .await
}

pub(crate) fn count(replies: &[Reply], status: u16) -> usize {
    replies.iter().filter(|r| r.status.as_u16() == status).count()
}

/// An edge whose Redis is reached through `proxy`.
pub(crate) async fn edge_through(
    env: &TestEnv,
    proxy: &Pausable,
    change: impl FnOnce(&mut seckill_edge::Settings),
) -> Running {
    let mut settings = env.edge_settings();
    settings.servers.redis.url = format!("redis://{}/0", proxy.addr);
    settings.servers.redis.timeout_ms = 500;
    change(&mut settings);
    env.spawn_edge(settings).await
}

pub(crate) fn redis_addr() -> std::net::SocketAddr {
    "127.0.0.1:6379".parse().expect("an address")
}

/// Redis stops answering while buyers order, until a call outlived the
/// edge's call timeout and was asked again: the deductions ran when it came back, so
/// the buyers are told what they decided — 202 with their order — and not
/// a 503 for a unit that is in fact held. (Before: every buyer of the
/// batch was answered 503, and each had an order afterwards.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduction_whose_answer_was_not_heard_is_asked_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |_| {}).await;
    let order = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    proxy.pause();
    let deduct = seckill_e2e::script_sha("deduct");
    let (replies, _) = tokio::join!(crowd(&client, sale, 1, 10), async {
        // Resumed once a call outlived its timeout and was asked again:
        // both are held, the first one unheard.
        eventually("a deduction asked again", Duration::from_secs(30), || async {
            match proxy.held(&deduct) {
                held if held >= 2 => Ok(()),
                held => Err(format!("{held} deduction calls held")),
            }
        })
        .await;
        proxy.resume();
    });
    assert_eq!(
        count(&replies, 202),
        10,
        "each buyer hears what was decided: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    env.wait_orders(sale, "CREATED", 10).await;
    assert_eq!(env.redis_stock(sale).await, 10, "ten units sold, once each");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(report.broken_promises.is_empty(), "{:?}", report.broken_promises);
    order.stop().await;
    edge.stop().await;
}

/// Redis answers nothing for longer than the edge may wait, its void
/// included: the buyers are told 202 `UNCONFIRMED` (not 503: nothing says
/// the void landed), and the calls, run when Redis returns, are undone by
/// the void that goes on in the background — no unit, buyer or reservation
/// is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduction_that_ran_later_is_voided_and_its_buyers_were_not_promised() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| s.deduct_resolve_ms = 1_000).await;
    let client = Client::new(edge.url());
    proxy.pause();
    let replies = crowd(&client, sale, 1, 5).await;
    let unconfirmed = replies.iter().filter(|r| r.status == 202 && r.code() == "UNCONFIRMED").count();
    assert_eq!(unconfirmed, 5, "nothing heard within the resolve time, the void neither: UNCONFIRMED");
    proxy.resume();
    eventually("every unit back, no buyer, no reservation", Duration::from_secs(30), || async {
        let snapshot = env.stock.books().snapshot(sale).await.map_err(|e| e.to_string())?;
        let whole = (snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued) == (20, 0, 0, 0);
        if whole {
            Ok(())
        } else {
            Err(format!("{snapshot:?}"))
        }
    })
    .await;
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 1).await.status, 202, "the buyer may buy");
    edge.stop().await;
}

/// The deduction ran, but the edge hears nothing of it, nor of its void
/// (Redis cut off from the edge alone, past the order's publish deadline,
/// while the sweeper reaches Redis and publishes the order again). The
/// buyer is not told "nothing kept": the answer is 202 `UNCONFIRMED`, and
/// polling tells the order. (Before: 503, and the buyer held a CREATED
/// order afterwards.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_comes_only_once_the_void_has_landed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| {
        s.deduct_resolve_ms = 1_000;
        // The order's publish deadline: this plus 2 s.
        s.servers.kafka.message_timeout_ms = 1_000;
    })
    .await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    seckill_e2e::wait_ready(&client).await;
    proxy.hold_answers();
    let buyer = tokio::spawn({
        let client = client.clone();
        async move { client.order(sale.activity.get(), sale.sku.get(), 7).await }
    });
    // The deduction ran: the edge is cut off from here on.
    eventually("the deduction to run", Duration::from_secs(30), || async {
        match env.stock.books().snapshot(sale).await {
            Ok(snapshot) if snapshot.reservations == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    proxy.pause();
    let reply = buyer.await.expect("the buyer's request");
    // Past the publish deadline the sweeper publishes the order again.
    env.wait_orders(sale, "CREATED", 1).await;
    proxy.resume();
    assert_ne!(reply.status, 503, "told nothing was kept, for an order that exists: {}", reply.text);
    assert_eq!((reply.status.as_u16(), reply.code()), (202, "UNCONFIRMED"), "{}", reply.text);
    assert!(reply.headers.contains_key("retry-after"));
    let result = eventually("the buyer's result", Duration::from_secs(30), || async {
        let path = format!("/api/seckill/result?activityId={}&skuId={}&userId=7", sale.activity, sale.sku);
        let result = client.get(&path).await;
        if result.json["status"] == "CREATED" {
            Ok(result)
        } else {
            Err(result.text)
        }
    })
    .await;
    assert_eq!(result.json["userId"], 7);
    env.verify_events(sale).await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, true).await.unwrap();
    assert!(report.consistent, "{:?}", report.violations);
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}

/// A sale's queue is bounded: while Redis does not answer, requests beyond
/// it are answered 503 at once, nothing deducted; the ones in it are
/// decided when Redis returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_at_once_and_keeps_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let proxy = Pausable::start(redis_addr()).await;
    let edge = edge_through(&env, &proxy, |s| {
        s.deduct_queue_max = 4;
        s.deduct_batch_max = 4;
    })
    .await;
    let client = Client::new(edge.url());
    proxy.pause();
    let deduct = seckill_e2e::script_sha("deduct");
    let buyers: Vec<_> = (1..=40)
        .map(|user| {
            let client = client.clone();
            tokio::spawn(async move { client.order(sale.activity.get(), sale.sku.get(), user).await })
        })
        .collect();
    // Resumed once a call is held and some buyers were already refused: the
    // queue behind the call filled up.
    eventually("a call held and the queue full", Duration::from_secs(30), || async {
        let refused = buyers.iter().filter(|buyer| buyer.is_finished()).count();
        match proxy.held(&deduct) {
            held if held >= 1 && refused >= 1 => Ok(()),
            held => Err(format!("{held} calls held, {refused} buyers answered")),
        }
    })
    .await;
    proxy.resume();
    let mut replies = Vec::new();
    for buyer in buyers {
        replies.push(buyer.await.expect("a buyer"));
    }
    let (accepted, refused) = (count(&replies, 202), count(&replies, 503));
    assert_eq!(accepted + refused, 40, "202 or 503, nothing else");
    assert!(refused > 0 && accepted > 0, "some waited in the queue, some found it full: {accepted} / {refused}");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.remaining, snapshot.buyers),
        (100 - accepted as i64, accepted as i64),
        "the 503s hold nothing"
    );
    edge.stop().await;
}

/// Where a deduction must be confirmed by a replica and none confirms it
/// (here: there is none), the deduction is undone — never a 202 `QUEUED`
/// for a write a failover could lose — and, the undoing not confirmed by a
/// replica either, answered 202 `UNCONFIRMED` with the order id, which
/// reads FAILED `VOIDED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduction_no_replica_confirmed_is_undone() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let mut settings = env.edge_settings();
    settings.servers.redis.min_replica_acks = Some(1);
    settings.servers.redis.replica_ack_timeout_ms = 100;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let replies = crowd(&client, sale, 1, 5).await;
    for reply in &replies {
        assert_eq!((reply.status.as_u16(), reply.code()), (202, "UNCONFIRMED"), "{}", reply.text);
        let order = client.get(&format!("/api/seckill/order/{}", reply.json["orderId"].as_str().unwrap())).await;
        assert_eq!((order.json["status"].as_str(), order.json["reason"].as_str()), (Some("FAILED"), Some("VOIDED")));
    }
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued),
        (10, 0, 0, 0),
        "nothing kept"
    );
    edge.stop().await;
}
