//! A release on the Redis Cluster: its sizes' sales and the release itself
//! in slots of their own, on different primaries; the primary holding the
//! release's slot is killed (its replica cut off first, so the failover
//! loses what it did not confirm) while customers order across sizes
//! through two edges.

use futures::StreamExt;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::redis_cluster::{bring_back, fail_over, wait_slot_replicated};
use seckill_e2e::{eventually, TestEnv, Topology};
use seckill_shared::domain::{ActivityId, Limits, SaleKey};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The slot of activity `activity`'s release (its keys' hash tag).
fn release_slot(activity: i64) -> u16 {
    let tag = format!("{{release:{activity}}}");
    let output = std::process::Command::new("redis-cli").args(["-p", "7000", "cluster", "keyslot", &tag]).output();
    output.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).expect("the release's slot")
}

/// Customers, 20 a wave, each ordering one unit of every size at once,
/// until `stop` (`waves` counts the waves done): every reply with its
/// customer.
async fn customers(
    clients: Arc<[Client; 2]>,
    sizes: Arc<Vec<SaleKey>>,
    stop: Arc<AtomicBool>,
    waves: Arc<AtomicUsize>,
) -> Vec<(i64, Reply)> {
    let mut replies = Vec::new();
    let mut wave = 0;
    while !stop.load(Ordering::SeqCst) && wave < 60 {
        let asked: Vec<(i64, SaleKey)> =
            (1..=20).flat_map(|c| sizes.iter().map(move |size| (wave * 20 + c, *size))).collect();
        let answers: Vec<(i64, Reply)> = futures::stream::iter(asked)
            .enumerate()
            .map(|(i, (customer, size))| {
                let client = &clients[i % 2];
                async move { (customer, client.order_units(size.activity.get(), size.sku.get(), customer, 1).await) }
            })
            .buffer_unordered(40)
            .collect()
            .await;
        replies.extend(answers);
        wave += 1;
        waves.store(wave as usize, Ordering::SeqCst);
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_a_release_holds_its_limit_through_a_failover_of_its_slot() {
    let env = TestEnv::on(Topology::RedisCluster).await;
    let activity = env.sale().activity.get();
    let sizes: Vec<SaleKey> = (1..=6).map(|s| SaleKey::from_raw(activity, 40 + s).unwrap()).collect();
    for size in &sizes {
        env.warmup_limited(*size, 200, 900, Limits { per_user_limit: 1, max_per_order: 1 }).await;
    }
    env.stock.releases().declare_release(sizes[0].activity, 2).await.unwrap();
    let mut settings = env.edge_settings();
    (settings.rate_limit.per_user_per_second, settings.rate_limit.per_user_burst) = (1_000, 1_000);
    settings.servers.redis.replica_ack_timeout_ms = 200;
    let edges = [env.spawn_edge(settings.clone()).await, env.spawn_edge(settings).await];
    let _order = env.spawn_order(env.order_settings()).await;
    let _compensator = env.spawn_compensator(env.compensator_settings()).await;
    let slot = release_slot(activity);
    wait_slot_replicated(slot).await;

    let clients = Arc::new([Client::new(edges[0].url()), Client::new(edges[1].url())]);
    let (stop, waves) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let load = tokio::spawn(customers(clients, Arc::new(sizes.clone()), stop.clone(), waves.clone()));
    let (killed, promoted) = fail_over(slot, Duration::from_millis(500)).await;
    eprintln!("the release's primary :{killed} killed, :{promoted} promoted");
    // The killed node back as the promoted one's replica (until then no
    // take is confirmed: 503), and customers order on, three waves more.
    tokio::task::spawn_blocking(bring_back).await.expect("up.sh");
    wait_slot_replicated(slot).await;
    let after = waves.load(Ordering::SeqCst) + 3;
    eventually("three waves after the failover", Duration::from_secs(120), || async {
        let done = waves.load(Ordering::SeqCst);
        (done >= after).then_some(()).ok_or(format!("{done} of {after} waves"))
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let replies = load.await.unwrap();

    judge(&env, sizes[0].activity, &replies).await;
    wait_slot_replicated(slot).await;
}

/// Every 202 `QUEUED` written CREATED (none FAILED), no customer above the
/// release's two across its sizes, the release's books consistent.
async fn judge(env: &TestEnv, activity: ActivityId, replies: &[(i64, Reply)]) {
    let queued: Vec<&str> = replies
        .iter()
        .filter(|(_, r)| r.status == 202 && r.code() == "QUEUED")
        .filter_map(|(_, r)| r.json["orderId"].as_str())
        .collect();
    let refused_by_release = replies.iter().filter(|(_, r)| r.json["release"].is_i64()).count();
    let mut answers = std::collections::BTreeMap::new();
    for (_, reply) in replies {
        *answers.entry(format!("{} {}", reply.status.as_u16(), reply.code())).or_insert(0) += 1;
    }
    eprintln!(
        "{} replies, {} QUEUED, {refused_by_release} refused by the release: {answers:?}",
        replies.len(),
        queued.len()
    );
    assert!(!queued.is_empty() && refused_by_release > 0, "the load ordered and met the limit");
    // Every 202 QUEUED kept: written CREATED, none FAILED.
    eventually("every QUEUED order written", Duration::from_secs(120), || async {
        let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = ANY($1)")
            .bind(&queued)
            .fetch_all(&env.db)
            .await
            .map_err(|e| e.to_string())?;
        assert!(!statuses.iter().any(|s| s == "FAILED"), "a 202 QUEUED ended FAILED");
        if statuses.len() == queued.len() {
            Ok(())
        } else {
            Err(format!("{} of {} written", statuses.len(), queued.len()))
        }
    })
    .await;
    // No customer above the release's two, across its six sizes.
    let most: Option<i64> = sqlx::query_scalar(
        "SELECT max(n)::bigint FROM (SELECT sum(quantity) AS n FROM orders
          WHERE activity_id = $1 AND status IN ('CREATED', 'PAID') GROUP BY user_id) per_customer",
    )
    .bind(activity.get())
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert!(most.is_some_and(|most| most <= 2), "a customer holds {most:?} units of a release of two");
    let report = eventually("the release's books", Duration::from_secs(60), || async {
        let report =
            seckill_shared::books::reconcile_release(&env.stock, &env.db, activity).await.map_err(|e| e.to_string())?;
        if report.consistent {
            Ok(report)
        } else {
            Err(format!("{report:?}"))
        }
    })
    .await;
    eprintln!("release books: {report:?}");
}
