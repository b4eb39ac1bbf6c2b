//! Kafka client setup: topic and group names, producer and consumer
//! configuration, topic creation, dead-letter headers and consumer lag.

use crate::config::KafkaSettings;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// Header carrying the edge's request id through the pipeline.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Dead-letter headers (contract: section 4).
pub mod dlq_header {
    /// Stable reason code.
    pub const REASON: &str = "dlq.reason";
    /// Human-readable error.
    pub const ERROR: &str = "dlq.error";
    /// Topic the record came from.
    pub const ORIGINAL_TOPIC: &str = "dlq.original.topic";
    /// Its partition.
    pub const ORIGINAL_PARTITION: &str = "dlq.original.partition";
    /// Its offset.
    pub const ORIGINAL_OFFSET: &str = "dlq.original.offset";
    /// How many times it has been dead-lettered.
    pub const ATTEMPTS: &str = "dlq.attempts";
    /// When (RFC 3339).
    pub const FAILED_AT: &str = "dlq.failed.at";
    /// Set by `seckillctl dlq replay`: `topic:partition:offset` it came from.
    pub const REPLAYED_FROM: &str = "dlq.replayed-from";
}

/// The two topics, with the deployment's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// Accepted orders.
    pub orders: String,
    /// Records the order service could never write.
    pub dlq: String,
}

impl Topics {
    /// Topic names for the settings' prefix.
    pub fn new(settings: &KafkaSettings) -> Self {
        Self {
            orders: format!("{}seckill.orders", settings.topic_prefix),
            dlq: format!("{}seckill.orders.dlq", settings.topic_prefix),
        }
    }
}

/// The order service's consumer group, prefixed like the topics.
pub fn order_group(settings: &KafkaSettings) -> String {
    format!("{}seckill-order", settings.topic_prefix)
}

/// The compensator's consumer group, prefixed like the topics.
pub fn compensator_group(settings: &KafkaSettings) -> String {
    format!("{}seckill-compensator", settings.topic_prefix)
}

/// Producer: acks from every in-sync replica, idempotent (no duplicates from
/// retries), a short linger for batching, and a bounded delivery time.
pub fn producer(settings: &KafkaSettings) -> anyhow::Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", &settings.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", settings.linger_ms.to_string())
        .set("message.timeout.ms", settings.message_timeout_ms.to_string())
        .set("request.timeout.ms", settings.message_timeout_ms.min(30_000).to_string())
        .set("queue.buffering.max.messages", "200000")
        .set("socket.keepalive.enable", "true")
        .set("reconnect.backoff.max.ms", "1000")
        // A topic missing from the cluster fails its records within 2 s
        // (definitely not persisted) instead of waiting 30 s for it to appear.
        .set("topic.metadata.propagation.max.ms", "2000")
        .set("topic.metadata.refresh.interval.ms", "10000")
        .create()?)
}

/// Consumer in `group`: offsets are committed by the caller, only after the
/// work they cover is done; a new group starts from the earliest record.
pub fn consumer_config(settings: &KafkaSettings, group: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &settings.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", settings.session_timeout_ms.to_string())
        .set("heartbeat.interval.ms", (settings.session_timeout_ms / 3).max(500).to_string())
        .set("max.poll.interval.ms", "300000")
        .set("reconnect.backoff.max.ms", "1000")
        .set("fetch.wait.max.ms", "50");
    config
}

/// Creates both topics when missing (never relying on broker auto-create).
pub async fn ensure_topics(settings: &KafkaSettings) -> anyhow::Result<Topics> {
    let topics = Topics::new(settings);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &settings.brokers).create()?;
    let wanted = [
        NewTopic::new(&topics.orders, settings.order_partitions, TopicReplication::Fixed(settings.replication_factor)),
        NewTopic::new(&topics.dlq, settings.dlq_partitions, TopicReplication::Fixed(settings.replication_factor)),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let results = tokio::time::timeout(Duration::from_secs(30), admin.create_topics(&wanted, &options))
        .await
        .map_err(|_| anyhow::anyhow!("creating topics timed out (is Kafka up at {}?)", settings.brokers))??;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => anyhow::bail!("creating topic {topic}: {code}"),
        }
    }
    Ok(topics)
}

/// Builds dead-letter headers for a record that failed for `reason`.
pub fn dlq_headers<H: Headers>(
    original: Option<&H>,
    reason: &str,
    error: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> OwnedHeaders {
    let attempts = original.and_then(|h| header_str(h, dlq_header::ATTEMPTS)).and_then(|a| a.parse::<u32>().ok()).unwrap_or(0) + 1;
    let failed_at = chrono::Utc::now().to_rfc3339();
    let mut headers = OwnedHeaders::new();
    // Keep the request id, so the compensator's spans carry it too.
    if let Some(request_id) = original.and_then(|h| header_str(h, REQUEST_ID_HEADER)) {
        headers = headers.insert(Header { key: REQUEST_ID_HEADER, value: Some(request_id.as_bytes()) });
    }
    for (key, value) in [
        (dlq_header::REASON, reason.to_owned()),
        (dlq_header::ERROR, error.to_owned()),
        (dlq_header::ORIGINAL_TOPIC, topic.to_owned()),
        (dlq_header::ORIGINAL_PARTITION, partition.to_string()),
        (dlq_header::ORIGINAL_OFFSET, offset.to_string()),
        (dlq_header::ATTEMPTS, attempts.to_string()),
        (dlq_header::FAILED_AT, failed_at.clone()),
    ] {
        headers = headers.insert(Header { key, value: Some(value.as_bytes()) });
    }
    headers
}

/// The last value of a header, as text.
pub fn header_str<'a, H: Headers>(headers: &'a H, key: &str) -> Option<&'a str> {
    headers.iter().filter(|h| h.key == key).last().and_then(|h| h.value).and_then(|v| std::str::from_utf8(v).ok())
}

/// Every header, as text, in order.
pub fn headers_map<H: Headers>(headers: &H) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|h| (h.key.to_owned(), h.value.map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()))
        .collect()
}

/// The high watermark of every partition of `topic`: the offset the next
/// record appended to it will get.
pub fn high_watermarks(consumer: &BaseConsumer, topic: &str, timeout: Duration) -> anyhow::Result<BTreeMap<i32, i64>> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let mut marks = BTreeMap::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            marks.insert(p.id(), consumer.fetch_watermarks(topic, p.id(), timeout)?.1);
        }
    }
    if marks.is_empty() {
        anyhow::bail!("topic {topic} has no partitions (does it exist?)");
    }
    Ok(marks)
}

/// Where the consumer's group stands on each of `partitions`: its committed
/// offset, or the partition's low watermark when it has committed nothing.
pub fn committed_positions<'a>(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: impl IntoIterator<Item = &'a i32>,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let mut list = TopicPartitionList::new();
    for p in partitions {
        list.add_partition(topic, *p);
    }
    let committed = consumer.committed_offsets(list, timeout)?;
    let mut positions = BTreeMap::new();
    for entry in committed.elements_for_topic(topic) {
        let position = match entry.offset() {
            Offset::Offset(o) => o,
            _ => consumer.fetch_watermarks(topic, entry.partition(), timeout)?.0,
        };
        positions.insert(entry.partition(), position);
    }
    Ok(positions)
}

/// Records not yet committed by `group` on `topic`, per partition and summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lag {
    /// Sum over partitions.
    pub total: i64,
    /// Per partition: high watermark minus committed offset.
    pub partitions: BTreeMap<i32, i64>,
}

/// Measures `group`'s lag on `topic`: for each partition, the high watermark
/// minus the group's committed offset (the low watermark when none).
pub fn lag(settings: &KafkaSettings, group: &str, topic: &str, timeout: Duration) -> anyhow::Result<Lag> {
    let consumer: BaseConsumer = consumer_config(settings, group).create()?;
    let highs = high_watermarks(&consumer, topic, timeout)?;
    let positions = committed_positions(&consumer, topic, highs.keys(), timeout)?;
    let mut lag = Lag::default();
    for (p, high) in highs {
        let behind = (high - positions.get(&p).copied().unwrap_or(0)).max(0);
        lag.partitions.insert(p, behind);
        lag.total += behind;
    }
    Ok(lag)
}
