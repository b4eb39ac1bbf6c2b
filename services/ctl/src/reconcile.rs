//! `seckillctl reconcile`: the invariant of one sale, term by term.

use crate::{connect, Failure, Settings};
use seckill_shared::books::{reconcile, ReconcileError, Report};
use seckill_shared::domain::SaleKey;
use std::time::{Duration, Instant};

/// Arguments of `reconcile`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Activity id.
    #[arg(long, required_unless_present = "release")]
    pub activity: Option<i64>,
    /// SKU id.
    #[arg(long, required_unless_present = "release")]
    pub sku: Option<i64>,
    /// A release's books instead (its activity id): no customer holds more
    /// than its limit across its sizes in PostgreSQL's rows, and its takes
    /// in Redis count at least what those rows hold.
    #[arg(long, conflicts_with_all = ["activity", "sku", "wait_drain"])]
    pub release: Option<i64>,
    /// Wait up to this many seconds for the pipeline to drain (no lag, no
    /// order in flight) before judging; then anything in flight is a violation.
    #[arg(long)]
    pub wait_drain: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `reconcile`: exit 0 consistent, 1 not, 2 a source unreadable.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    if let Some(release) = args.release {
        return crate::release::reconcile(settings, release, args.json).await;
    }
    let report = report(settings, &args).await?;
    print(&report, args.json);
    if report.consistent {
        Ok(())
    } else {
        Err(Failure::failed(anyhow::anyhow!("sale {}:{} is NOT consistent", report.activity_id, report.sku_id)))
    }
}

/// Builds the report, waiting for drain first when asked.
pub async fn report(settings: &Settings, args: &Args) -> Result<Report, Failure> {
    let (activity, sku) = args
        .activity
        .zip(args.sku)
        .ok_or_else(|| Failure::failed(anyhow::anyhow!("--activity and --sku name the sale")))?;
    let sale = SaleKey::from_raw(activity, sku).map_err(Failure::unreadable)?;
    let (stock, db) = connect(settings).await?;
    let read = || {
        let (stock, db) = (&stock, &db);
        async move {
            reconcile(stock, db, Some(&settings.servers.kafka), sale, false).await.map_err(|error| match error {
                ReconcileError::SaleNotFound(_) => Failure::failed(error),
                ReconcileError::Source { .. } => Failure::unreadable(error),
            })
        }
    };
    let Some(wait) = args.wait_drain else { return read().await };
    let deadline = Instant::now() + Duration::from_secs(wait);
    let progress = indicatif::ProgressBar::new_spinner();
    progress.set_message("waiting for the pipeline to drain");
    loop {
        match read().await {
            Ok(mut report) => {
                if report.drained() || Instant::now() >= deadline {
                    progress.finish_and_clear();
                    // Judged now, anything still in flight is a violation.
                    report.judge(true);
                    return Ok(report);
                }
                progress.set_message(format!(
                    "waiting for the pipeline to drain: {} in flight, order lag {:?}, compensator lag {:?}, events pending {}",
                    report.orders_in_flight, report.order_lag, report.compensator_lag, report.events_pending
                ));
            }
            // A source unreadable for a moment (a broker just restarted, its
            // group coordinator still loading) is waited for like the drain.
            Err(failure) if failure.code == 2 && Instant::now() < deadline => {
                progress.set_message(format!("waiting for a source: {:#}", failure.error));
            }
            Err(failure) => {
                progress.finish_and_clear();
                return Err(failure);
            }
        }
        progress.tick();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints a report as a table or JSON.
pub fn print(report: &Report, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(report).expect("a report serializes"));
        return;
    }
    let lag = |l: Option<i64>| l.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let rows = [
        ("sale", format!("{}:{} (round {})", report.activity_id, report.sku_id, report.round)),
        ("total stock", report.total_stock.to_string()),
        ("redis remaining", report.redis_remaining.to_string()),
        ("orders created (postgresql)", report.orders_created.to_string()),
        ("  units created", report.units_created.to_string()),
        ("orders paid", report.orders_paid.to_string()),
        ("  units paid", report.units_paid.to_string()),
        ("orders cancelled", report.orders_cancelled.to_string()),
        ("  by reason", format!("{:?}", report.cancelled_by_reason)),
        ("  units given back (redis)", format!("{} (pending {})", report.returned, report.cancels_pending)),
        ("payments applied", report.payments_applied.to_string()),
        ("refunds due (not refunded)", report.refunds_due.to_string()),
        ("paid late (before the ledger)", report.orders_paid_late.to_string()),
        ("orders in flight (queued)", report.orders_in_flight.to_string()),
        ("  units in flight", report.units_in_flight.to_string()),
        ("  of which reserved (unseen)", report.reservations.to_string()),
        ("orders failed (postgresql)", report.orders_failed.to_string()),
        ("  by reason", format!("{:?}", report.failed_by_reason)),
        ("failed orders redis accepted", report.failed_accepted.to_string()),
        (
            "202s that ended FAILED",
            format!("{} {:?}", report.broken_promises.values().sum::<i64>(), report.broken_promises),
        ),
        ("  placed again by a redrive", report.redriven.to_string()),
        ("units compensated", report.compensated.to_string()),
        ("units written off", report.written_off.to_string()),
        ("database remaining", report.db_remaining.to_string()),
        ("buyers (redis)", report.buyers.to_string()),
        ("users with two orders", report.duplicate_users.to_string()),
        ("users over their limit", format!("{} (limit {} units)", report.users_over_limit, report.per_user_limit)),
        ("records parked", report.parked.to_string()),
        ("events via the outbox (pending)", format!("{} ({})", report.events, report.events_pending)),
        ("CREATED events, order service", report.events_created_directly.to_string()),
        ("events held back by", report.events_held_back_by.as_ref().map_or("-".to_owned(), |held| held.to_string())),
        ("order service lag", lag(report.order_lag)),
        ("compensator lag", lag(report.compensator_lag)),
        ("waiting room (waiting/active/admitted)", room(report)),
        ("draw (entries/winners/claimed)", draw(report)),
    ];
    for (term, value) in rows {
        println!("{term:<32} {value}");
    }
    // A sale in stock buckets: each one, and the units between them.
    for bucket in &report.redis.buckets {
        let term = format!("  bucket {}", bucket.bucket);
        println!(
            "{term:<32} {} of {} left, {} buyers, {} queued, lent {}, borrowed {}",
            bucket.remaining, bucket.total, bucket.buyers, bucket.queued, bucket.lent, bucket.borrowed
        );
    }
    if !report.redis.buckets.is_empty() {
        println!("{:<32} {} (counted in redis remaining)", "  units in transit", report.redis.in_transit);
    }
    println!(
        "{:<32} {} + {} + {} + {} = {} (total {})",
        "remaining+created+paid+in flight",
        report.redis_remaining,
        report.units_created,
        report.units_paid,
        report.units_in_flight,
        report.balance(),
        report.total_stock
    );
    if report.consistent {
        println!("{:<32} consistent", "verdict");
    } else {
        println!("{:<32} NOT consistent", "verdict");
        for violation in &report.violations {
            println!("  - {violation}");
        }
    }
}

/// The waiting room's line of the report.
fn room(report: &Report) -> String {
    match &report.waiting_room {
        None => "-".into(),
        Some(room) => {
            let seed = if room.seed.is_empty() { "secret until the start" } else { &room.seed };
            format!(
                "{} / {} / {}, seed {seed} (SHA-256 {})",
                room.waiting, room.active, room.admitted, room.seed_commitment
            )
        }
    }
}

/// The draw's line of the report: its figures, and once drawn its seed and
/// the entry list's digest (`seckillctl draw verify` checks them).
fn draw(report: &Report) -> String {
    let Some(draw) = &report.draw else {
        return "-".into();
    };
    let proof = if draw.drawn {
        format!("seed {} (SHA-256 {}), entry list SHA-256 {}", draw.seed, draw.seed_commitment, draw.entries_digest)
    } else {
        format!("not drawn yet, seed committed SHA-256 {}", draw.seed_commitment)
    };
    format!(
        "{} / {} / {}, promoted {}, expired {}, lost {}, waitlisted {}; {proof}",
        draw.entries, draw.winners, draw.claimed, draw.promoted, draw.expired, draw.lost, draw.waitlisted
    )
}
