//! `seckillctl draw ...`: a draw as operators and doubters see it.
//!
//! - `stats`: entries, winners, rights used, promoted, lapsed, lost, the
//!   waitlist, the events not yet published, the commitment and, once
//!   drawn, the seed and the entry list's digest.
//! - `export`: the entry list as drawn, byte for byte the list whose
//!   SHA-256 was published (`seckill_shared::draw::proof`).
//! - `verify`: with no server, checks a seed against its commitment and a
//!   list against its digest, and prints the ranking they make.

use crate::{connect, Failure, Settings};
use seckill_shared::domain::SaleKey;
use seckill_shared::draw::proof;
use std::path::PathBuf;

/// `seckillctl draw ...`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// The draw's figures and proof.
    Stats {
        /// The sale, ACTIVITY:SKU.
        #[arg(long, value_parser = seckill_shared::dlq::parse_sale)]
        sale: SaleKey,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the entry list as drawn (its SHA-256 is the published
    /// digest); only once the draw is made: before, the list may grow.
    Export {
        #[arg(long, value_parser = seckill_shared::dlq::parse_sale)]
        sale: SaleKey,
        /// Where to write it (`-`: standard output).
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Check a draw with no server: exit 0 when the seed matches the
    /// commitment and the list its digest; prints the ranking either way.
    Verify(VerifyArgs),
}

/// `seckillctl draw verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The seed revealed at the draw.
    #[arg(long)]
    seed: String,
    /// The entry list (`seckillctl draw export`, or as the shop published it).
    #[arg(long)]
    entries: PathBuf,
    /// The seed's commitment published before entries opened.
    #[arg(long)]
    commitment: String,
    /// The entry list's digest published at the draw.
    #[arg(long)]
    digest: String,
    /// How many won at the draw (marks them in the ranking).
    #[arg(long, default_value_t = 0)]
    winners: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs a `draw` command that reads the servers.
pub async fn run(settings: &Settings, command: Command) -> Result<(), Failure> {
    let (stock, _) = connect(settings).await?;
    match command {
        Command::Stats { sale, json } => {
            let draw = stock.draws().draw_state(sale).await.map_err(Failure::unreadable)?;
            let draw = draw.ok_or_else(|| Failure::failed(anyhow::anyhow!("sale {sale} has no draw")))?;
            if json {
                println!("{}", serde_json::to_string(&draw).map_err(Failure::failed)?);
                return Ok(());
            }
            let time = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339();
            let shown = |text: String, before: &str| if text.is_empty() { before.to_owned() } else { text };
            let rows = [
                ("sale", format!("{sale} (round {})", draw.round)),
                ("entries open / draw at", format!("{} / {}", time(draw.entries_open_ms), time(draw.draw_ms))),
                ("claim window", format!("{} s", draw.claim_ms / 1000)),
                ("entries", draw.entries.to_string()),
                ("drawn", if draw.drawn { format!("at {}", time(draw.drawn_at_ms)) } else { "not yet".into() }),
                ("winners", draw.winners.to_string()),
                ("claimed / promoted", format!("{} / {}", draw.claimed, draw.promoted)),
                ("expired / lost", format!("{} / {}", draw.expired, draw.lost)),
                ("waitlisted now", draw.waitlisted.to_string()),
                ("sale over", draw.closed.to_string()),
                ("outcomes recorded / unpublished", format!("{} / {}", draw.events, draw.events_unpublished)),
                ("seed commitment (SHA-256)", draw.seed_commitment),
                ("seed", shown(draw.seed, "- (secret until the draw)")),
                ("entry list digest (SHA-256)", shown(draw.entries_digest, "- (at the draw)")),
            ];
            for (term, value) in rows {
                println!("{term:<32} {value}");
            }
            Ok(())
        }
        Command::Export { sale, out } => {
            let draw = stock.draws().draw_state(sale).await.map_err(Failure::unreadable)?;
            let draw = draw.ok_or_else(|| Failure::failed(anyhow::anyhow!("sale {sale} has no draw")))?;
            if !draw.drawn {
                return Err(Failure::failed(anyhow::anyhow!(
                    "the draw of {sale} is not made yet: its entry list is final only at the draw"
                )));
            }
            let entries = stock.draws().draw_entries(sale).await.map_err(Failure::unreadable)?;
            let users: Vec<_> = entries.into_iter().map(|(_, user)| user).collect();
            let list = proof::entry_list(&users);
            if out.as_os_str() == "-" {
                print!("{list}");
            } else {
                std::fs::write(&out, &list).map_err(Failure::failed)?;
                eprintln!("{} entries written to {}", users.len(), out.display());
            }
            Ok(())
        }
        Command::Verify(args) => verify(args),
    }
}

/// `seckillctl draw verify`: needs no settings and no server.
pub fn verify(args: VerifyArgs) -> Result<(), Failure> {
    let list = std::fs::read_to_string(&args.entries)
        .map_err(|e| Failure::unreadable(anyhow::anyhow!("reading {}: {e}", args.entries.display())))?;
    let mut wrong = proof::check(&args.seed, &list, &args.commitment, &args.digest);
    let users = proof::parse_entry_list(&list).unwrap_or_else(|why| {
        wrong.push(format!("the entry list is not as published: {why}"));
        Vec::new()
    });
    let ranking = proof::ranking(&args.seed, &args.digest, &users);
    if args.json {
        let ranked: Vec<serde_json::Value> = ranking
            .iter()
            .enumerate()
            .map(|(i, (user, key))| serde_json::json!({"rank": i + 1, "userId": user.get(), "key": key, "won": i < args.winners}))
            .collect();
        let value = serde_json::json!({"verified": wrong.is_empty(), "problems": wrong, "entries": users.len(), "ranking": ranked});
        println!("{value}");
    } else {
        println!(
            "# rank user key (HMAC-SHA256 of the user id keyed by SEED:DIGEST){}",
            if args.winners > 0 { " [won]" } else { "" }
        );
        for (i, (user, key)) in ranking.iter().enumerate() {
            println!("{} {user} {key}{}", i + 1, if i < args.winners { " won" } else { "" });
        }
        for problem in &wrong {
            println!("# WRONG: {problem}");
        }
        if wrong.is_empty() {
            println!("# verified: the seed matches its commitment and the {} entries their digest", users.len());
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Failure::failed(anyhow::anyhow!("the draw does not verify: {}", wrong.join("; "))))
    }
}
