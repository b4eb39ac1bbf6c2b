//! A replay: re-produces chosen records to their original topic (or `to`),
//! each with `dlq.replayed-from`, an incremented attempt count, the run's
//! `dlq.replay-id` and its `dlq.replay-count` one higher; awaits the
//! delivery, and only then commits past it (see [`Resumable`]): an
//! interrupted replay resumes where it stopped, and a crash between a
//! delivery and its commit replays that one record once more, which the
//! order service absorbs (first row wins). A record already replayed
//! `dlq.max_replays` times is refused unless forced.

use super::resume::Resumable;
use super::runs::{Outcome, Run, RunSpec, Started};
use super::{entry, loop_guard, Filter, RecordDone, RunError, RunOptions, RunReport, Tools};
use crate::config::KafkaSettings;
use crate::kafka::renewing::Renewing;
use crate::kafka::{self, dlq_header, header_str, REQUEST_ID_HEADER};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// Makes sure the `to` topic exists before anything is sent: created when
/// `create` (with the dead-letter topic's partitions; answers `true`), else
/// refused with how to create it.
pub async fn target_exists(settings: &KafkaSettings, topic: &str, create: bool) -> Result<bool, RunError> {
    if kafka::topic_partitions(settings, topic).await.map_err(RunError::unreadable)?.is_some() {
        return Ok(false);
    }
    if !create {
        return Err(RunError::failed(anyhow::anyhow!(
            "topic {topic} does not exist: nothing was sent; create it (kafka-topics.sh --create --topic {topic}) or run again with --create-topic"
        )));
    }
    kafka::create_topic(settings, topic, settings.dlq_partitions).await.map_err(RunError::unreadable)?;
    Ok(true)
}

/// Runs a replay of what `filter` takes, to `to` (else each record's
/// original topic); `report` hears of each record as it is dealt with.
pub async fn replay(
    tools: &Tools,
    filter: Filter,
    to: Option<String>,
    options: &RunOptions,
    report: &mut (dyn FnMut(&RecordDone) + Send),
) -> Result<RunReport, RunError> {
    let kafka_settings = &tools.servers.kafka;
    let producer = tools.producer()?;
    let topics = tools.topics();
    let target = to.as_deref().map(|topic| format!("-to-{topic}")).unwrap_or_default();
    let group = format!("{}seckillctl-replay-{}{target}", kafka_settings.topic_prefix, filter.group_suffix());
    let spec = RunSpec {
        kind: "replay",
        operator: options.operator.as_deref(),
        note: &options.note,
        filter: &filter,
        target: to.as_deref(),
        dry_run: options.dry_run,
        submission: options.submission.as_deref(),
    };
    let audit = match Run::start(&tools.db, &spec).await? {
        Started::New(run) => run,
        Started::Before(id) => return RunReport::of(&tools.db, id).await,
    };
    let mut records = Resumable::start(&tools.servers, group, filter.clone(), !options.dry_run);
    let mut counts = RunReport { run_id: audit.id, done: 0, skipped: 0, refused: 0 };
    let result = async {
        while let Some(message) = records.next().await {
            if options.limit.is_some_and(|limit| counts.done >= limit) {
                // Not sent, not committed: the next run starts here.
                break;
            }
            let e = entry(&message);
            let destination = to.clone().unwrap_or_else(|| {
                e.headers.get(dlq_header::ORIGINAL_TOPIC).cloned().unwrap_or_else(|| topics.orders.clone())
            });
            let mut done = RecordDone {
                position: e.position.clone(),
                reason: e.reason.clone(),
                order_id: e.order_id.clone(),
                outcome: Outcome::Sent,
                detail: destination.clone(),
                new_order_id: None,
            };
            if let Err(why) = loop_guard(&message, tools.settings.max_replays, options.force) {
                (done.outcome, done.detail) = (Outcome::Refused, why);
            } else if !options.dry_run {
                send(&producer, &message, &destination, &format!("{}:{}", topics.dlq, e.position), audit.id).await?;
            }
            audit.record(&message, &done).await?;
            report(&done);
            counts.count(done.outcome);
            records.done();
            if done.outcome == Outcome::Sent {
                options.pace().await;
            }
        }
        Ok(())
    }
    .await;
    super::finish(&audit, records, result).await?;
    Ok(counts)
}

/// Re-produces `message` to `destination` and waits for the broker (on a
/// new producer should this one fail fatally).
async fn send(
    producer: &Renewing<FutureProducer>,
    message: &OwnedMessage,
    destination: &str,
    from: &str,
    run_id: i64,
) -> Result<(), RunError> {
    let headers = replayed(message, from, run_id);
    let out = || {
        let mut out = FutureRecord::<[u8], [u8]>::to(destination).headers(headers.clone());
        if let Some(key) = message.key() {
            out = out.key(key);
        }
        if let Some(payload) = message.payload() {
            out = out.payload(payload);
        }
        out
    };
    producer.send(out, Duration::from_secs(10).into()).await.map_err(|error| {
        RunError::failed(anyhow::anyhow!("replaying {}:{}: {error}", message.partition(), message.offset()))
    })?;
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
