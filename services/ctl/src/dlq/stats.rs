//! `seckillctl dlq stats`: the dead letters the compensator indexed, by
//! reason, by sale and by hour, with what replays and redrives did and the
//! records parked — the figures `/metrics` and the dashboard show — and how
//! many records on the topic the index does not hold yet (not counted), as
//! `seckill_shared::dlq::stats` reads them.

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use seckill_shared::db::dead_letters::Scope;
use seckill_shared::dlq::stats::report;
use seckill_shared::domain::SaleKey;

/// Prints the figures.
pub async fn run(
    settings: &Settings,
    since: Option<DateTime<Utc>>,
    sale: Option<SaleKey>,
    json: bool,
) -> Result<(), Failure> {
    let db = crate::database(settings).await?;
    let topic = seckill_shared::kafka::Topics::new(&settings.servers.kafka).dlq;
    let report =
        report(&settings.servers.kafka, &db, &topic, Scope { since, sale }).await.map_err(Failure::unreadable)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(Failure::failed)?);
        return Ok(());
    }
    let s = &report.stats;
    println!("dead letters      {}", s.records);
    let time = |t: Option<DateTime<Utc>>| t.map_or("-".to_owned(), |t| t.to_rfc3339());
    println!("oldest            {}", time(s.oldest));
    println!("newest            {}", time(s.newest));
    println!("replayed          {}", s.replayed);
    println!("redriven          {}", s.redriven);
    println!("parked            {}", s.parked);
    match report.not_indexed_yet {
        Some(n) => println!("not indexed yet   {n} (on the topic, not in the index: not counted above)"),
        None => println!("not indexed yet   unknown (the broker did not answer)"),
    }
    for (title, counts) in [("by reason", &s.by_reason), ("by sale", &s.by_sale), ("by hour", &s.by_hour)] {
        println!("{title}");
        for (key, n) in counts {
            println!("  {key:<24} {n}");
        }
    }
    Ok(())
}
