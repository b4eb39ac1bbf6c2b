//! A group member that makes no progress is noticed and replaced: two
//! order services of one member each; the first one's PostgreSQL stops
//! answering (a proxy holds what it sends), so its batch can never be
//! done. After `consumer.stall_secs` it has left the group and the other
//! took its partitions — every order is written — while its `/readyz` says
//! why (its partitions named) and `/metrics` counts it; after twice the
//! bound its `/healthz` fails (a liveness probe restarts it). Once its
//! database answers, it moves again. (Before: its partitions moved only
//! after `max.poll.interval.ms`, 300 s, and nothing said why.)
//!
//! And a member that is not busy but fetches nothing while it keeps its
//! partitions (a client left holding them after its coordinator vanished)
//! joins its group again once the group stands still for the bound.

use seckill_e2e::chaos::free_port;
use seckill_e2e::http::{sample, Client};
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, Child, TestEnv};
use std::time::Duration;

/// An order service of one member, stalled after 10 s, its database at `url`.
fn order_service(env: &TestEnv, url: &str, port: u16) -> Child {
    let mut vars = env.child_env();
    vars.extend(
        [
            ("SECKILL_DATABASE_URL", url.to_owned()),
            ("SECKILL__METRICS_ADDR", format!("127.0.0.1:{port}")),
            ("SECKILL__CONSUMERS", "1".into()),
            ("SECKILL__CONSUMER__STALL_SECS", "10".into()),
            ("SECKILL__RETRY__MAX_MS", "1000".into()),
            ("SECKILL__DATABASE__STATEMENT_TIMEOUT_MS", "1000".into()),
            ("SECKILL__DATABASE__LOCK_TIMEOUT_MS", "500".into()),
            ("SECKILL__DATABASE__CALL_DEADLINE_MS", "2000".into()),
            ("SECKILL__EVENTS__LEASE_MS", "3000".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    Child::start("seckill-order", &vars)
}

/// Waits until `client`'s `path` answers `status` with `words` in its body.
async fn answers(client: &Client, path: &str, status: u16, words: &str) {
    eventually(&format!("{path} {status} '{words}'"), Duration::from_secs(60), || async {
        match client.try_send(hyper::Method::GET, path, None, &[]).await {
            Ok(reply) if reply.status == status && reply.text.contains(words) => Ok(()),
            Ok(reply) => Err(format!("{} {}", reply.status, reply.text)),
            Err(error) => Err(error),
        }
    })
    .await;
}

/// Orders a hundred at a time until the member behind `first` has consumed
/// some (it holds partitions): "ready" is said before a member's first
/// assignment, and the other member may take every record until then.
/// How many orders were written.
async fn both_members_consume(env: &TestEnv, sale: seckill_shared::domain::SaleKey, first: &Client) -> i64 {
    let mut written = 0;
    loop {
        env.produce_orders(sale, written + 1..written + 101).await;
        written += 100;
        env.wait_orders(sale, "CREATED", written).await;
        let consumed = sample(&first.get("/metrics").await.text, "seckill_order_records_consumed_total");
        if consumed.unwrap_or(0.0) > 0.0 {
            return written;
        }
        assert!(written < 300, "the first member consumed nothing of {written} orders");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_member_is_reported_and_its_partitions_move_to_the_others() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 400).await;
    let proxy = Pausable::start("127.0.0.1:5432".parse().unwrap()).await;
    let through = env.database.url.replace("127.0.0.1:5432", &proxy.addr.to_string());
    let (first_port, second_port) = (free_port(), free_port());
    let first = order_service(&env, &through, first_port);
    let second = order_service(&env, &env.database.url, second_port);
    let (first_health, second_health) =
        (Client::new(format!("http://127.0.0.1:{first_port}")), Client::new(format!("http://127.0.0.1:{second_port}")));
    answers(&first_health, "/readyz", 200, "ready").await;
    answers(&second_health, "/readyz", 200, "ready").await;
    let written = both_members_consume(&env, sale, &first_health).await;

    proxy.pause();
    env.produce_orders(sale, written + 1..written + 101).await;
    env.wait_orders(sale, "CREATED", written + 100).await;
    answers(&first_health, "/readyz", 503, "order worker 0 made no progress").await;
    answers(&first_health, "/readyz", 503, ".seckill.orders[").await;
    // The gauge is the stall watch's, set once a second (readiness is asked
    // on demand): it follows within one.
    eventually("the stalled-members gauge at 1", Duration::from_secs(10), || async {
        let metrics = first_health.get("/metrics").await.text;
        match sample(&metrics, "seckill_consumer_stalled_members") {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    answers(&first_health, "/healthz", 503, "stalled past twice").await;
    answers(&second_health, "/readyz", 200, "ready").await;

    proxy.resume();
    answers(&first_health, "/readyz", 200, "ready").await;
    answers(&first_health, "/healthz", 200, "ok").await;
    env.verify_events(sale).await;
    assert!(first.terminate().await && second.terminate().await, "both stop cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_fetches_nothing_while_records_wait_joins_its_group_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let mut settings = env.order_settings();
    settings.consumers = 1;
    settings.service.consumer.stall_secs = 6;
    let settings = std::sync::Arc::new(settings);
    let (rejoin, rejoins) = tokio::sync::watch::channel(0);
    let worker = env.order_worker_with(settings.clone()).rejoining_on(rejoins);
    let wedge = worker.wedger();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    let watch = tokio::spawn(seckill_order::lag::report_lag(settings, rejoin.clone(), shutdown.clone()));
    env.produce_orders(sale, 1..2).await;
    env.wait_orders(sale, "CREATED", 1).await;

    // The member keeps its partition and fetches nothing: only joining the
    // group again with a new consumer brings these orders in.
    wedge();
    env.produce_orders(sale, 2..12).await;
    env.wait_orders(sale, "CREATED", 11).await;
    assert!(*rejoin.borrow() >= 1, "the lag reporter asked the member to join again");
    shutdown.cancel();
    run.await.expect("the worker").expect("the worker stops cleanly");
    watch.await.expect("the lag reporter").expect("the lag reporter stops cleanly");
}
