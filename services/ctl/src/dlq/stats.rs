//! `seckillctl dlq stats`: the dead letters the compensator indexed, by
//! reason, by sale and by hour, with what replays and redrives did and the
//! records parked — the figures `/metrics` and the dashboard show — and how
//! many records the compensator has yet to read (not counted yet).

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use seckill_shared::db::dead_letters::{self, Scope, Stats};
use seckill_shared::domain::SaleKey;

/// The figures, and the records not read yet.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    #[serde(flatten)]
    stats: Stats,
    /// Records on the topic the compensator has not read (so not counted);
    /// absent when the broker could not say.
    not_indexed_yet: Option<i64>,
}

/// Prints the figures.
pub async fn run(
    settings: &Settings,
    since: Option<DateTime<Utc>>,
    sale: Option<SaleKey>,
    json: bool,
) -> Result<(), Failure> {
    let db = crate::database(settings).await?;
    let stats = dead_letters::stats(&db, Scope { since, sale }).await.map_err(Failure::unreadable)?;
    let lag = seckill_shared::kafka::pipeline_lag(&settings.servers.kafka).await;
    let report = Report { stats, not_indexed_yet: lag.ok().map(|lag| lag.compensator.total) };
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
        Some(n) => println!("not read yet      {n} (the compensator's lag: not counted above)"),
        None => println!("not read yet      unknown (the broker did not answer)"),
    }
    for (title, counts) in [("by reason", &s.by_reason), ("by sale", &s.by_sale), ("by hour", &s.by_hour)] {
        println!("{title}");
        for (key, n) in counts {
            println!("  {key:<24} {n}");
        }
    }
    Ok(())
}
