//! seckillctl: reconciliation verdicts and exit codes, dead-letter
//! inspection and replay, and the load tool.

use rdkafka::message::{Headers, Message};
use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::dlq_header;
use std::time::Duration;

fn sale_args(sale: SaleKey) -> (String, String) {
    (sale.activity.to_string(), sale.sku.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_says_consistent_or_names_the_term_that_is_not() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (a, s) = sale_args(sale);
    let warm = env.ctl(&["warmup", "--activity", &a, "--sku", &s, "--stock", "10"]).await;
    assert_eq!(warm.code, 0, "{warm:?}");
    let ok = env.ctl(&["reconcile", "--activity", &a, "--sku", &s]).await;
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(ok.stdout.contains("consistent"), "{}", ok.stdout);
    let json = env.ctl(&["reconcile", "--activity", &a, "--sku", &s, "--json"]).await;
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(report["consistent"], true);
    assert_eq!(report["totalStock"], 10);

    // One extra unit appears in Redis: the books no longer balance.
    let mut conn = env.stock.connection();
    let _: i64 = redis::cmd("INCR")
        .arg(format!("{}seckill:{{{a}:{s}}}:stock", env.redis.key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    let bad = env.ctl(&["reconcile", "--activity", &a, "--sku", &s]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stdout.contains("NOT consistent") && bad.stdout.contains("redis_remaining 11"), "{}", bad.stdout);

    // A source that cannot be read: exit 2.
    let output = tokio::process::Command::new(seckill_e2e::binary("seckillctl"))
        .args(["reconcile", "--activity", &a, "--sku", &s])
        .envs(env.child_env())
        .env("SECKILL_REDIS_URL", "redis://127.0.0.1:1/0")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_and_replayed_exactly_as_filtered() {
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let records = env.order_records(sale, 1..41);
    for (i, record) in records.iter().enumerate() {
        env.dead_letter(record, if i % 2 == 0 { "DB_REJECTED" } else { "NO_DB_STOCK" }).await;
    }

    let list = env.ctl(&["dlq", "list", "--reason", "NO_DB_STOCK", "--json"]).await;
    assert_eq!(list.code, 0, "{list:?}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(listed.len(), 20, "only the chosen reason");
    assert!(listed.iter().all(|e| e["reason"] == "NO_DB_STOCK"));
    let position = listed[0]["position"].as_str().unwrap().to_owned();
    let show = env.ctl(&["dlq", "show", &position]).await;
    assert_eq!(show.code, 0, "{show:?}");
    assert!(show.stdout.contains("dlq.reason = NO_DB_STOCK") && show.stdout.contains("orderId"), "{}", show.stdout);
    let limited = env.ctl(&["dlq", "list", "--limit", "3", "--json"]).await;
    assert_eq!(serde_json::from_str::<Vec<serde_json::Value>>(&limited.stdout).unwrap().len(), 3);

    // A dry run sends nothing.
    let dry = env.ctl(&["dlq", "replay", "--reason", "DB_REJECTED", "--dry-run"]).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(dry.stdout.matches("would replay").count(), 20);
    let orders_topic = env.topics().orders;
    assert!(env.read_topic(&orders_topic, 1, Duration::from_secs(2)).await.is_empty(), "nothing sent by a dry run");

    // Replay, interrupted half-way, then resumed.
    let child = Child::start_with_args(
        "seckillctl",
        &["dlq", "replay", "--reason", "DB_REJECTED", "--rate", "10"],
        &env.child_env(),
    );
    eventually("a few replays", Duration::from_secs(30), || async {
        let n = env.read_topic(&orders_topic, 5, Duration::from_millis(500)).await.len();
        if n >= 5 {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
    child.kill9().await;
    let resumed = env.ctl(&["dlq", "replay", "--reason", "DB_REJECTED"]).await;
    assert_eq!(resumed.code, 0, "{resumed:?}");
    let replayed = env.read_topic(&orders_topic, 40, Duration::from_secs(5)).await;
    let mut sources: Vec<String> = replayed
        .iter()
        .map(|m| {
            let headers = m.headers().expect("headers");
            assert_eq!(
                seckill_shared::kafka::header_str(headers, dlq_header::ATTEMPTS),
                Some("2"),
                "attempt count incremented"
            );
            seckill_shared::kafka::header_str(headers, dlq_header::REPLAYED_FROM).expect("replayed-from").to_owned()
        })
        .collect();
    let total = sources.len();
    sources.sort();
    sources.dedup();
    assert_eq!(sources.len(), 20, "every chosen record replayed, and no other");
    // A kill between a delivery and its commit may replay that one record
    // once more (the order service absorbs it); never more than that.
    assert!(total <= 21, "{total} replays for 20 records");
    assert!(replayed.iter().all(|m| m.headers().unwrap().count() >= 2));
    let again = env.ctl(&["dlq", "replay", "--reason", "DB_REJECTED"]).await;
    assert!(again.stdout.contains("0 record(s) replayed"), "a finished replay has nothing left: {}", again.stdout);
}

/// `replay --to` re-produces the chosen records to another topic (for
/// inspection or another pipeline), and keeps its own position: the
/// original topic gets nothing, and a replay there still finds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_to_another_topic_leaves_the_original_alone() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    for record in env.order_records(sale, 1..11) {
        env.dead_letter(&record, "DB_REJECTED").await;
    }
    let inspect = format!("{}inspect", env.kafka.topic_prefix);
    let admin: AdminClient<_> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", &env.kafka.brokers).create().expect("an admin client");
    let created = admin
        .create_topics(&[NewTopic::new(&inspect, 1, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create topics");
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");
    let to = env.ctl(&["dlq", "replay", "--reason", "DB_REJECTED", "--to", &inspect]).await;
    assert_eq!(to.code, 0, "{to:?}");
    assert!(to.stdout.contains("10 record(s) replayed"), "{}", to.stdout);
    assert_eq!(env.read_topic(&inspect, 10, Duration::from_secs(10)).await.len(), 10);
    assert!(env.read_topic(&env.topics().orders, 1, Duration::from_secs(2)).await.is_empty(), "the original: nothing");
    let original = env.ctl(&["dlq", "replay", "--reason", "DB_REJECTED", "--dry-run"]).await;
    assert_eq!(original.stdout.matches("would replay").count(), 10, "a replay to the original still has them all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_compensated_order_does_not_resurrect_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let record = env.deduct(sale, 3).await;
    let order_id = record.order_id.clone();
    env.dead_letter(&record, "DB_REJECTED").await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    eventually("the order FAILED and its unit back", Duration::from_secs(30), || async {
        let stock = env.redis_stock(sale).await;
        if stock == 5 {
            Ok(())
        } else {
            Err(stock.to_string())
        }
    })
    .await;
    let order = env.spawn_order(env.order_settings()).await;
    let replay = env.ctl(&["dlq", "replay", "--order", order_id.as_str()]).await;
    assert_eq!(replay.code, 0, "{replay:?}");
    assert!(replay.stdout.contains("1 record(s) replayed"), "{}", replay.stdout);
    eventually("the replayed record consumed", Duration::from_secs(30), || async {
        let lag = env.order_lag().await;
        if lag == 0 && env.read_topic(&env.topics().orders, 1, Duration::from_millis(500)).await.len() == 1 {
            Ok(())
        } else {
            Err(format!("lag {lag}"))
        }
    })
    .await;
    let (status, _) = env.order_row(&order_id).await.expect("a row");
    assert_eq!(status, "FAILED", "first row wins: the replay created nothing");
    assert_eq!(env.count_orders(sale, "CREATED").await, 0);
    assert_eq!(env.redis_stock(sale).await, 5, "and restored nothing twice");
    order.stop().await;
    compensator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_counts_add_up_and_match_the_orders_written() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 300).await;
    let (a, s) = sale_args(sale);
    let url = edge.url();
    let run = env
        .ctl(&[
            "bench",
            "--url",
            &url,
            "--activity",
            &a,
            "--sku",
            &s,
            "--users",
            "1000",
            "--requests",
            "1200",
            "--concurrency",
            "32",
            "--same-user-ratio",
            "0.1",
            "--reconcile",
            "--wait-drain",
            "60",
            "--json",
        ])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    let result: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let outcomes = result["bench"]["outcomes"].as_object().unwrap();
    let sum: u64 = outcomes.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(sum, 1200, "every request is counted once: {outcomes:?}");
    assert_eq!(result["bench"]["requests"], 1200);
    assert_eq!(outcomes["202 QUEUED"], 300, "{outcomes:?}");
    assert_eq!(result["reconciliation"]["ordersCreated"], 300);
    assert_eq!(result["reconciliation"]["consistent"], true);
    order.stop().await;
    edge.stop().await;
}
