//! `seckillctl events resend --since T`: the repair for events a relay
//! passed without sending (a cursor once ordered as text jumped past rows
//! whose transaction ids had fewer digits). The events the orders changed
//! since `T` call for ([`super::expected`]), less those on the topic (read
//! from a little before `T`) and those the relay will still send, are sent
//! again with their stable `eventId`s, keyed and with headers as the relay
//! sends them: a consumer that saw one already drops it. Each user's
//! resent events go in the order they happened; they arrive after that
//! user's later events, which is what a consumer deduplicating by
//! `eventId` and ordering by `occurredAt` is written to expect.

use super::expected::{expected, Scope};
use super::verify::on_topic_from;
use crate::{Failure, Settings};
use chrono::{DateTime, Utc};
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::db::outbox;
use seckill_shared::kafka::read::Start;
use seckill_shared::kafka::{self, Topics};
use std::time::Duration;

/// How much earlier than `--since` the topic is read: events are appended
/// after they happen, and the relay's clock may differ from PostgreSQL's.
const CLOCK_MARGIN: chrono::Duration = chrono::Duration::minutes(5);

/// What a resend did.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Resent {
    since: DateTime<Utc>,
    /// Events the orders changed since then call for.
    expected: usize,
    /// Of those, already on the topic.
    delivered: usize,
    /// Of those, still ahead of the relay's cursor (the relay sends them).
    pending: usize,
    /// Sent now (or, in a dry run, that would be).
    sent: Vec<String>,
    dry_run: bool,
}

/// Runs `events resend`.
pub async fn run(settings: &Settings, since: DateTime<Utc>, dry_run: bool, json: bool) -> Result<(), Failure> {
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    let wanted = expected(&db, Scope::Since(since)).await.map_err(Failure::unreadable)?;
    let kafka_settings = settings.servers.kafka.clone();
    let from = (since - CLOCK_MARGIN).timestamp_millis();
    let seen = tokio::task::spawn_blocking(move || on_topic_from(&kafka_settings, None, Start::Time(from)))
        .await
        .map_err(Failure::failed)?
        .map_err(Failure::unreadable)?;
    let delivered = wanted.iter().filter(|w| seen.contains_key(&w.event.event_id)).count();
    let pending = wanted.iter().filter(|w| w.pending && !seen.contains_key(&w.event.event_id)).count();
    let lacking: Vec<_> = wanted.iter().filter(|w| !w.pending && !seen.contains_key(&w.event.event_id)).collect();
    let mut outcome = Resent { since, expected: wanted.len(), delivered, pending, sent: Vec::new(), dry_run };
    if !dry_run && !lacking.is_empty() {
        let producer: FutureProducer = kafka::producer(&settings.servers.kafka).map_err(Failure::unreadable)?;
        let topic = Topics::new(&settings.servers.kafka).events;
        // One at a time, each awaited: a user's events keep their order.
        for want in &lacking {
            let event = want.event.event().map_err(Failure::failed)?;
            let (key, payload) = outbox::keyed(&event);
            let record = FutureRecord::to(&topic)
                .key(&key)
                .payload(&payload)
                .headers(want.event.headers(&settings.servers.kafka.cloudevents_source, &tracing::Span::none()));
            producer
                .send(record, Duration::from_secs(30))
                .await
                .map_err(|(error, _)| Failure::failed(anyhow::anyhow!("sending {}: {error}", event.event_id)))?;
            outcome.sent.push(event.event_id);
        }
    } else {
        outcome.sent = lacking.iter().map(|w| w.event.event_id.clone()).collect();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&outcome).map_err(Failure::failed)?);
    } else {
        for id in &outcome.sent {
            println!("{} {id}", if dry_run { "would send" } else { "sent" });
        }
        println!(
            "since {}: {} events expected, {} on the topic, {} pending for the relay, {} {}",
            since.to_rfc3339(),
            outcome.expected,
            outcome.delivered,
            outcome.pending,
            outcome.sent.len(),
            if dry_run { "would be sent (dry run)" } else { "sent" }
        );
    }
    Ok(())
}
