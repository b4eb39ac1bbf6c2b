//! A consumer group member that stops making progress — its batch (or
//! record) neither done nor given up for `consumer.stall_secs`, a
//! dependency answering nothing or failing on every try — is noticed,
//! reported and replaced.
//!
//! - **Replaced**: a member that does not poll its consumer for
//!   `consumer.stall_secs` leaves its group (librdkafka's
//!   `max.poll.interval.ms`, set to that bound: it sends LeaveGroup by
//!   itself), so the other members take its partitions at once, with the
//!   cooperative-sticky assignor moving only those. What it had not
//!   committed is consumed again by them, idempotently. Once its work ends,
//!   its next poll joins the group again.
//! - **Reported**: [`Stalls::watch`] logs the member and the partitions its
//!   work came from, and `seckill_consumer_stalled_members` counts it;
//!   `/readyz` answers 503 with why while it lasts.
//! - **Restarted**: a member still stalled after twice the bound fails
//!   `/healthz`, so an orchestrator's liveness probe restarts the process.
//!
//! A member that is not busy but fetches nothing is the order service's
//! stand-still watch's ([`super::standstill`]).

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a group member may work on one batch or record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumerSettings {
    /// A member whose batch (or record) is not done after this long is
    /// stalled: it leaves its group, `/readyz` says so; after twice this
    /// long `/healthz` fails.
    pub stall_secs: u64,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self { stall_secs: 120 }
    }
}

impl ConsumerSettings {
    /// The bound.
    pub fn stall(&self) -> Duration {
        Duration::from_secs(self.stall_secs)
    }

    /// Refuses a bound librdkafka would not take as `max.poll.interval.ms`
    /// (at least the session timeout) or that could not hold a batch's
    /// bounded tries.
    pub fn check(&self, kafka: &crate::config::KafkaSettings) -> anyhow::Result<()> {
        let session_secs = kafka.session_timeout_ms.div_ceil(1_000);
        if self.stall_secs < session_secs.max(5) || self.stall_secs > 3_600 {
            anyhow::bail!(
                "consumer.stall_secs {} must be between {} (the consumer session timeout) and 3600",
                self.stall_secs,
                session_secs.max(5)
            );
        }
        Ok(())
    }

    /// `max.poll.interval.ms`: a member that has not polled for the bound
    /// leaves its group.
    pub fn max_poll_interval_ms(&self) -> String {
        (self.stall_secs * 1_000).to_string()
    }
}

/// `topic[0 3]`: the partitions records came from, for a log line.
pub fn partitions_of<'a>(records: impl IntoIterator<Item = (&'a str, i32)>) -> String {
    let mut by_topic: std::collections::BTreeMap<&str, std::collections::BTreeSet<i32>> = Default::default();
    for (topic, partition) in records {
        by_topic.entry(topic).or_default().insert(partition);
    }
    by_topic
        .iter()
        .map(|(topic, partitions)| {
            let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
            format!("{topic}[{}]", list.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one member is working on, if anything.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<Option<(Instant, String)>>>);

impl Progress {
    /// Work taken: records of `partitions` (`topic[0 3]`), from now.
    pub fn busy(&self, partitions: String) {
        *self.0.lock() = Some((Instant::now(), partitions));
    }

    /// The work is done (committed) or given back.
    pub fn idle(&self) {
        *self.0.lock() = None;
    }

    fn busy_for(&self) -> Option<(Duration, String)> {
        self.0.lock().as_ref().map(|(since, partitions)| (since.elapsed(), partitions.clone()))
    }
}

/// The members of one process, watched.
#[derive(Clone)]
pub struct Stalls {
    members: Arc<Mutex<Vec<(String, Progress)>>>,
    bound: Duration,
}

impl Default for Stalls {
    fn default() -> Self {
        Self::new(ConsumerSettings::default().stall())
    }
}

impl Stalls {
    /// No member yet; stalled past `bound`.
    pub fn new(bound: Duration) -> Self {
        Self { members: Arc::default(), bound }
    }

    /// A member named `name` (`order worker 0`), to report its progress.
    pub fn member(&self, name: String) -> Progress {
        let progress = Progress::default();
        self.members.lock().push((name, progress.clone()));
        progress
    }

    /// Each stalled member, in words, that has been stalled for at least
    /// `times` × the bound.
    fn stalled(&self, times: u32) -> Vec<String> {
        self.members
            .lock()
            .iter()
            .filter_map(|(name, progress)| {
                let (busy, partitions) = progress.busy_for()?;
                (busy >= self.bound * times).then(|| {
                    format!("{name} made no progress for {} s on {partitions}; it left its group", busy.as_secs())
                })
            })
            .collect()
    }

    /// For `/readyz`: `Err` naming each stalled member.
    pub fn ready(&self) -> Result<(), String> {
        let stalled = self.stalled(1);
        if stalled.is_empty() {
            Ok(())
        } else {
            Err(stalled.join("; "))
        }
    }

    /// For `/healthz`: `Err` once a member has been stalled for twice the
    /// bound (leaving its group did not free it: restart the process).
    pub fn alive(&self) -> Result<(), String> {
        let stalled = self.stalled(2);
        if stalled.is_empty() {
            Ok(())
        } else {
            Err(format!("stalled past twice consumer.stall_secs: {}", stalled.join("; ")))
        }
    }

    /// Every second until `shutdown`: the count on `/metrics`, and a log
    /// line when a member stalls (naming its partitions) and when it moves
    /// again.
    pub async fn watch(self, shutdown: CancellationToken) -> Result<(), std::convert::Infallible> {
        let mut reported: Vec<String> = Vec::new();
        crate::ops::shutdown::every("stall watch", Duration::from_secs(1), shutdown, || {
            let stalled = self.stalled(1);
            for now in &stalled {
                let member = now.split(" made no").next().unwrap_or(now);
                if !reported.iter().any(|r| r.starts_with(member)) {
                    tracing::error!(stall_secs = self.bound.as_secs(), "consumer stalled: {now}");
                }
            }
            for before in &reported {
                let member = before.split(" made no").next().unwrap_or(before);
                if !stalled.iter().any(|s| s.starts_with(member)) {
                    tracing::warn!("consumer moving again: {member}");
                }
            }
            metrics::gauge!("seckill_consumer_stalled_members").set(stalled.len() as f64);
            reported = stalled;
            async { Ok::<(), std::convert::Infallible>(()) }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_busy_past_the_bound_is_stalled_and_twice_past_it_is_dead() {
        let stalls = Stalls::new(Duration::from_millis(50));
        let worker = stalls.member("order worker 0".into());
        let other = stalls.member("order worker 1".into());
        assert!(stalls.ready().is_ok() && stalls.alive().is_ok(), "idle members");
        worker.busy("seckill.orders[1 3]".into());
        other.busy("seckill.orders[0]".into());
        other.idle();
        std::thread::sleep(Duration::from_millis(60));
        let why = stalls.ready().unwrap_err();
        assert!(why.contains("order worker 0") && why.contains("seckill.orders[1 3]"), "{why}");
        assert!(!why.contains("order worker 1"), "{why}");
        assert!(stalls.alive().is_ok(), "not yet twice the bound");
        std::thread::sleep(Duration::from_millis(50));
        assert!(stalls.alive().is_err(), "twice the bound");
        worker.idle();
        assert!(stalls.ready().is_ok() && stalls.alive().is_ok(), "moving again");
    }

    #[test]
    fn the_bound_is_one_librdkafka_takes() {
        let kafka = crate::config::KafkaSettings::default();
        assert!(ConsumerSettings::default().check(&kafka).is_ok());
        assert!(ConsumerSettings { stall_secs: 5 }.check(&kafka).is_err(), "below the session timeout");
        assert!(ConsumerSettings { stall_secs: 7_200 }.check(&kafka).is_err());
        assert_eq!(ConsumerSettings { stall_secs: 30 }.max_poll_interval_ms(), "30000");
    }
}
