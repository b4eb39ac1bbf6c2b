//! The flash-sale decision (`lua/deduct.lua`).
//!
//! Every call carries an id, and the script keeps the call's outcome under
//! it for a while (`redis.call_outcome_ms`): a caller that did not hear the
//! answer (a timeout, a dropped connection: the script may have run) asks
//! again with the same [`DeductCall`] and hears the outcome instead of a
//! second deduction. A caller that cannot hear it at all voids the call
//! ([`Orders::void`](crate::stock::Orders::void), `lua/void.lua`): afterwards it holds nothing, so its
//! requests may be answered "nothing kept" truthfully.

use super::keys::Bucket;
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

impl crate::stock::Orders<'_> {
    /// The flash-sale decision (`lua/deduct.lua`) of `quantity` units, in
    /// the user's home bucket. `publish_deadline` is how long the caller
    /// may take to learn whether the order's record is in the log: the
    /// reservation is not swept before it has passed. (No borrowing: the
    /// edge's path does.)
    pub async fn deduct(
        self,
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
        let home = self.bucket_moves().directory(sale).await?.home(user);
        let call = DeductCall::new(vec![request], publish_deadline).in_bucket(home);
        let mut answers = self.deduct_batch(sale, &call).await?;
        answers.pop().ok_or(RedisCallError::Unexpected { script: "deduct.lua", answer: "no answer".into() })
    }

    /// The decisions of several requests of one sale in one script call,
    /// each exactly as [`Orders::deduct`](crate::stock::Orders::deduct) would have decided it alone, in
    /// the order given: one answer per request. Asked again with the same
    /// call, the same answers.
    #[tracing::instrument(name = "deduct_batch", level = "debug", skip_all, fields(%sale, call = %call.id, requests = call.requests.len()))]
    pub async fn deduct_batch(self, sale: SaleKey, call: &DeductCall) -> Result<Vec<Deduction>, RedisCallError> {
        let k = self.keys.bucket_kept(sale, call.bucket);
        let call_key = k.call(&call.id);
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(DEDUCT.get_hash()).arg(9);
        for key in [&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.seq, &call_key, &k.trace, &k.held] {
            evalsha.arg(key.as_str());
        }
        evalsha
            .arg(sale.activity.get())
            .arg(sale.sku.get())
            .arg(call.publish_deadline.as_millis() as u64)
            .arg(&call.id)
            .arg(self.call_outcome_ms);
        let suffix = call.bucket.nonce_suffix();
        for request in &call.requests {
            evalsha.arg(request.user.get());
            if suffix.is_empty() {
                evalsha.arg(&request.nonce);
            } else {
                evalsha.arg(format!("{}{suffix}", request.nonce));
            }
            evalsha
                .arg(&request.request_id)
                .arg(&request.traceparent)
                .arg(if request.admitted { "1" } else { "0" })
                .arg(request.quantity);
        }
        let reply: String = self.conn.evalsha(&DEDUCT, &evalsha, &k.meta).await?;
        parse_deductions(&reply, call.requests.len())
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
    pub async fn confirmed(self, sale: SaleKey, call: &DeductCall) -> Result<bool, RedisCallError> {
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

/// The script's one-string answer (`lua/deduct.lua`: the round, then an
/// entry per request, `code[:field...]`), one deduction per request; `n`
/// requests were asked.
pub(super) fn parse_deductions(reply: &str, n: usize) -> Result<Vec<Deduction>, RedisCallError> {
    let unexpected = || RedisCallError::Unexpected { script: "deduct.lua", answer: reply.chars().take(512).collect() };
    let mut entries = reply.split(',');
    let round: i64 = entries.next().and_then(|r| r.parse().ok()).ok_or_else(unexpected)?;
    let decided: Vec<Deduction> =
        entries.map(|entry| parse_entry(entry, round)).collect::<Option<_>>().ok_or_else(unexpected)?;
    if decided.len() != n {
        return Err(RedisCallError::Unexpected {
            script: "deduct.lua",
            answer: format!("{} answers to {n} requests", decided.len()),
        });
    }
    Ok(decided)
}

/// One request's entry of the answer (`None`: not one the script writes).
fn parse_entry(entry: &str, round: i64) -> Option<Deduction> {
    let mut fields = entry.split(':');
    let code: i64 = fields.next()?.parse().ok()?;
    let mut int = || fields.next()?.parse::<i64>().ok();
    use super::protocol::deduct::*;
    Some(match code {
        ACCEPTED => {
            let mut fields = entry.split(':').skip(1);
            let order_id = OrderId::parse(fields.next()?).ok()?;
            let slot = fields.next()?.parse().ok()?;
            let accepted_at = fields.next()?.parse().ok()?;
            let stock_left = fields.next().and_then(|n| n.parse().ok());
            Deduction::Accepted { order_id, round, stock_left, accepted_at, slot }
        }
        SALE_NOT_FOUND => Deduction::SaleNotFound,
        SALE_NOT_ACTIVE => Deduction::NotActive,
        ALREADY_PURCHASED => {
            let held = entry.split(':').nth(1).filter(|id| !id.is_empty());
            Deduction::AlreadyPurchased { order_id: held.map(str::to_owned) }
        }
        SOLD_OUT => Deduction::SoldOut { available: int().unwrap_or(0) },
        LIMIT_REACHED => Deduction::LimitReached { held: int()?, limit: int()? },
        OVER_MAX_PER_ORDER => Deduction::OverMaxPerOrder { max: int()? },
        VOIDED => Deduction::Voided,
        OTHER_BUCKET => Deduction::OtherBucket,
        WARMING => Deduction::Warming,
        ADMISSION_REQUIRED => Deduction::AdmissionRequired,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_the_script_writes_is_read() {
        let reply = "7,1:9-1-12-a1b2c3d4e5f60718:1:1733512345678:3,-3:9-1-3-00000000000000aa,-3:,-4:2,-9:2:3,-10:2,-5,-6,-7,-8,-2";
        let decided = parse_deductions(reply, 11).unwrap();
        let order_id = OrderId::parse("9-1-12-a1b2c3d4e5f60718").unwrap();
        let expected = [
            Deduction::Accepted { order_id, round: 7, stock_left: Some(3), accepted_at: 1733512345678, slot: 1 },
            Deduction::AlreadyPurchased { order_id: Some("9-1-3-00000000000000aa".into()) },
            Deduction::AlreadyPurchased { order_id: None },
            Deduction::SoldOut { available: 2 },
            Deduction::LimitReached { held: 2, limit: 3 },
            Deduction::OverMaxPerOrder { max: 2 },
            Deduction::Voided,
            Deduction::OtherBucket,
            Deduction::Warming,
            Deduction::AdmissionRequired,
            Deduction::NotActive,
        ];
        assert_eq!(decided, expected);
        assert_eq!(parse_deductions("0,-1", 1).unwrap(), [Deduction::SaleNotFound]);
    }

    #[test]
    fn an_answer_that_is_not_the_scripts_is_an_error() {
        for (reply, n, why) in [
            ("7,-4:2", 2, "fewer entries than requests"),
            ("x,-4:2", 1, "no round"),
            ("7,-99", 1, "an unknown code"),
            ("7,1:not-an-id:0:1", 1, "an order id that is none"),
            ("7,-9:2", 1, "a field missing"),
        ] {
            assert!(parse_deductions(reply, n).is_err(), "{why}");
        }
    }
}
