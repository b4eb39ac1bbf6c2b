//! `seckillctl dlq list | show | replay`: the dead-letter topic for humans.
//!
//! `list` and `show` read without a consumer group commit. `replay` reads
//! with its own group (one per filter, so different filters keep separate
//! positions), re-produces each chosen record to its original topic with a
//! `dlq.replayed-from` header and an incremented attempt count, awaits the
//! delivery, and only then commits past it: an interrupted replay resumes
//! where it stopped. A crash between a delivery and its commit replays that
//! one record once more, which the order service absorbs (first row wins).

use crate::topic::{read_to_end, reader, Start};
use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use seckill_shared::domain::OrderRecord;
use seckill_shared::kafka::{self, dlq_header, header_str, headers_map, Topics, REQUEST_ID_HEADER};
use std::collections::BTreeMap;
use std::time::Duration;

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
        /// Records per second at most.
        #[arg(long)]
        rate: Option<f64>,
        /// Replay at most this many (the next run resumes after them).
        #[arg(long)]
        limit: Option<u64>,
        /// List what would be sent; send and commit nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which records.
#[derive(clap::Args, Clone, Default, Debug)]
pub struct Filter {
    /// Only this `dlq.reason` (e.g. NO_DB_STOCK).
    #[arg(long)]
    reason: Option<String>,
    /// Only this order id.
    #[arg(long)]
    order: Option<String>,
    /// Only records dead-lettered at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<DateTime<Utc>>,
}

impl Filter {
    fn matches(&self, message: &OwnedMessage) -> bool {
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
        if let Some(order) = &self.order {
            let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
            if record.is_none_or(|r| r.order_id.as_str() != order) {
                return false;
            }
        }
        true
    }

    /// A stable name for this filter, for the replay group.
    fn group_suffix(&self) -> String {
        let text = format!("{self:?}");
        let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
        format!("{hash:016x}")
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
            let (partition, offset) = position
                .split_once(':')
                .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
                .ok_or_else(|| {
                    Failure::unreadable(anyhow::anyhow!("position must be partition:offset, got '{position}'"))
                })?;
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
        Command::Replay { filter, to, rate, limit, dry_run } => {
            replay(settings, filter, to, rate, limit, dry_run).await
        }
    }
}

async fn parked(settings: &Settings, limit: i64, json: bool) -> Result<(), Failure> {
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    seckill_shared::db::migrate(&db).await.map_err(Failure::unreadable)?;
    let rows = seckill_shared::parked::list(&db, limit).await.map_err(Failure::unreadable)?;
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

async fn replay(
    settings: Settings,
    filter: Filter,
    to: Option<String>,
    rate: Option<f64>,
    limit: Option<u64>,
    dry_run: bool,
) -> Result<(), Failure> {
    let producer: FutureProducer = kafka::producer(&settings.servers.kafka).map_err(Failure::unreadable)?;
    let target = to.as_deref().map(|topic| format!("-to-{topic}")).unwrap_or_default();
    let group = format!("{}seckillctl-replay-{}{target}", settings.servers.kafka.topic_prefix, filter.group_suffix());
    let dlq_topic = Topics::new(&settings.servers.kafka).dlq;
    // The reader runs on a blocking thread and hands chosen records over; each
    // is committed only after its delivery was acknowledged.
    let (to_send, mut chosen) = tokio::sync::mpsc::channel::<OwnedMessage>(1);
    let (acked_tx, acked_rx) = std::sync::mpsc::channel::<bool>();
    let reader_settings = settings.clone();
    let reader_group = group.clone();
    let reader = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        read_dlq(&reader_settings, Some(&reader_group), |consumer, message| {
            if !filter.matches(message) {
                return Ok(true);
            }
            if to_send.blocking_send(message.clone()).is_err() {
                return Ok(false);
            }
            // Wait for the delivery before committing past the record.
            let delivered = acked_rx.recv().unwrap_or(false);
            if !delivered {
                return Ok(false);
            }
            if !dry_run {
                let mut list = TopicPartitionList::new();
                list.add_partition_offset(message.topic(), message.partition(), Offset::Offset(message.offset() + 1))?;
                consumer.commit(&list, CommitMode::Sync)?;
            }
            Ok(true)
        })
    });
    let progress = indicatif::ProgressBar::new_spinner();
    let mut sent = 0u64;
    while let Some(message) = chosen.recv().await {
        if limit.is_some_and(|limit| sent >= limit) {
            // Not sent, not committed: the next run starts here.
            break;
        }
        let e = entry(&message);
        let original_topic = to.clone().unwrap_or_else(|| {
            e.headers
                .get(dlq_header::ORIGINAL_TOPIC)
                .cloned()
                .unwrap_or_else(|| Topics::new(&settings.servers.kafka).orders)
        });
        if dry_run {
            println!("would replay {} ({}, order {}) to {original_topic}", e.position, e.reason, e.order_id);
            sent += 1;
            let _ = acked_tx.send(true);
            continue;
        }
        let attempts = e.attempts.parse::<u32>().unwrap_or(0) + 1;
        let replayed_from = format!("{dlq_topic}:{}", e.position);
        let attempts_text = attempts.to_string();
        let mut headers = OwnedHeaders::new();
        if let Some(request_id) = message.headers().and_then(|h| header_str(h, REQUEST_ID_HEADER)) {
            headers = headers.insert(Header { key: REQUEST_ID_HEADER, value: Some(request_id) });
        }
        headers = headers
            .insert(Header { key: dlq_header::REPLAYED_FROM, value: Some(replayed_from.as_str()) })
            .insert(Header { key: dlq_header::ATTEMPTS, value: Some(attempts_text.as_str()) });
        let mut record = FutureRecord::<[u8], [u8]>::to(&original_topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        match producer.send(record, Duration::from_secs(10)).await {
            Ok(_) => {
                sent += 1;
                progress.set_message(format!("replayed {sent}"));
                progress.tick();
                println!("replayed {} ({}, order {}) to {original_topic}", e.position, e.reason, e.order_id);
                let _ = acked_tx.send(true);
            }
            Err((error, _)) => {
                let _ = acked_tx.send(false);
                drop(chosen);
                let _ = reader.await;
                return Err(Failure::failed(anyhow::anyhow!("replaying {}: {error}", e.position)));
            }
        }
        if let Some(rate) = rate.filter(|r| *r > 0.0) {
            tokio::time::sleep(Duration::from_secs_f64(1.0 / rate)).await;
        }
    }
    progress.finish_and_clear();
    // Stops the reader if the limit did: it waits for an acknowledgement
    // that will not come, and commits nothing past what was sent.
    drop(acked_tx);
    drop(chosen);
    reader.await.map_err(Failure::failed)?.map_err(Failure::unreadable)?;
    println!("{} record(s) {}", sent, if dry_run { "would be replayed (dry run)" } else { "replayed" });
    Ok(())
}
