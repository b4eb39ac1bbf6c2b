//! `seckillctl dlq replay`: re-produces chosen records to their original
//! topic (or `--to`), each with `dlq.replayed-from`, an incremented attempt
//! count, the run's `dlq.replay-id` and its `dlq.replay-count` one higher;
//! awaits the delivery, and only then commits past it (see [`Resumable`]):
//! an interrupted replay resumes where it stopped, and a crash between a
//! delivery and its commit replays that one record once more, which the
//! order service absorbs (first row wins). A record already replayed
//! `dlq.max_replays` times is refused without `--force`.

use super::resume::Resumable;
use super::runs::{Outcome, Run, RunSpec};
use super::{entry, loop_guard, Filter, RunArgs};
use crate::{Failure, Settings};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::kafka::{self, dlq_header, header_str, Topics, REQUEST_ID_HEADER};
use std::time::Duration;

/// Makes sure `--to`'s `topic` exists before anything is sent: created
/// when `create` (with the dead-letter topic's partitions), else refused
/// with how to create it.
pub async fn target_exists(settings: &Settings, topic: &str, create: bool) -> Result<(), Failure> {
    let kafka_settings = &settings.servers.kafka;
    if kafka::topic_partitions(kafka_settings, topic).await.map_err(Failure::unreadable)?.is_some() {
        return Ok(());
    }
    if !create {
        return Err(Failure::failed(anyhow::anyhow!(
            "topic {topic} does not exist: nothing was sent; create it (kafka-topics.sh --create --topic {topic}) or run again with --create-topic"
        )));
    }
    kafka::create_topic(kafka_settings, topic, kafka_settings.dlq_partitions).await.map_err(Failure::unreadable)?;
    println!("created topic {topic} ({} partitions)", kafka_settings.dlq_partitions);
    Ok(())
}

/// Runs a replay.
pub async fn replay(settings: Settings, filter: Filter, to: Option<String>, run: RunArgs) -> Result<(), Failure> {
    let producer: FutureProducer = kafka::producer(&settings.servers.kafka).map_err(Failure::unreadable)?;
    let db = crate::database(&settings).await?;
    let topics = Topics::new(&settings.servers.kafka);
    let target = to.as_deref().map(|topic| format!("-to-{topic}")).unwrap_or_default();
    let group = format!("{}seckillctl-replay-{}{target}", settings.servers.kafka.topic_prefix, filter.group_suffix());
    let spec = RunSpec {
        kind: "replay",
        operator: run.operator.as_deref(),
        note: &run.note,
        filter: &filter,
        target: to.as_deref(),
        dry_run: run.dry_run,
    };
    let audit = Run::start(&db, &spec).await?;
    let mut records = Resumable::start(&settings, group, filter.clone(), !run.dry_run);
    let mut sent = 0u64;
    let mut refused = 0u64;
    let result = async {
        while let Some(message) = records.next().await {
            if run.limit.is_some_and(|limit| sent >= limit) {
                // Not sent, not committed: the next run starts here.
                break;
            }
            let e = entry(&message);
            let destination = to.clone().unwrap_or_else(|| {
                e.headers.get(dlq_header::ORIGINAL_TOPIC).cloned().unwrap_or_else(|| topics.orders.clone())
            });
            let order = (e.order_id != "-").then_some(e.order_id.as_str());
            if let Err(why) = loop_guard(&message, settings.dlq.max_replays, run.force) {
                println!("refused {} ({}, order {}): {why}", e.position, e.reason, e.order_id);
                audit.record(&message, order, Outcome::Refused, &why, None).await?;
                refused += 1;
                records.done();
                continue;
            }
            if run.dry_run {
                println!("would replay {} ({}, order {}) to {destination}", e.position, e.reason, e.order_id);
            } else {
                let record = replayed(&message, &format!("{}:{}", topics.dlq, e.position), audit.id);
                let mut out = FutureRecord::<[u8], [u8]>::to(&destination).headers(record);
                if let Some(key) = message.key() {
                    out = out.key(key);
                }
                if let Some(payload) = message.payload() {
                    out = out.payload(payload);
                }
                if let Err((error, _)) = producer.send(out, Duration::from_secs(10)).await {
                    return Err(Failure::failed(anyhow::anyhow!("replaying {}: {error}", e.position)));
                }
                println!("replayed {} ({}, order {}) to {destination}", e.position, e.reason, e.order_id);
            }
            audit.record(&message, order, Outcome::Sent, &destination, None).await?;
            sent += 1;
            records.done();
            run.pace().await;
        }
        Ok(())
    }
    .await;
    super::finish(&audit, records, result).await?;
    let verb = if run.dry_run { "would be replayed (dry run)" } else { "replayed" };
    println!("{sent} record(s) {verb}, {refused} refused (run {})", audit.id);
    Ok(())
}

/// The headers of a replayed record: its request id, where it came from,
/// its attempt count and replay count one higher, and the run's id.
fn replayed(message: &OwnedMessage, from: &str, run_id: i64) -> OwnedHeaders {
    let headers = message.headers();
    let count = |key| headers.and_then(|h| header_str(h, key)).and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    let attempts = (count(dlq_header::ATTEMPTS) + 1).to_string();
    let replays = (count(dlq_header::REPLAY_COUNT) + 1).to_string();
    let run_id = run_id.to_string();
    let mut out = OwnedHeaders::new();
    if let Some(request_id) = headers.and_then(|h| header_str(h, REQUEST_ID_HEADER)) {
        out = out.insert(Header { key: REQUEST_ID_HEADER, value: Some(request_id) });
    }
    out.insert(Header { key: dlq_header::REPLAYED_FROM, value: Some(from) })
        .insert(Header { key: dlq_header::ATTEMPTS, value: Some(attempts.as_str()) })
        .insert(Header { key: dlq_header::REPLAY_COUNT, value: Some(replays.as_str()) })
        .insert(Header { key: dlq_header::REPLAY_ID, value: Some(run_id.as_str()) })
}
