//! Buyers' status reads cannot flood PostgreSQL, and are answered from
//! Redis while PostgreSQL is down.

use futures::stream::{self, StreamExt};
use seckill_e2e::http::{assert_error, Client};
use seckill_e2e::TestEnv;
use std::collections::BTreeMap;

/// Status reads cannot flood PostgreSQL: where no user is known, reads are
/// limited per client (here 20 a second, burst 20), so 1,000 reads of
/// unknown ids cost at most a few dozen database look-ups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_status_reads_is_limited_per_client() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.status_reads.per_client_per_second = 20;
    settings.status_reads.per_client_burst = 20;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    let codes: Vec<u16> = stream::iter(1..=1_000)
        .map(|i| {
            let client = client.clone();
            async move {
                let id = format!("{}-{}-{i}-00000000000000ff", sale.activity, sale.sku);
                client.get(&format!("/api/seckill/order/{id}")).await.status.as_u16()
            }
        })
        .buffer_unordered(50)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    for code in codes {
        *counts.entry(code).or_insert(0) += 1;
    }
    let not_found = counts.get(&404).copied().unwrap_or(0);
    assert!((20..100).contains(&not_found), "{counts:?}");
    assert_eq!(not_found + counts.get(&429).copied().unwrap_or(0), 1_000, "{counts:?}");
    edge.stop().await;
}

/// When PostgreSQL does not answer, an order Redis holds as CREATED is
/// answered as Redis knows it, not 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_answers_a_status_read_while_postgres_is_down() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 2).await;
    let record = env.deduct(sale, 5).await;
    env.stock
        .orders()
        .follow_created(&[(record.order_id.clone(), record.user_id, record.accepted_at, record.held())])
        .await
        .unwrap();
    let mut settings = env.edge_settings();
    settings.servers.database.url = "postgres://seckill:seckill@127.0.0.1:1/nothing".into();
    settings.servers.database.acquire_timeout_ms = 500;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let reply = client.get(&format!("/api/seckill/order/{}", record.order_id)).await;
    assert_eq!((reply.status.as_u16(), reply.json["status"].as_str()), (200, Some("CREATED")), "{}", reply.text);
    let unknown = client.get(&format!("/api/seckill/order/{}-{}-99-00000000000000ee", sale.activity, sale.sku)).await;
    assert_error(&unknown, 503, "TRY_AGAIN", "an order nobody can vouch for, PostgreSQL down");
    edge.stop().await;
}
