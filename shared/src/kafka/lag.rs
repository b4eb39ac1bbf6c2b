//! How far the consumer groups are behind: per partition, the high
//! watermark minus the group's committed offset. The reconciliation, the
//! sweeper's checkpoints, `seckillctl lag` and the services' lag gauges all
//! read it here.

use super::{compensator_group, consumer_config, order_group, Topics};
use crate::config::KafkaSettings;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// The high watermark of every partition of `topic`: the offset the next
/// record appended to it will get.
pub fn high_watermarks(consumer: &BaseConsumer, topic: &str, timeout: Duration) -> anyhow::Result<BTreeMap<i32, i64>> {
    Ok(watermarks(consumer, topic, timeout)?.into_iter().map(|(p, (_, high))| (p, high)).collect())
}

/// The low and high watermarks of every partition of `topic`: the records
/// it holds are the offsets from low up to (not including) high.
pub fn watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<i32, (i64, i64)>> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let mut marks = BTreeMap::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            marks.insert(p.id(), consumer.fetch_watermarks(topic, p.id(), timeout)?);
        }
    }
    if marks.is_empty() {
        anyhow::bail!("topic {topic} has no partitions (does it exist?)");
    }
    Ok(marks)
}

/// [`watermarks`], off the async runtime (the Kafka calls block).
pub async fn topic_watermarks(settings: &KafkaSettings, topic: &str) -> anyhow::Result<BTreeMap<i32, (i64, i64)>> {
    let (settings, topic) = (settings.clone(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = consumer_config(&settings, &compensator_group(&settings)).create()?;
        watermarks(&consumer, &topic, settings.admin_timeout())
    })
    .await?
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
    let committed = committed_offsets(consumer, list, timeout)?;
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

/// The group's committed offsets, asked again while its coordinator is
/// still being chosen or loaded (a fresh cluster's first group: Kafka
/// creates `__consumer_offsets` on that first ask), within `timeout`.
fn committed_offsets(
    consumer: &BaseConsumer,
    list: TopicPartitionList,
    timeout: Duration,
) -> anyhow::Result<TopicPartitionList> {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode::{CoordinatorLoadInProgress, CoordinatorNotAvailable, NotCoordinator};
    let give_up = std::time::Instant::now() + timeout;
    loop {
        match consumer.committed_offsets(list.clone(), timeout) {
            Err(KafkaError::MetadataFetch(NotCoordinator | CoordinatorLoadInProgress | CoordinatorNotAvailable))
                if std::time::Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return Ok(other?),
        }
    }
}

/// Records not yet committed by a group on a topic, per partition and summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lag {
    /// Sum over partitions.
    pub total: i64,
    /// Per partition: high watermark minus committed offset.
    pub partitions: BTreeMap<i32, i64>,
    /// Records ever written to the topic: the sum of its high watermarks.
    pub written: i64,
    /// Per partition: the high watermark (the committed offset is it minus
    /// the lag).
    #[serde(skip)]
    pub highs: BTreeMap<i32, i64>,
}

/// Measures `group`'s lag on `topic` (blocking).
pub fn lag(settings: &KafkaSettings, group: &str, topic: &str) -> anyhow::Result<Lag> {
    let timeout = settings.admin_timeout();
    let consumer: BaseConsumer = consumer_config(settings, group).create()?;
    let highs = high_watermarks(&consumer, topic, timeout)?;
    let positions = committed_positions(&consumer, topic, highs.keys(), timeout)?;
    let mut lag = Lag::default();
    for (p, high) in highs {
        let behind = (high - positions.get(&p).copied().unwrap_or(0)).max(0);
        lag.partitions.insert(p, behind);
        lag.total += behind;
        lag.written += high;
        lag.highs.insert(p, high);
    }
    Ok(lag)
}

/// Both consumer groups' lag.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineLag {
    /// The order service on the orders topic.
    pub order: Lag,
    /// The compensator on the dead-letter topic.
    pub compensator: Lag,
}

/// Measures both groups' lag, off the async runtime (the Kafka calls block).
pub async fn pipeline_lag(settings: &KafkaSettings) -> anyhow::Result<PipelineLag> {
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || {
        let topics = Topics::new(&settings);
        Ok(PipelineLag {
            order: lag(&settings, &order_group(&settings), &topics.orders)?,
            compensator: lag(&settings, &compensator_group(&settings), &topics.dlq)?,
        })
    })
    .await?
}
