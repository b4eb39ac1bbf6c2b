//! A test's topics: producing records and dead letters as the services
//! would, reading a topic as a consumer would, the consumer groups' lag.

use crate::{eventually, TestEnv};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use seckill_shared::domain::{OrderId, OrderRecord, SaleKey, UserId};
use std::time::{Duration, Instant};

impl TestEnv {
    /// Waits (a minute at most) until `group` committed every record of its
    /// topic.
    pub async fn wait_drained(&self, group: Group) {
        eventually(&format!("the {group:?} group to commit every record"), Duration::from_secs(60), || async {
            // A lag not read (a broker answering late) is asked again.
            let lag = self.pipeline_lag().await.map_err(|error| format!("lag unread: {error:#}"))?;
            let lag = match group {
                Group::Order => lag.order.total,
                Group::Compensator => lag.compensator.total,
            };
            if lag == 0 {
                Ok(())
            } else {
                Err(format!("lag {lag}"))
            }
        })
        .await;
    }

    /// Produces a dead letter for `record` as the order service would, with
    /// `reason`.
    pub async fn dead_letter(&self, record: &OrderRecord, reason: &str) {
        self.dead_letter_on(&self.topics(), record, reason).await;
    }

    /// [`TestEnv::dead_letter`] to the dead-letter topic of `topics` (another
    /// deployment's).
    pub async fn dead_letter_on(&self, topics: &seckill_shared::kafka::Topics, record: &OrderRecord, reason: &str) {
        use seckill_shared::kafka::dlq_header;
        let payload = serde_json::to_vec(record).expect("json");
        let headers = [
            (dlq_header::REASON, reason),
            (dlq_header::ERROR, "test"),
            (dlq_header::ORIGINAL_TOPIC, topics.orders.as_str()),
            (dlq_header::ATTEMPTS, "1"),
            (dlq_header::FAILED_AT, "2026-11-29T00:00:00+00:00"),
        ];
        self.produce(&topics.dlq, &record.user_id.to_string(), &payload, &headers).await;
    }

    /// Deletes `topic` and waits (bounded) until the brokers no longer
    /// list it.
    pub async fn delete_topic(&self, topic: &str) {
        use rdkafka::admin::{AdminClient, AdminOptions};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.kafka.brokers).create().expect("an admin client");
        let deleted = admin.delete_topics(&[topic], &AdminOptions::new()).await.expect("deleting a topic");
        assert!(deleted.iter().all(|r| r.is_ok()), "deleting {topic}: {deleted:?}");
        eventually(&format!("{topic} gone"), Duration::from_secs(30), || async {
            match seckill_shared::kafka::topic_partitions(&self.kafka, topic).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    /// Produces one raw record to `topic`.
    pub async fn produce(&self, topic: &str, key: &str, payload: &[u8], headers: &[(&str, &str)]) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let mut owned = OwnedHeaders::new();
        for (k, v) in headers {
            owned = owned.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let record = FutureRecord::to(topic).key(key).payload(payload).headers(owned);
        producer.send(record, Duration::from_secs(10)).await.expect("producing a test record");
    }

    /// Order records for `users` of `sale`, not sent anywhere.
    pub fn order_records(&self, sale: SaleKey, users: std::ops::Range<i64>) -> Vec<OrderRecord> {
        users
            .map(|user| {
                let order_id =
                    OrderId::parse(&format!("{}-{}-{user}-{:08x}", sale.activity, sale.sku, rand::random::<u32>()))
                        .expect("valid id");
                OrderRecord::new(order_id, sale, UserId::new(user).expect("positive user"), seckill_shared::now_ms())
            })
            .collect()
    }

    /// Produces order records for `users` of `sale` straight to the orders
    /// topic (as if the edge had accepted them) and returns them.
    pub async fn produce_orders(&self, sale: SaleKey, users: std::ops::Range<i64>) -> Vec<OrderRecord> {
        let records = self.order_records(sale, users);
        self.produce_records(&records).await;
        records
    }

    /// Produces the given order records to the orders topic.
    pub async fn produce_records(&self, records: &[OrderRecord]) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let topic = self.topics().orders;
        let payloads: Vec<(String, Vec<u8>)> =
            records.iter().map(|r| (r.user_id.to_string(), serde_json::to_vec(r).expect("json"))).collect();
        let sends = payloads.iter().map(|(key, payload)| {
            producer.send(FutureRecord::to(&topic).key(key).payload(payload), Duration::from_secs(30))
        });
        for result in futures::future::join_all(sends).await {
            result.expect("producing an order record");
        }
    }

    /// Produces dead letters for `records` with `reason`, as the order
    /// service would.
    pub async fn produce_dead_letters(&self, records: &[OrderRecord], reason: &str) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let topic = self.topics().dlq;
        let payloads: Vec<(String, Vec<u8>)> =
            records.iter().map(|r| (r.user_id.to_string(), serde_json::to_vec(r).expect("json"))).collect();
        let sends = payloads.iter().map(|(key, payload)| {
            let headers = OwnedHeaders::new()
                .insert(Header { key: "dlq.reason", value: Some(reason) })
                .insert(Header { key: "dlq.attempts", value: Some("1") });
            producer.send(FutureRecord::to(&topic).key(key).payload(payload).headers(headers), Duration::from_secs(30))
        });
        for result in futures::future::join_all(sends).await {
            result.expect("producing a dead letter");
        }
    }

    /// Reads every record of `topic` from the start (every partition
    /// assigned, no group), until `expected` arrived or `timeout` passed.
    /// Fewer than `expected` is an answer only once the reader reached the
    /// end of every partition as it stood at the deadline (its position at
    /// that high watermark; read on for up to 30 s more): a reader that
    /// cannot get there fails the test, naming the errors it met, so a
    /// broken reader never reads as "no record came".
    pub async fn read_topic(&self, topic: &str, expected: usize, timeout: Duration) -> Vec<OwnedMessage> {
        let brokers = self.kafka.brokers.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", format!("reader-{}", rand::random::<u64>()))
                .set("enable.auto.commit", "false")
                .create()
                .expect("reader");
            let metadata =
                consumer.fetch_metadata(Some(&topic), Duration::from_secs(10)).expect("the topic's metadata");
            let partitions: Vec<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
            assert!(!partitions.is_empty(), "{topic} has no partitions");
            let mut assignment = TopicPartitionList::new();
            for partition in &partitions {
                assignment.add_partition_offset(&topic, *partition, Offset::Beginning).expect("an offset");
            }
            consumer.assign(&assignment).expect("assigning the partitions");
            let deadline = Instant::now() + timeout;
            let (mut records, mut errors) = (Vec::new(), Vec::new());
            while records.len() < expected && Instant::now() < deadline {
                match consumer.poll(Duration::from_millis(200)) {
                    Some(Ok(message)) => records.push(message.detach()),
                    Some(Err(error)) => errors.push(error.to_string()),
                    None => {}
                }
            }
            if records.len() < expected {
                let ends: Vec<(i32, i64, i64)> = partitions
                    .iter()
                    .map(|p| {
                        let (low, high) =
                            consumer.fetch_watermarks(&topic, *p, Duration::from_secs(10)).expect("watermarks");
                        (*p, low, high)
                    })
                    .collect();
                let drained = Instant::now() + Duration::from_secs(30);
                while !behind_the_end(&consumer, &topic, &ends).is_empty() && Instant::now() < drained {
                    match consumer.poll(Duration::from_millis(200)) {
                        Some(Ok(message)) => records.push(message.detach()),
                        Some(Err(error)) => errors.push(error.to_string()),
                        None => {}
                    }
                }
                let behind = behind_the_end(&consumer, &topic, &ends);
                assert!(
                    behind.is_empty(),
                    "reading {topic}: {} of {expected} records, and the reader did not reach the end of {behind:?} \
                     (partition, position, high watermark), so no absence is shown; errors: {errors:?}",
                    records.len()
                );
            }
            records
        })
        .await
        .expect("reader thread")
    }

    /// The lag of the order service's group (the test fails when it cannot
    /// be read: no figure stands in for it).
    pub async fn order_lag(&self) -> i64 {
        self.pipeline_lag().await.expect("reading the consumer groups' lag").order.total
    }

    /// The lag of the compensator's group (the test fails when it cannot be
    /// read).
    pub async fn compensator_lag(&self) -> i64 {
        self.pipeline_lag().await.expect("reading the consumer groups' lag").compensator.total
    }

    /// The lag of the order service's and the compensator's groups, or why
    /// it could not be read.
    pub async fn pipeline_lag(&self) -> anyhow::Result<seckill_shared::kafka::PipelineLag> {
        seckill_shared::kafka::pipeline_lag(&self.kafka).await
    }

    /// The broker (node id) leading partition 0 of the orders topic.
    pub async fn orders_leader(&self) -> i32 {
        let (settings, topic) = (self.kafka.clone(), self.topics().orders);
        tokio::task::spawn_blocking(move || {
            use rdkafka::consumer::Consumer;
            let consumer: BaseConsumer =
                seckill_shared::kafka::consumer_config(&settings, "leader-lookup").create().expect("client");
            let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10)).expect("metadata");
            let leader = metadata.topics()[0].partitions().iter().find(|p| p.id() == 0).expect("partition 0").leader();
            leader
        })
        .await
        .expect("metadata thread")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The order service's, on the orders topic.
    Order,
    /// The compensator's, on the dead-letter topic.
    Compensator,
}

/// The partitions (of `ends`: partition, low and high watermark) whose end
/// the reader has not reached: (partition, position, high watermark). An
/// empty partition is at its end unread.
fn behind_the_end(consumer: &BaseConsumer, topic: &str, ends: &[(i32, i64, i64)]) -> Vec<(i32, Option<i64>, i64)> {
    let positions = consumer.position().expect("the reader's positions");
    let mut behind = Vec::new();
    for (partition, low, high) in ends {
        let position = positions.find_partition(topic, *partition).and_then(|p| p.offset().to_raw());
        let at_end = match position {
            Some(offset) if offset >= 0 => offset >= *high,
            _ => low == high,
        };
        if !at_end {
            behind.push((*partition, position, *high));
        }
    }
    behind
}
