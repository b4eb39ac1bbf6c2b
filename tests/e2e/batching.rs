//! Deductions batched per sale decide every request as a call of its own
//! would: one order per user, never past the stock, answers in order.

use seckill_e2e::http::Client;
use seckill_e2e::TestEnv;
use seckill_shared::domain::{FailReason, UserId};
use seckill_shared::stock::{DeductCall, DeductRequest, Deduction, Voided};
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_call_decides_a_batch_as_single_calls_would() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let (one, two, three) = (UserId::new(1).unwrap(), UserId::new(2).unwrap(), UserId::new(3).unwrap());
    let call = call(&[
        (one, "00000000000000a1"),
        (one, "00000000000000a2"),
        (two, "00000000000000b1"),
        (three, "00000000000000c1"),
    ]);
    let answers = env.stock.orders().deduct_batch(sale, &call).await.unwrap();
    let Deduction::Accepted { order_id: first, stock_left: Some(1), .. } = &answers[0] else { panic!("{answers:?}") };
    assert_eq!(
        answers[1],
        Deduction::AlreadyPurchased { order_id: Some(first.to_string()) },
        "the same user later in the batch"
    );
    let Deduction::Accepted { order_id: second, stock_left: Some(0), .. } = &answers[2] else { panic!("{answers:?}") };
    let sequence = |id: &str| id.split('-').nth(2).unwrap_or_default().to_owned();
    assert_eq!(
        (sequence(first.as_str()), sequence(second.as_str())),
        ("1".to_owned(), "2".to_owned()),
        "ids minted in order, once each"
    );
    assert_eq!(answers[3], Deduction::SoldOut { available: 0 });
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.queued, snapshot.buyers, snapshot.reservations), (0, 2, 2, 2));
    let unknown = env.sale();
    let none = env
        .stock
        .orders()
        .deduct_batch(unknown, &call_of(&[(one, "00000000000000d1"), (two, "00000000000000d2")]))
        .await
        .unwrap();
    assert_eq!(none, [Deduction::SaleNotFound, Deduction::SaleNotFound]);

    // Asked again, the same call answers what it decided, deducting nothing.
    let again = env.stock.orders().deduct_batch(sale, &call).await.unwrap();
    let Deduction::Accepted { order_id: heard, .. } = &again[0] else { panic!("{again:?}") };
    assert_eq!(heard, first, "the accepted order, the same");
    assert_eq!(again[1..], answers[1..]);
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.queued, snapshot.buyers), (0, 2, 2), "nothing deducted twice");
}

fn call_of(requests: &[(UserId, &str)]) -> DeductCall {
    let requests = requests
        .iter()
        .map(|(user, nonce)| DeductRequest {
            user: *user,
            nonce: (*nonce).to_owned(),
            request_id: "batch-test".into(),
            traceparent: String::new(),
            admitted: false,
            quantity: 1,
        })
        .collect();
    DeductCall::new(requests, Duration::from_secs(5))
}

fn call(requests: &[(UserId, &str)]) -> DeductCall {
    call_of(requests)
}

/// A call voided after it ran keeps nothing; a call voided before it ran
/// never deducts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voided_call_keeps_nothing_whenever_it_runs() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let (one, two) = (UserId::new(1).unwrap(), UserId::new(2).unwrap());
    let ran = call_of(&[(one, "00000000000000e1"), (two, "00000000000000e2")]);
    assert!(matches!(env.stock.orders().deduct_batch(sale, &ran).await.unwrap()[0], Deduction::Accepted { .. }));
    assert_eq!(env.stock.orders().void(sale, &ran).await.unwrap(), [Voided::Undone, Voided::Undone], "both units back");
    assert_eq!(
        env.stock.orders().void(sale, &ran).await.unwrap(),
        [Voided::Nothing, Voided::Nothing],
        "nothing back twice"
    );
    assert_eq!(env.stock.orders().deduct_batch(sale, &ran).await.unwrap(), [Deduction::Voided, Deduction::Voided]);
    let early = call_of(&[(one, "00000000000000f1")]);
    assert_eq!(env.stock.orders().void(sale, &early).await.unwrap(), [Voided::Nothing]);
    assert_eq!(
        env.stock.orders().deduct_batch(sale, &early).await.unwrap(),
        [Deduction::Voided],
        "a voided call never deducts"
    );
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.reservations, snapshot.queued), (3, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_through_the_batcher_buys_exactly_the_stock_once_per_user() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let mut settings = env.edge_settings();
    settings.rate_limit.per_user_burst = 100;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    // 600 requests at once from 300 users, each twice.
    let replies = futures::future::join_all((0..600).map(|i| {
        let client = client.clone();
        async move { (1 + i % 300, client.order(sale.activity.get(), sale.sku.get(), 1 + i % 300).await) }
    }))
    .await;
    let mut accepted: HashMap<i64, String> = HashMap::new();
    let mut codes: HashMap<String, usize> = HashMap::new();
    for (user, reply) in &replies {
        *codes.entry(format!("{} {}", reply.status.as_u16(), reply.code())).or_default() += 1;
        if reply.status == 202 {
            assert!(
                accepted.insert(*user, reply.json["orderId"].as_str().unwrap().to_owned()).is_none(),
                "user {user} accepted twice"
            );
        }
    }
    assert_eq!(accepted.len(), 100, "{codes:?}");
    for (user, reply) in &replies {
        if reply.code() == "ALREADY_PURCHASED" {
            assert_eq!(reply.json["orderId"].as_str(), accepted.get(user).map(String::as_str), "the user's own order");
        }
    }
    assert_eq!(env.redis_stock(sale).await, 0);
    let metrics = client.get("/metrics").await.text;
    let read = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let (calls, requests) = (read("seckill_edge_deduct_batch_size_count"), read("seckill_edge_deduct_batch_size_sum"));
    eprintln!("600 requests at once: {requests} decided in {calls} script calls");
    assert!(calls > 0.0 && requests > calls, "requests that waited went together: {requests} in {calls} calls");
    edge.stop().await;
}

/// A call asked again answers for its own orders only: user 5's order of
/// call A given back, then user 5 buying again in call B; asked again, call
/// A answers that it keeps nothing — never B's order as its own. (Before:
/// it answered the user's current order, so a rerun of a redrive could
/// adopt an unrelated order as its own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asked_again_never_adopts_another_calls_order() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let five = UserId::new(5).unwrap();
    let first = call_of(&[(five, "00000000000000a5")]);
    let Deduction::Accepted { order_id: given_back, .. } =
        env.stock.orders().deduct_batch(sale, &first).await.unwrap().remove(0)
    else {
        panic!("the first call accepts")
    };
    assert!(env
        .stock
        .orders()
        .rollback(
            &given_back,
            five,
            seckill_shared::domain::Holding::ONE,
            FailReason::PublishFailed,
            std::time::Duration::from_secs(60)
        )
        .await
        .unwrap());
    let second = call_of(&[(five, "00000000000000b5")]);
    let Deduction::Accepted { order_id: bought, .. } =
        env.stock.orders().deduct_batch(sale, &second).await.unwrap().remove(0)
    else {
        panic!("the user buys again")
    };
    assert_ne!(bought, given_back);
    let again = env.stock.orders().deduct_batch(sale, &first).await.unwrap();
    assert_eq!(again, [Deduction::Voided], "call A keeps nothing now; the order held is call B's");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers), (2, 1), "one unit sold, to call B");
}

/// An order is undone only before its publish deadline: past it the
/// reservation is the sweeper's (it may have published the record again),
/// so a late void leaves the order standing and says so, and a late
/// rollback gives nothing back. (Before: both undid it whenever they came,
/// and a buyer told 503 could hold the order the sweeper had published.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_publish_deadline_an_order_is_the_sweepers_and_stands() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let (one, two) = (UserId::new(1).unwrap(), UserId::new(2).unwrap());
    let mut late = call_of(&[(one, "00000000000000c1")]);
    late.publish_deadline = Duration::from_millis(200);
    let Deduction::Accepted { order_id, accepted_at, round, .. } =
        env.stock.orders().deduct_batch(sale, &late).await.unwrap().remove(0)
    else {
        panic!("accepted")
    };
    let mut early = call_of(&[(two, "00000000000000c2")]);
    early.publish_deadline = Duration::from_millis(200);
    let Deduction::Accepted { order_id: early_id, .. } =
        env.stock.orders().deduct_batch(sale, &early).await.unwrap().remove(0)
    else {
        panic!("accepted")
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let voided = env.stock.orders().void(sale, &late).await.unwrap();
    assert_eq!(
        voided,
        [Voided::Stands { order_id: order_id.clone(), round, accepted_at, slot: 0 }],
        "past its deadline"
    );
    let rolled = env
        .stock
        .orders()
        .rollback(
            &early_id,
            two,
            seckill_shared::domain::Holding::ONE,
            FailReason::PublishFailed,
            early.publish_deadline,
        )
        .await
        .unwrap();
    assert!(!rolled, "a rollback past the deadline gives nothing back");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.queued, snapshot.buyers), (3, 2, 2), "both stand: {snapshot:?}");
    assert!(matches!(env.stock.orders().deduct_batch(sale, &late).await.unwrap()[0], Deduction::Accepted { .. }));
}
