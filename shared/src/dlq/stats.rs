//! The dead letters' figures as an operator reads them first (`dlq stats`,
//! the dashboard's dead-letters page): the compensator's index counted by
//! reason, sale and hour, with what replays and redrives did — and how many
//! records on the topic the index does not hold yet, so a count that lags
//! says so instead of reading "0 left".

use crate::config::KafkaSettings;
use crate::db::dead_letters::{self, Scope, Stats};
use crate::kafka::{compensator_group, lag};
use sqlx::PgPool;

/// The figures, and the records not indexed yet.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    #[serde(flatten)]
    pub stats: Stats,
    /// Records on the topic the index does not hold (so not counted):
    /// from the topic's watermarks, whatever the compensator committed;
    /// absent when the broker could not say.
    pub not_indexed_yet: Option<i64>,
}

/// The figures of `topic` within `scope`.
pub async fn report(kafka: &KafkaSettings, db: &PgPool, topic: &str, scope: Scope) -> anyhow::Result<Report> {
    let stats = dead_letters::stats(db, topic, scope).await?;
    let not_indexed_yet = match not_indexed_yet(kafka, db, topic).await {
        Ok(n) => Some(n),
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "what the index lacks could not be measured");
            None
        }
    };
    Ok(Report { stats, not_indexed_yet })
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
