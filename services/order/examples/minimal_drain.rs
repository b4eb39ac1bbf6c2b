//! `make bench`'s yardstick for the drain: the smallest program that does
//! the order service's job on a backlog of accepted orders, and nothing
//! else — no retries, no dead letters, no relay, no spans, no metrics.
//! What `make bench` holds the order service to, run on the same backlog
//! in the same run.
//!
//! Its job, batch by batch:
//! 1. consume the orders topic in a group of its own — as many members as
//!    the service runs by default (`--consumers`, 2), each with its own
//!    producer — a batch of at most `--batch` records (2,000) or `--wait-ms`
//!    after the first (20 ms);
//! 2. in one transaction: one `INSERT … SELECT FROM unnest(…) ON CONFLICT
//!    DO NOTHING RETURNING order_id` of the batch's orders as CREATED (the
//!    service's own statement, into a database of its own migrated like
//!    the pipeline's), and one guarded stock `UPDATE` of the sales it
//!    touched (never below zero);
//! 3. one pipelined Redis write of the statuses (an `HSET` of each order's
//!    status, a `ZREM` of its reservation), on keys of its own;
//! 4. one CREATED event per order (the service's JSON and CloudEvents
//!    headers; acks=all, idempotent), every delivery awaited;
//! 5. the batch's offsets committed after.
//!
//! It stops once `--expect` orders are written and prints one JSON line:
//! how many, and when the last one was (ms since the epoch).
//!
//! `minimal_drain --orders-topic T --events-prefix P --group G --database-url U --expect N [--key-prefix K]`
//! (its events go to `P` + `seckill.order-events`, created if missing).

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::{OrderEvent, OrderRecord};
use seckill_shared::kafka::cloud_event::{self, Attributes};
use seckill_shared::kafka::Trace;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts the deliveries that failed (a record not in the log).
#[derive(Default)]
struct Failures(AtomicU64);

impl ClientContext for Failures {}

impl ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A record of the batch: the order, and where it came from (the rows
/// carry it, as the service's do: the insert trigger then writes no outbox
/// row for them).
struct Consumed {
    record: OrderRecord,
    partition: i32,
    offset: i64,
}

/// The command line, by flag.
struct Args(BTreeMap<String, String>);

impl Args {
    fn parse() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Self(
            args.chunks(2)
                .filter_map(|pair| Some((pair[0].trim_start_matches("--").to_owned(), pair.get(1)?.clone())))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> anyhow::Result<&str> {
        self.0.get(name).map(String::as_str).ok_or_else(|| anyhow::anyhow!("--{name} is needed"))
    }

    fn number(&self, name: &str, default: u64) -> anyhow::Result<u64> {
        self.0.get(name).map_or(Ok(default), |n| n.parse().map_err(|_| anyhow::anyhow!("--{name}: not a number")))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let kafka = KafkaSettings {
        brokers: std::env::var("SECKILL_KAFKA_BROKERS").unwrap_or_else(|_| KafkaSettings::default().brokers),
        ..Default::default()
    };
    let consumers = args.number("consumers", 2)? as u32;
    let db = sqlx::postgres::PgPoolOptions::new().max_connections(consumers).connect(args.get("database-url")?).await?;
    let redis =
        redis::Client::open(std::env::var("SECKILL_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into()))?;
    let redis = redis.get_multiplexed_async_connection().await?;
    let events = KafkaSettings { topic_prefix: args.get("events-prefix")?.to_owned(), ..kafka.clone() };
    let drain = std::sync::Arc::new(Drain {
        events_topic: seckill_shared::kafka::ensure_topics(&events).await?.events,
        key_prefix: args.0.get("key-prefix").cloned().unwrap_or_default(),
        source: kafka.cloudevents_source.clone(),
    });
    let shape = Shape {
        batch: args.number("batch", 2_000)? as usize,
        wait: Duration::from_millis(args.number("wait-ms", 20)?),
        expect: args.number("expect", u64::MAX)?,
    };
    // As many members of the group as the service runs (its default: 2),
    // each with its producer, as its workers have.
    let written = std::sync::Arc::new(AtomicU64::new(0));
    let mut members = tokio::task::JoinSet::new();
    for _ in 0..consumers {
        let consumer: StreamConsumer = seckill_shared::kafka::consumer_config(&kafka, args.get("group")?).create()?;
        consumer.subscribe(&[args.get("orders-topic")?])?;
        let producer: ThreadedProducer<Failures> =
            seckill_shared::kafka::producer_config(&kafka).create_with_context(Failures::default())?;
        let member = Member { consumer, producer, db: db.clone(), redis: redis.clone(), drain: drain.clone() };
        members.spawn(member.run(shape, written.clone()));
    }
    // The first member to see the backlog written ends the program.
    members.join_next().await.expect("a member")??;
    let last = chrono::Utc::now().timestamp_millis();
    println!("{}", serde_json::json!({"written": written.load(Ordering::SeqCst), "lastWrittenMs": last}));
    std::process::exit(0)
}

/// How batches are made, and when to stop.
#[derive(Clone, Copy)]
struct Shape {
    batch: usize,
    wait: Duration,
    /// Orders written by every member together, then stop.
    expect: u64,
}

/// One member of the group: its consumer, its producer, and the shared
/// pool and connection.
struct Member {
    consumer: StreamConsumer,
    producer: ThreadedProducer<Failures>,
    db: sqlx::PgPool,
    redis: redis::aio::MultiplexedConnection,
    drain: std::sync::Arc<Drain>,
}

impl Member {
    /// Batches, each written, followed, announced and committed, until the
    /// members together wrote the backlog.
    async fn run(mut self, shape: Shape, written: std::sync::Arc<AtomicU64>) -> anyhow::Result<()> {
        while written.load(Ordering::SeqCst) < shape.expect {
            let batch = next_batch(&self.consumer, shape.batch, shape.wait).await?;
            let consumed: Vec<Consumed> = batch
                .iter()
                .filter_map(|m| {
                    let record = serde_json::from_slice(m.payload().unwrap_or_default()).ok()?;
                    Some(Consumed { record, partition: m.partition(), offset: m.offset() })
                })
                .collect();
            let new = self.drain.write(&self.db, &consumed).await?;
            self.drain.follow(&mut self.redis, &consumed).await?;
            self.drain.announce(&self.producer, &consumed, &batch)?;
            self.consumer.commit_consumer_state(CommitMode::Async)?;
            written.fetch_add(new, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A first record (waiting as long as it takes), then more for up to `wait`.
async fn next_batch(
    consumer: &StreamConsumer,
    most: usize,
    wait: Duration,
) -> anyhow::Result<Vec<rdkafka::message::OwnedMessage>> {
    let mut batch = vec![consumer.recv().await?.detach()];
    let deadline = tokio::time::Instant::now() + wait;
    while batch.len() < most {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(message) => batch.push(message?.detach()),
            Err(_) => break,
        }
    }
    Ok(batch)
}

/// Where the drain writes.
struct Drain {
    events_topic: String,
    key_prefix: String,
    source: String,
}

impl Drain {
    /// The batch's orders and the stock they take, in one transaction: how
    /// many orders are new.
    async fn write(&self, db: &sqlx::PgPool, consumed: &[Consumed]) -> anyhow::Result<u64> {
        let records = consumed.iter().map(|c| &c.record);
        let ids: Vec<&str> = records.clone().map(|r| r.order_id.as_str()).collect();
        let activities: Vec<i64> = records.clone().map(|r| r.activity_id.get()).collect();
        let skus: Vec<i64> = records.clone().map(|r| r.sku_id.get()).collect();
        let rounds: Vec<i32> = records.clone().map(|r| r.round.unwrap_or(1) as i32).collect();
        let users: Vec<i64> = records.clone().map(|r| r.user_id.get()).collect();
        let accepted: Vec<i64> = records.clone().map(|r| r.accepted_at).collect();
        let quantities: Vec<i16> = records.clone().map(|r| r.quantity as i16).collect();
        let partitions: Vec<i32> = consumed.iter().map(|c| c.partition).collect();
        let offsets: Vec<i64> = consumed.iter().map(|c| c.offset).collect();
        let mut tx = db.begin().await?;
        let inserted = sqlx::query_scalar!(
            "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at, pay_deadline, quantity,
                                 source_partition, source_offset)
             SELECT b.order_id, b.activity_id, b.sku_id, b.round, b.user_id, 'CREATED', to_timestamp(b.accepted_ms / 1000.0),
                    now() + interval '900 seconds', b.quantity, b.source_partition, b.source_offset
               FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[], $7::smallint[],
                           $8::int[], $9::bigint[])
                    AS b(order_id, activity_id, sku_id, round, user_id, accepted_ms, quantity, source_partition, source_offset)
             ON CONFLICT DO NOTHING RETURNING order_id",
            &ids as &[&str],
            &activities,
            &skus,
            &rounds,
            &users,
            &accepted,
            &quantities,
            &partitions,
            &offsets
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut taken: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        for record in consumed.iter().map(|c| &c.record) {
            *taken.entry((record.activity_id.get(), record.sku_id.get())).or_default() += i64::from(record.quantity);
        }
        let (sales, units): (Vec<(i64, i64)>, Vec<i64>) = taken.into_iter().unzip();
        let (sale_activities, sale_skus): (Vec<i64>, Vec<i64>) = sales.into_iter().unzip();
        sqlx::query!(
            "UPDATE sales s SET remaining_stock = s.remaining_stock - b.n, updated_at = now()
               FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS b(activity_id, sku_id, n)
              WHERE s.activity_id = b.activity_id AND s.sku_id = b.sku_id AND s.remaining_stock >= b.n",
            &sale_activities,
            &sale_skus,
            &units
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(inserted.len() as u64)
    }

    /// Every order's status in one pipeline: written, its reservation gone.
    async fn follow(&self, redis: &mut redis::aio::MultiplexedConnection, consumed: &[Consumed]) -> anyhow::Result<()> {
        let mut pipe = redis::pipe();
        for record in consumed.iter().map(|c| &c.record) {
            let sale = format!("{}minimal-drain:{}:{}", self.key_prefix, record.activity_id, record.sku_id);
            let status = format!("CREATED|{}||{}", record.user_id, record.accepted_at);
            pipe.hset(format!("{sale}:orders"), record.order_id.as_str(), status).ignore();
            pipe.zrem(format!("{sale}:reserved"), record.order_id.as_str()).ignore();
        }
        let _: () = pipe.query_async(redis).await?;
        Ok(())
    }

    /// The batch's CREATED events, every delivery awaited.
    fn announce(
        &self,
        producer: &ThreadedProducer<Failures>,
        consumed: &[Consumed],
        batch: &[rdkafka::message::OwnedMessage],
    ) -> anyhow::Result<()> {
        let failed_before = producer.context().0.load(Ordering::Relaxed);
        let sources = batch.iter().map(|m| (m.partition(), m.offset(), m)).collect::<Vec<_>>();
        for c in consumed {
            let message = sources.iter().find(|(p, o, _)| (*p, *o) == (c.partition, c.offset)).map(|(_, _, m)| m);
            let event = OrderEvent::created(&c.record);
            let payload = serde_json::to_vec(&event)?;
            let key = event.user_id.to_string();
            let time = chrono::DateTime::from_timestamp_millis(event.occurred_at).unwrap_or_default();
            let attributes = Attributes {
                id: &event.event_id,
                kind: &event.kind,
                subject: event.order_id.as_str(),
                time,
                source: &self.source,
            };
            let trace = message.map_or_else(Trace::default, |m| Trace::of(m.headers()));
            let headers = cloud_event::headers(trace, attributes);
            let mut record = BaseRecord::to(&self.events_topic).key(&key).payload(&payload).headers(headers);
            // A full queue: let the deliveries catch up, then again.
            while let Err((error, back)) = producer.send(record) {
                anyhow::ensure!(
                    matches!(error.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::QueueFull)),
                    "producing a CREATED event: {error}"
                );
                std::thread::sleep(Duration::from_millis(5));
                record = back;
            }
        }
        // Every delivery reported (flush() would wait in 100 ms steps while
        // the producer's own thread polls).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while producer.in_flight_count() > 0 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "the events were not delivered in 30 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        let failed = producer.context().0.load(Ordering::Relaxed) - failed_before;
        anyhow::ensure!(failed == 0, "{failed} CREATED events were not delivered");
        Ok(())
    }
}
