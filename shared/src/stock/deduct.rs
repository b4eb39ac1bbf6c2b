//! The flash-sale decision (`lua/deduct.lua`).
//!
//! Every call carries an id, and the script keeps the call's outcome under
//! it for a while (`redis.call_outcome_ms`): a caller that did not hear the
//! answer (a timeout, a dropped connection: the script may have run) asks
//! again with the same [`DeductCall`] and hears the outcome instead of a
//! second deduction. A caller that cannot hear it at all voids the call
//! ([`Stock::void`], `lua/void.lua`): afterwards it holds nothing, so its
//! requests may be answered "nothing kept" truthfully.

use super::keys::Bucket;
use super::{with_keys, Stock};
use crate::domain::{OrderId, SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/deduct.lua")));

/// The answer of one deduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deduction {
    /// The units are the user's, held in their place `slot`; the order id
    /// is new; `accepted_at` is Redis's clock (ms) at the deduction;
    /// `stock_left` the bucket's units after it, when the answer says (an
    /// order that stood through its call's void does not).
    Accepted { order_id: OrderId, round: i64, stock_left: Option<i64>, accepted_at: i64, slot: u32 },
    /// No such sale in Redis (never warmed, expired, or Redis lost it).
    SaleNotFound,
    /// Outside the sale window.
    NotActive,
    /// The user already holds this order.
    AlreadyPurchased { order_id: Option<String> },
    /// Fewer units left than asked: `available` (nothing kept).
    SoldOut { available: i64 },
    /// The user's units held plus the quantity asked would pass the round's
    /// limit per user (nothing kept).
    LimitReached { held: i64, limit: i64 },
    /// The quantity asked is above the round's most per order (nothing
    /// kept).
    OverMaxPerOrder { max: i64 },
    /// The call was voided before it ran (or its unit given back since):
    /// nothing is kept.
    Voided,
    /// The user's home is another bucket of the sale (the caller read
    /// another round's buckets): nothing is kept; ask their home.
    OtherBucket,
    /// A warm-up is replacing the round: nothing is kept; ask again.
    Warming,
    /// The round sells only with an admission from its waiting room, and
    /// the request has none: nothing is kept.
    AdmissionRequired,
}

/// One request of a deduction call.
#[derive(Debug, Clone)]
pub struct DeductRequest {
    pub user: UserId,
    /// 64 random bits, hex: order ids stay unique whatever Redis forgets.
    pub nonce: String,
    /// The HTTP request's id and W3C trace context, kept with the
    /// reservation so a record published again carries them.
    pub request_id: String,
    pub traceparent: String,
    /// The edge checked the buyer's admission token and claimed it (a
    /// round with a waiting room sells to no request without).
    pub admitted: bool,
    /// The units asked for: all or none.
    pub quantity: u32,
}

/// Most requests one deduction call decides. `lua/deduct.lua` passes two
/// values per accepted request to one command (`unpack`), and Redis's Lua takes at
/// most 8,000 results from an `unpack`: 4,000 requests would fail every
/// such call. The edge refuses a `deduct_batch_max` above this at start.
pub const MAX_DEDUCT_BATCH: usize = 3_000;

/// One deduction call: the same id, asked again, answers what the first
/// asking decided.
#[derive(Debug, Clone)]
pub struct DeductCall {
    /// Unique per call (random).
    pub id: String,
    /// The requests, decided in this order.
    pub requests: Vec<DeductRequest>,
    /// How long the caller may take to learn whether an accepted order's
    /// record is in the log: the reservation is not swept before.
    pub publish_deadline: Duration,
    /// The bucket of the sale it deducts from (its order ids name it).
    pub bucket: Bucket,
}

impl DeductCall {
    /// A call with a fresh id.
    pub fn new(requests: Vec<DeductRequest>, publish_deadline: Duration) -> Self {
        Self { id: format!("{:016x}", rand::random::<u64>()), requests, publish_deadline, bucket: Bucket::FIRST }
    }

    /// The same call, deducting from `bucket` of the sale.
    pub fn in_bucket(self, bucket: Bucket) -> Self {
        Self { bucket, ..self }
    }

    /// A request's nonce as the script takes it: with the mark of the
    /// call's bucket, so the order id names it.
    pub(super) fn nonce(&self, request: &DeductRequest) -> String {
        format!("{}{}", request.nonce, self.bucket.nonce_suffix())
    }
}

impl Stock {
    /// The flash-sale decision (`lua/deduct.lua`) of `quantity` units, in
    /// the user's home bucket. `publish_deadline` is how long the caller
    /// may take to learn whether the order's record is in the log: the
    /// reservation is not swept before it has passed. (No borrowing: the
    /// edge's path does.)
    pub async fn deduct(
        &self,
        sale: SaleKey,
        user: UserId,
        quantity: u32,
        nonce: &str,
        publish_deadline: Duration,
    ) -> Result<Deduction, RedisCallError> {
        let request = DeductRequest {
            user,
            nonce: nonce.to_owned(),
            request_id: String::new(),
            traceparent: String::new(),
            admitted: false,
            quantity,
        };
        let home = self.directory(sale).await?.home(user);
        let call = DeductCall::new(vec![request], publish_deadline).in_bucket(home);
        let mut answers = self.deduct_batch(sale, &call).await?;
        answers.pop().ok_or(RedisCallError::Unexpected { script: "deduct.lua", answer: "no answer".into() })
    }

    /// The decisions of several requests of one sale in one script call,
    /// each exactly as [`Stock::deduct`] would have decided it alone, in
    /// the order given: one answer per request. Asked again with the same
    /// call, the same answers.
    #[tracing::instrument(name = "deduct_batch", level = "debug", skip_all, fields(%sale, call = %call.id, requests = call.requests.len()))]
    pub async fn deduct_batch(&self, sale: SaleKey, call: &DeductCall) -> Result<Vec<Deduction>, RedisCallError> {
        let k = self.keys.bucket(sale, call.bucket);
        let call_key = k.call(&call.id);
        let mut invocation = with_keys(
            &DEDUCT,
            &[&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.seq, &call_key, &k.trace, &k.held],
        );
        invocation
            .arg(sale.activity.get())
            .arg(sale.sku.get())
            .arg(call.publish_deadline.as_millis() as u64)
            .arg(&call.id)
            .arg(self.call_outcome_ms);
        for request in &call.requests {
            invocation
                .arg(request.user.get())
                .arg(call.nonce(request))
                .arg(&request.request_id)
                .arg(&request.traceparent)
                .arg(if request.admitted { "1" } else { "0" })
                .arg(request.quantity);
        }
        let answers: Vec<Vec<redis::Value>> = self.conn.invoke(&invocation).await?;
        if answers.len() != call.requests.len() {
            return Err(RedisCallError::Unexpected {
                script: "deduct.lua",
                answer: format!("{} answers to {} requests", answers.len(), call.requests.len()),
            });
        }
        answers.iter().map(|answer| parse_deduction(answer)).collect()
    }

    /// Whether what `call` decided — its deduction, or its void — reached the
    /// replicas a deduction must be confirmed by (always, when none are
    /// asked for). The call's outcome key is written again (`PEXPIRE`) with
    /// `WAIT` behind it in one pipeline, on the primary holding the sale:
    /// the write makes `WAIT` cover every earlier write of that primary (the
    /// call's included) whatever connection it goes out on, and it finds no
    /// outcome where the primary has none — after a failover to a replica
    /// that never had the call — which is "not confirmed".
    #[tracing::instrument(name = "deduct.confirmed", level = "debug", skip_all, fields(call = %call.id))]
    pub async fn confirmed(&self, sale: SaleKey, call: &DeductCall) -> Result<bool, RedisCallError> {
        let (replicas, timeout) = self.replica_acks;
        if replicas == 0 {
            return Ok(true);
        }
        let mut touch = redis::cmd("PEXPIRE");
        touch.arg(self.keys.bucket(sale, call.bucket).call(&call.id)).arg(self.call_outcome_ms);
        let (found, confirmed): (bool, u32) = self.conn.write_then_wait(touch, replicas, timeout).await?;
        Ok(found && confirmed >= replicas)
    }
}

fn parse_deduction(answer: &[redis::Value]) -> Result<Deduction, RedisCallError> {
    let unexpected = || RedisCallError::Unexpected { script: "deduct.lua", answer: format!("{answer:?}") };
    let int = |i: usize| match answer.get(i) {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    };
    let text = |i: usize| match answer.get(i) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8(bytes.clone()).ok(),
        Some(redis::Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    use super::protocol::deduct::*;
    match int(0).ok_or_else(unexpected)? {
        ACCEPTED => {
            let order_id = text(2).and_then(|id| OrderId::parse(&id).ok()).ok_or_else(unexpected)?;
            Ok(Deduction::Accepted {
                order_id,
                round: int(1).unwrap_or(0),
                stock_left: int(3),
                accepted_at: int(4).ok_or_else(unexpected)?,
                slot: int(5).and_then(|slot| u32::try_from(slot).ok()).ok_or_else(unexpected)?,
            })
        }
        SALE_NOT_FOUND => Ok(Deduction::SaleNotFound),
        SALE_NOT_ACTIVE => Ok(Deduction::NotActive),
        ALREADY_PURCHASED => Ok(Deduction::AlreadyPurchased { order_id: text(2) }),
        SOLD_OUT => Ok(Deduction::SoldOut { available: int(3).unwrap_or(0) }),
        LIMIT_REACHED => {
            Ok(Deduction::LimitReached { held: int(3).ok_or_else(unexpected)?, limit: int(4).ok_or_else(unexpected)? })
        }
        OVER_MAX_PER_ORDER => Ok(Deduction::OverMaxPerOrder { max: int(3).ok_or_else(unexpected)? }),
        VOIDED => Ok(Deduction::Voided),
        OTHER_BUCKET => Ok(Deduction::OtherBucket),
        WARMING => Ok(Deduction::Warming),
        ADMISSION_REQUIRED => Ok(Deduction::AdmissionRequired),
        _ => Err(unexpected()),
    }
}
