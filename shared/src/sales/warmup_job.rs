//! The warm-up job: all or nothing, whoever stops waiting for it.
//!
//! In order, under the sale's warm-up lock, each step recorded
//! ([`super::warmup_rows`]):
//!
//! 1. the round's buckets are placed (once: a repeat uses the same);
//! 2. every bucket of the new and the previous round is held still
//!    (`lua/freeze.lua`: with the in-flight check, so a refusal leaves
//!    every bucket and PostgreSQL as they were; from here no deduction is
//!    accepted until the bucket is loaded);
//! 3. the new round is committed in PostgreSQL — with nothing selling,
//!    no order of it is answered before PostgreSQL has its round;
//! 4. the round's waiting room is opened (or taken away: a round without
//!    one), then the buckets are loaded (bucket 0, whose list the edges read, last),
//!    each once for this warm-up (`lua/warmup.lua` answers a bucket loaded
//!    by it before without touching it: it may be selling);
//! 5. the replicas confirm every bucket (`redis.min_replica_acks`): a
//!    warm-up answered is never lost in a failover.
//!
//! A run that stops anywhere (its caller hung up: the edge runs it as a
//! task of its own; its process died; the replicas did not confirm) is
//! finished by running the same warm-up id again, from the step it
//! reached; the reconciliation names it until then.

use super::warmup_rows::{self, Step};
use super::{Admission, WarmupError, WarmupRequest, MAX_PAYMENT_WINDOW_SECONDS};
use crate::config::LockSettings;
use crate::db::{self, SaleRow};
use crate::ops::lock::LockClient;
use crate::stock::queue::RoomRound;
use crate::stock::{warmup::Round, Bucket, SaleLock, Stock, MAX_BUCKETS};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::time::Duration;

/// Runs the warm-up `request.id` (a new id when `None`) under the sale's
/// warm-up lock (`lock`: its lease and wait), each PostgreSQL call within
/// `deadline` (`database.call_deadline_ms`: a primary frozen or cut off
/// ends the run, its lock given back, and is answered as PostgreSQL's
/// failure), to its end, or finishes it
/// from where an earlier run stopped; returns the sale as PostgreSQL now
/// holds it. Asked again once done, answers the sale without a new round.
/// The clock judges a new warm-up only (`endsAt` and `drawAt` ahead): one
/// already accepted is finished, or answered, whatever the time now — a
/// draw cut short before its `drawAt` is drawn once it is finished, late.
#[tracing::instrument(name = "warmup", skip_all, fields(sale = %request.sale, warmup_id = request.id.as_deref().unwrap_or("")))]
pub async fn warmup(
    stock: &Stock,
    pool: &PgPool,
    deadline: Duration,
    locks: &LockClient,
    lock: &LockSettings,
    request: &WarmupRequest,
) -> Result<SaleRow, WarmupError> {
    validate(request)?;
    let accepted = match &request.id {
        Some(id) => db::within(deadline, warmup_rows::find(pool, id)).await?.is_some(),
        None => false,
    };
    if !accepted {
        validate_clock(request, Utc::now())?;
    }
    let id = request.id.clone().unwrap_or_else(|| format!("w-{:016x}", rand::random::<u64>()));
    let sale = request.sale;
    let lock_name = stock.keys().sale_lock(sale, SaleLock::Warmup);
    let Some(guard) = locks.acquire_with_watchdog(&lock_name, lock.lease(), lock.wait(), 0).await? else {
        return Err(WarmupError::Busy(sale));
    };
    let result = run(stock, (pool, deadline), &id, request).await;
    if let Err(error) = &result {
        // Recorded for the reconciliation (best effort: it may be the
        // database that failed).
        let refused = matches!(error, WarmupError::InFlight(_)).then_some(Step::Refused);
        let why = error.to_string();
        let ended = warmup_rows::ended(pool, &id, refused, Some(&why));
        if let Err(not_recorded) = db::within(deadline, ended).await {
            tracing::warn!(warmup = %id, %not_recorded, "a warm-up's stop not recorded");
        }
    }
    guard.release().await;
    result
}

/// What a warm-up must be whenever it is asked.
fn validate(request: &WarmupRequest) -> Result<(), WarmupError> {
    if request.stock < 0 || request.stock > 1_000_000_000 {
        return Err(WarmupError::Invalid(format!("stock must be between 0 and 1000000000, got {}", request.stock)));
    }
    if !(1..=MAX_PAYMENT_WINDOW_SECONDS).contains(&request.payment_window_seconds) {
        return Err(WarmupError::Invalid(format!(
            "paymentWindowSeconds must be between 1 and {MAX_PAYMENT_WINDOW_SECONDS}, got {}",
            request.payment_window_seconds
        )));
    }
    if !(1..=MAX_BUCKETS).contains(&request.buckets) {
        return Err(WarmupError::Invalid(format!(
            "buckets must be between 1 and {MAX_BUCKETS}, got {}",
            request.buckets
        )));
    }
    if let (Some(starts), Some(ends)) = (request.starts_at, request.ends_at) {
        if starts >= ends {
            return Err(WarmupError::Invalid("startsAt must be before endsAt".into()));
        }
    }
    if let Some(wrong) = request.limits.invalid() {
        return Err(WarmupError::Invalid(wrong));
    }
    if let Some(wrong) = request.admission.as_ref().and_then(Admission::invalid) {
        return Err(WarmupError::Invalid(wrong));
    }
    if request.admission.is_some() && request.draw.is_some() {
        return Err(WarmupError::Invalid("a sale has a waiting room or a draw, not both".into()));
    }
    if let Some(wrong) = request.draw.as_ref().and_then(|d| d.invalid(request.starts_at, request.ends_at)) {
        return Err(WarmupError::Invalid(wrong));
    }
    if let Some(id) = &request.id {
        let plain = id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if id.is_empty() || id.len() > 64 || !plain {
            return Err(WarmupError::Invalid("warmupId must be 1 to 64 letters, digits, '-' or '_'".into()));
        }
    }
    Ok(())
}

/// What a new warm-up must be at `now`: a sale that is not over yet, a
/// draw not yet due. Not asked of a warm-up already accepted: its clock
/// ran on while it was cut short, and it is finished all the same.
fn validate_clock(request: &WarmupRequest, now: DateTime<Utc>) -> Result<(), WarmupError> {
    // Over before it could sell: nothing a new warm-up could honour.
    if let Some(ends) = request.ends_at.filter(|ends| *ends <= now) {
        return Err(WarmupError::Invalid(format!("endsAt must be in the future, got {}", ends.to_rfc3339())));
    }
    // A draw already due would be made at once, over whatever entered.
    if let Some(draw) = request.draw.as_ref().filter(|d| d.draw_at <= now) {
        return Err(WarmupError::Invalid(format!(
            "draw.drawAt must be in the future, got {}",
            draw.draw_at.to_rfc3339()
        )));
    }
    Ok(())
}

/// Holds `every` bucket of the sale still (none with orders in flight,
/// unless forced) and commits the new round in PostgreSQL, recorded as the
/// warm-up's step: the round.
async fn commit_round(
    stock: &Stock,
    (pool, deadline): (&PgPool, Duration),
    id: &str,
    request: &WarmupRequest,
    every: &[Bucket],
) -> Result<i32, WarmupError> {
    let sale = request.sale;
    // The previous round's draw outcomes not yet on their topic would go
    // with its keys: they are in flight too.
    let unpublished = stock.draws().draw_state(sale).await?.is_some_and(|d| d.events_unpublished > 0);
    if (unpublished && !request.force) || !stock.warm_ups().freeze(sale, every, request.force).await? {
        return Err(WarmupError::InFlight(sale));
    }
    let mut tx = db::within(deadline, pool.begin()).await?;
    let window = request.payment_window_seconds as i32;
    let (starts, ends) = (request.starts_at, request.ends_at);
    let row = db::within(deadline, db::upsert_sale(&mut tx, sale, request.stock, starts, ends, window)).await?;
    db::within(deadline, warmup_rows::committed(&mut tx, id, row.round)).await?;
    db::within(deadline, tx.commit()).await?;
    Ok(row.round)
}

/// The steps, from the one the warm-up reached.
async fn run(
    stock: &Stock,
    (pool, deadline): (&PgPool, Duration),
    id: &str,
    request: &WarmupRequest,
) -> Result<SaleRow, WarmupError> {
    let sale = request.sale;
    let job = db::within(deadline, warmup_rows::begin(pool, id, request))
        .await?
        .ok_or_else(|| WarmupError::IdReused(id.to_owned()))?;
    if job.step == Step::Done {
        return db::within(deadline, db::find_sale(pool, sale)).await?.ok_or(WarmupError::NotFound(sale));
    }
    if job.step == Step::Closed {
        return Err(WarmupError::Invalid(format!(
            "warm-up {id} was replaced by a close of the sale before it finished; warm up with a new id"
        )));
    }
    let (buckets, retired) = match (&job.buckets, job.step) {
        (Some(buckets), Step::Started | Step::Committed) => (buckets.clone(), job.retired.clone()),
        _ => {
            let buckets = stock.bucket_moves().place_buckets(sale, request.buckets).await?;
            let previous = stock.bucket_moves().directory(sale).await?.buckets;
            let retired: Vec<Bucket> = previous.into_iter().filter(|b| !buckets.contains(b)).collect();
            db::within(deadline, warmup_rows::placed(pool, id, &buckets, &retired)).await?;
            (buckets, retired)
        }
    };
    let mut every = buckets.clone();
    every.extend(&retired);
    let committed_round = match (job.step, job.round) {
        (Step::Committed, Some(round)) => round,
        _ => commit_round(stock, (pool, deadline), id, request, &every).await?,
    };
    let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis()).unwrap_or(0);
    let round = Round {
        stock: request.stock,
        starts_ms: ms(request.starts_at),
        ends_ms: ms(request.ends_at),
        round: i64::from(committed_round),
        expire_at_ms: request
            .ends_at
            .map(|end| stock.sale_keys_expire_at(end.timestamp_millis(), request.payment_window_seconds))
            .unwrap_or(0),
        force: true,
        admission: request.admission.is_some() || request.draw.is_some(),
        limits: request.limits,
    };
    // The room before the stock: no unit of a round with a room is sold
    // without an admission.
    open_room(stock, (pool, deadline), request, &round).await?;
    stock.warm_ups().load_round(sale, &buckets, &retired, round, id).await?;
    for bucket in &buckets {
        if !stock.warm_ups().round_confirmed(sale, *bucket).await? {
            return Err(WarmupError::NotReplicated(id.to_owned()));
        }
    }
    db::within(deadline, warmup_rows::ended(pool, id, Some(Step::Done), None)).await?;
    tracing::info!(warmup = %id, %sale, round = committed_round, "warm-up done");
    db::within(deadline, db::find_sale(pool, sale)).await?.ok_or(WarmupError::NotFound(sale))
}

/// Opens the round's room, if it has one (a draw's starts at the draw: its
/// pre-queue is the entries), or takes an older round's away. A draw's
/// seed is kept before its room commits to it (a room open for this round
/// already keeps its own: the row is unused).
async fn open_room(
    stock: &Stock,
    (pool, deadline): (&PgPool, Duration),
    request: &WarmupRequest,
    round: &Round,
) -> Result<(), WarmupError> {
    let sale = request.sale;
    let room = match (&request.admission, &request.draw) {
        (Some(admission), _) => Some((admission.room(), round.starts_ms)),
        (None, Some(draw)) => Some((draw.room(), draw.draw_ms())),
        (None, None) => None,
    };
    let Some((settings, starts_ms)) = room else {
        return Ok(stock.waiting_room().room_off(sale).await?);
    };
    let commitment = match settings.draw {
        true => Some(db::within(deadline, crate::draw::seed::keep(pool, sale)).await?),
        false => None,
    };
    let room = RoomRound {
        round: round.round,
        starts_ms,
        ends_ms: round.ends_ms,
        expire_at_ms: round.expire_at_ms,
        payment_window_ms: request.payment_window_seconds * 1_000,
    };
    stock.waiting_room().open_room(sale, room, &settings, commitment.as_deref()).await?;
    Ok(())
}
