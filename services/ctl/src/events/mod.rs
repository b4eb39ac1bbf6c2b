//! `seckillctl events`: the order events as a consumer downstream sees
//! them — `tail` follows them, `verify` checks that the topic holds every
//! event the orders call for, and `resend` sends the ones it lacks.

mod expected;
mod resend;
mod tail;
mod verify;

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};

/// `events` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Print order events as they come (Ctrl-C stops).
    Tail(tail::Args),
    /// Check the events topic against a sale's orders: one CREATED event
    /// per order that was created, one per later state, each order's in
    /// order; name what is missing (exit 1).
    Verify(verify::Args),
    /// Send again the events of orders changed since a time that the topic
    /// lacks and the relay will not send (rows its cursor passed without
    /// sending them), with their stable eventIds.
    Resend {
        /// Orders changed at or after this time (RFC 3339).
        #[arg(long)]
        since: DateTime<Utc>,
        /// List what would be sent; send nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs an `events` subcommand.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    match command {
        Command::Tail(args) => tail::run(settings, args).await,
        Command::Verify(args) => verify::run(settings, args).await,
        Command::Resend { since, dry_run, json } => resend::run(settings, since, dry_run, json).await,
    }
}
