//! The dead-letter index is keyed by topic, partition and offset (issue 47,
//! item 4): two deployments sharing one database each count their own dead
//! letters, and a recreated dead-letter topic is counted as it is now, its
//! reused positions logged and counted as conflicts — judged by what
//! `seckillctl dlq stats` answers the operator, `notIndexedYet` included.

use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::Topics;
use std::time::Duration;

/// `dlq stats --json` for `sale` as a deployment with `topic_prefix` sees it.
async fn stats(env: &TestEnv, topic_prefix: &str, sale: SaleKey) -> serde_json::Value {
    let out = env
        .ctl_with_env(
            &["dlq", "stats", "--sale", &sale.to_string(), "--json"],
            &[("SECKILL_TOPIC_PREFIX", topic_prefix)],
        )
        .await;
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Waits until the deployment with `topic_prefix` counts `records` dead
/// letters of `sale` and says nothing is left to index.
async fn counted(env: &TestEnv, topic_prefix: &str, sale: SaleKey, records: i64) -> serde_json::Value {
    eventually(&format!("{records} dead letters of {sale} counted"), Duration::from_secs(60), || async {
        let stats = stats(env, topic_prefix, sale).await;
        if stats["records"] == records && stats["notIndexedYet"] == 0 {
            Ok(stats)
        } else {
            Err(stats.to_string())
        }
    })
    .await
}

/// A compensator of the deployment with `topic_prefix`, its `/metrics` on
/// `metrics_addr`.
fn compensator_on(env: &TestEnv, topic_prefix: &str, metrics_addr: &str) -> Child {
    let mut child_env = env.child_env();
    child_env.push(("SECKILL_TOPIC_PREFIX".into(), topic_prefix.into()));
    child_env.push(("SECKILL__METRICS_ADDR".into(), metrics_addr.into()));
    child_env.push(("SECKILL__SWEEPER__ENABLED".into(), "false".into()));
    Child::start("seckill-compensator", &child_env)
}

/// A compensator of the deployment with `topic_prefix`.
fn compensator(env: &TestEnv, topic_prefix: &str) -> Child {
    compensator_on(env, topic_prefix, "127.0.0.1:0")
}

/// Before, the second deployment's dead letters took the first one's
/// positions (the same keys, so the same partitions and offsets) and were
/// left out: its `dlq stats` said 0 records and 0 not indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deployments_sharing_a_database_each_count_their_own_dead_letters() {
    let env = TestEnv::with_partitions(1).await;
    let (first, second) = (env.kafka.topic_prefix.clone(), format!("{}second.", env.kafka.topic_prefix));
    let other = KafkaSettings { topic_prefix: second.clone(), ..env.kafka.clone() };
    seckill_shared::kafka::ensure_topics(&other).await.expect("the second deployment's topics");
    let (one, two) = (env.sale(), env.sale());
    for record in env.order_records(one, 1..11) {
        env.dead_letter(&record, "DB_REJECTED").await;
    }
    for record in env.order_records(two, 1..7) {
        env.dead_letter_on(&Topics::new(&other), &record, "NO_DB_STOCK").await;
    }
    let _first = compensator(&env, &first);
    let _second = compensator(&env, &second);
    let of_one = counted(&env, &first, one, 10).await;
    assert_eq!(of_one["byReason"], serde_json::json!({"DB_REJECTED": 10}));
    let of_two = counted(&env, &second, two, 6).await;
    assert_eq!(of_two["byReason"], serde_json::json!({"NO_DB_STOCK": 6}));
    // Each deployment counts only its own topic's.
    assert_eq!(stats(&env, &first, two).await["records"], 0);
    assert_eq!(stats(&env, &second, one).await["records"], 0);
}

/// A dead-letter topic deleted and created again starts its offsets at 0:
/// its new records are counted (each position the index held with an older
/// record is logged and counted as a conflict), and while the compensator
/// is stopped `notIndexedYet` says how many are waiting — never 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_dead_letter_topic_is_counted_as_it_is_now() {
    let env = TestEnv::with_partitions(1).await;
    let prefix = env.kafka.topic_prefix.clone();
    let (one, two) = (env.sale(), env.sale());
    for record in env.order_records(one, 1..6) {
        env.dead_letter(&record, "DB_REJECTED").await;
    }
    let first = compensator(&env, &prefix);
    counted(&env, &prefix, one, 5).await;
    assert!(first.terminate().await);

    let topics = env.topics();
    env.delete_topic(&topics.dlq).await;
    seckill_shared::kafka::create_topic(&env.kafka, &topics.dlq, env.kafka.dlq_partitions).await.unwrap();
    for record in env.order_records(two, 1..4) {
        env.dead_letter(&record, "PUBLISH_LOST").await;
    }
    let waiting = stats(&env, &prefix, two).await;
    assert_eq!((waiting["records"].as_i64(), waiting["notIndexedYet"].as_i64()), (Some(0), Some(3)), "{waiting}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _again = compensator_on(&env, &prefix, &format!("127.0.0.1:{port}"));
    let of_two = counted(&env, &prefix, two, 3).await;
    assert_eq!(of_two["byReason"], serde_json::json!({"PUBLISH_LOST": 3}));
    // The same keys, so the same partitions: each new record took an old
    // one's position.
    let metrics = seckill_e2e::http::Client::new(format!("http://127.0.0.1:{port}")).get("/metrics").await.text;
    assert_eq!(
        seckill_e2e::http::sample(&metrics, "seckill_dead_letters_index_conflicts_total"),
        Some(3.0),
        "{metrics}"
    );
}

/// Rows indexed before migration 10 name no topic; the compensator's
/// start gives them to its topic, with the run records that name them, and
/// they are counted again — none deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_indexed_before_the_topic_was_kept_are_adopted() {
    use seckill_shared::db::MIGRATOR;
    let env = TestEnv::new().await;
    let db = env.scratch_database("dlq_index").await;
    let migrations: Vec<_> = MIGRATOR.iter().collect();
    let by_topic = migrations.iter().position(|m| m.description.contains("dead letters by topic")).expect("10");
    for migration in &migrations[..by_topic] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("an older migration");
    }
    sqlx::query(
        "INSERT INTO dead_letters (dlq_partition, dlq_offset, reason, order_id, activity_id, sku_id, failed_at)
         VALUES (0, 0, 'DB_REJECTED', NULL, 1, 1, now()), (0, 1, 'DB_REJECTED', NULL, 1, 1, now())",
    )
    .execute(&db)
    .await
    .unwrap();
    for migration in &migrations[by_topic..] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("migration 10 and later");
    }
    let topic = env.topics().dlq;
    let scope = seckill_shared::db::dead_letters::Scope::default();
    assert_eq!(seckill_shared::db::dead_letters::stats(&db, &topic, scope).await.unwrap().records, 0);
    assert_eq!(seckill_shared::db::dead_letters::adopt(&db, &topic).await.unwrap(), 2);
    assert_eq!(seckill_shared::db::dead_letters::stats(&db, &topic, scope).await.unwrap().records, 2);
    assert_eq!(seckill_shared::db::dead_letters::adopt(&db, &topic).await.unwrap(), 0, "adopted once");
}
