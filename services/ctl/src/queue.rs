//! `seckillctl queue stats`: a sale's waiting room as operators watch it —
//! waiting, admitted in the last minute, active, used, expired, abandoned,
//! the estimated wait at the back of the line, sold out or closed, and the
//! shuffle's seed once the sale has started.

use crate::{connect, Failure, Settings};
use seckill_shared::domain::SaleKey;

/// `seckillctl queue ...`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// The waiting room's figures.
    Stats {
        /// The sale, ACTIVITY:SKU.
        #[arg(long, value_parser = seckill_shared::dlq::parse_sale)]
        sale: SaleKey,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `queue` command: exit 1 when the sale has no waiting room.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    let Command::Stats { sale, json } = command;
    let (stock, _) = connect(settings).await?;
    let room = stock.waiting_room().room(sale).await.map_err(Failure::unreadable)?;
    let Some(room) = room.map(|r| r.shown_at(seckill_shared::now_ms())) else {
        return Err(Failure::failed(anyhow::anyhow!("sale {sale} has no waiting room")));
    };
    let wait = room.wait_seconds(room.waiting.max(0) as u64);
    if json {
        let mut value = serde_json::to_value(&room).map_err(Failure::failed)?;
        value["waitSecondsAtTheBack"] = serde_json::json!(wait);
        println!("{value}");
        return Ok(());
    }
    let rate = match room.admit_per_minute {
        0 => "unlimited".to_owned(),
        rate => format!("{rate}/min"),
    };
    let rows = [
        ("sale", format!("{sale} (round {})", room.round)),
        ("settings", format!("{} active buyers, {rate}, overbook {}", room.active_buyers, room.overbook)),
        ("waiting", room.waiting.to_string()),
        ("admitted in the last minute", room.admitted_last_minute.to_string()),
        ("active (admitted, unused)", room.active.to_string()),
        ("admitted / used", format!("{} / {}", room.admitted, room.used)),
        ("expired / abandoned", format!("{} / {}", room.expired, room.abandoned)),
        ("estimated wait at the back", wait.map_or_else(|| "-".to_owned(), |w| format!("{w} s"))),
        ("sold out / closed", format!("{} / {}", room.sold_out, room.closed)),
        ("shuffle seed", if room.seed.is_empty() { "- (secret until the start)".to_owned() } else { room.seed }),
        ("seed commitment (SHA-256)", room.seed_commitment),
    ];
    for (term, value) in rows {
        println!("{term:<30} {value}");
    }
    Ok(())
}
