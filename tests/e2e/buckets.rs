//! A sale's stock buckets (on one Redis and, in `make test-redis-cluster`,
//! on the Redis Cluster): where they are placed, and units moved between
//! them (`lua/lend.lua`, `lua/receive.lua`), two slots tied by a transfer id.

use seckill_e2e::TestEnv;
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::warmup::Round;
use seckill_shared::stock::{Bucket, Finished, Lent, Received, Transfer};
use std::collections::HashMap;

pub(crate) fn round(stock: i64, round: i64) -> Round {
    Round {
        stock,
        starts_ms: 0,
        ends_ms: 0,
        round,
        expire_at_ms: 0,
        force: true,
        admission: false,
        limits: Default::default(),
    }
}

/// Warms `buckets` with `stock` units each.
pub(crate) async fn warm(env: &TestEnv, sale: SaleKey, buckets: &[Bucket], stock: i64, number: i64) {
    let shares: Vec<(Bucket, i64)> = buckets.iter().map(|b| (*b, stock)).collect();
    assert!(env.stock.warm_ups().warmup_shares(sale, &shares, round(0, number)).await.expect("warming the buckets"));
}

pub(crate) async fn remaining(env: &TestEnv, sale: SaleKey, bucket: Bucket) -> i64 {
    env.stock.books().snapshot_bucket(sale, bucket).await.expect("a snapshot").0.remaining
}

/// A bucket's `lent` and `borrowed` counters.
pub(crate) async fn moved(env: &TestEnv, sale: SaleKey, bucket: Bucket) -> (i64, i64) {
    let meta = format!("{}:meta", env.stock.keys().bucket_base(sale, bucket));
    let mut conn = env.stock.connection();
    let (lent, borrowed): (Option<i64>, Option<i64>) =
        redis::cmd("HMGET").arg(&meta).arg("lent").arg("borrowed").query_async(&mut conn).await.expect("meta");
    (lent.unwrap_or(0), borrowed.unwrap_or(0))
}

/// `call`'s answer, asked again while it is not heard (a busy machine: the
/// cluster client times out), and whether it was asked again.
pub(crate) async fn heard<T, F, Fut>(call: F) -> (T, bool)
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
    let buckets = env.stock.bucket_moves().place_buckets(sale, 2).await.expect("placing");
    let (a, b) = (buckets[0], buckets[1]);
    assert!(env.stock.warm_ups().warmup_shares(sale, &[(a, 5), (b, 0)], round(0, 1)).await.unwrap());

    let transfer = Transfer::new(a, b, 1);
    assert_eq!(env.stock.bucket_moves().lend(sale, &transfer).await.unwrap(), Lent::Units(3), "half of 5, rounded up");
    assert_eq!(
        env.stock.bucket_moves().lend(sale, &transfer).await.unwrap(),
        Lent::Units(3),
        "asked again: what it lent then"
    );
    assert_eq!(remaining(&env, sale, a).await, 2, "lent once");
    assert_eq!(remaining(&env, sale, b).await, 0, "not received yet");
    let logged = env.stock.bucket_moves().transfers_lent(sale, a).await.unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!((&logged[0].transfer, logged[0].units), (&transfer, 3));

    assert_eq!(env.stock.bucket_moves().receive(sale, &transfer, 3).await.unwrap(), Received::Now);
    assert_eq!(env.stock.bucket_moves().receive(sale, &transfer, 3).await.unwrap(), Received::Before);
    assert_eq!(remaining(&env, sale, b).await, 3, "received once");
    env.stock.bucket_moves().forget_transfer(sale, &transfer).await.unwrap();
    assert!(env.stock.bucket_moves().transfers_lent(sale, a).await.unwrap().is_empty());
    assert_eq!((moved(&env, sale, a).await, moved(&env, sale, b).await), ((3, 0), (0, 3)));

    // 2 → 1 → 1 → nothing.
    for (units, left) in [(1, 1), (1, 0)] {
        let again = Transfer::new(a, b, 1);
        assert_eq!(env.stock.bucket_moves().lend(sale, &again).await.unwrap(), Lent::Units(units));
        assert_eq!(env.stock.bucket_moves().receive(sale, &again, units).await.unwrap(), Received::Now);
        assert_eq!(remaining(&env, sale, a).await, left);
        if left == 0 {
            let empty = Transfer::new(a, b, 1);
            assert_eq!(
                env.stock.bucket_moves().lend(sale, &empty).await.unwrap(),
                Lent::InTransit,
                "logged, not yet forgotten"
            );
        }
        env.stock.bucket_moves().forget_transfer(sale, &again).await.unwrap();
    }
    assert_eq!(env.stock.bucket_moves().lend(sale, &Transfer::new(a, b, 1)).await.unwrap(), Lent::Nothing);
    assert_eq!(remaining(&env, sale, b).await, 5, "every unit moved, none made");

    // Another round: refused on either side, nothing moved.
    assert_eq!(env.stock.bucket_moves().lend(sale, &Transfer::new(b, a, 2)).await.unwrap(), Lent::OtherRound);
    assert_eq!(env.stock.bucket_moves().receive(sale, &Transfer::new(b, a, 2), 4).await.unwrap(), Received::OtherRound);
    assert_eq!((remaining(&env, sale, a).await, remaining(&env, sale, b).await), (0, 5));

    // Lent in round 1, the receiver warmed for round 2 meanwhile: the units
    // went with round 1.
    let stale = Transfer::new(b, a, 1);
    assert_eq!(env.stock.bucket_moves().lend(sale, &stale).await.unwrap(), Lent::Units(3));
    assert!(env.stock.warm_ups().warmup_shares(sale, &[(a, 7)], round(0, 2)).await.unwrap());
    assert_eq!(env.stock.bucket_moves().receive(sale, &stale, 3).await.unwrap(), Received::OtherRound);
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
    let buckets = env.stock.bucket_moves().place_buckets(sale, 2).await.expect("placing");
    let (a, b) = (buckets[0], buckets[1]);
    assert!(env.stock.warm_ups().warmup_shares(sale, &[(a, 0), (b, 5)], round(0, 1)).await.unwrap());
    let transfer = Transfer::new(b, a, 1);
    assert_eq!(env.stock.bucket_moves().lend(sale, &transfer).await.unwrap(), Lent::Units(3));
    let meta = format!("{}:meta", env.stock.keys().bucket_base(sale, a));
    let mut conn = env.stock.connection();
    let _: () = redis::AsyncCommands::hset(&mut conn, &meta, "round", 2).await.unwrap();
    // As the sweeper finds it: logged, and older than its cut-off.
    let now = env.stock.now_ms().await.unwrap();
    env.stock.bucket_moves().complete_transfers(sale, now + 1).await.unwrap();
    assert_eq!((remaining(&env, sale, a).await, remaining(&env, sale, b).await), (0, 5), "back with their round");
    assert!(env.stock.bucket_moves().transfers_lent(sale, b).await.unwrap().is_empty(), "no longer logged");
    assert_eq!(moved(&env, sale, b).await, (0, 0), "the lender's books: nothing lent");
    assert_eq!(env.stock.bucket_moves().unlend(sale, &transfer).await.unwrap(), 0, "given back once");
    assert_eq!(
        env.stock.bucket_moves().finish_transfer(sale, &transfer, 3).await.unwrap(),
        Finished::Pending,
        "nothing logged"
    );
}

/// Many transfers at once between three buckets, each asked again, some
/// left half-done (the caller died between lending and receiving) and
/// completed afterwards from the lenders' logs: every unit is in a bucket
/// at the end, and what was lent equals what was received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_moved_between_buckets_at_once_are_neither_made_nor_lost() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let buckets = env.stock.bucket_moves().place_buckets(sale, 3).await.expect("placing");
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
            let Lent::Units(units) = heard(|| stock.bucket_moves().lend(sale, &transfer)).await.0 else { return };
            assert_eq!(heard(|| stock.bucket_moves().lend(sale, &transfer)).await.0, Lent::Units(units), "asked again");
            if i % 4 == 0 {
                return; // died here: the transfer stays logged, not received
            }
            let (received, repeated) = heard(|| stock.bucket_moves().receive(sale, &transfer, units)).await;
            assert!(received == Received::Now || (repeated && received == Received::Before), "{received:?}");
            assert_eq!(heard(|| stock.bucket_moves().receive(sale, &transfer, units)).await.0, Received::Before);
            heard(|| stock.bucket_moves().forget_transfer(sale, &transfer)).await;
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.expect("a transfer task");
    }

    // What finds a logged transfer completes it.
    let mut in_flight = 0;
    for bucket in &buckets {
        for logged in env.stock.bucket_moves().transfers_lent(sale, *bucket).await.unwrap() {
            in_flight += logged.units;
            let received = env.stock.bucket_moves().receive(sale, &logged.transfer, logged.units).await.unwrap();
            assert_eq!(received, Received::Now, "{logged:?}: left half-done, so not received yet");
            env.stock.bucket_moves().forget_transfer(sale, &logged.transfer).await.unwrap();
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
    let placed = env.stock.bucket_moves().place_buckets(sale, 4).await.expect("placing");
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
