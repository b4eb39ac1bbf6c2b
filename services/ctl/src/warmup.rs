//! `seckillctl warmup`: the same operation as `PUT /admin/sales/{a}/{s}`;
//! `seckillctl sale close`: the same as `POST /admin/sales/{a}/{s}/close`.

use crate::{connect, Failure, Settings};
use chrono::{DateTime, Utc};
use seckill_shared::db::SaleRow;
use seckill_shared::domain::{Limits, SaleKey};
use seckill_shared::sales::{warmup, WarmupError, WarmupRequest};

/// Arguments of `warmup`.
#[derive(clap::Args)]
pub struct Args {
    /// Activity id.
    #[arg(long)]
    activity: i64,
    /// SKU id.
    #[arg(long)]
    sku: i64,
    /// Units on sale (set, never added).
    #[arg(long)]
    stock: i64,
    /// Sale start (RFC 3339); open when absent.
    #[arg(long)]
    starts_at: Option<DateTime<Utc>>,
    /// Sale end (RFC 3339); open when absent.
    #[arg(long)]
    ends_at: Option<DateTime<Utc>>,
    /// Warm up even if the previous round still has orders in flight.
    #[arg(long)]
    force: bool,
    /// How long a CREATED order awaits payment before it is cancelled and
    /// its unit sold again.
    #[arg(long, default_value_t = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS)]
    payment_window: i64,
    /// Stock buckets for a hot sale: its units spread over this many keys
    /// in slots of their own (on a Redis Cluster, on different primaries).
    #[arg(long, default_value_t = 1)]
    buckets: u32,
    /// A waiting room in front of the round, as the admin API's
    /// `admission` (JSON: `{"activeBuyers":100,"admitPerMinute":600}`).
    #[arg(long, value_parser = parse_admission)]
    admission: Option<seckill_shared::sales::Admission>,
    /// A draw in front of the round (JSON: `{"entriesOpenAt":"…","drawAt":"…","claimSeconds":600}`),
    /// instead of a waiting room.
    #[arg(long, value_parser = parse_draw, conflicts_with = "admission")]
    draw: Option<seckill_shared::draw::Draw>,
    /// Units one user may hold in the round, over all their orders (1 to
    /// 100).
    #[arg(long, default_value_t = 1)]
    per_user_limit: u32,
    /// Units one order may hold (1 to the limit per user; default: the
    /// limit per user).
    #[arg(long)]
    max_per_order: Option<u32>,
    /// The warm-up's id: the same id run again finishes (or answers) the
    /// same warm-up, never a second round; a new one when absent (printed
    /// when it stops short).
    #[arg(long)]
    id: Option<String>,
    /// Print the sale as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `warmup`.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    let sale = SaleKey::from_raw(args.activity, args.sku).map_err(Failure::unreadable)?;
    let (stock, db) = connect(settings).await?;
    seckill_shared::db::migrate(&db).await.map_err(Failure::unreadable)?;
    let id = args.id.unwrap_or_else(|| format!("w-{:016x}", rand::random::<u64>()));
    let request = WarmupRequest {
        id: Some(id.clone()),
        sale,
        stock: args.stock,
        starts_at: args.starts_at,
        ends_at: args.ends_at,
        force: args.force,
        payment_window_seconds: args.payment_window,
        buckets: args.buckets,
        admission: args.admission,
        draw: args.draw,
        limits: Limits::asked(Some(args.per_user_limit), args.max_per_order),
    };
    let locks = seckill_shared::ops::lock::LockClient::new(stock.connection(), Default::default());
    let deadline = settings.servers.database.call_deadline();
    let row = warmup(&stock, &db, deadline, &locks, &settings.warmup_lock, &request).await.map_err(|error| {
        let resumable = matches!(error, WarmupError::NotReplicated(_) | WarmupError::Redis(_) | WarmupError::Db(_));
        if resumable {
            eprintln!("warm-up {id} stopped short; run it again with --id {id} to finish it");
        }
        failure(error)
    })?;
    print(&row, args.json, &format!("sale {sale} warmed up"))
}

fn parse_draw(raw: &str) -> Result<seckill_shared::draw::Draw, String> {
    serde_json::from_str(raw).map_err(|e| format!("not a draw: {e}"))
}

fn parse_admission(raw: &str) -> Result<seckill_shared::sales::Admission, String> {
    serde_json::from_str(raw).map_err(|e| format!("not an admission: {e}"))
}

/// Arguments of `sale close`.
#[derive(clap::Args)]
pub struct CloseArgs {
    /// Activity id.
    #[arg(long)]
    activity: i64,
    /// SKU id.
    #[arg(long)]
    sku: i64,
    /// Print the sale as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `sale close`: no order is accepted after it, and every key of the
/// sale expires once its payment window and the margin have passed.
pub async fn close(settings: &Settings, args: CloseArgs) -> Result<(), Failure> {
    let sale = SaleKey::from_raw(args.activity, args.sku).map_err(Failure::unreadable)?;
    let (stock, db) = connect(settings).await?;
    let locks = seckill_shared::ops::lock::LockClient::new(stock.connection(), Default::default());
    let deadline = settings.servers.database.call_deadline();
    let row = seckill_shared::sales::close(&stock, &db, deadline, &locks, &settings.warmup_lock, sale)
        .await
        .map_err(failure)?;
    print(&row, args.json, &format!("sale {sale} closed"))
}

fn failure(error: WarmupError) -> Failure {
    match error {
        WarmupError::Redis(_) | WarmupError::Db(_) | WarmupError::NotReplicated(_) => Failure::unreadable(error),
        other => Failure::failed(other),
    }
}

fn print(row: &SaleRow, json: bool, what: &str) -> Result<(), Failure> {
    if json {
        println!("{}", serde_json::to_string_pretty(row).map_err(Failure::failed)?);
    } else {
        println!(
            "{what}: round {}, stock {}, window {} .. {}, payment window {} s",
            row.round,
            row.total_stock,
            row.starts_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "open".into()),
            row.ends_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "open".into()),
            row.payment_window_seconds,
        );
    }
    Ok(())
}
