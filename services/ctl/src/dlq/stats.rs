//! `seckillctl dlq stats`: the dead letters the compensator indexed, by
//! reason, by sale and by hour, with what replays and redrives did and the
//! records parked — the figures `/metrics` and the dashboard show — and how
//! many records on the topic the index does not hold yet (not counted).

use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use seckill_shared::config::KafkaSettings;
use seckill_shared::db::dead_letters::{self, Scope, Stats};
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::{compensator_group, lag};
use sqlx::PgPool;

/// The figures, and the records not read yet.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    #[serde(flatten)]
    stats: Stats,
    /// Records on the topic the index does not hold (so not counted):
    /// from the topic's watermarks, whatever the compensator committed;
    /// absent when the broker could not say.
    not_indexed_yet: Option<i64>,
}

/// What the index lacks of `topic`: the records between the topic's
/// watermarks it holds no row for, or the compensator's lag when that is
/// more (a position the index holds from a recreated topic's older record
/// looks indexed until the compensator has read the new one).
async fn not_indexed_yet(kafka: &KafkaSettings, db: &PgPool, topic: &str) -> anyhow::Result<i64> {
    let marks = lag::topic_watermarks(kafka, topic).await?;
    let missing = dead_letters::not_indexed(db, topic, &marks).await?;
    let (settings, topic) = (kafka.clone(), topic.to_owned());
    let behind =
        tokio::task::spawn_blocking(move || lag::lag(&settings, &compensator_group(&settings), &topic)).await??;
    Ok(missing.max(behind.total))
}

/// Prints the figures.
pub async fn run(
    settings: &Settings,
    since: Option<DateTime<Utc>>,
    sale: Option<SaleKey>,
    json: bool,
) -> Result<(), Failure> {
    let db = crate::database(settings).await?;
    let topic = seckill_shared::kafka::Topics::new(&settings.servers.kafka).dlq;
    let stats = dead_letters::stats(&db, &topic, Scope { since, sale }).await.map_err(Failure::unreadable)?;
    let not_indexed_yet = match not_indexed_yet(&settings.servers.kafka, &db, &topic).await {
        Ok(n) => Some(n),
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "what the index lacks could not be measured");
            None
        }
    };
    let report = Report { stats, not_indexed_yet };
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
