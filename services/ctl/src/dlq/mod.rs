//! `seckillctl dlq …`: the dead-letter topic for humans.
//!
//! `list` and `show` read without a consumer group commit; `stats` counts
//! the compensator's index of the topic. `replay` and `redrive` are the
//! shared tools' runs (`seckill_shared::dlq`, which the dashboard's
//! dead-letters page runs too): each resumes where a previous run with the
//! same filter stopped and records every run in the audit trail, which
//! `runs` lists. This module parses and prints.

mod stats;

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use rdkafka::consumer::Consumer;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use seckill_shared::dlq::{self, entry, parse_position, parse_sale, Entry, Filter, RecordDone, RunError, RunOptions};
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::read::reader;
use seckill_shared::kafka::Topics;
use std::time::Duration;

pub use seckill_shared::dlq::DlqToolSettings;

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
    /// The caller's one-time name for the run (the console's form key):
    /// a run with this name started before is not started again.
    #[arg(long)]
    submission: Option<String>,
}

impl RunArgs {
    /// The shared tools' options.
    fn options(&self) -> RunOptions {
        RunOptions {
            note: self.note.clone(),
            operator: self.operator.clone(),
            rate: self.rate,
            limit: self.limit,
            dry_run: self.dry_run,
            force: self.force,
            submission: self.submission.clone(),
        }
    }
}

impl From<RunError> for Failure {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Unreadable(error) => Failure::unreadable(error),
            RunError::Failed(error) => Failure::failed(error),
        }
    }
}

/// What the tool prints of a record a run dealt with.
fn print_done(kind: &'static str, dry_run: bool) -> impl FnMut(&RecordDone) + Send {
    move |done| {
        let how = match (done.outcome, kind) {
            (dlq::Outcome::Sent, _) => format!(" to {}", done.detail),
            _ => format!(": {}", done.detail),
        };
        println!("{} {} ({}, order {}){how}", done.verb(kind, dry_run), done.position, done.reason, done.order_id);
    }
}

/// The tools, connected.
async fn tools(settings: &Settings) -> Result<dlq::Tools, Failure> {
    let (stock, _) = crate::connect(settings).await?;
    let db = crate::database(settings).await?;
    Ok(dlq::Tools::new(settings.servers.clone(), db, stock, settings.dlq.clone()))
}

/// Runs a `dlq` subcommand.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    let settings = settings.clone();
    match command {
        Command::List { filter, limit, json } => {
            let entries = dlq::list(&settings.servers, filter, limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&entries).map_err(Failure::failed)?);
            } else {
                print_list(&entries);
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
                if dlq::replay::target_exists(&settings.servers.kafka, topic, create_topic).await? {
                    println!("created topic {topic} ({} partitions)", settings.servers.kafka.dlq_partitions);
                }
            }
            let tools = tools(&settings).await?;
            let report =
                dlq::replay::replay(&tools, filter, to, &run.options(), &mut print_done("replay", run.dry_run)).await?;
            let verb = if run.dry_run { "would be replayed (dry run)" } else { "replayed" };
            println!("{} record(s) {verb}, {} refused (run {})", report.done, report.refused, report.run_id);
            Ok(())
        }
        Command::Redrive { filter, run } => {
            let tools = tools(&settings).await?;
            let report =
                dlq::redrive::redrive(&tools, filter, &run.options(), &mut print_done("redrive", run.dry_run)).await?;
            let verb = if run.dry_run { "would be placed again (dry run)" } else { "placed again" };
            println!(
                "{} order(s) {verb}, {} skipped, {} refused (run {})",
                report.done, report.skipped, report.refused, report.run_id
            );
            Ok(())
        }
        Command::Runs { limit, json } => runs(&crate::database(&settings).await?, limit, json).await,
        Command::Stats { since, sale, json } => stats::run(&settings, since, sale, json).await,
    }
}

fn print_list(entries: &[Entry]) {
    println!("{:<12} {:<16} {:<36} {:<8} {:<32} error", "position", "reason", "order", "attempts", "failed at");
    for e in entries {
        println!(
            "{:<12} {:<16} {:<36} {:<8} {:<32} {}",
            e.position, e.reason, e.order_id, e.attempts, e.failed_at, e.error
        );
    }
    println!("{} record(s)", entries.len());
}

/// `dlq runs`: the latest runs first.
async fn runs(db: &sqlx::PgPool, limit: i64, json: bool) -> Result<(), Failure> {
    let rows = dlq::runs::latest(db, limit, None).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(Failure::failed)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<13} {:<12} {:<26} {:>6} {:>7} {:>7}  note / filter",
        "run", "kind", "operator", "started", "sent", "skipped", "refused"
    );
    for r in &rows {
        let kind = if r.dry_run { format!("{} (dry)", r.kind) } else { r.kind.clone() };
        let state = match (&r.finished_at, &r.error) {
            (_, Some(error)) => format!(" [stopped: {error}]"),
            (None, None) => " [unfinished]".into(),
            (Some(_), None) => String::new(),
        };
        println!(
            "{:<6} {:<13} {:<12} {:<26} {:>6} {:>7} {:>7}  {} {}{state}",
            r.run_id,
            kind,
            r.operator,
            r.started_at.format("%Y-%m-%d %H:%M:%S%.3fZ"),
            r.sent,
            r.skipped,
            r.refused,
            r.note,
            r.filter
        );
    }
    println!("{} run(s)", rows.len());
    Ok(())
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
