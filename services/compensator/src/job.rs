//! The dead-letter consumer: one record at a time, settle, then commit.
//!
//! For each record: in one transaction, write the order's row as FAILED
//! unless it has a row already; the row's status decides. FAILED → restore
//! the unit (or, for `NO_DB_STOCK`, write it off) with one Lua call that
//! does so at most once per order id. CREATED → restore nothing. Then the
//! offset is committed. A crash anywhere before the commit replays the
//! record, and the replay restores nothing twice.

use crate::Settings;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use seckill_shared::db;
use seckill_shared::domain::{FailReason, OrderRecord, OrderStatus};
use seckill_shared::kafka::{self, dlq_header, header_str};
use seckill_shared::stock::{Compensation, Settlement};
use seckill_shared::tasks::{retry_until, Connections};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What settling one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The row is FAILED and Redis was settled (or had been already).
    Failed(Compensation),
    /// The row is CREATED: nothing restored.
    AlreadyCreated,
    /// The record could not be decoded: logged, counted, skipped.
    Malformed,
}

/// The compensator's consumer in the `seckill-compensator` group.
pub struct DlqJob {
    settings: Arc<Settings>,
    deps: Connections,
    consumer: StreamConsumer,
}

impl DlqJob {
    /// Creates the consumer and subscribes it to the dead-letter topic.
    pub fn new(settings: Arc<Settings>, deps: Connections) -> anyhow::Result<Self> {
        let consumer: StreamConsumer =
            kafka::consumer_config(&settings.kafka, &kafka::compensator_group(&settings.kafka)).create()?;
        consumer.subscribe(&[deps.topics.dlq.as_str()])?;
        Ok(Self { settings, deps, consumer })
    }

    /// Consumes until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        loop {
            let message = tokio::select! {
                // Safe point: the previous record is committed.
                _ = shutdown.cancelled() => break,
                received = self.consumer.recv() => match received {
                    Ok(message) => message,
                    Err(error) => {
                        tracing::warn!(%error, "dead-letter consumer error");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            let settled = retry_until(self.settings.backoff(), "settling a dead-lettered order", &shutdown, || {
                settle(&self.deps, &message)
            })
            .await;
            let Some(settled) = settled else { break };
            let request_id = message.headers().and_then(|h| header_str(h, kafka::REQUEST_ID_HEADER)).unwrap_or("");
            tracing::info!(partition = message.partition(), offset = message.offset(), request_id, ?settled, "dead letter settled");
            // Only now: a crash before this line replays the record.
            if let Err(error) = self.consumer.commit_message(&message, CommitMode::Sync) {
                tracing::warn!(%error, "offset commit failed; the record will be replayed");
            }
        }
        self.consumer.unsubscribe();
        Ok(())
    }
}

/// Settles one dead-lettered record. Errors are transient: retry.
pub async fn settle(deps: &Connections, message: &BorrowedMessage<'_>) -> Result<Settled, String> {
    let reason_code = message.headers().and_then(|h| header_str(h, dlq_header::REASON)).unwrap_or("");
    let record = match message.payload().map(OrderRecord::decode) {
        Some(Ok(record)) => record,
        Some(Err(error)) => {
            tracing::warn!(reason = reason_code, %error, offset = message.offset(), "malformed dead letter skipped");
            metrics::counter!("seckill_compensator_malformed_total").increment(1);
            return Ok(Settled::Malformed);
        }
        None => {
            metrics::counter!("seckill_compensator_malformed_total").increment(1);
            return Ok(Settled::Malformed);
        }
    };
    let reason = FailReason::parse(reason_code).unwrap_or(FailReason::DbRejected);
    settle_order(deps, &record, reason).await
}

/// Decides one order's fate as FAILED (unless PostgreSQL already says
/// CREATED) and settles Redis accordingly, at most once.
pub async fn settle_order(deps: &Connections, record: &OrderRecord, reason: FailReason) -> Result<Settled, String> {
    let mut tx = deps.db.begin().await.map_err(|e| e.to_string())?;
    let status = db::settle_failed(&mut tx, &record.order_id, record.user_id, reason, Some(record.accepted_at))
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    settle_redis(deps, record, reason, status).await
}

/// Brings Redis in line with the fate PostgreSQL decided (`status`):
/// CREATED restores nothing; FAILED restores the unit (or writes it off) at
/// most once per order id. Idempotent.
pub async fn settle_redis(
    deps: &Connections,
    record: &OrderRecord,
    reason: FailReason,
    status: OrderStatus,
) -> Result<Settled, String> {
    if status == OrderStatus::Created {
        deps.stock
            .mark_created(&[(record.order_id.clone(), record.user_id, record.accepted_at)])
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Settled::AlreadyCreated);
    }
    let settlement = if reason == FailReason::NoDbStock {
        // Redis counted a unit the database does not have: selling it again
        // would only make another doomed order. Bring Redis down instead.
        let remaining = db::find_sale(&deps.db, record.sale())
            .await
            .map_err(|e| e.to_string())?
            .map(|sale| sale.remaining_stock)
            .unwrap_or(0);
        Settlement::WriteOff { db_remaining: remaining }
    } else {
        Settlement::Restore
    };
    let compensation = deps
        .stock
        .compensate(&record.order_id, record.user_id, reason, settlement)
        .await
        .map_err(|e| e.to_string())?;
    if compensation == Compensation::Settled {
        metrics::counter!("seckill_compensator_compensations_total", "reason" => reason.code()).increment(1);
    }
    Ok(Settled::Failed(compensation))
}
