//! The dead-letter tools, as `seckillctl dlq` and the dashboard's
//! dead-letters page both run them: which records ([`filter`]), the topic
//! read from where a run stopped ([`resume`]), the audit trail every run
//! writes ([`runs`]), and the two runs — [`replay`] re-produces records,
//! [`redrive`] places dead-lettered orders again for their buyers — with
//! the dead letters' figures ([`stats`]). What a run did with each record
//! goes to the caller as it happens ([`RecordDone`]): the tool prints it,
//! the page shows it.

pub mod filter;
mod reading;
pub mod redrive;
pub mod replay;
mod resume;
pub mod runs;
pub mod stats;

pub use filter::{entry, parse_position, parse_sale, Entry, Filter};
pub use reading::read_dlq;
pub use runs::{Outcome, RecordDone, RunError};

use crate::config::Servers;
use crate::kafka::renewing::Renewing;
use crate::kafka::{dlq_header, header_str, Topics};
use crate::stock::Stock;
use parking_lot::Mutex;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

/// Settings of the dead-letter tools (the `dlq` section of the operator's
/// tool and of the edge, whose dashboard runs them too).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DlqToolSettings {
    /// A record whose order was re-produced this many times (its
    /// `dlq.replay-count`) is refused by `replay` and `redrive` without
    /// `force`: a loop shows up instead of spinning.
    pub max_replays: u32,
}

impl Default for DlqToolSettings {
    fn default() -> Self {
        Self { max_replays: 3 }
    }
}

/// What a run works with.
#[derive(Clone)]
pub struct Tools {
    /// The servers, as the services see them.
    pub servers: Servers,
    /// PostgreSQL, migrated.
    pub db: PgPool,
    /// Redis (the redrive's deduction).
    pub stock: Stock,
    /// The tools' settings.
    pub settings: DlqToolSettings,
    /// The runs' producer, made at the first send.
    producer: Arc<Mutex<Option<Arc<Renewing<FutureProducer>>>>>,
}

impl Tools {
    /// Tools over these servers and connections.
    pub fn new(servers: Servers, db: PgPool, stock: Stock, settings: DlqToolSettings) -> Self {
        Self { servers, db, stock, settings, producer: Arc::default() }
    }

    /// The topic names.
    pub fn topics(&self) -> Topics {
        Topics::new(&self.servers.kafka)
    }

    /// The producer every run of these tools sends with: one, made anew
    /// after a fatal error.
    pub fn producer(&self) -> Result<Arc<Renewing<FutureProducer>>, RunError> {
        let mut slot = self.producer.lock();
        if let Some(producer) = slot.as_ref() {
            return Ok(producer.clone());
        }
        let kafka = self.servers.kafka.clone();
        let made = Arc::new(
            Renewing::new("dead-letter tools", move || crate::kafka::producer(&kafka)).map_err(RunError::unreadable)?,
        );
        *slot = Some(made.clone());
        Ok(made)
    }
}

/// How a replay or redrive runs.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Why (kept in the audit trail).
    pub note: String,
    /// Who runs it (kept in the audit trail); `None`: the process's user
    /// ([`runs::operator`]).
    pub operator: Option<String>,
    /// Records per second at most.
    pub rate: Option<f64>,
    /// At most this many sent / placed (the next run resumes after them).
    pub limit: Option<u64>,
    /// Say what would be done; send, place and commit nothing.
    pub dry_run: bool,
    /// Also records already re-produced `dlq.max_replays` times.
    pub force: bool,
    /// The caller's name for this run: a second run with it runs nothing
    /// and is answered by the first (a form submitted twice).
    pub submission: Option<String>,
}

impl RunOptions {
    /// Waits out the rate cap after a record sent.
    async fn pace(&self) {
        if let Some(rate) = self.rate.filter(|r| *r > 0.0) {
            tokio::time::sleep(Duration::from_secs_f64(1.0 / rate)).await;
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// Its id in the audit trail (the `dlq.replay-id` of what it sent).
    pub run_id: i64,
    /// Sent (a replay) or placed (a redrive).
    pub done: u64,
    pub skipped: u64,
    pub refused: u64,
}

impl RunReport {
    /// Run `id` as the audit trail has it (a submission sent again is
    /// answered with the run it started).
    pub async fn of(db: &PgPool, id: i64) -> Result<Self, RunError> {
        let row = runs::latest(db, 1, Some(id)).await?.pop();
        let row = row.ok_or_else(|| RunError::failed(anyhow::anyhow!("no run {id}")))?;
        let count = |n: i32| u64::try_from(n).unwrap_or(0);
        Ok(Self { run_id: id, done: count(row.sent), skipped: count(row.skipped), refused: count(row.refused) })
    }

    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Sent | Outcome::Placed => self.done += 1,
            Outcome::Skipped => self.skipped += 1,
            Outcome::Refused => self.refused += 1,
        }
    }
}

/// Refuses a record whose order was re-produced `max` times already,
/// unless forced.
fn loop_guard(message: &OwnedMessage, max: u32, force: bool) -> Result<(), String> {
    let count = message
        .headers()
        .and_then(|h| header_str(h, dlq_header::REPLAY_COUNT))
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    if count >= max && !force {
        return Err(format!(
            "re-produced {count} times already and dead-lettered again (dlq.max_replays = {max}): a loop? \
             --force --position {}:{} sends it anyway",
            message.partition(),
            message.offset()
        ));
    }
    Ok(())
}

/// Ends a run: the reader stopped (committing nothing past what was done),
/// the audit row closed with why it stopped early, if it did.
async fn finish(audit: &runs::Run, records: resume::Resumable, result: Result<(), RunError>) -> Result<(), RunError> {
    let stopped = records.stop().await;
    let error = match (&result, &stopped) {
        (Err(failure), _) => Some(failure.to_string()),
        (Ok(()), Err(error)) => Some(format!("reading the dead-letter topic: {error:#}")),
        _ => None,
    };
    audit.finish(error.as_deref()).await?;
    result?;
    stopped.map_err(RunError::Unreadable)
}

/// Up to `limit` dead letters `filter` takes, oldest first (a read of the
/// whole topic, on a blocking thread).
pub async fn list(servers: &Servers, filter: Filter, limit: usize) -> Result<Vec<Entry>, RunError> {
    let servers = servers.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        read_dlq(&servers, None, |_, message| {
            if filter.matches(message) {
                entries.push(entry(message));
            }
            Ok(entries.len() < limit)
        })?;
        Ok(entries)
    })
    .await
    .map_err(RunError::failed)?
    .map_err(RunError::Unreadable)
}
