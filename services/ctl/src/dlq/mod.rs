//! `seckillctl dlq …`: the dead-letter topic for humans.
//!
//! `list` and `show` read without a consumer group commit; `stats` counts
//! the compensator's index of the topic. `replay` ([`replay`]) re-produces
//! records, `redrive` ([`redrive`]) places dead-lettered orders again for
//! their buyers; both resume where a previous run with the same filter
//! stopped ([`resume`]) and record every run in the audit trail ([`runs`]),
//! which `runs` lists.

mod redrive;
mod replay;
mod resume;
mod runs;
mod stats;

use crate::topic::{read_to_end, reader, Start};
use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use seckill_shared::domain::{OrderRecord, SaleKey};
use seckill_shared::kafka::{dlq_header, header_str, headers_map, Topics};
use std::collections::BTreeMap;
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

fn parse_sale(text: &str) -> Result<SaleKey, String> {
    let (activity, sku) = text.split_once(':').ok_or_else(|| format!("expected ACTIVITY:SKU, got '{text}'"))?;
    let number = |part: &str| part.parse::<i64>().map_err(|_| format!("expected ACTIVITY:SKU, got '{text}'"));
    SaleKey::from_raw(number(activity)?, number(sku)?).map_err(|e| e.to_string())
}

fn as_text<S: serde::Serializer>(sale: &Option<SaleKey>, to: S) -> Result<S::Ok, S::Error> {
    to.collect_str(&sale.map(|s| s.to_string()).unwrap_or_default())
}

fn parse_position(text: &str) -> Result<(i32, i64), String> {
    text.split_once(':')
        .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
        .ok_or_else(|| format!("expected PARTITION:OFFSET, got '{text}'"))
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

/// Which records.
#[derive(clap::Args, Clone, Default, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    /// Only this `dlq.reason` (e.g. NO_DB_STOCK).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Only this order id.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    /// Only records dead-lettered at or after this time (RFC 3339).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<DateTime<Utc>>,
    /// Only this sale's records (`ACTIVITY:SKU`).
    #[arg(long, value_parser = parse_sale)]
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_text")]
    sale: Option<SaleKey>,
    /// Only the record at `PARTITION:OFFSET` (as `list` shows it).
    #[arg(long, value_parser = parse_position)]
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<(i32, i64)>,
}

impl Filter {
    fn matches(&self, message: &OwnedMessage) -> bool {
        if self.position.is_some_and(|p| p != (message.partition(), message.offset())) {
            return false;
        }
        let headers = message.headers();
        let header = |key| headers.and_then(|h| header_str(h, key));
        if let Some(reason) = &self.reason {
            if header(dlq_header::REASON) != Some(reason.as_str()) {
                return false;
            }
        }
        if let Some(since) = &self.since {
            let failed_at = header(dlq_header::FAILED_AT).and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            if failed_at.is_none_or(|t| t < *since) {
                return false;
            }
        }
        if self.order.is_some() || self.sale.is_some() {
            let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
            let Some(record) = record else { return false };
            if self.order.as_ref().is_some_and(|order| record.order_id.as_str() != order)
                || self.sale.is_some_and(|sale| record.sale() != sale)
            {
                return false;
            }
        }
        true
    }

    /// A stable name for this filter, for the replay group: the text is the
    /// one versions before `--sale` and `--position` hashed (so a replay
    /// begun by one resumes after an upgrade), those two added when given.
    fn group_suffix(&self) -> String {
        let mut text =
            format!("Filter {{ reason: {:?}, order: {:?}, since: {:?} }}", self.reason, self.order, self.since);
        if let Some(sale) = self.sale {
            text.push_str(&format!(" sale {sale}"));
        }
        if let Some((partition, offset)) = self.position {
            text.push_str(&format!(" position {partition}:{offset}"));
        }
        stable_hash(&text)
    }
}

/// One record as `list` and `show` print it.
#[derive(serde::Serialize)]
struct Entry {
    position: String,
    reason: String,
    error: String,
    order_id: String,
    failed_at: String,
    attempts: String,
    headers: BTreeMap<String, String>,
    value: serde_json::Value,
}

fn entry(message: &OwnedMessage) -> Entry {
    let headers = message.headers().map(headers_map).unwrap_or_default();
    let value = message
        .payload()
        .map(|p| {
            serde_json::from_slice(p)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(p).into_owned()))
        })
        .unwrap_or(serde_json::Value::Null);
    Entry {
        position: format!("{}:{}", message.partition(), message.offset()),
        reason: headers.get(dlq_header::REASON).cloned().unwrap_or_default(),
        error: headers.get(dlq_header::ERROR).cloned().unwrap_or_default(),
        order_id: value["orderId"].as_str().unwrap_or("-").to_owned(),
        failed_at: headers.get(dlq_header::FAILED_AT).cloned().unwrap_or_default(),
        attempts: headers.get(dlq_header::ATTEMPTS).cloned().unwrap_or_default(),
        headers,
        value,
    }
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
        Command::Replay { filter, to, run } => replay::replay(settings, filter, to, run).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_names_the_replay_group_of_earlier_versions() {
        // What the version before --sale and --position named a replay of
        // `--reason DB_REJECTED` (its Debug text, hashed): a replay begun
        // then resumes after an upgrade.
        let filter = Filter { reason: Some("DB_REJECTED".into()), ..Filter::default() };
        assert_eq!(
            filter.group_suffix(),
            stable_hash(r#"Filter { reason: Some("DB_REJECTED"), order: None, since: None }"#)
        );
        let sale = Filter { sale: Some(SaleKey::from_raw(1, 2).unwrap()), ..filter.clone() };
        assert_ne!(sale.group_suffix(), filter.group_suffix());
        let one = Filter { position: Some((0, 7)), ..filter.clone() };
        assert_ne!(one.group_suffix(), filter.group_suffix());
        assert_eq!(serde_json::to_value(&sale).unwrap(), serde_json::json!({"reason": "DB_REJECTED", "sale": "1:2"}));
    }
}
