//! `seckillctl`: the operator's tool — warm up sales, reconcile them, inspect
//! and replay the dead-letter topic, and load-test the edge.
//!
//! Exit codes: 0 success (and, for `reconcile`, consistent); 1 the operation
//! failed or the sale is inconsistent; 2 a source could not be read or the
//! command line was wrong.

mod bench;
mod dlq;
mod reconcile;
mod warmup;

use clap::{Parser, Subcommand};
use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, TelemetrySettings};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// Where the servers are: the same settings (file + `SECKILL_*` variables) as
/// the services.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Redis.
    pub redis: RedisSettings,
    /// Kafka.
    pub kafka: KafkaSettings,
    /// PostgreSQL.
    pub database: DbSettings,
    /// Logging.
    pub telemetry: TelemetrySettings,
}

#[derive(Parser)]
#[command(name = "seckillctl", version, about = "Operate the seckill pipeline: warm-up, reconciliation, dead letters, load tests")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the database migrations.
    Migrate,
    /// Create or re-warm a sale: stock is set (never added), buyers cleared.
    Warmup(warmup::Args),
    /// Check a sale's books: every term of the invariant and the verdict.
    Reconcile(reconcile::Args),
    /// Inspect and replay the dead-letter topic.
    #[command(subcommand)]
    Dlq(dlq::Command),
    /// Load-test the edge.
    Bench(bench::Args),
    /// Consumer-group lag of the order service and the compensator.
    Lag {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// An error with the exit code it deserves.
pub struct Failure {
    /// 1 (operation failed / inconsistent) or 2 (a source unreadable).
    pub code: u8,
    /// What happened.
    pub error: anyhow::Error,
}

impl Failure {
    /// Exit code 1.
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self { code: 1, error: error.into() }
    }
    /// Exit code 2.
    pub fn unreadable(error: impl Into<anyhow::Error>) -> Self {
        Self { code: 2, error: error.into() }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings: Settings = match seckill_shared::config::load() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("seckillctl: loading settings: {error:#}");
            return ExitCode::from(2);
        }
    };
    let telemetry = TelemetrySettings { filter: Some(settings.telemetry.filter.clone().unwrap_or_else(|| "warn".into())), ..settings.telemetry.clone() };
    seckill_shared::telemetry::init_tracing(&telemetry);
    let result = match cli.command {
        Command::Migrate => migrate(&settings).await,
        Command::Warmup(args) => warmup::run(&settings, args).await,
        Command::Reconcile(args) => reconcile::run(&settings, args).await,
        Command::Dlq(command) => dlq::run(&settings, command).await,
        Command::Bench(args) => bench::run(&settings, args).await,
        Command::Lag { json } => lag(&settings, json).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("seckillctl: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

async fn migrate(settings: &Settings) -> Result<(), Failure> {
    let db = seckill_shared::db::connect_lazy(&settings.database).map_err(Failure::unreadable)?;
    seckill_shared::db::migrate(&db).await.map_err(Failure::unreadable)?;
    println!("migrations applied");
    Ok(())
}

async fn lag(settings: &Settings, json: bool) -> Result<(), Failure> {
    use seckill_shared::kafka;
    let kafka_settings = settings.kafka.clone();
    let (order, compensator) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let topics = kafka::Topics::new(&kafka_settings);
        let timeout = std::time::Duration::from_secs(5);
        Ok((
            kafka::lag(&kafka_settings, &kafka::order_group(&kafka_settings), &topics.orders, timeout)?,
            kafka::lag(&kafka_settings, &kafka::compensator_group(&kafka_settings), &topics.dlq, timeout)?,
        ))
    })
    .await
    .map_err(Failure::failed)?
    .map_err(Failure::unreadable)?;
    if json {
        println!("{}", serde_json::json!({ "order": order, "compensator": compensator }));
    } else {
        println!("order service lag  {} {:?}", order.total, order.partitions);
        println!("compensator lag    {} {:?}", compensator.total, compensator.partitions);
    }
    Ok(())
}

/// Connects to Redis and PostgreSQL.
pub async fn connect(settings: &Settings) -> Result<(seckill_shared::stock::Stock, sqlx::PgPool), Failure> {
    let stock = seckill_shared::stock::Stock::connect(&settings.redis)
        .await
        .map_err(|e| Failure::unreadable(anyhow::anyhow!("connecting to redis: {e}")))?;
    let db = seckill_shared::db::connect_lazy(&settings.database).map_err(Failure::unreadable)?;
    Ok((stock, db))
}
