//! `seckillctl payments`: the money the payments ledger owes back —
//! `refunds` lists every payment recorded REFUND_DUE and not yet refunded
//! (a second payment of a paid order, a payment after a cancel or the
//! deadline, for a failed or unknown order), `refunded` marks one refunded
//! once the provider has paid it back.

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// `payments` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// The payments owed back, oldest first.
    Refunds {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mark a payment refunded (after the provider paid it back).
    Refunded {
        /// The provider's payment id.
        payment_id: String,
    },
}

/// One payment owed back.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Refund {
    payment_id: String,
    order_id: String,
    reason: String,
    user_id: Option<i64>,
    activity_id: Option<i64>,
    sku_id: Option<i64>,
    received_at: DateTime<Utc>,
}

/// Runs a `payments` subcommand.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    match command {
        Command::Refunds { json } => {
            let refunds = sqlx::query_as!(
                Refund,
                r#"SELECT payment_id, order_id, refund_reason AS "reason!", user_id, activity_id, sku_id, received_at
                     FROM payments WHERE outcome = 'REFUND_DUE' AND refunded_at IS NULL
                    ORDER BY received_at, payment_id"#
            )
            .fetch_all(&db)
            .await
            .map_err(Failure::unreadable)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&refunds).map_err(Failure::failed)?);
            } else {
                println!("{} payments owed back", refunds.len());
                for r in &refunds {
                    println!(
                        "  {}  {}  {}  user {}  {}",
                        r.payment_id,
                        r.order_id,
                        r.reason,
                        r.user_id.map_or("?".into(), |u| u.to_string()),
                        r.received_at.to_rfc3339()
                    );
                }
            }
            Ok(())
        }
        Command::Refunded { payment_id } => {
            let marked = sqlx::query_scalar!(
                "UPDATE payments SET refunded_at = now()
                  WHERE payment_id = $1 AND outcome = 'REFUND_DUE' AND refunded_at IS NULL RETURNING payment_id",
                payment_id
            )
            .fetch_optional(&db)
            .await
            .map_err(Failure::unreadable)?;
            match marked {
                Some(_) => {
                    println!("payment {payment_id} marked refunded");
                    Ok(())
                }
                None => Err(Failure::failed(anyhow::anyhow!("no refund due under payment {payment_id}"))),
            }
        }
    }
}
