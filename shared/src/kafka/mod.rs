//! Kafka client setup: topic and group names, producer and consumer
//! configuration and topic creation; record headers ([`headers`]), the
//! spans of a record's hops ([`spans`]), consumer lag ([`lag`]) and a
//! topic read once to its end ([`read`]).

pub mod cloud_event;
pub mod context;
pub mod headers;
pub mod lag;
pub mod membership;
pub mod read;
pub mod renewing;
pub mod spans;
pub mod stall;
pub mod standstill;

pub use context::Observed;
pub use headers::{
    dlq_header, dlq_headers, header_str, headers_map, spring_dlt, Origin, Trace, REQUEST_ID_HEADER, TRACEPARENT_HEADER,
};
pub use lag::{committed_positions, high_watermarks, pipeline_lag, Lag, PipelineLag};

use crate::config::KafkaSettings;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureProducer;

/// The topics, with the deployment's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// Accepted orders.
    pub orders: String,
    /// Records the order service could never write.
    pub dlq: String,
    /// Every change of an order's status, for consumers downstream.
    pub events: String,
    /// Every outcome of a draw's entry (won, waitlisted, promoted,
    /// expired, lost), for the shop's notifier.
    pub draw_events: String,
}

impl Topics {
    /// Topic names for the settings' prefix.
    pub fn new(settings: &KafkaSettings) -> Self {
        Self {
            orders: format!("{}seckill.orders", settings.topic_prefix),
            dlq: format!("{}seckill.orders.dlq", settings.topic_prefix),
            events: format!("{}seckill.order-events", settings.topic_prefix),
            draw_events: format!("{}seckill.draw-events", settings.topic_prefix),
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
    Ok(producer_config(settings).create()?)
}

/// The producer configuration [`producer`] uses, for producers with a
/// context of their own (the edge's, which reads each record's persistence
/// status in its delivery callback).
pub fn producer_config(settings: &KafkaSettings) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &settings.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        // Keys land where Java clients (Kafka's default partitioner) put
        // them, so Java producers and consumers sharing the topics agree.
        .set("partitioner", "murmur2_random")
        .set("linger.ms", settings.linger_ms.to_string())
        .set("message.timeout.ms", settings.message_timeout_ms.to_string())
        .set("request.timeout.ms", settings.message_timeout_ms.min(30_000).to_string())
        .set("queue.buffering.max.messages", "200000")
        .set("socket.keepalive.enable", "true")
        .set("reconnect.backoff.max.ms", "1000")
        // A topic missing from the cluster fails its records within 2 s
        // (definitely not persisted) instead of waiting 30 s for it to appear.
        .set("topic.metadata.propagation.max.ms", "2000")
        .set("topic.metadata.refresh.interval.ms", "10000");
    config
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
        // A rebalance moves only the partitions that change owner: a member
        // that stalls and leaves (kafka::stall) pauses nobody else.
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("reconnect.backoff.max.ms", "1000")
        .set("fetch.wait.max.ms", "50")
        .set("fetch.min.bytes", settings.fetch_min_bytes.max(1).to_string());
    config
}

/// Creates the topics when missing (never relying on broker auto-create),
/// replicated as the settings say or, by default, as the cluster allows.
pub async fn ensure_topics(settings: &KafkaSettings) -> anyhow::Result<Topics> {
    let topics = Topics::new(settings);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &settings.brokers).create()?;
    let timeout = settings.admin_timeout();
    let (replication, min_insync) = replication(settings, timeout).await?;
    let min_insync = min_insync.to_string();
    let wanted = [
        NewTopic::new(&topics.orders, settings.order_partitions, TopicReplication::Fixed(replication))
            .set("min.insync.replicas", &min_insync),
        NewTopic::new(&topics.dlq, settings.dlq_partitions, TopicReplication::Fixed(replication))
            .set("min.insync.replicas", &min_insync),
        NewTopic::new(&topics.events, settings.order_partitions, TopicReplication::Fixed(replication))
            .set("min.insync.replicas", &min_insync),
        NewTopic::new(&topics.draw_events, settings.order_partitions, TopicReplication::Fixed(replication))
            .set("min.insync.replicas", &min_insync),
    ];
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = tokio::time::timeout(timeout * 2, admin.create_topics(&wanted, &options))
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

/// How many partitions `topic` has (`None`: it does not exist). Asked as
/// a consumer asks, which never creates it.
pub async fn topic_partitions(settings: &KafkaSettings, topic: &str) -> anyhow::Result<Option<usize>> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &settings.brokers).set("allow.auto.create.topics", "false");
    let (timeout, topic) = (settings.admin_timeout(), topic.to_owned());
    tokio::task::spawn_blocking(move || -> anyhow::Result<Option<usize>> {
        let consumer: rdkafka::consumer::BaseConsumer = config.create()?;
        let metadata = rdkafka::consumer::Consumer::fetch_metadata(&consumer, Some(&topic), timeout)?;
        let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
        Ok(found.map(|t| t.partitions().len()).filter(|n| *n > 0))
    })
    .await?
}

/// Creates `topic` with `partitions`, replicated as [`ensure_topics`]
/// replicates the pipeline's (an existing one is left as it is).
pub async fn create_topic(settings: &KafkaSettings, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &settings.brokers).create()?;
    let timeout = settings.admin_timeout();
    let (replication, min_insync) = replication(settings, timeout).await?;
    let min_insync = min_insync.to_string();
    let wanted =
        [NewTopic::new(topic, partitions, TopicReplication::Fixed(replication))
            .set("min.insync.replicas", &min_insync)];
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    for result in admin.create_topics(&wanted, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => anyhow::bail!("creating topic {topic}: {code}"),
        }
    }
    Ok(())
}

/// The replication factor and `min.insync.replicas` for new topics: the
/// settings' when given, else from the cluster's broker count (at most 3
/// copies; 2 in sync when there are 3).
async fn replication(settings: &KafkaSettings, timeout: std::time::Duration) -> anyhow::Result<(i32, i32)> {
    let replication = if settings.replication_factor > 0 {
        settings.replication_factor
    } else {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &settings.brokers);
        let brokers = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
            let consumer: rdkafka::consumer::BaseConsumer = config.create()?;
            Ok(rdkafka::consumer::Consumer::fetch_metadata(&consumer, None, timeout)?.brokers().len())
        })
        .await??;
        (brokers as i32).clamp(1, 3)
    };
    let min_insync = match settings.min_insync_replicas {
        0 if replication >= 3 => 2,
        0 => 1,
        given => given,
    };
    Ok((replication, min_insync))
}

/// Whether the broker (or the client) refuses a record for good, whatever
/// is retried: it is too large, or a record the broker calls invalid. The
/// one judgement every producer of the services makes before parking.
pub fn refused_for_good(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{InvalidMessage, InvalidMessageSize, InvalidRecord, MessageSizeTooLarge};
    matches!(
        error.rdkafka_error_code(),
        Some(MessageSizeTooLarge | InvalidMessageSize | InvalidRecord | InvalidMessage)
    )
}
