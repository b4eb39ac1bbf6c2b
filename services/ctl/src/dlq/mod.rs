//! `seckillctl dlq …`: the dead-letter topic for humans.
//!
//! `list` and `show` read without a consumer group commit; `stats` counts
//! the compensator's index of the topic. `replay` ([`replay`]) re-produces
//! records, `redrive` ([`redrive`]) places dead-lettered orders again for
//! their buyers; both resume where a previous run with the same filter
//! stopped ([`resume`]) and record every run in the audit trail ([`runs`]),
//! which `runs` lists.

pub(crate) mod filter;
mod redrive;
mod replay;
mod resume;
mod runs;
mod stats;

pub use filter::Filter;
use filter::{entry, parse_position, parse_sale, Entry};

use crate::topic::{read_to_end, reader, Start};
use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::{dlq_header, header_str, Topics};
use std::time::Duration;

/// Settings of the dead-letter tools.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DlqToolSettings {
    /// A record whose order was re-produced this many times (its
    /// `dlq.replay-count`) is refused by `replay` and `redrive` without
    /// `--force`: a loop shows up instead of spinning.
    pub max_replays: u32,
}

impl Default for DlqToolSettings {
    fn default() -> Self {
        Self { max_replays: 3 }
    }
}

/// `dlq` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// List dead-lettered records.
    List {
        #[command(flatten)]
        filter: Filter,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one record: headers and decoded value.
    Show {
        /// `partition:offset`.
        position: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Records no service could settle after bounded attempts, parked in
    /// PostgreSQL for an operator.
    Parked {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-produce chosen records to their original topic (or `--to`).
    Replay {
        #[command(flatten)]
        filter: Filter,
        /// Re-produce to this topic instead (inspection, another pipeline);
        /// its own resume position, apart from a replay to the original.
        #[arg(long)]
        to: Option<String>,
        /// Create `--to`'s topic when it does not exist (with the
        /// dead-letter topic's partition count); without it, a missing
        /// topic is refused before anything is sent.
        #[arg(long, requires = "to")]
        create_topic: bool,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Place chosen dead-lettered orders again for their buyers, where the
    /// sale's round is still open, the buyer holds no live order and a unit
    /// is left: a new order (`redriveOf` the original), at most one per
    /// original however often it runs.
    Redrive {
        #[command(flatten)]
        filter: Filter,
        #[command(flatten)]
        run: RunArgs,
    },
    /// The replay and redrive runs, latest first (the audit trail).
    Runs {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters by reason, by sale and by hour; oldest and newest;
    /// replayed, redriven and parked.
    Stats {
        /// Only records dead-lettered at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<DateTime<Utc>>,
        /// Only this sale's (`ACTIVITY:SKU`).
        #[arg(long, value_parser = parse_sale)]
        sale: Option<SaleKey>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// How a replay or redrive runs.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Why (kept in the audit trail).
    #[arg(long, default_value = "")]
    note: String,
    /// Who runs it (kept in the audit trail); else `SECKILL_OPERATOR`,
    /// `$USER`, `$LOGNAME`, the name of this process's user.
    #[arg(long)]
    operator: Option<String>,
    /// Records per second at most.
    #[arg(long)]
    rate: Option<f64>,
    /// At most this many sent / placed (the next run resumes after them).
    #[arg(long)]
    limit: Option<u64>,
    /// Say what would be done; send, place and commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also records already replayed `dlq.max_replays` times.
    #[arg(long)]
    force: bool,
}

impl RunArgs {
    /// Waits out the rate cap after a record sent.
    async fn pace(&self) {
        if let Some(rate) = self.rate.filter(|r| *r > 0.0) {
            tokio::time::sleep(Duration::from_secs_f64(1.0 / rate)).await;
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
async fn finish(audit: &runs::Run, records: resume::Resumable, result: Result<(), Failure>) -> Result<(), Failure> {
    let stopped = records.stop().await;
    let error = match (&result, &stopped) {
        (Err(failure), _) => Some(format!("{:#}", failure.error)),
        (Ok(()), Err(error)) => Some(format!("reading the dead-letter topic: {error:#}")),
        _ => None,
    };
    audit.finish(error.as_deref()).await?;
    result?;
    stopped.map_err(Failure::unreadable)
}

/// A stable hex name for a text (FNV-1a).
fn stable_hash(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
    format!("{hash:016x}")
}

/// Runs a `dlq` subcommand.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    let settings = settings.clone();
    match command {
        Command::List { filter, limit, json } => {
            let entries = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Entry>> {
                let mut entries = Vec::new();
                read_dlq(&settings, None, |_, message| {
                    if filter.matches(message) {
                        entries.push(entry(message));
                    }
                    Ok(entries.len() < limit)
                })?;
                Ok(entries)
            })
            .await
            .map_err(Failure::failed)?
            .map_err(Failure::unreadable)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&entries).map_err(Failure::failed)?);
            } else {
                println!(
                    "{:<12} {:<16} {:<36} {:<8} {:<32} error",
                    "position", "reason", "order", "attempts", "failed at"
                );
                for e in &entries {
                    println!(
                        "{:<12} {:<16} {:<36} {:<8} {:<32} {}",
                        e.position, e.reason, e.order_id, e.attempts, e.failed_at, e.error
                    );
                }
                println!("{} record(s)", entries.len());
            }
            Ok(())
        }
        Command::Show { position, json } => {
            let (partition, offset) = parse_position(&position).map_err(|e| Failure::unreadable(anyhow::anyhow!(e)))?;
            let message = tokio::task::spawn_blocking(move || read_one(&settings, partition, offset))
                .await
                .map_err(Failure::failed)?
                .map_err(Failure::unreadable)?;
            let Some(message) = message else {
                return Err(Failure::failed(anyhow::anyhow!("no record at {position}")));
            };
            let e = entry(&message);
            if json {
                println!("{}", serde_json::to_string_pretty(&e).map_err(Failure::failed)?);
            } else {
                println!("position  {}", e.position);
                for (k, v) in &e.headers {
                    println!("header    {k} = {v}");
                }
                println!("value     {}", serde_json::to_string_pretty(&e.value).unwrap_or_default());
            }
            Ok(())
        }
        Command::Parked { limit, json } => parked(&settings, limit, json).await,
        Command::Replay { filter, to, create_topic, run } => {
            if let Some(topic) = &to {
                replay::target_exists(&settings, topic, create_topic).await?;
            }
            replay::replay(settings, filter, to, run).await
        }
        Command::Redrive { filter, run } => redrive::redrive(settings, filter, run).await,
        Command::Runs { limit, json } => runs::list(&crate::database(&settings).await?, limit, json).await,
        Command::Stats { since, sale, json } => stats::run(&settings, since, sale, json).await,
    }
}

async fn parked(settings: &Settings, limit: i64, json: bool) -> Result<(), Failure> {
    let db = crate::database(settings).await?;
    let rows = seckill_shared::db::parked::list(&db, limit).await.map_err(Failure::unreadable)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(Failure::failed)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<40} {:<36} {:<14} {:<8} {:<12} error",
        "id", "record", "order", "reason", "attempts", "parked by"
    );
    for r in &rows {
        let position = format!("{}:{}:{}", r.topic, r.partition, r.offset);
        let order = r.order_id.as_deref().unwrap_or("-");
        println!(
            "{:<6} {:<40} {:<36} {:<14} {:<8} {:<12} {}",
            r.id, position, order, r.reason, r.attempts, r.parked_by, r.error
        );
    }
    println!("{} parked record(s)", rows.len());
    Ok(())
}

/// Reads the DLQ from the beginning (or from `group`'s committed position)
/// up to the high watermarks taken at the start. `visit` returns whether to
/// go on.
fn read_dlq(
    settings: &Settings,
    group: Option<&str>,
    visit: impl FnMut(&BaseConsumer, &OwnedMessage) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let topic = Topics::new(&settings.servers.kafka).dlq;
    let start = group.map_or(Start::Beginning, Start::Committed);
    read_to_end(&settings.servers.kafka, &topic, start, Duration::from_secs(120), visit)
}

fn read_one(settings: &Settings, partition: i32, offset: i64) -> anyhow::Result<Option<OwnedMessage>> {
    let topic = Topics::new(&settings.servers.kafka).dlq;
    let consumer = reader(&settings.servers.kafka, &format!("seckillctl-reader-{}", rand::random::<u64>()))?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
    consumer.assign(&list)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if let Some(result) = consumer.poll(Duration::from_millis(500)) {
            let message = result?.detach();
            if message.offset() == offset {
                return Ok(Some(message));
            }
            if message.offset() > offset {
                return Ok(None);
            }
        }
    }
    Ok(None)
}
