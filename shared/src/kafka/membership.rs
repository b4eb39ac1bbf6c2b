//! One member's place in its consumer group: its consumer, made anew when
//! the member joins the group again (the group stood still while records
//! waited, [`super::standstill`]), and its offset commits. The order
//! service's workers and the compensator's dead-letter job are members.

use crate::config::KafkaSettings;
use crate::kafka;
use parking_lot::RwLock;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// How a member's consumer is made: its group, its topic, and the stall
/// bound it leaves the group after (`max.poll.interval.ms`).
#[derive(Clone)]
pub struct Joining {
    pub kafka: KafkaSettings,
    pub group: String,
    pub topic: String,
    pub max_poll_interval_ms: String,
}

/// A member's consumer, and what asks it to join again.
pub struct Membership {
    /// The member's name, for the log (`order worker 0`).
    name: String,
    joining: Joining,
    /// Shared with the bounded final commit, which runs on a thread of its
    /// own (a synchronous commit blocks until the coordinator answers);
    /// made anew when the member joins its group again.
    consumer: Arc<RwLock<Arc<StreamConsumer<kafka::Observed>>>>,
    /// Bumped by the lag reporter when the group stands still while records
    /// wait; `None`: never asked.
    rejoins: Option<watch::Receiver<u64>>,
    /// The last request to join again this member followed.
    rejoined: AtomicU64,
}

impl Membership {
    /// Creates the consumer and subscribes it to its topic.
    pub fn join(name: String, joining: Joining) -> anyhow::Result<Self> {
        let consumer = subscribed(&joining)?;
        Ok(Self {
            name,
            joining,
            consumer: Arc::new(RwLock::new(Arc::new(consumer))),
            rejoins: None,
            rejoined: AtomicU64::new(0),
        })
    }

    /// Joins the group again, with a consumer made anew, whenever `rejoins`
    /// is bumped and the member is not busy with a batch.
    pub fn rejoining_on(&mut self, rejoins: watch::Receiver<u64>) {
        self.rejoined = AtomicU64::new(*rejoins.borrow());
        self.rejoins = Some(rejoins);
    }

    /// The member's consumer as it is now.
    pub fn consumer(&self) -> Arc<StreamConsumer<kafka::Observed>> {
        self.consumer.read().clone()
    }

    /// Waits until the member is asked to join its group again (never when
    /// nobody asks); answers the request's number.
    pub async fn rejoin_asked(&self) -> u64 {
        let Some(rejoins) = &self.rejoins else { return std::future::pending().await };
        let mut rejoins = rejoins.clone();
        let seen = self.rejoined.load(Ordering::Relaxed);
        let asked = rejoins.wait_for(|asked| *asked > seen).await.map(|asked| *asked);
        match asked {
            Ok(asked) => asked,
            Err(_) => std::future::pending().await,
        }
    }

    /// Leaves the group with the old consumer (closed on a thread of its
    /// own, never awaited: a client stuck with its coordinator may take
    /// long to close) and joins it with a new one.
    pub fn rejoin(&self, asked: u64) {
        self.rejoined.store(asked, Ordering::Relaxed);
        match subscribed(&self.joining) {
            Ok(fresh) => {
                let old = std::mem::replace(&mut *self.consumer.write(), Arc::new(fresh));
                tokio::task::spawn_blocking(move || drop(old));
                metrics::counter!("seckill_consumer_rejoins_total", "group" => self.joining.group.clone()).increment(1);
                tracing::warn!(member = %self.name, group = %self.joining.group, "joined its group again with a new consumer");
            }
            Err(error) => {
                tracing::error!(member = %self.name, %error, "could not make a new consumer; keeping the old one")
            }
        }
    }

    /// Test hook: the member's consumer stops fetching (its partitions
    /// paused) while it stays in its group, as a client left holding its
    /// partitions without fetching would. A consumer made anew fetches.
    #[cfg(feature = "fault-injection")]
    pub fn wedger(&self) -> impl Fn() + Send + Sync + 'static {
        let consumer = self.consumer.clone();
        move || {
            let consumer = consumer.read().clone();
            let assigned = consumer.assignment().expect("the assignment");
            consumer.pause(&assigned).expect("pausing the assignment");
        }
    }

    /// Commits the offset after each partition's last record of the batch;
    /// returns what it committed.
    pub fn commit(&self, batch: &[OwnedMessage], mode: CommitMode) -> TopicPartitionList {
        let mut next: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        for message in batch {
            let entry = next.entry((message.topic(), message.partition())).or_insert(0);
            *entry = (*entry).max(message.offset() + 1);
        }
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in &next {
            if let Err(error) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
                tracing::warn!(%error, "building the commit");
            }
        }
        self.send_commit(&list, mode);
        list
    }

    fn send_commit(&self, list: &TopicPartitionList, mode: CommitMode) {
        // A failed commit (the partition moved to another member in a
        // rebalance) is not fatal: the new owner replays, idempotently.
        if let Err(error) = self.consumer().commit(list, mode) {
            tracing::warn!(member = %self.name, %error, "offset commit failed; the records will be replayed");
        }
    }
}

/// A consumer of the topic in the group. A member that has not polled for
/// the stall bound (its work not done) leaves the group: the others take
/// its partitions.
fn subscribed(joining: &Joining) -> anyhow::Result<StreamConsumer<kafka::Observed>> {
    let consumer: StreamConsumer<kafka::Observed> = kafka::consumer_config(&joining.kafka, &joining.group)
        .set("max.poll.interval.ms", &joining.max_poll_interval_ms)
        .create_with_context(kafka::Observed::new(&joining.group))?;
    consumer.subscribe(&[joining.topic.as_str()])?;
    Ok(consumer)
}
