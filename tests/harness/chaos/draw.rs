//! A draw through failovers: the Redis primary serving the draw (on the
//! Redis Cluster, its slot's; with Sentinel, the one) killed, its replica
//! cut off first so the failover loses what the replica had not confirmed,
//! while buyers enter, as the draw is made, and while the winners order
//! with their rights. Every entry answered 200 is drawn, the draw is one
//! (each entrant one first outcome, the winners the ranking the published
//! seed and digest give), exactly the stock is sold, once per winner, and
//! the books reconcile.

use crate::draw::{draw_json, drawn, enter, outcomes, outcomes_by_user, warm};
use crate::http::{Client, Reply};
use crate::redis_cluster::{cut_off_replica, fail_over, kill_and_promote, sale_slot, wait_writes_unreplicated};
use crate::{eventually, TestEnv, Topology};
use futures::stream::{self, StreamExt};
use seckill_shared::domain::{SaleKey, UserId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a draw through failovers came to: its row.
pub struct DrawOutcome {
    pub name: &'static str,
    pub entrants: i64,
    pub stock: i64,
    /// Seconds from each cut to the old primary back, as a replica.
    pub failovers: Vec<(&'static str, f64)>,
    pub drawn: i64,
    pub sold: i64,
}

impl DrawOutcome {
    pub fn row(&self) -> String {
        let failovers: Vec<String> = self.failovers.iter().map(|(at, s)| format!("{at} {s:.1} s")).collect();
        format!(
            "| {} | {} entrants, {} units | every entry answered 200 drawn: {} | one draw | sold {} | failovers: {} |",
            self.name,
            self.entrants,
            self.stock,
            self.drawn,
            self.sold,
            failovers.join(", ")
        )
    }
}

/// Runs the scenario; panics on a broken promise, naming it.
pub async fn draw_through_failovers(topology: Topology, name: &'static str, entrants: i64, stock: i64) -> DrawOutcome {
    let env = TestEnv::on(topology).await;
    let sale = env.sale();
    // Entries open for as long as entering everyone may take, failover
    // included.
    let draw = serde_json::from_str(&draw_json(-1, 30 + entrants / 20, 300)).expect("a draw");
    warm(&env, sale, stock, draw, true).await.expect("warmed up");
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    // Its sweeper makes Redis follow PostgreSQL where a failover lost a
    // step (an order's CREATED mark).
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    let mut failovers = Vec::new();

    let progress = Arc::new(AtomicUsize::new(0));
    let entering = tokio::spawn(enter_all(client.clone(), sale, entrants, progress.clone()));
    until(&progress, entrants as usize / 2, "entries").await;
    failovers.push(("entries", failover(&env, sale).await));
    let entry_of = entering.await.expect("the entries");

    // Read again where a connection broke in the failover.
    let draw_ms = eventually("the draw's time", Duration::from_secs(30), || async {
        match env.stock.draws().draw_state(sale).await {
            Ok(Some(draw)) => Ok(draw.draw_ms),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually("the draw due in a second", Duration::from_secs(300), || async {
        let now = env.stock.now_ms().await.map_err(|e| e.to_string())?;
        (now >= draw_ms - 1_000).then_some(()).ok_or(format!("{} ms to go", draw_ms - now))
    })
    .await;
    failovers.push(("the draw", failover(&env, sale).await));
    let made = drawn(&client, sale).await;
    assert_eq!(
        (made["entries"].as_i64(), made["winners"].as_i64()),
        (Some(entrants), Some(stock.min(entrants))),
        "{name}: every entry answered 200 drawn, as many winners as units: {made}"
    );
    let winners = one_draw(&env, sale, &made, &entry_of).await;

    let progress = Arc::new(AtomicUsize::new(0));
    // On the Redis Cluster the replica is cut off before the claims start:
    // every claim writes while it is (twenty claims can all end before a
    // cut made after the first two, and the failover waited for writes in
    // vain).
    let cut = match env.topology {
        Topology::RedisCluster => Some((Instant::now(), cut_off_replica(sale_slot(&env, sale)).await)),
        _ => None,
    };
    let claiming = tokio::spawn(claim_all(client.clone(), sale, winners.clone(), entry_of, progress.clone()));
    failovers.push(("claims", claims_failover(&env, sale, &progress, cut).await));
    claiming.await.expect("the claims");
    env.wait_orders(sale, "CREATED", winners.len() as i64).await;
    // Drained as `seckillctl reconcile --wait-drain` waits for it, then judged.
    let mut report = eventually("the books drained", Duration::from_secs(240), || async {
        let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await;
        match report {
            Ok(report) if report.drained() => Ok(report),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    report.judge(true);
    assert!(report.consistent && report.broken_promises.is_empty(), "{name}: {:?}", report.violations);
    assert_eq!(report.units_created, winners.len() as i64, "{name}: one unit per winner, no more");
    compensator.stop().await;
    order_service.stop().await;
    edge.stop().await;
    DrawOutcome { name, entrants, stock, failovers, drawn: entrants, sold: report.units_created }
}

/// The primary killed, its replica cut off first (and the killed one back
/// as a replica). Seconds from the cut to the old primary back.
async fn failover(env: &TestEnv, sale: SaleKey) -> f64 {
    let since = Instant::now();
    if env.topology == Topology::RedisCluster {
        fail_over(sale_slot(env, sale), Duration::ZERO).await;
        tokio::task::spawn_blocking(crate::redis_cluster::bring_back).await.expect("up.sh");
    } else {
        super::faults::kill_redis_primary(env, Some(Duration::ZERO), Duration::ZERO).await;
    }
    since.elapsed().as_secs_f64()
}

/// The failover while the winners claim: on the Redis Cluster, of the
/// replica `cut` off before the claims began (once the primary took
/// writes it does not have); else once two claims are done. Seconds from
/// the cut to the old primary back.
async fn claims_failover(
    env: &TestEnv,
    sale: SaleKey,
    progress: &AtomicUsize,
    cut: Option<(Instant, (u16, u16))>,
) -> f64 {
    let Some((since, (primary, replica))) = cut else {
        until(progress, 2, "claims").await;
        return failover(env, sale).await;
    };
    wait_writes_unreplicated(primary, Duration::ZERO).await;
    kill_and_promote(sale_slot(env, sale), primary, replica).await;
    tokio::task::spawn_blocking(crate::redis_cluster::bring_back).await.expect("up.sh");
    since.elapsed().as_secs_f64()
}

/// Waits until `count` of `what` are done.
async fn until(progress: &AtomicUsize, count: usize, what: &str) {
    eventually(&format!("{count} {what} done"), Duration::from_secs(120), || async {
        let done = progress.load(Ordering::Relaxed);
        (done >= count).then_some(()).ok_or(format!("{done} done"))
    })
    .await;
}

/// Asks `again` until it answers something other than a 503 (a failover
/// under way), a 202 `UNCONFIRMED` or a 429 (asking again too soon): as a
/// buyer does.
async fn until_answered<F, Fut>(what: &str, again: F) -> Reply
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    eventually(what, Duration::from_secs(60), || async {
        let reply = again().await;
        if [503, 429].contains(&reply.status.as_u16()) || reply.code() == "UNCONFIRMED" {
            Err(format!("{}: {}", reply.status, reply.text))
        } else {
            Ok(reply)
        }
    })
    .await
}

/// Users 1..=`entrants` enter, each until answered 200; each one's first
/// entry answered 200 is theirs for good.
async fn enter_all(client: Client, sale: SaleKey, entrants: i64, progress: Arc<AtomicUsize>) -> BTreeMap<i64, String> {
    let entered: Vec<(i64, String)> = stream::iter(1..=entrants)
        .map(|user| {
            let (client, progress) = (client.clone(), progress.clone());
            async move {
                let reply = until_answered("an entry", || enter(&client, sale, user)).await;
                assert_eq!(reply.status, 200, "user {user}'s entry: {}", reply.text);
                progress.fetch_add(1, Ordering::Relaxed);
                (user, reply.json["entry"].as_str().expect("an entry id").to_owned())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    entered.into_iter().collect()
}

/// The draw's outcomes on the topic are one draw's: each entry answered
/// 200 has one first outcome, under its entry id; the winners are the
/// first of the ranking the published seed and digest give. The winners.
async fn one_draw(
    env: &TestEnv,
    sale: SaleKey,
    made: &serde_json::Value,
    entry_of: &BTreeMap<i64, String>,
) -> BTreeSet<i64> {
    let events = outcomes(env, sale, entry_of.len()).await;
    for (event, _) in &events {
        let user = event["userId"].as_i64().expect("a user");
        assert_eq!(event["entryId"].as_str(), entry_of.get(&user).map(String::as_str), "the entry answered 200");
    }
    let outcome_of = outcomes_by_user(&events);
    assert!(outcome_of.values().all(|kinds| kinds.len() == 1), "one outcome each: {outcome_of:?}");
    let won: BTreeSet<i64> = outcome_of.iter().filter(|(_, k)| k.contains("WON")).map(|(u, _)| *u).collect();
    let users: Vec<UserId> = entry_of.keys().map(|u| UserId::new(*u).expect("a user")).collect();
    let (seed, digest) = (made["seed"].as_str().expect("the seed"), made["entriesDigest"].as_str().expect("digest"));
    let first: BTreeSet<i64> = seckill_shared::draw::proof::ranking(seed, digest, &users)
        .iter()
        .take(won.len())
        .map(|(u, _)| u.get())
        .collect();
    assert_eq!(won, first, "the winners are the ranking's first");
    won
}

/// Each winner reads their entry (WON, its token) and orders with it until
/// the order is taken (202) or they hold one (409).
async fn claim_all(
    client: Client,
    sale: SaleKey,
    winners: BTreeSet<i64>,
    entry_of: BTreeMap<i64, String>,
    progress: Arc<AtomicUsize>,
) {
    let entry_of = Arc::new(entry_of);
    stream::iter(winners)
        .for_each_concurrent(2, |user| {
            let (client, progress, entry_of) = (client.clone(), progress.clone(), entry_of.clone());
            async move {
                let path = format!("/api/seckill/draw/entries/{}", entry_of[&user]);
                let read = until_answered("a winner's entry", || client.get(&path)).await;
                let token = read.json["admission"].as_str().expect("a winner's token").to_owned();
                let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
                let placed = until_answered("a winner's order", || {
                    let headers = [("seckill-admission", token.as_str())];
                    let client = client.clone();
                    let body = body.clone();
                    async move {
                        client.send(hyper::Method::POST, "/api/seckill/order", Some(body.as_bytes()), &headers).await
                    }
                })
                .await;
                assert!([202, 409].contains(&placed.status.as_u16()), "winner {user}'s order: {}", placed.text);
                progress.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
}
