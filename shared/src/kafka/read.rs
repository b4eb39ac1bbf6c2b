//! Reading a topic once, up to where it ended when the read began: the
//! dead-letter tools (`seckillctl dlq`, the dashboard's dead-letters page)
//! and the event checks read this way, without joining the services'
//! consumer groups.

use crate::config::KafkaSettings;
use crate::kafka;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Where each partition's read starts.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// The partition's first record still kept.
    Beginning,
    /// Where this consumer group committed (the beginning when it has not).
    Committed(&'a str),
    /// The first record appended at or after this time (ms since the epoch).
    Time(i64),
}

/// A consumer that commits nothing by itself, in `group`.
pub fn reader(settings: &KafkaSettings, group: &str) -> anyhow::Result<BaseConsumer> {
    Ok(kafka::consumer_config(settings, group).create()?)
}

/// Reads `topic` from `start` up to the high watermarks taken as the read
/// began, calling `visit` with each record (and the consumer, to commit
/// with); `visit` answers whether to go on. Bounded by `deadline`.
pub fn read_to_end(
    settings: &KafkaSettings,
    topic: &str,
    start: Start<'_>,
    deadline: Duration,
    mut visit: impl FnMut(&BaseConsumer, &OwnedMessage) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let throwaway = format!("seckillctl-reader-{}", rand::random::<u64>());
    let group = match start {
        Start::Committed(group) => group,
        _ => &throwaway,
    };
    let consumer = reader(settings, group)?;
    let timeout = settings.admin_timeout();
    let marks = kafka::high_watermarks(&consumer, topic, timeout)?;
    let starts: BTreeMap<i32, Offset> = match start {
        Start::Beginning => marks.keys().map(|p| (*p, Offset::Beginning)).collect(),
        Start::Committed(_) => kafka::committed_positions(&consumer, topic, marks.keys(), timeout)?
            .into_iter()
            .map(|(p, o)| (p, Offset::Offset(o)))
            .collect(),
        Start::Time(ms) => {
            let mut wanted = TopicPartitionList::new();
            for partition in marks.keys() {
                wanted.add_partition_offset(topic, *partition, Offset::Offset(ms))?;
            }
            let found = consumer.offsets_for_times(wanted, timeout)?;
            // A partition with nothing at or after the time starts at its end.
            found.elements_for_topic(topic).iter().map(|e| (e.partition(), e.offset())).collect()
        }
    };
    let mut assignment = TopicPartitionList::new();
    let mut pending: BTreeMap<i32, i64> = BTreeMap::new();
    for (partition, high) in &marks {
        let offset = starts.get(partition).copied().unwrap_or(Offset::Beginning);
        assignment.add_partition_offset(topic, *partition, offset)?;
        let empty = matches!(offset, Offset::End) || matches!(offset, Offset::Offset(o) if o >= *high) || *high == 0;
        if !empty {
            pending.insert(*partition, *high);
        }
    }
    consumer.assign(&assignment)?;
    let give_up = Instant::now() + deadline;
    while !pending.is_empty() {
        if Instant::now() >= give_up {
            anyhow::bail!(
                "reading {topic} took longer than {deadline:?}; {} partition(s) unread to the end",
                pending.len()
            );
        }
        let Some(result) = consumer.poll(Duration::from_millis(500)) else {
            // A partition whose records before the mark were all deleted
            // (retention) ends where its low watermark now is.
            for (partition, high) in pending.clone() {
                if consumer.fetch_watermarks(topic, partition, timeout)?.0 >= high {
                    pending.remove(&partition);
                }
            }
            continue;
        };
        let message = result?.detach();
        if let Some(high) = pending.get(&message.partition()).copied() {
            if message.offset() + 1 >= high {
                pending.remove(&message.partition());
            }
            if message.offset() < high && !visit(&consumer, &message)? {
                return Ok(());
            }
        }
    }
    Ok(())
}
