//! The consumers' context: every rebalance (partitions assigned and
//! revoked) and every failed offset commit is logged with the group, so an
//! operator can tell a replay after a rebalance from a bug, as
//! rust-rdkafka's own examples do. Used by every consumer group member of
//! the services (the order service's workers, the compensator's DLQ job).

use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::{ClientContext, TopicPartitionList};

/// Logs rebalances and commits for one group member.
pub struct Observed {
    /// The consumer group, for the log lines.
    group: String,
}

impl Observed {
    /// A context for a member of `group`.
    pub fn new(group: &str) -> Self {
        Self { group: group.to_owned() }
    }
}

/// `topic[partition, ...]` for a log line.
fn partitions(list: &TopicPartitionList) -> String {
    let mut parts: Vec<String> = list.elements().iter().map(|e| format!("{}[{}]", e.topic(), e.partition())).collect();
    parts.sort();
    parts.join(" ")
}

impl ClientContext for Observed {}

impl ConsumerContext for Observed {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            // What was consumed of these and not committed is replayed by
            // their next owner, idempotently.
            Rebalance::Revoke(list) => {
                tracing::info!(group = %self.group, partitions = %partitions(list), "partitions revoked")
            }
            Rebalance::Assign(list) => {
                tracing::debug!(group = %self.group, partitions = %partitions(list), "partitions to assign")
            }
            Rebalance::Error(error) => tracing::warn!(group = %self.group, %error, "rebalance failed"),
        }
        metrics::counter!("seckill_consumer_rebalances_total", "group" => self.group.clone()).increment(1);
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            tracing::info!(group = %self.group, partitions = %partitions(list), "partitions assigned");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => tracing::trace!(group = %self.group, partitions = %partitions(offsets), "offsets committed"),
            // Not fatal: the records after the last commit are replayed by
            // whoever owns the partition, idempotently.
            Err(error) => {
                tracing::warn!(group = %self.group, %error, partitions = %partitions(offsets), "offset commit failed; the records will be replayed");
                metrics::counter!("seckill_consumer_commit_failures_total", "group" => self.group.clone()).increment(1);
            }
        }
    }
}
