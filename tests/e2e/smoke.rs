//! The foundation works: a Lua script on Redis, a record through Kafka with a
//! manual commit in a consumer group, a row through the migrated schema.

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::Message;
use seckill_e2e::TestEnv;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kafka_and_postgres_answer() {
    let env = TestEnv::new().await;

    // Redis: a Lua script runs by SHA.
    let script = redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    let mut conn = env.stock.connection();
    let key = format!("{}smoke", env.redis.key_prefix);
    let value: i64 = script.key(&key).arg(41).invoke_async(&mut conn).await.expect("lua");
    let value2: i64 = script.key(&key).arg(1).invoke_async(&mut conn).await.expect("lua by sha");
    assert_eq!((value, value2), (41, 42));

    // Kafka: produce, consume in a group, commit manually, see the commit.
    let topics = env.topics();
    env.produce(&topics.orders, "7", b"hello", &[("x-request-id", "smoke")]).await;
    let group = seckill_shared::kafka::order_group(&env.kafka);
    let consumer: StreamConsumer =
        seckill_shared::kafka::consumer_config(&env.kafka, &group).create().expect("consumer");
    consumer.subscribe(&[&topics.orders]).expect("subscribe");
    let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("a record within 30s")
        .expect("record");
    assert_eq!(message.payload(), Some(&b"hello"[..]));
    consumer.commit_message(&message, CommitMode::Sync).expect("manual commit");
    drop(message);
    drop(consumer);
    assert_eq!(env.order_lag().await, 0, "the committed offset covers the record");

    // PostgreSQL: the migrated schema takes and returns a row.
    let sale = env.sale();
    let mut conn = env.db.acquire().await.expect("a connection");
    let row = seckill_shared::db::upsert_sale(&mut conn, sale, 5, None, None, 900).await.expect("insert a sale");
    drop(conn);
    assert_eq!((row.total_stock, row.remaining_stock, row.round), (5, 5, 1));
    let found = seckill_shared::db::find_sale(&env.db, sale).await.expect("read").expect("the sale");
    assert_eq!(found, row);
    // The stock guard holds in the database itself.
    let refused = sqlx::query("UPDATE sales SET remaining_stock = -1 WHERE activity_id = $1")
        .bind(sale.activity.get())
        .execute(&env.db)
        .await;
    assert!(refused.is_err(), "remaining_stock can never go below zero");
}

/// The suite's reader of a topic answers "no record" only when it read to
/// the end: one that cannot reach the brokers fails the test.
#[tokio::test]
#[should_panic(expected = "metadata")]
async fn a_topic_that_cannot_be_read_fails_the_test_instead_of_reading_as_empty() {
    let mut env = TestEnv::new().await;
    env.kafka.brokers = format!("127.0.0.1:{}", seckill_e2e::chaos::free_port());
    env.read_topic(&env.topics().events, 1, Duration::from_secs(1)).await;
}

/// A lag that cannot be read fails the test: no figure stands in for it.
#[tokio::test]
#[should_panic(expected = "lag")]
async fn a_lag_that_cannot_be_read_fails_the_test() {
    let mut env = TestEnv::new().await;
    env.kafka.brokers = format!("127.0.0.1:{}", seckill_e2e::chaos::free_port());
    env.order_lag().await;
}
