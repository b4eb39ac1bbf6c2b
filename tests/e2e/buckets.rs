//! A sale's stock buckets (on one Redis and, in `make test-redis-cluster`,
//! on the Redis Cluster): where they are placed, and units moved between
//! them (`lua/lend.lua`, `lua/receive.lua`), two slots tied by a transfer id.

use seckill_e2e::TestEnv;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::stock::warmup::Round;
use seckill_shared::stock::{
    Borrowed, Bucket, DeductCall, DeductRequest, Deduction, Finished, Lent, Received, Transfer,
};
use std::collections::HashMap;
use std::time::Duration;

fn round(stock: i64, round: i64) -> Round {
    Round { stock, starts_ms: 0, ends_ms: 0, round, expire_at_ms: 0, force: true }
}

/// Warms `buckets` with `stock` units each.
async fn warm(env: &TestEnv, sale: SaleKey, buckets: &[Bucket], stock: i64, number: i64) {
    let shares: Vec<(Bucket, i64)> = buckets.iter().map(|b| (*b, stock)).collect();
    assert!(env.stock.warmup_shares(sale, &shares, round(0, number)).await.expect("warming the buckets"));
}

async fn remaining(env: &TestEnv, sale: SaleKey, bucket: Bucket) -> i64 {
    env.stock.snapshot_bucket(sale, bucket).await.expect("a snapshot").0.remaining
}

/// A bucket's `lent` and `borrowed` counters.
async fn moved(env: &TestEnv, sale: SaleKey, bucket: Bucket) -> (i64, i64) {
    let meta = format!("{}:meta", env.stock.keys().bucket_base(sale, bucket));
    let mut conn = env.stock.connection();
    let (lent, borrowed): (Option<i64>, Option<i64>) =
        redis::cmd("HMGET").arg(&meta).arg("lent").arg("borrowed").query_async(&mut conn).await.expect("meta");
    (lent.unwrap_or(0), borrowed.unwrap_or(0))
}

/// `call`'s answer, asked again while it is not heard (a busy machine: the
/// cluster client times out), and whether it was asked again.
async fn heard<T, F, Fut>(call: F) -> (T, bool)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, seckill_shared::stock::conn::RedisCallError>>,
{
    for asks in 0..20 {
        match call().await {
            Ok(answer) => return (answer, asks > 0),
            Err(error) if error.unheard() => continue,
            Err(error) => panic!("{error}"),
        }
    }
    panic!("not heard in 20 asks")
}

/// Half the lender's units, rounded up, move, and only once per transfer
/// id whoever asks again; an empty lender lends nothing; units never go
/// to another round (asked with the wrong one, or a receiver warmed again
/// while they were on the way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_moves_half_the_lenders_units_once_and_only_within_its_round() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let buckets = env.stock.place_buckets(sale, 2).await.expect("placing");
    let (a, b) = (buckets[0], buckets[1]);
    assert!(env.stock.warmup_shares(sale, &[(a, 5), (b, 0)], round(0, 1)).await.unwrap());

    let transfer = Transfer::new(a, b, 1);
    assert_eq!(env.stock.lend(sale, &transfer).await.unwrap(), Lent::Units(3), "half of 5, rounded up");
    assert_eq!(env.stock.lend(sale, &transfer).await.unwrap(), Lent::Units(3), "asked again: what it lent then");
    assert_eq!(remaining(&env, sale, a).await, 2, "lent once");
    assert_eq!(remaining(&env, sale, b).await, 0, "not received yet");
    let logged = env.stock.transfers_lent(sale, a).await.unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!((&logged[0].transfer, logged[0].units), (&transfer, 3));

    assert_eq!(env.stock.receive(sale, &transfer, 3).await.unwrap(), Received::Now);
    assert_eq!(env.stock.receive(sale, &transfer, 3).await.unwrap(), Received::Before);
    assert_eq!(remaining(&env, sale, b).await, 3, "received once");
    env.stock.forget_transfer(sale, &transfer).await.unwrap();
    assert!(env.stock.transfers_lent(sale, a).await.unwrap().is_empty());
    assert_eq!((moved(&env, sale, a).await, moved(&env, sale, b).await), ((3, 0), (0, 3)));

    // 2 → 1 → 1 → nothing.
    for (units, left) in [(1, 1), (1, 0)] {
        let again = Transfer::new(a, b, 1);
        assert_eq!(env.stock.lend(sale, &again).await.unwrap(), Lent::Units(units));
        assert_eq!(env.stock.receive(sale, &again, units).await.unwrap(), Received::Now);
        assert_eq!(remaining(&env, sale, a).await, left);
        if left == 0 {
            let empty = Transfer::new(a, b, 1);
            assert_eq!(env.stock.lend(sale, &empty).await.unwrap(), Lent::InTransit, "logged, not yet forgotten");
        }
        env.stock.forget_transfer(sale, &again).await.unwrap();
    }
    assert_eq!(env.stock.lend(sale, &Transfer::new(a, b, 1)).await.unwrap(), Lent::Nothing);
    assert_eq!(remaining(&env, sale, b).await, 5, "every unit moved, none made");

    // Another round: refused on either side, nothing moved.
    assert_eq!(env.stock.lend(sale, &Transfer::new(b, a, 2)).await.unwrap(), Lent::OtherRound);
    assert_eq!(env.stock.receive(sale, &Transfer::new(b, a, 2), 4).await.unwrap(), Received::OtherRound);
    assert_eq!((remaining(&env, sale, a).await, remaining(&env, sale, b).await), (0, 5));

    // Lent in round 1, the receiver warmed for round 2 meanwhile: the units
    // went with round 1.
    let stale = Transfer::new(b, a, 1);
    assert_eq!(env.stock.lend(sale, &stale).await.unwrap(), Lent::Units(3));
    assert!(env.stock.warmup_shares(sale, &[(a, 7)], round(0, 2)).await.unwrap());
    assert_eq!(env.stock.receive(sale, &stale, 3).await.unwrap(), Received::OtherRound);
    assert_eq!(remaining(&env, sale, a).await, 7, "round 2 holds what it was warmed with");
}

/// A receiver that holds another round than the lender (a warm-up half
/// done: the receiver's bucket loaded for the next round, the lender's not
/// yet) refuses a transfer; finishing it gives the units back to the lender,
/// which still holds their round — never forgotten on the way. (Before: the
/// move was forgotten and the lender's units were gone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_a_receiver_of_another_round_refuses_go_back_to_the_lender() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let buckets = env.stock.place_buckets(sale, 2).await.expect("placing");
    let (a, b) = (buckets[0], buckets[1]);
    assert!(env.stock.warmup_shares(sale, &[(a, 0), (b, 5)], round(0, 1)).await.unwrap());
    let transfer = Transfer::new(b, a, 1);
    assert_eq!(env.stock.lend(sale, &transfer).await.unwrap(), Lent::Units(3));
    let meta = format!("{}:meta", env.stock.keys().bucket_base(sale, a));
    let mut conn = env.stock.connection();
    let _: () = redis::AsyncCommands::hset(&mut conn, &meta, "round", 2).await.unwrap();
    // As the sweeper finds it: logged, and older than its cut-off.
    let now = env.stock.now_ms().await.unwrap();
    env.stock.complete_transfers(sale, now + 1).await.unwrap();
    assert_eq!((remaining(&env, sale, a).await, remaining(&env, sale, b).await), (0, 5), "back with their round");
    assert!(env.stock.transfers_lent(sale, b).await.unwrap().is_empty(), "no longer logged");
    assert_eq!(moved(&env, sale, b).await, (0, 0), "the lender's books: nothing lent");
    assert_eq!(env.stock.unlend(sale, &transfer).await.unwrap(), 0, "given back once");
    assert_eq!(env.stock.finish_transfer(sale, &transfer, 3).await.unwrap(), Finished::Pending, "nothing logged");
}

/// Many transfers at once between three buckets, each asked again, some
/// left half-done (the caller died between lending and receiving) and
/// completed afterwards from the lenders' logs: every unit is in a bucket
/// at the end, and what was lent equals what was received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_moved_between_buckets_at_once_are_neither_made_nor_lost() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let buckets = env.stock.place_buckets(sale, 3).await.expect("placing");
    warm(&env, sale, &buckets, 40, 1).await;

    let tasks = (0..90u32).map(|i| {
        let (stock, buckets) = (env.stock.clone(), buckets.clone());
        tokio::spawn(async move {
            let (from, to) = (buckets[(i % 3) as usize], buckets[((i / 3 + i) % 3) as usize]);
            if from == to {
                return;
            }
            let transfer = Transfer::new(from, to, 1);
            // (Nothing lent is not logged: asked again, it may lend.)
            let Lent::Units(units) = heard(|| stock.lend(sale, &transfer)).await.0 else { return };
            assert_eq!(heard(|| stock.lend(sale, &transfer)).await.0, Lent::Units(units), "asked again");
            if i % 4 == 0 {
                return; // died here: the transfer stays logged, not received
            }
            let (received, repeated) = heard(|| stock.receive(sale, &transfer, units)).await;
            assert!(received == Received::Now || (repeated && received == Received::Before), "{received:?}");
            assert_eq!(heard(|| stock.receive(sale, &transfer, units)).await.0, Received::Before);
            heard(|| stock.forget_transfer(sale, &transfer)).await;
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.expect("a transfer task");
    }

    // What finds a logged transfer completes it.
    let mut in_flight = 0;
    for bucket in &buckets {
        for logged in env.stock.transfers_lent(sale, *bucket).await.unwrap() {
            in_flight += logged.units;
            let received = env.stock.receive(sale, &logged.transfer, logged.units).await.unwrap();
            assert_eq!(received, Received::Now, "{logged:?}: left half-done, so not received yet");
            env.stock.forget_transfer(sale, &logged.transfer).await.unwrap();
        }
    }
    let mut total = 0;
    let (mut lent, mut borrowed) = (0, 0);
    let mut per_bucket = HashMap::new();
    for bucket in &buckets {
        let left = remaining(&env, sale, *bucket).await;
        assert!(left >= 0, "{bucket:?}: {left}");
        per_bucket.insert(*bucket, left);
        total += left;
        let (l, b) = moved(&env, sale, *bucket).await;
        (lent, borrowed) = (lent + l, borrowed + b);
    }
    assert_eq!(total, 120, "every unit is in a bucket: {per_bucket:?}");
    assert_eq!(lent, borrowed, "lent {lent}, received {borrowed}");
    assert!(lent > 0 && in_flight > 0, "transfers ran ({lent} lent) and some were left half-done ({in_flight})");
}

/// On a Redis Cluster the buckets of a sale go to different primaries, all
/// before any gets two; on one server they are buckets 0, 1, 2, … Each is
/// a slot of its own either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sales_buckets_are_spread_over_the_primaries() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let placed = env.stock.place_buckets(sale, 4).await.expect("placing");
    assert_eq!(placed.len(), 4);
    assert_eq!(placed[0], Bucket::FIRST, "bucket 0 is the sale's own keys");
    let slots: std::collections::HashSet<_> = placed
        .iter()
        .map(|b| redis::cluster_routing::Slot::for_key(format!("{}:meta", env.stock.keys().bucket_base(sale, *b))))
        .collect();
    assert_eq!(slots.len(), 4, "a slot each: {placed:?}");
    match env.stock.connection().slot_primaries().await.expect("the slot map") {
        None => assert_eq!(placed, [Bucket(0), Bucket(1), Bucket(2), Bucket(3)]),
        Some(ranges) => {
            let primaries: std::collections::HashSet<_> = ranges.iter().map(|(_, _, node)| node.clone()).collect();
            let mut conn = env.stock.connection();
            let mut load: HashMap<String, usize> = HashMap::new();
            for bucket in &placed {
                let key = format!("{}:meta", env.stock.keys().bucket_base(sale, *bucket));
                let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query_async(&mut conn).await.unwrap();
                let node = ranges.iter().find(|(first, last, _)| (*first..=*last).contains(&slot)).unwrap().2.clone();
                *load.entry(node).or_default() += 1;
            }
            assert_eq!(load.len(), primaries.len().min(4), "every primary has one: {load:?}");
            assert!(load.values().all(|n| *n <= 4usize.div_ceil(primaries.len())), "{load:?}");
        }
    }
}

/// A deduction call of one request of `user`, in `bucket`.
fn call_for(user: i64, bucket: Bucket) -> DeductCall {
    let request = DeductRequest {
        user: UserId::new(user).unwrap(),
        nonce: format!("{:016x}", rand::random::<u64>()),
        request_id: String::new(),
        traceparent: String::new(),
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
            match stock.deduct_batch(sale, &call).await {
                Ok(mut answers) => break answers.pop().expect("an answer"),
                Err(error) if error.unheard() && unheard < 20 => unheard += 1,
                Err(error) => panic!("user {user}: a deduction: {error}"),
            }
        };
        if answer != Deduction::SoldOut {
            return answer;
        }
        match stock.borrow(sale, buckets, home, 1).await {
            Ok(Borrowed::Units(_)) => {}
            Ok(Borrowed::InTransit) => {
                waited += 1;
                if waited % 50 == 0 {
                    complete_transfers(stock, sale, buckets).await;
                }
                tokio::task::yield_now().await;
            }
            Ok(Borrowed::Nothing) => return Deduction::SoldOut,
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
        for logged in stock.transfers_lent(sale, *bucket).await.expect("the log") {
            let received = stock.receive(sale, &logged.transfer, logged.units).await.expect("receiving");
            completed += usize::from(received == Received::Now);
            stock.forget_transfer(sale, &logged.transfer).await.expect("forgetting");
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
    let buckets = env.stock.place_buckets(sale, 3).await.expect("placing");
    // Uneven on purpose: the first bucket holds most units and is no
    // buyer's home, so every unit of it is sold by lending.
    let shares: Vec<(Bucket, i64)> = buckets.iter().copied().zip([80, 10, 10]).collect();
    assert!(env.stock.warmup_shares(sale, &shares, round(0, 1)).await.unwrap());
    let crowd: Vec<i64> = (1..).filter(|user| user % 3 != 0).take(400).collect();
    let tasks: Vec<_> = crowd
        .iter()
        .chain(&crowd)
        .map(|user| {
            let (env, buckets, user) = (env.clone(), buckets.clone(), *user);
            tokio::spawn(async move {
                let answer = order(&env.stock, sale, &buckets, user).await;
                let mut left_after = 0;
                if answer == Deduction::SoldOut {
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
            Deduction::SoldOut => {
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
            Deduction::SoldOut => break,
            other => panic!("user {late}: {other:?}"),
        }
    }
    let late_buyers = buyers.keys().filter(|user| **user > 1_000).count();
    eprintln!("{late_buyers} unit(s) left after the crowd, sold to buyers who came later");
    assert_eq!(buyers.len(), 100, "exactly the stock sold ({late_buyers} to late buyers)");
    assert_eq!(order(&env.stock, sale, &buckets, late + 1).await, Deduction::SoldOut, "sold out once all is sold");
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
    let buckets = env.stock.place_buckets(sale, 3).await.expect("placing");
    warm(&env, sale, &buckets, 5, 1).await;
    let bucket = buckets[2];
    let mut orders = Vec::new();
    // Users whose home is the third bucket.
    for user in [2, 5, 8, 11] {
        let call = call_for(user, bucket);
        let Some(Deduction::Accepted { order_id, accepted_at, .. }) =
            env.stock.deduct_batch(sale, &call).await.unwrap().pop()
        else {
            panic!("user {user} not accepted");
        };
        assert_eq!(Bucket::of_order(&order_id), bucket, "{order_id}");
        orders.push((order_id, UserId::new(user).unwrap(), accepted_at));
    }
    let (snapshot, _) = env.stock.snapshot_bucket(sale, bucket).await.unwrap();
    assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.reservations), (1, 4, 4));

    let (rolled_back, compensated, cancelled, created) = (&orders[0], &orders[1], &orders[2], &orders[3]);
    assert!(env
        .stock
        .rollback(&rolled_back.0, rolled_back.1, FailReason::PublishFailed, std::time::Duration::from_secs(60))
        .await
        .unwrap());
    let compensation = env
        .stock
        .compensate(&compensated.0, compensated.1, FailReason::DbRejected, CompensationMode::Restore)
        .await
        .unwrap();
    assert_eq!(compensation, Compensation::Done);
    env.stock.follow_created(&[cancelled.clone(), created.clone()]).await.unwrap();
    let given_back = Cancelled { order_id: cancelled.0.clone(), user: cancelled.1, reason: "EXPIRED" };
    assert_eq!(env.stock.cancel(sale, &[given_back]).await.unwrap(), 1);
    env.stock.unreserve(std::slice::from_ref(&created.0)).await.unwrap();

    let (snapshot, _) = env.stock.snapshot_bucket(sale, bucket).await.unwrap();
    assert_eq!(snapshot.remaining, 4, "three units back in their bucket: {snapshot:?}");
    assert_eq!((snapshot.buyers, snapshot.reservations, snapshot.created), (1, 0, 1), "{snapshot:?}");
    assert_eq!((snapshot.failed, snapshot.compensated, snapshot.cancelled, snapshot.returned), (2, 1, 1, 1));
    for other in &buckets[..2] {
        let (snapshot, _) = env.stock.snapshot_bucket(sale, *other).await.unwrap();
        assert_eq!((snapshot.remaining, snapshot.buyers, snapshot.queued, snapshot.failed), (5, 0, 0, 0), "{other:?}");
    }
}
