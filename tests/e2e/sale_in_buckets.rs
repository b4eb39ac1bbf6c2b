//! A hot sale warmed in stock buckets, through the edge and the services
//! (on one Redis and, in `make test-redis-cluster`, on the Redis Cluster,
//! where its buckets sit on different primaries): exactly its stock sold,
//! one order per user, SOLD_OUT only when every bucket is empty; re-warmed
//! bucket by bucket with the in-flight check; swept per bucket; the books
//! summed over the buckets.

use futures::stream::{self, StreamExt};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
use seckill_shared::books::reconcile;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::sales::WarmupError;
use seckill_shared::stock::{Bucket, DeductCall, DeductRequest, Deduction};
use std::collections::BTreeMap;
use std::time::Duration;

/// An order, asked again on 503 TRY_AGAIN as the contract lets a client
/// (nothing was kept): the buyer's last answer.
async fn order(client: &Client, sale: SaleKey, user: i64) -> Reply {
    let mut reply = client.order(sale.activity.get(), sale.sku.get(), user).await;
    for _ in 0..10 {
        if reply.status.as_u16() != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        reply = client.order(sale.activity.get(), sale.sku.get(), user).await;
    }
    reply
}

async fn consistent(env: &TestEnv, sale: SaleKey) {
    eventually("the books consistent", Duration::from_secs(60), || async {
        let report = reconcile(&env.stock, &env.db, None, sale, true).await.map_err(|e| e.to_string())?;
        if report.consistent {
            Ok(report)
        } else {
            Err(format!("{:?}", report.violations))
        }
    })
    .await;
}

/// 100 units in three buckets, warmed through the admin API, and 100 buyers
/// none of whom lives in the first bucket (user id mod 3 is never 0), each
/// pressing "buy" twice at once: every buyer gets exactly one order — the
/// 34 units of the first bucket are all sold by lending to the others, and
/// no buyer is told SOLD_OUT while a unit remains (any 410 here would be
/// one). The 101st buyer is told SOLD_OUT. A request sent straight to a
/// bucket that is not the user's home is refused, nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_in_three_buckets_sells_exactly_its_stock_once_per_user_through_the_edge() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    let sale = env.sale();
    let client = Client::new(edge.url());
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let headers = [("authorization", auth.as_str())];
    let console = Client::new(edge.console_url());
    let too_many = console.send(Method::PUT, &path, Some(br#"{"stock":100,"buckets":65}"#), &headers).await;
    assert_error(&too_many, 400, "INVALID_REQUEST", "65 buckets");
    assert!(!env.stock.books().snapshot(sale).await.unwrap().exists, "a refused warm-up creates nothing");
    let warmed = console.send(Method::PUT, &path, Some(br#"{"stock":100,"buckets":3}"#), &headers).await;
    assert_eq!(warmed.status.as_u16(), 200, "{}", warmed.text);

    let list = env.stock.bucket_moves().directory(sale).await.unwrap();
    assert_eq!((list.buckets.len(), list.buckets[0]), (3, Bucket::FIRST), "{list:?}");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    let totals: Vec<i64> = snapshot.buckets.iter().map(|b| b.total).collect();
    assert_eq!((snapshot.total, totals), (100, vec![34, 33, 33]), "{snapshot:?}");

    // Straight to a bucket that is not the user's home: refused.
    let request = DeductRequest {
        user: UserId::new(3).unwrap(),
        nonce: "00".repeat(8),
        request_id: String::new(),
        traceparent: String::new(),
        admitted: false,
        quantity: 1,
    };
    let astray = DeductCall::new(vec![request], Duration::from_secs(5)).in_bucket(list.buckets[1]);
    assert_eq!(env.stock.orders().deduct_batch(sale, &astray).await.unwrap(), [Deduction::OtherBucket]);

    let buyers: Vec<i64> = (1..).filter(|user| user % 3 != 0).take(100).collect();
    let replies: Vec<(i64, Reply)> = stream::iter(buyers.iter().chain(&buyers).copied())
        .map(|user| {
            let client = client.clone();
            async move { (user, order(&client, sale, user).await) }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    let mut accepted: BTreeMap<i64, usize> = BTreeMap::new();
    for (user, reply) in &replies {
        *counts.entry(reply.status.as_u16()).or_default() += 1;
        if reply.status.as_u16() == 202 {
            *accepted.entry(*user).or_default() += 1;
        }
    }
    assert_eq!(counts, BTreeMap::from([(202, 100), (409, 100)]), "each buyer one order, and none told SOLD_OUT");
    assert!(accepted.values().all(|n| *n == 1), "one order per user");
    assert_error(&order(&client, sale, 999_999).await, 410, "SOLD_OUT", "the 101st buyer");

    env.wait_orders(sale, "CREATED", 100).await;
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.in_transit, snapshot.buyers), (0, 0, 100), "{snapshot:?}");
    let first = &snapshot.buckets[0];
    assert_eq!((first.buyers, first.lent, first.borrowed), (0, 34, 0), "the first bucket lent all it had");
    let lent: i64 = snapshot.buckets.iter().map(|b| b.lent).sum();
    let borrowed: i64 = snapshot.buckets.iter().map(|b| b.borrowed).sum();
    assert_eq!(lent, borrowed, "every unit lent arrived");
    println!("units moved: {lent} (34 from the first bucket, the rest between the other two)");
    consistent(&env, sale).await;
    // The operator's reconciliation lists each bucket.
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let text = env.ctl(&["reconcile", "--activity", &a, "--sku", &s]).await;
    assert_eq!(text.code, 0, "{text:?}");
    for bucket in &list.buckets {
        let line = format!("bucket {}", bucket.0);
        assert!(text.stdout.contains(&line), "{line} listed: {}", text.stdout);
    }
    assert!(text.stdout.contains("units in transit"), "{}", text.stdout);
    order_service.stop().await;
    edge.stop().await;
}

/// A re-warm of a sale in buckets: refused while any bucket has an order in
/// flight, every bucket left as it was (still selling); forced, every
/// bucket holds the new round's share and no buyer; warmed again with fewer
/// buckets, the one dropped is gone. Orders accepted in any bucket and
/// never published are swept from their own bucket and honoured; a
/// transfer a borrower left half-done is completed by the sweeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_in_buckets_is_re_warmed_with_the_in_flight_check_and_swept_per_bucket() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let window = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS;
    let first = env.warmup_round(sale, 30, window, 3, true).await.expect("warming up");
    let list = env.stock.bucket_moves().directory(sale).await.unwrap();
    assert_eq!(list.buckets.len(), 3);
    // Users 1, 2, 3 live in the three buckets; their orders are in flight.
    let held: Vec<_> = futures::future::join_all((1..=3).map(|user| env.deduct(sale, user))).await;
    for (record, user) in held.iter().zip(1..) {
        assert_eq!(Bucket::of_order(&record.order_id), list.home(UserId::new(user).unwrap()), "{}", record.order_id);
    }

    let refused = env.warmup_round(sale, 50, window, 3, false).await;
    assert!(matches!(refused, Err(WarmupError::InFlight(_))), "{refused:?}");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!(
        (snapshot.round, snapshot.total, snapshot.remaining, snapshot.queued),
        (i64::from(first.round), 30, 27, 3)
    );
    env.deduct(sale, 4).await; // still selling: nothing left frozen

    // A borrower that died between lending and receiving.
    let lent = seckill_shared::stock::Transfer::new(list.buckets[2], list.buckets[1], i64::from(first.round));
    assert!(matches!(env.stock.bucket_moves().lend(sale, &lent).await.unwrap(), seckill_shared::stock::Lent::Units(5)));
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap().in_transit, 5, "on its way, still the sale's");

    // The sweeper: every reservation of every bucket honoured, the
    // transfer completed.
    let order_service = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    env.wait_orders(sale, "CREATED", 4).await;
    eventually("the transfer completed", Duration::from_secs(60), || async {
        let snapshot = env.stock.books().snapshot(sale).await.map_err(|e| e.to_string())?;
        if snapshot.in_transit == 0 && snapshot.reservations == 0 {
            Ok(())
        } else {
            Err(format!("{snapshot:?}"))
        }
    })
    .await;
    assert!(env.stock.bucket_moves().transfers_lent(sale, list.buckets[2]).await.unwrap().is_empty());
    consistent(&env, sale).await;
    compensator.stop().await;
    order_service.stop().await;

    // Now the round has nothing in flight: warmed again, in two buckets.
    let second = env.warmup_round(sale, 50, window, 2, false).await.expect("re-warming");
    let now = env.stock.bucket_moves().directory(sale).await.unwrap();
    assert_eq!((now.round, now.buckets.clone()), (i64::from(second.round), list.buckets[..2].to_vec()));
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    let each: Vec<(i64, i64, i64)> = snapshot.buckets.iter().map(|b| (b.total, b.remaining, b.buyers)).collect();
    assert_eq!(each, [(25, 25, 0), (25, 25, 0)], "{snapshot:?}");
    let (dropped, _) = env.stock.books().snapshot_bucket(sale, list.buckets[2]).await.unwrap();
    assert!(!dropped.exists, "the bucket the round lists no more is gone");
    env.deduct(sale, 1).await; // user 1 buys again in the new round
}

/// A crowd that all lives in one bucket of three, asking at once and never
/// again: each buyer hears 202 or 410 — never 503 — though the home bucket
/// holds a third of the units and the rest arrive a handful per borrowing
/// while the crowd races for each handful (losing that race is progress,
/// not a reason to give up). Exactly the stock is sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_at_one_home_hears_its_unit_or_sold_out_never_try_again() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let sale = env.sale();
    env.warmup_round(sale, 60, seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS, 3, true)
        .await
        .expect("warming up");
    let client = Client::new(edge.url());
    let buyers = (0..400).map(|n| 1 + 3 * n);
    let counts = client.order_each(sale.activity.get(), sale.sku.get(), buyers, 128).await;
    assert_eq!(counts, BTreeMap::from([(202, 60), (410, 340)]), "every unit sold, every other buyer told SOLD_OUT");
    let snapshot = env.stock.books().snapshot(sale).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.in_transit, snapshot.buyers), (0, 0, 60), "{snapshot:?}");
    edge.stop().await;
}
