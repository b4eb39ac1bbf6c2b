//! The relay's ordering rule: an order's CREATED event is produced by the
//! order service that wrote its row, after the commit and before the
//! batch's offsets are committed (`created_events.rs`). So an order's later
//! event (PAID, CANCELLED, REFUND_DUE) — whose outbox row carries the
//! position of the record the order came from — may go only once the
//! order group's committed offset on that partition has passed that
//! record: until then its CREATED may not be on the topic yet, and a
//! consumer must never see a PAID before its CREATED.
//!
//! The relay sends its rows in order, so a row held holds every row after
//! it (the cursor cannot skip). Committed offsets only grow: they are asked
//! of the broker only when a row is past what was last seen. A record that
//! is no longer in the partition (its topic made anew, or the record past
//! retention) can never be consumed again: its row is let go, and the log
//! says so.

use parking_lot::Mutex;
use rdkafka::consumer::BaseConsumer;
use seckill_shared::config::KafkaSettings;
use seckill_shared::db::outbox::OutboxRow;
use seckill_shared::kafka::{self, lag};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// What the relay knows of the order group's committed offsets.
pub struct CreatedFirst {
    kafka: KafkaSettings,
    /// `seckill.orders`.
    topic: String,
    /// Per partition, the group's committed offset last read.
    committed: Mutex<HashMap<i32, i64>>,
    /// The client that asks (made on first need, again after a failure).
    client: Mutex<Option<Arc<BaseConsumer>>>,
}

impl CreatedFirst {
    /// The rule for the order group on `topic`.
    pub fn new(kafka: KafkaSettings, topic: String) -> Self {
        Self { kafka, topic, committed: Mutex::default(), client: Mutex::default() }
    }

    /// How many of `rows` (in the cursor's order) may be sent now: all of
    /// them, or those before the first whose order's record the order group
    /// has not committed past.
    pub async fn sendable(&self, rows: &[OutboxRow]) -> anyhow::Result<usize> {
        let Some(first) = self.first_held(rows) else { return Ok(rows.len()) };
        let wanted: Vec<i32> = {
            let mut partitions: Vec<i32> = rows[first..].iter().filter_map(|r| r.source).map(|(p, _)| p).collect();
            partitions.sort_unstable();
            partitions.dedup();
            partitions
        };
        let cached = self.client.lock().clone();
        let client = match cached {
            Some(client) => client,
            None => {
                let made = kafka::consumer_config(&self.kafka, &kafka::order_group(&self.kafka)).create()?;
                self.client.lock().insert(Arc::new(made)).clone()
            }
        };
        let (topic, timeout) = (self.topic.clone(), self.kafka.admin_timeout());
        let read = tokio::task::spawn_blocking(move || read_group(&client, &topic, &wanted, timeout)).await?;
        let (committed, marks) = read.inspect_err(|_| *self.client.lock() = None)?;
        self.committed.lock().extend(committed);
        let Some(first) = self.first_held(rows) else { return Ok(rows.len()) };
        // Held only while the record can still be consumed.
        let (partition, offset) = rows[first].source.expect("a held row has a source");
        match marks.get(&partition) {
            Some(&(low, high)) if offset < low || offset >= high => {
                tracing::warn!(
                    event_id = rows[first].event.event_id,
                    partition,
                    offset,
                    low,
                    high,
                    "the order's record is no longer in seckill.orders; its event goes without waiting for its CREATED"
                );
                self.committed.lock().insert(partition, offset + 1);
                Ok(self.first_held(rows).unwrap_or(rows.len()))
            }
            _ => Ok(first),
        }
    }

    /// The first row whose record is not known to be committed.
    fn first_held(&self, rows: &[OutboxRow]) -> Option<usize> {
        let committed = self.committed.lock();
        rows.iter().position(|row| match row.source {
            Some((partition, offset)) => committed.get(&partition).is_none_or(|&c| c <= offset),
            None => false,
        })
    }
}

/// Partition → committed offset, and partition → (low, high) watermarks.
type GroupRead = (BTreeMap<i32, i64>, BTreeMap<i32, (i64, i64)>);

/// The order group's committed offsets on `partitions` of `topic`, and the
/// topic's watermarks (blocking), asked by `client` (a consumer of the
/// group that never joins it).
fn read_group(client: &BaseConsumer, topic: &str, partitions: &[i32], timeout: Duration) -> anyhow::Result<GroupRead> {
    let committed = lag::committed_positions(client, topic, partitions, timeout)?;
    let marks = lag::watermarks(client, topic, timeout)?;
    Ok((committed, marks))
}
