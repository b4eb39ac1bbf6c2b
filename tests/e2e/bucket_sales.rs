//! Selling in buckets, order by order: a sale over three buckets sells
//! exactly its stock once per user (units moving to whoever ran out), and
//! units coming back return to the bucket of their order.

use super::buckets::{moved, remaining, round, warm};
use seckill_e2e::TestEnv;
use seckill_shared::domain::{Holding, SaleKey, UserId};
use seckill_shared::stock::{Borrowed, Bucket, DeductCall, DeductRequest, Deduction, Received};
use std::collections::HashMap;
use std::time::Duration;

/// A deduction call of one request of `user`, in `bucket`.
fn call_for(user: i64, bucket: Bucket) -> DeductCall {
    let request = DeductRequest {
        user: UserId::new(user).unwrap(),
        nonce: format!("{:016x}", rand::random::<u64>()),
        request_id: String::new(),
        traceparent: String::new(),
        admitted: false,
        quantity: 1,
    };
    DeductCall::new(vec![request], Duration::from_secs(60)).in_bucket(bucket)
}

/// What a request does on a sale of several buckets: its user's home
/// bucket decides; when that one is sold out, units are borrowed from the
/// others and it decides again; units on their way between buckets are
/// waited for. `SOLD_OUT` only when no bucket lent anything. An answer not
/// heard (a busy machine: the cluster client times out) is asked again as
/// the edge asks it: the same call, or another borrowing; a transfer long
/// on its way is completed from the lenders' logs, as the sweeper will.
async fn order(stock: &seckill_shared::stock::Stock, sale: SaleKey, buckets: &[Bucket], user: i64) -> Deduction {
    let home = buckets[user as usize % buckets.len()];
    let (mut unheard, mut waited) = (0, 0);
    loop {
        let call = call_for(user, home);
        let answer = loop {
            match stock.orders().deduct_batch(sale, &call).await {
                Ok(mut answers) => break answers.pop().expect("an answer"),
                Err(error) if error.unheard() && unheard < 20 => unheard += 1,
                Err(error) => panic!("user {user}: a deduction: {error}"),
            }
        };
        if !matches!(answer, Deduction::SoldOut { .. }) {
            return answer;
        }
        match stock.bucket_moves().borrow(sale, buckets, home, 1).await {
            Ok(Borrowed::Units(_)) => {}
            Ok(Borrowed::InTransit) => {
                waited += 1;
                if waited % 50 == 0 {
                    complete_transfers(stock, sale, buckets).await;
                }
                tokio::task::yield_now().await;
            }
            Ok(Borrowed::Nothing) => return Deduction::SoldOut { available: 0 },
            Err(error) if error.unheard() && unheard < 20 => unheard += 1,
            Err(error) => panic!("user {user}: borrowing: {error}"),
        }
    }
}

/// Completes every transfer the buckets logged (received now or before,
/// then forgotten); answers how many were still to be received.
async fn complete_transfers(stock: &seckill_shared::stock::Stock, sale: SaleKey, buckets: &[Bucket]) -> usize {
    let mut completed = 0;
    for bucket in buckets {
        for logged in stock.bucket_moves().transfers_lent(sale, *bucket).await.expect("the log") {
            let received = stock.bucket_moves().receive(sale, &logged.transfer, logged.units).await.expect("receiving");
            completed += usize::from(received == Received::Now);
            stock.bucket_moves().forget_transfer(sale, &logged.transfer).await.expect("forgetting");
        }
    }
    completed
}

/// The units a bucket holds or has on their way out (stock + lent −
/// borrowed): lending and receiving leave it as it is, each sale takes one,
/// so with no units coming back it only ever falls — a bucket read after
/// an answer held at least as much when the answer was given.
async fn available(env: &TestEnv, sale: SaleKey, bucket: Bucket) -> i64 {
    let (lent, borrowed) = moved(env, sale, bucket).await;
    remaining(env, sale, bucket).await + lent - borrowed
}

/// 100 units over three buckets (80, 10, 10), 400 users whose home is
/// one of the small two asking twice each, all at once:
/// one order per user, each in its user's home bucket (the order id says
/// which), and a SOLD_OUT answered while a unit was left only when it was
/// hopping between buckets (counted, and printed for the measurements).
/// Buyers still coming afterwards take what is left: exactly 100 sold,
/// every bucket empty, nothing on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_over_three_buckets_sells_exactly_its_stock_once_per_user() {
    let env = std::sync::Arc::new(TestEnv::new().await);
    let sale = env.sale();
    let buckets = env.stock.bucket_moves().place_buckets(sale, 3).await.expect("placing");
    // Uneven on purpose: the first bucket holds most units and is no
    // buyer's home, so every unit of it is sold by lending.
    let shares: Vec<(Bucket, i64)> = buckets.iter().copied().zip([80, 10, 10]).collect();
    assert!(env.stock.warm_ups().warmup_shares(sale, &shares, round(0, 1)).await.unwrap());
    let crowd: Vec<i64> = (1..).filter(|user| user % 3 != 0).take(400).collect();
    let tasks: Vec<_> = crowd
        .iter()
        .chain(&crowd)
        .map(|user| {
            let (env, buckets, user) = (env.clone(), buckets.clone(), *user);
            tokio::spawn(async move {
                let answer = order(&env.stock, sale, &buckets, user).await;
                let mut left_after = 0;
                if matches!(answer, Deduction::SoldOut { .. }) {
                    for bucket in &buckets {
                        left_after += available(&env, sale, *bucket).await;
                    }
                }
                (user, answer, left_after)
            })
        })
        .collect();
    let mut buyers = HashMap::new();
    let (mut sold_out, mut while_left) = (0, 0);
    for task in tasks {
        let (user, answer, left_after) = task.await.expect("a request");
        match answer {
            Deduction::Accepted { order_id, .. } => {
                assert_eq!(Bucket::of_order(&order_id), buckets[user as usize % 3], "{order_id}: the home bucket");
                assert!(buyers.insert(user, order_id).is_none(), "user {user} holds two orders");
            }
            Deduction::SoldOut { .. } => {
                sold_out += 1;
                while_left += i64::from(left_after > 0);
            }
            Deduction::AlreadyPurchased { .. } => {}
            other => panic!("user {user}: {other:?}"),
        }
    }
    eprintln!("{sold_out} SOLD_OUT answers, {while_left} of them while a unit was on its way between buckets");
    let mut late = 1_000;
    while buyers.len() < 100 {
        late += if late % 3 == 2 { 2 } else { 1 };
        match order(&env.stock, sale, &buckets, late).await {
            Deduction::Accepted { order_id, .. } => assert!(buyers.insert(late, order_id).is_none()),
            Deduction::SoldOut { .. } => break,
            other => panic!("user {late}: {other:?}"),
        }
    }
    let late_buyers = buyers.keys().filter(|user| **user > 1_000).count();
    eprintln!("{late_buyers} unit(s) left after the crowd, sold to buyers who came later");
    assert_eq!(buyers.len(), 100, "exactly the stock sold ({late_buyers} to late buyers)");
    assert_eq!(
        order(&env.stock, sale, &buckets, late + 1).await,
        Deduction::SoldOut { available: 0 },
        "sold out once all is sold"
    );
    // Normally none: a borrowing that gave up on a busy machine leaves one.
    let completed = complete_transfers(&env.stock, sale, &buckets).await;
    eprintln!("{completed} transfer(s) left half-done and completed afterwards");
    let mut sold_in = Vec::new();
    for bucket in &buckets {
        sold_in.push(buyers.values().filter(|id| Bucket::of_order(id) == *bucket).count());
    }
    assert_eq!((sold_in[0], sold_in[1] + sold_in[2]), (0, 100), "sold in the buyers' home buckets: {sold_in:?}");
    let mut left = 0;
    for bucket in &buckets {
        assert_eq!(remaining(&env, sale, *bucket).await, 0, "{bucket:?} sold out");
        left += available(&env, sale, *bucket).await;
    }
    assert_eq!(left, 0, "nothing on its way");
    assert_eq!(moved(&env, sale, buckets[0]).await, (80, 0), "the first bucket lent every unit it had");
}

/// Units coming back — a rollback, a compensation, a cancellation — go to
/// the bucket their order was deducted in (its id names it), and what
/// follows an order (CREATED, its reservation cleared) is written there;
/// the other buckets are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_coming_back_return_to_the_bucket_of_their_order() {
    use seckill_shared::domain::FailReason;
    use seckill_shared::stock::{Cancelled, Compensation, CompensationMode};
    let env = TestEnv::new().await;
    let sale = env.sale();
    let buckets = env.stock.bucket_moves().place_buckets(sale, 3).await.expect("placing");
    warm(&env, sale, &buckets, 5, 1).await;
    let bucket = buckets[2];
    let mut orders = Vec::new();
    // Users whose home is the third bucket.
    for user in [2, 5, 8, 11] {
        let call = call_for(user, bucket);
        let Some(Deduction::Accepted { order_id, accepted_at, .. }) =
            env.stock.orders().deduct_batch(sale, &call).await.unwrap().pop()
        else {
            panic!("user {user} not accepted");
        };
        assert_eq!(Bucket::of_order(&order_id), bucket, "{order_id}");
        orders.push((order_id, UserId::new(user).unwrap(), accepted_at, Holding::ONE));
    }
    let (snapshot, _) = env.stock.books().snapshot_bucket(sale, bucket).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.reservations), (1, 4, 4));

    let (rolled_back, compensated, cancelled, created) = (&orders[0], &orders[1], &orders[2], &orders[3]);
    assert!(env
        .stock
        .orders()
        .rollback(
            &rolled_back.0,
            rolled_back.1,
            Holding::ONE,
            FailReason::PublishFailed,
            std::time::Duration::from_secs(60)
        )
        .await
        .unwrap());
    let compensation = env
        .stock
        .orders()
        .compensate(&compensated.0, compensated.1, Holding::ONE, FailReason::DbRejected, CompensationMode::Restore)
        .await
        .unwrap();
    assert_eq!(compensation, Compensation::Done);
    env.stock.orders().follow_created(&[cancelled.clone(), created.clone()]).await.unwrap();
    let given_back =
        Cancelled { order_id: cancelled.0.clone(), user: cancelled.1, reason: "EXPIRED", held: Holding::ONE };
    assert_eq!(env.stock.orders().cancel(sale, &[given_back]).await.unwrap(), 1);
    env.stock.orders().unreserve(std::slice::from_ref(&created.0)).await.unwrap();

    let (snapshot, _) = env.stock.books().snapshot_bucket(sale, bucket).await.unwrap();
    assert_eq!(snapshot.remaining, 4, "three units back in their bucket: {snapshot:?}");
    assert_eq!((snapshot.buyers, snapshot.reservations, snapshot.created), (1, 0, 1), "{snapshot:?}");
    assert_eq!((snapshot.failed, snapshot.compensated, snapshot.cancelled, snapshot.returned), (2, 1, 1, 1));
    for other in &buckets[..2] {
        let (snapshot, _) = env.stock.books().snapshot_bucket(sale, *other).await.unwrap();
        assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.queued, snapshot.failed), (5, 0, 0, 0), "{other:?}");
    }
}
