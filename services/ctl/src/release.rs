//! `seckillctl release`: the same operation as `PUT /admin/releases/{A}`;
//! `seckillctl reconcile --release A`: a release's books, as
//! `GET /admin/releases/{A}` answers them.

use crate::{connect, Failure, Settings};
use seckill_shared::books::{reconcile_release, ReleaseBooksError, ReleaseReport};
use seckill_shared::domain::ActivityId;

/// Arguments of `release`.
#[derive(clap::Args)]
pub struct Args {
    /// The release's activity: every SKU of it shares the limit.
    #[arg(long)]
    activity: i64,
    /// Units one customer may hold across the release's sizes, in live
    /// orders (1 to 1000); each size's own per-user limit still holds.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    per_customer_limit: u32,
}

/// Runs `release`: the limit declared, confirmed by the replicas.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    let activity = ActivityId::new(args.activity).map_err(Failure::failed)?;
    let (stock, _db) = connect(settings).await?;
    stock.releases().declare_release(activity, args.per_customer_limit).await.map_err(Failure::unreadable)?;
    println!("release {activity}: at most {} units per customer across its sizes", args.per_customer_limit);
    Ok(())
}

/// Runs `reconcile --release`: exit 0 consistent, 1 not (or no such
/// release), 2 a source unreadable.
pub async fn reconcile(settings: &Settings, release: i64, json: bool) -> Result<(), Failure> {
    let activity = ActivityId::new(release).map_err(Failure::failed)?;
    let (stock, db) = connect(settings).await?;
    let report = reconcile_release(&stock, &db, activity).await.map_err(|error| match error {
        ReleaseBooksError::NotARelease(_) => Failure::failed(error),
        _ => Failure::unreadable(error),
    })?;
    print(&report, json);
    if report.consistent {
        Ok(())
    } else {
        Err(Failure::failed(anyhow::anyhow!("release {release} is NOT consistent")))
    }
}

fn print(report: &ReleaseReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(report).expect("a report serializes"));
        return;
    }
    let rows = [
        ("release", report.activity_id.to_string()),
        ("limit per customer", report.per_customer_limit.to_string()),
        ("customers (postgresql)", report.customers.to_string()),
        ("most one customer holds", report.most_held.to_string()),
        ("units in live orders", report.units_in_orders.to_string()),
        (
            "units the takes count (redis)",
            format!(
                "{} ({} not in live orders yet: in flight, or takes pending)",
                report.units_taken,
                report.units_taken - report.units_in_orders
            ),
        ),
        ("  of takes still pending", report.takes_pending.to_string()),
        ("customers over the limit", report.over_limit.len().to_string()),
        ("customers undercounted", report.undercounted.len().to_string()),
    ];
    for (term, value) in rows {
        println!("{term:<32} {value}");
    }
    for customer in report.over_limit.iter().chain(&report.undercounted) {
        println!(
            "  - customer {}: {} units in orders, {} taken",
            customer.user_id, customer.units_in_orders, customer.units_taken
        );
    }
    println!("{:<32} {}", "verdict", if report.consistent { "consistent" } else { "NOT consistent" });
}
