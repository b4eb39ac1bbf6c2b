//! `seckillctl`: the operator's tool — warm up sales, reconcile them, inspect
//! and replay the dead-letter topic, check a draw, and load-test the edge.
//!
//! Exit codes: 0 success (and, for `reconcile`, consistent); 1 the operation
//! failed or the sale is inconsistent; 2 a source could not be read or the
//! command line was wrong.

mod bench;
mod dlq;
mod draw;
mod events;
mod payments;
mod probe;
mod queue;
mod reconcile;
mod release;
mod warmup;

use clap::{Parser, Subcommand};
use seckill_shared::config::{LockSettings, Servers, TelemetrySettings};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// Where the servers are: the same settings (file + `SECKILL_*` variables) as
/// the services.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Lease and wait of the warm-up lock (as the edge's `warmup_lock`).
    pub warmup_lock: LockSettings,
    /// The dead-letter tools (`dlq replay`, `dlq redrive`).
    pub dlq: dlq::DlqToolSettings,
    #[serde(flatten)]
    pub servers: Servers,
}

impl Default for Settings {
    fn default() -> Self {
        Self { warmup_lock: LockSettings::warmup(), dlq: Default::default(), servers: Servers::default() }
    }
}

#[derive(Parser)]
#[command(name = "seckillctl", version = seckill_shared::ops::cli::VERSION, about = "Operate the seckill pipeline: warm-up, reconciliation, dead letters, load tests")]
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
    /// A sale's life after its warm-up.
    #[command(subcommand)]
    Sale(SaleCommand),
    /// Check a sale's books: every term of the invariant and the verdict
    /// (`--release A`: a release's).
    Reconcile(reconcile::Args),
    /// Declare an activity a release: one limit of units per customer
    /// across its sizes.
    Release(release::Args),
    /// Inspect, count, replay and redrive the dead-letter topic.
    #[command(subcommand)]
    Dlq(dlq::Command),
    /// Consume the order events, as a team downstream would.
    #[command(subcommand)]
    Events(events::Command),
    /// The payments ledger: refunds due.
    #[command(subcommand)]
    Payments(payments::Command),
    /// A sale's waiting room.
    #[command(subcommand)]
    Queue(queue::Command),
    /// A sale's draw: its figures, its entry list, and a check anyone can run.
    #[command(subcommand)]
    Draw(draw::Command),
    /// Load-test the edge.
    Bench(bench::Args),
    /// Consumer-group lag of the order service and the compensator.
    Lag {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Exit 0 when a URL answers 2xx (a health check for shell-less images).
    Probe(probe::Args),
    /// A service's effective settings, as it would load them in this
    /// environment (its binary's `--print-config`), secrets masked.
    Config {
        /// Which service.
        #[arg(long, value_enum)]
        service: Service,
    },
}

/// `seckillctl sale ...`.
#[derive(Subcommand)]
enum SaleCommand {
    /// End the sale now (an end only moves earlier): no order is accepted
    /// after it, and every key of the sale expires once its payment window
    /// and redis.sale_key_margin_secs have passed.
    Close(warmup::CloseArgs),
}

/// The service binaries `config` asks.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Service {
    Edge,
    Order,
    Compensator,
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
    match cli.command {
        // The service's own binary loads and validates its settings.
        Command::Config { service } => return config(service),
        // Needs no settings: it runs where nothing else is configured.
        Command::Probe(args) => return exit_code(probe::run(args).await),
        // Needs no server: anyone checks a draw with the published figures.
        Command::Draw(draw::Command::Verify(args)) => return exit_code(draw::verify(args)),
        _ => {}
    }
    let settings: Settings = match seckill_shared::config::load(seckill_shared::config::UnknownKeys::Ignore) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("seckillctl: loading settings: {error:#}");
            return ExitCode::from(2);
        }
    };
    // The operator's tool logs warnings only and exports no spans (it
    // shares the services' environment, SECKILL_OTLP_ENDPOINT included).
    let telemetry = TelemetrySettings {
        filter: Some(settings.servers.telemetry.filter.clone().unwrap_or_else(|| "warn".into())),
        otlp_endpoint: None,
        ..settings.servers.telemetry.clone()
    };
    seckill_shared::ops::telemetry::init_tracing(&telemetry, "seckillctl");
    seckill_shared::db::name_sessions("seckillctl");
    let result = match cli.command {
        Command::Migrate => migrate(&settings).await,
        Command::Warmup(args) => warmup::run(&settings, args).await,
        Command::Sale(SaleCommand::Close(args)) => warmup::close(&settings, args).await,
        Command::Reconcile(args) => reconcile::run(&settings, args).await,
        Command::Release(args) => release::run(&settings, args).await,
        Command::Dlq(command) => dlq::run(&settings, command).await,
        Command::Events(command) => events::run(&settings, command).await,
        Command::Payments(command) => payments::run(&settings, command).await,
        Command::Queue(command) => queue::run(&settings, command).await,
        Command::Draw(command) => draw::run(&settings, command).await,
        Command::Bench(args) => bench::run(&settings, args).await,
        Command::Lag { json } => lag(&settings, json).await,
        Command::Config { .. } | Command::Probe(_) => unreachable!("answered before the settings are loaded"),
    };
    exit_code(result)
}

fn exit_code(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("seckillctl: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

async fn migrate(settings: &Settings) -> Result<(), Failure> {
    database(settings).await?;
    println!("migrations applied");
    Ok(())
}

/// The database, its migrations applied (for the commands whose tables a
/// migration creates).
pub async fn database(settings: &Settings) -> Result<sqlx::PgPool, Failure> {
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    seckill_shared::db::migrate(&db).await.map_err(Failure::unreadable)?;
    Ok(db)
}

async fn lag(settings: &Settings, json: bool) -> Result<(), Failure> {
    let lag = seckill_shared::kafka::pipeline_lag(&settings.servers.kafka).await.map_err(Failure::unreadable)?;
    if json {
        println!("{}", serde_json::to_string(&lag).map_err(Failure::failed)?);
    } else {
        println!("order service lag  {} {:?}", lag.order.total, lag.order.partitions);
        println!("compensator lag    {} {:?}", lag.compensator.total, lag.compensator.partitions);
    }
    Ok(())
}

/// Runs `seckill-<service> --print-config` (next to this binary, else on
/// the PATH) and exits as it does.
fn config(service: Service) -> ExitCode {
    let name = match service {
        Service::Edge => "seckill-edge",
        Service::Order => "seckill-order",
        Service::Compensator => "seckill-compensator",
    };
    let sibling = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join(name))).filter(|p| p.exists());
    let program = sibling.unwrap_or_else(|| name.into());
    match std::process::Command::new(&program).arg("--print-config").status() {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(error) => {
            eprintln!("seckillctl: running {}: {error}", program.display());
            ExitCode::from(2)
        }
    }
}

/// Connects to Redis and PostgreSQL.
pub async fn connect(settings: &Settings) -> Result<(seckill_shared::stock::Stock, sqlx::PgPool), Failure> {
    let stock = seckill_shared::stock::Stock::connect(&settings.servers.redis)
        .await
        .map_err(|e| Failure::unreadable(anyhow::anyhow!("connecting to redis: {e}")))?;
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    Ok((stock, db))
}
