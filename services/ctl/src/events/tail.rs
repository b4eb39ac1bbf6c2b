//! `seckillctl events tail`: a minimal consumer of `seckill.order-events`,
//! and the shape of one: a consumer group, offsets stored after the event is
//! handled and committed every half second (and at the end), and events
//! dropped when their `eventId` was seen (the relay may send one twice).

use crate::{Failure, Settings};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::Message;
use seckill_shared::domain::OrderEvent;
use seckill_shared::kafka::{self, header_str, Topics, REQUEST_ID_HEADER};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Arguments of `events tail`.
#[derive(clap::Args)]
pub struct Args {
    /// Consumer group: a group resumes where it stopped.
    #[arg(long, default_value = "seckillctl-events-tail")]
    group: String,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
    /// Stop when nothing came for this many seconds.
    #[arg(long)]
    idle: Option<u64>,
    /// Print each event as a JSON line.
    #[arg(long)]
    json: bool,
}

/// Runs `events tail`.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    let Args { group, limit, idle, json } = args;
    let kafka_settings = &settings.servers.kafka;
    let topic = Topics::new(kafka_settings).events;
    let group = format!("{}{group}", kafka_settings.topic_prefix);
    let consumer: StreamConsumer =
        kafka::consumer_config(kafka_settings, &group).create().map_err(Failure::unreadable)?;
    consumer.subscribe(&[&topic]).map_err(Failure::unreadable)?;
    let mut seen = HashSet::new();
    let mut printed = 0u64;
    let mut last_commit = Instant::now();
    while limit.is_none_or(|limit| printed < limit) {
        let received = match idle {
            Some(idle) => match tokio::time::timeout(Duration::from_secs(idle), consumer.recv()).await {
                Ok(received) => received,
                Err(_) => break,
            },
            None => consumer.recv().await,
        };
        let message = received.map_err(Failure::unreadable)?;
        let event: Result<OrderEvent, _> = serde_json::from_slice(message.payload().unwrap_or_default());
        match event {
            // Handle an event once, whatever the relay sent twice.
            Ok(event) if seen.insert(event.event_id.clone()) => {
                if json {
                    println!("{}", serde_json::to_string(&event).map_err(Failure::failed)?);
                } else {
                    let request_id = message.headers().and_then(|h| header_str(h, REQUEST_ID_HEADER)).unwrap_or("-");
                    println!(
                        "{:<10} {:<36} user {:<10} {:<16} request {request_id}",
                        event.kind,
                        event.order_id,
                        event.user_id,
                        event.reason.as_deref().unwrap_or("")
                    );
                }
                printed += 1;
            }
            Ok(_) => {}
            Err(error) => eprintln!("seckillctl: skipping a record that is not an order event: {error}"),
        }
        // Only after the event was handled: a crash re-delivers it. The
        // group's position is committed at most every COMMIT_EVERY (a
        // commit per event held a reader to about 1,400 events a second),
        // and once more at the end.
        consumer.store_offset_from_message(&message).map_err(Failure::unreadable)?;
        if last_commit.elapsed() >= COMMIT_EVERY {
            commit(&consumer, CommitMode::Async)?;
            last_commit = Instant::now();
        }
    }
    commit(&consumer, CommitMode::Sync)
}

/// How often `tail` commits the position it reached.
const COMMIT_EVERY: Duration = Duration::from_millis(500);

fn commit(consumer: &StreamConsumer, mode: CommitMode) -> Result<(), Failure> {
    match consumer.commit_consumer_state(mode) {
        // Nothing stored since the last commit.
        Err(rdkafka::error::KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => Ok(()),
        other => other.map_err(Failure::unreadable),
    }
}
