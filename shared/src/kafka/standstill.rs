//! A group that stands still while records wait: a partition of the orders
//! topic whose committed offset has not moved for `consumer.stall_secs`
//! while records wait behind it.
//!
//! The stall watch ([`super::stall`]) covers a member busy with work it
//! cannot finish. This covers the member that is not busy at all: its
//! consumer fetches nothing (a client left without its partitions, or
//! holding them without fetching, after its coordinator vanished
//! mid-rebalance — seen in the replicated chaos suite, on the order and the
//! dead-letter groups alike), or its last commit was lost and nothing new
//! arrives to commit again. Nobody else takes those partitions, because the
//! member still heartbeats. Each service measures its group's lag every few
//! seconds and hands it to [`StandStill::report`]; when a partition stands
//! still, every member of that process that is not busy joins its group
//! again with a consumer made anew ([`super::membership`]), so the group
//! assigns the partitions again and their new owner consumes from the
//! committed offset (replays are idempotent).

use crate::config::KafkaSettings;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One partition standing still: its number, the records waiting, and for
/// how long its committed offset has not moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Still {
    /// The partition.
    pub partition: i32,
    /// Records after its committed offset.
    pub waiting: i64,
    /// Since its committed offset last moved (or records began to wait).
    pub for_: Duration,
}

/// Which group to watch on which topic, and when a partition stands still.
pub struct Watched {
    pub kafka: KafkaSettings,
    pub group: String,
    pub topic: String,
    /// `consumer.stall_secs`.
    pub stall: Duration,
}

/// Measures the group's lag every five seconds until `shutdown` (`task`
/// names the loop in its logs): each measurement is handed to `seen` (a
/// service's gauges), and a partition standing still bumps `rejoin`.
pub async fn watch(
    task: &'static str,
    watched: Watched,
    seen: impl Fn(&super::lag::Lag) + Sync,
    rejoin: tokio::sync::watch::Sender<u64>,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let standstill = parking_lot::Mutex::new(StandStill::new(watched.stall));
    crate::ops::shutdown::every(task, Duration::from_secs(5), shutdown, || async {
        let (kafka, group, topic) = (watched.kafka.clone(), watched.group.clone(), watched.topic.clone());
        let lag = tokio::task::spawn_blocking(move || super::lag::lag(&kafka, &group, &topic)).await??;
        seen(&lag);
        standstill.lock().report(&watched.group, &watched.topic, &lag, &rejoin);
        Ok::<(), anyhow::Error>(())
    })
    .await
}

/// Each partition's committed offset and since when it has stood there with
/// records waiting.
#[derive(Debug)]
pub struct StandStill {
    bound: Duration,
    since: BTreeMap<i32, (i64, Instant)>,
}

impl StandStill {
    /// Partitions stand still after `bound`.
    pub fn new(bound: Duration) -> Self {
        Self { bound, since: BTreeMap::new() }
    }

    /// Takes `group`'s lag on `topic` now; when partitions stand still,
    /// logs them, counts it and bumps `rejoin` (the members join again).
    pub fn report(
        &mut self,
        group: &str,
        topic: &str,
        lag: &super::lag::Lag,
        rejoin: &tokio::sync::watch::Sender<u64>,
    ) {
        let still = self.observe(Instant::now(), &lag.highs, &lag.partitions);
        if still.is_empty() {
            return;
        }
        let which: Vec<String> = still
            .iter()
            .map(|s| format!("{topic}[{}]: {} waiting for {} s", s.partition, s.waiting, s.for_.as_secs()))
            .collect();
        tracing::error!(
            group,
            stall_secs = self.bound.as_secs(),
            "the group stands still while records wait ({}); this process's idle members join it again",
            which.join(", ")
        );
        metrics::counter!("seckill_consumer_standstills_total", "group" => group.to_owned()).increment(1);
        rejoin.send_modify(|n| *n += 1);
    }

    /// Takes the group's position at `now` (per partition: high watermark
    /// and records waiting) and answers the partitions standing still past
    /// the bound. Each is answered once per bound: its clock starts again.
    pub fn observe(&mut self, now: Instant, highs: &BTreeMap<i32, i64>, waiting: &BTreeMap<i32, i64>) -> Vec<Still> {
        let mut still = Vec::new();
        for (&partition, &high) in highs {
            let behind = waiting.get(&partition).copied().unwrap_or(0);
            let committed = high - behind;
            let entry = self.since.entry(partition).or_insert((committed, now));
            if behind == 0 || entry.0 != committed {
                *entry = (committed, now);
                continue;
            }
            let stood = now.saturating_duration_since(entry.1);
            if stood >= self.bound {
                still.push(Still { partition, waiting: behind, for_: stood });
                entry.1 = now;
            }
        }
        still
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(pairs: &[(i32, i64)]) -> BTreeMap<i32, i64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_partition_whose_offset_does_not_move_while_records_wait_stands_still_once_per_bound() {
        let bound = Duration::from_secs(10);
        let mut watch = StandStill::new(bound);
        let t0 = Instant::now();
        let highs = marks(&[(0, 100), (1, 50)]);
        let waiting = marks(&[(0, 20), (1, 0)]);
        assert!(watch.observe(t0, &highs, &waiting).is_empty());
        assert!(watch.observe(t0 + Duration::from_secs(9), &highs, &waiting).is_empty());
        let still = watch.observe(t0 + Duration::from_secs(10), &highs, &waiting);
        assert_eq!(still, vec![Still { partition: 0, waiting: 20, for_: bound }]);
        // Answered once: the clock starts again.
        assert!(watch.observe(t0 + Duration::from_secs(15), &highs, &waiting).is_empty());
        assert_eq!(watch.observe(t0 + Duration::from_secs(20), &highs, &waiting).len(), 1);
    }

    #[test]
    fn a_moving_offset_or_nothing_waiting_is_not_standing_still() {
        let mut watch = StandStill::new(Duration::from_secs(10));
        let t0 = Instant::now();
        // Records arrive as fast as they are committed: the offset moves.
        for i in 0..5 {
            let highs = marks(&[(0, 100 + 10 * i)]);
            let waiting = marks(&[(0, 10)]);
            assert!(watch.observe(t0 + Duration::from_secs(10 * i as u64), &highs, &waiting).is_empty());
        }
        // Nothing waits: an idle partition is not standing still.
        let mut idle = StandStill::new(Duration::from_secs(10));
        for i in 0..5 {
            let still = idle.observe(t0 + Duration::from_secs(10 * i), &marks(&[(0, 7)]), &marks(&[(0, 0)]));
            assert!(still.is_empty());
        }
    }
}
