//! A redrive: a replay that gives the buyer another chance.
//!
//! A dead-lettered order was settled FAILED and its unit given back, so
//! replaying its record creates nothing. A redrive asks, per record, whether
//! the buyer can still have the order — the sale's round is the record's and
//! still open, the buyer holds no live order in it, a unit is left — and if
//! so places it again through the edge's own atomic deduction
//! (`lua/deduct.lua`): a new order id, the unit taken from today's stock
//! (never beyond it), published to the orders topic like any order, with
//! `redriveOf` naming the original (and every event of the new order says
//! so: the outbox triggers read `dlq_redrives`).
//!
//! At most one new order per original, however often a redrive is run or
//! interrupted: the `dlq_redrives` row is written before the deduction with
//! the deduction call's id, and a run that finds it asks the same call
//! again, so it hears what the first asking decided instead of deducting a
//! second time (after the call's outcome expired, the buyer's order in
//! Redis is recognised by the call's nonce in its id). The deduction's own
//! one-order-per-buyer check is what refuses a buyer who holds an order.

use super::resume::Resumable;
use super::runs::{Outcome, Run, RunSpec, Started};
use super::{entry, loop_guard, Filter, RecordDone, RunError, RunOptions, RunReport, Tools};
use crate::domain::{OrderId, OrderRecord};
use crate::kafka::renewing::Renewing;
use crate::kafka::{header_str, REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use crate::stock::{Borrowed, DeductCall, DeductRequest, Deduction};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use std::sync::Arc;
use std::time::Duration;

/// What a redrive needs.
struct Redrive<'a> {
    tools: &'a Tools,
    producer: Arc<Renewing<FutureProducer>>,
    audit: Run,
    dry_run: bool,
}

/// What became of one record.
struct Verdict {
    outcome: Outcome,
    detail: String,
    new_order: Option<OrderId>,
}

/// What a redrive's deduction took for the buyer. `decided_now`: this
/// asking took the units (a confirmation is due).
struct Taken {
    order_id: OrderId,
    round: i64,
    accepted_at: i64,
    slot: u32,
    decided_now: bool,
}

impl Verdict {
    fn skipped(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Skipped, detail: detail.into(), new_order: None }
    }
    fn refused(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Refused, detail: detail.into(), new_order: None }
    }
}

/// Runs a redrive of what `filter` takes; `report` hears of each record as
/// it is dealt with.
pub async fn redrive(
    tools: &Tools,
    filter: Filter,
    options: &RunOptions,
    report: &mut (dyn FnMut(&RecordDone) + Send),
) -> Result<RunReport, RunError> {
    let kafka_settings = &tools.servers.kafka;
    let producer = tools.producer()?;
    let group = format!("{}seckillctl-redrive-{}", kafka_settings.topic_prefix, filter.group_suffix());
    let spec = RunSpec {
        kind: "redrive",
        operator: options.operator.as_deref(),
        note: &options.note,
        filter: &filter,
        target: None,
        dry_run: options.dry_run,
        submission: options.submission.as_deref(),
    };
    let audit = match Run::start(&tools.db, &spec).await? {
        Started::New(run) => run,
        Started::Before(id) => return RunReport::of(&tools.db, id).await,
    };
    let mut records = Resumable::start(&tools.servers, group, filter.clone(), !options.dry_run);
    let redrive = Redrive { tools, producer, audit, dry_run: options.dry_run };
    let mut counts = RunReport { run_id: redrive.audit.id, done: 0, skipped: 0, refused: 0 };
    let result = async {
        while let Some(message) = records.next().await {
            if options.limit.is_some_and(|limit| counts.done >= limit) {
                break;
            }
            let e = entry(&message);
            let verdict = match loop_guard(&message, tools.settings.max_replays, options.force) {
                Err(why) => Verdict::refused(why),
                Ok(()) => redrive.one(&message).await?,
            };
            let done = RecordDone {
                position: e.position,
                reason: e.reason,
                order_id: e.order_id,
                outcome: verdict.outcome,
                detail: verdict.detail,
                new_order_id: verdict.new_order.map(|o| o.as_str().to_owned()),
            };
            redrive.audit.record(&message, &done).await?;
            report(&done);
            counts.count(done.outcome);
            records.done();
            if done.outcome == Outcome::Placed {
                options.pace().await;
            }
        }
        Ok(())
    }
    .await;
    super::finish(&redrive.audit, records, result).await?;
    Ok(counts)
}

impl Redrive<'_> {
    /// Decides one record and, unless a dry run, acts on it.
    async fn one(&self, message: &OwnedMessage) -> Result<Verdict, RunError> {
        let Some(original) = message.payload().and_then(|p| OrderRecord::decode(p).ok()) else {
            return Ok(Verdict::refused("not an order record: nothing to place again"));
        };
        let done = sqlx::query_scalar!(
            "SELECT new_order_id FROM dlq_redrives WHERE original_order_id = $1 AND new_order_id IS NOT NULL",
            original.order_id.as_str()
        )
        .fetch_optional(&self.tools.db)
        .await
        .map_err(RunError::unreadable)?
        .flatten();
        if let Some(new_order) = done {
            return Ok(Verdict::skipped(format!("already redriven as {new_order}")));
        }
        let status = sqlx::query_scalar!("SELECT status FROM orders WHERE order_id = $1", original.order_id.as_str())
            .fetch_optional(&self.tools.db)
            .await
            .map_err(RunError::unreadable)?;
        if let Some(status) = status.filter(|s| s != "FAILED") {
            return Ok(Verdict::skipped(format!("the order is {status}: nothing to place again")));
        }
        if self.dry_run {
            return self.would(&original).await;
        }
        self.place(message, &original).await
    }

    /// A dry run's answer, from reads alone (the deduction decides for real).
    async fn would(&self, original: &OrderRecord) -> Result<Verdict, RunError> {
        let sale = original.sale();
        let snapshot = self.tools.stock.books().snapshot(sale).await.map_err(RunError::unreadable)?;
        let holder =
            self.tools.stock.orders().user_order(sale, original.user_id).await.map_err(RunError::unreadable)?;
        Ok(if !snapshot.exists {
            Verdict::refused("the sale is not in Redis (finished or never warmed)")
        } else if let Some(why) = round_over(original, snapshot.round) {
            Verdict::refused(why)
        } else if let Some(order) = holder {
            Verdict::refused(format!("the buyer holds order {order}"))
        } else if snapshot.remaining <= 0 {
            Verdict::refused("sold out")
        } else {
            Verdict { outcome: Outcome::Placed, detail: "a unit is left for the buyer".into(), new_order: None }
        })
    }

    /// Places the buyer's order again, or says why not.
    /// The redrive's deduction call for `original`'s buyer, in their home
    /// bucket (units borrowed from the others when it ran out), and its
    /// answer.
    async fn deduct(
        &self,
        message: &OwnedMessage,
        original: &OrderRecord,
    ) -> Result<(DeductCall, Option<Deduction>), RunError> {
        let call_id = self.call_for(original).await?;
        let nonce = nonce_of(&call_id);
        let headers = message.headers();
        let header = |key| headers.and_then(|h| header_str(h, key)).unwrap_or("").to_owned();
        let request = DeductRequest {
            user: original.user_id,
            nonce: nonce.clone(),
            request_id: header(REQUEST_ID_HEADER),
            traceparent: header(TRACEPARENT_HEADER),
            // The operator places again an order the edge took: its
            // admission (if the round has a room) was checked then.
            admitted: true,
            quantity: original.quantity,
        };
        // Room for the publish below before the sweeper may take the
        // reservation for a lost record (it republishes it then).
        let deadline = Duration::from_millis(self.tools.servers.kafka.message_timeout_ms) + Duration::from_secs(5);
        let sale = original.sale();
        // The buyer's home bucket keeps their order (a sale of one: bucket 0).
        let list = self.tools.stock.bucket_moves().directory(sale).await.map_err(RunError::unreadable)?;
        let home = list.home(original.user_id);
        let call = DeductCall { id: call_id, requests: vec![request], publish_deadline: deadline, bucket: home };
        let mut answer = self.tools.stock.orders().deduct_batch(sale, &call).await.map_err(RunError::unreadable)?.pop();
        // Its bucket ran out: units from the others, and the same call again
        // (one that answered SOLD_OUT kept nothing).
        for _ in 0..3 {
            if !matches!(answer, Some(Deduction::SoldOut { .. })) || list.buckets.len() == 1 {
                break;
            }
            let borrowed = self.tools.stock.bucket_moves().borrow(sale, &list.buckets, home, list.round).await;
            if borrowed.map_err(RunError::unreadable)? == Borrowed::Nothing {
                break;
            }
            answer = self.tools.stock.orders().deduct_batch(sale, &call).await.map_err(RunError::unreadable)?.pop();
        }
        Ok((call, answer))
    }

    async fn place(&self, message: &OwnedMessage, original: &OrderRecord) -> Result<Verdict, RunError> {
        let nonce = nonce_of(&self.call_for(original).await?);
        let take = match self.take_in_release(original, &nonce).await? {
            Ok(take) => take,
            Err(refused) => return Ok(refused),
        };
        let verdict = self.place_taken(message, original, take.as_ref()).await?;
        if let Some(take) = take.filter(|_| verdict.outcome != Outcome::Placed) {
            self.give_in_release(original, &take).await?;
        }
        Ok(verdict)
    }

    /// [`Redrive::place`], its units taken in the release (`take`) when the
    /// activity is one.
    async fn place_taken(
        &self,
        message: &OwnedMessage,
        original: &OrderRecord,
        take: Option<&crate::stock::TakeId>,
    ) -> Result<Verdict, RunError> {
        let sale = original.sale();
        let (call, answer) = self.deduct(message, original).await?;
        let own = format!("-{}{}", nonce_of(&call.id), call.bucket.nonce_suffix());
        let Taken { order_id, round, accepted_at, slot, decided_now } = match self.taken(original, answer, &own).await?
        {
            Ok(taken) => taken,
            Err(refused) => return Ok(refused),
        };
        // A unit taken in another round than the record's is given back.
        if let Some(why) = round_over(original, round) {
            self.tools.stock.orders().void(sale, &call).await.map_err(RunError::unreadable)?;
            return Ok(Verdict::refused(why));
        }
        if decided_now && !self.tools.stock.orders().confirmed(sale, &call).await.map_err(RunError::unreadable)? {
            self.tools.stock.orders().void(sale, &call).await.map_err(RunError::unreadable)?;
            return Ok(Verdict::refused("the Redis replicas did not confirm the deduction; run again"));
        }
        if !self.keep_in_release(take, &order_id).await? {
            self.tools.stock.orders().void(sale, &call).await.map_err(RunError::unreadable)?;
            return Ok(Verdict::refused("the release's take was given back by its sweep; run again"));
        }
        // The link first: the order's events read it when the order
        // service writes the row, and a record the sweeper republishes
        // (this run died before its publish) keeps it too.
        sqlx::query!(
            "UPDATE dlq_redrives SET new_order_id = $2, placed_at = now() WHERE original_order_id = $1",
            original.order_id.as_str(),
            order_id.as_str()
        )
        .execute(&self.tools.db)
        .await
        .map_err(RunError::unreadable)?;
        let record = OrderRecord {
            redrive_of: Some(original.order_id.clone()),
            ..OrderRecord::new(order_id.clone(), sale, original.user_id, accepted_at)
                .in_round(round)
                .holding(original.quantity, slot)
        };
        self.publish(message, &record).await?;
        Ok(Verdict { outcome: Outcome::Placed, detail: format!("placed as {order_id}"), new_order: Some(order_id) })
    }

    /// What the redrive's deduction took for the buyer, or why it took
    /// nothing. An order whose id ends in `own` (the call's nonce and
    /// bucket) is the call's: asked again after its outcome expired, the
    /// deduction answers that the buyer holds it.
    async fn taken(
        &self,
        original: &OrderRecord,
        answer: Option<Deduction>,
        own: &str,
    ) -> Result<Result<Taken, Verdict>, RunError> {
        let refused = |why: &str| Ok(Err(Verdict::refused(why)));
        let held_own = match answer {
            Some(Deduction::Accepted { order_id, round, accepted_at, slot, .. }) => {
                return Ok(Ok(Taken { order_id, round, accepted_at, slot, decided_now: true }))
            }
            Some(Deduction::AlreadyPurchased { order_id: Some(held) }) if held.ends_with(own) => held,
            Some(Deduction::LimitReached { held, limit }) => {
                let latest = self.tools.stock.orders().user_order(original.sale(), original.user_id).await;
                match latest.map_err(RunError::unreadable)? {
                    Some(latest) if latest.ends_with(own) => latest,
                    _ => return refused(&format!("the buyer holds {held} of their {limit} units")),
                }
            }
            Some(Deduction::AlreadyPurchased { order_id }) => {
                return refused(&format!("the buyer holds order {}", order_id.as_deref().unwrap_or("?")))
            }
            Some(Deduction::SoldOut { available }) => return refused(&format!("sold out ({available} left)")),
            Some(Deduction::OverMaxPerOrder { max }) => {
                return refused(&format!(
                    "the order's {} units are above the round's {max} per order",
                    original.quantity
                ))
            }
            Some(Deduction::NotActive) => return refused("the sale is not open"),
            Some(Deduction::SaleNotFound) => return refused("the sale is not in Redis (finished or never warmed)"),
            Some(Deduction::Voided) | None => return refused("the deduction call was voided"),
            Some(Deduction::Warming) => return refused("a warm-up is replacing the sale's round"),
            Some(Deduction::AdmissionRequired) => return refused("the round admits through its waiting room"),
            Some(Deduction::OtherBucket) => return refused("the sale's buckets changed; run again"),
        };
        // An earlier asking took the units, longer ago than the call's
        // outcome is kept, and asked for its confirmation then.
        let order_id = OrderId::parse(&held_own).map_err(RunError::failed)?;
        let stock = &self.tools.stock;
        let state = stock.orders().order_state(&order_id).await.map_err(RunError::unreadable)?;
        let round = stock.books().snapshot(original.sale()).await.map_err(RunError::unreadable)?.round;
        let slot = stock.orders().held_slot(&order_id, original.user_id).await.map_err(RunError::unreadable)?;
        let accepted_at = state.map_or_else(crate::now_ms, |s| s.accepted_at);
        Ok(Ok(Taken { order_id, round, accepted_at, slot: slot.unwrap_or(0), decided_now: false }))
    }

    /// The deduction call of `original`'s redrive: the one a previous run
    /// used, else a new one, recorded before it is asked.
    async fn call_for(&self, original: &OrderRecord) -> Result<String, RunError> {
        let fresh = format!("redrive{:016x}", rand::random::<u64>());
        sqlx::query_scalar!(
            "WITH new AS (
                INSERT INTO dlq_redrives (original_order_id, call_id, run_id) VALUES ($1, $2, $3)
                ON CONFLICT (original_order_id) DO NOTHING RETURNING call_id
             )
             SELECT call_id AS \"call_id!\" FROM new
             UNION ALL SELECT call_id FROM dlq_redrives WHERE original_order_id = $1
             LIMIT 1",
            original.order_id.as_str(),
            fresh,
            self.audit.id
        )
        .fetch_one(&self.tools.db)
        .await
        .map_err(RunError::unreadable)
    }
}

/// Why `original` cannot be placed in `round`, if it cannot.
fn round_over(original: &OrderRecord, round: i64) -> Option<String> {
    original
        .round
        .filter(|r| *r != round)
        .map(|r| format!("its round {r} is over: the sale was warmed again (round {round})"))
}

/// The nonce of a redrive call's order id: derived from the call id, so an
/// order this call placed is recognised by its id alone.
fn nonce_of(call_id: &str) -> String {
    super::filter::stable_hash(call_id)
}

#[path = "redrive_publish.rs"]
mod publish;
#[path = "redrive_release.rs"]
mod release;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{SaleKey, UserId};

    #[test]
    fn a_redrive_call_names_its_nonce_and_a_record_of_another_round_is_refused() {
        assert_eq!(nonce_of("redrive00000000000000ab"), nonce_of("redrive00000000000000ab"));
        assert_ne!(nonce_of("redrive00000000000000ab"), nonce_of("redrive00000000000000ac"));
        let sale = SaleKey::from_raw(1, 2).unwrap();
        let order = OrderId::parse("1-2-3-ab").unwrap();
        let record = OrderRecord::new(order, sale, UserId::new(9).unwrap(), 5).in_round(2);
        assert!(round_over(&record, 2).is_none());
        assert!(round_over(&record, 3).unwrap().contains("round 2 is over"));
        let unnamed = OrderRecord { round: None, ..record };
        assert!(round_over(&unnamed, 3).is_none(), "a record naming no round is of the current one");
    }
}
