//! Voiding a deduction call (`lua/void.lua`): what the edge does with a
//! call whose outcome it could not hear, or whose orders the replicas did
//! not confirm, so its buyers may be told the truth.

use super::deduct::DeductCall;
use super::with_keys;
use crate::domain::{OrderId, SaleKey};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static VOID: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/void.lua")));

/// What voiding a call did to one of its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Voided {
    /// Its order was undone: units back, buyer and place free, FAILED
    /// `VOIDED`.
    Undone,
    /// It holds nothing (the call never ran or did not accept it).
    Nothing,
    /// Its order stands: past its publish deadline (the sweeper publishes
    /// its record again) or written since.
    Stands { order_id: OrderId, round: i64, accepted_at: i64, slot: u32 },
}

impl crate::stock::Orders<'_> {
    /// Makes sure `call` can take nothing more back (`lua/void.lua`): if it
    /// ran, every order it accepted that is still QUEUED and before its
    /// publish deadline is undone (unit back, buyer free, FAILED `VOIDED`);
    /// if it has not run, it never will deduct. One answer per request:
    /// undone, nothing held, or the order that stands (past its deadline,
    /// the sweeper's; or written since).
    #[tracing::instrument(name = "void", skip_all, fields(%sale, call = %call.id))]
    pub async fn void(self, sale: SaleKey, call: &DeductCall) -> Result<Vec<Voided>, RedisCallError> {
        let k = self.keys.bucket(sale, call.bucket);
        let call_key = k.call(&call.id);
        let mut invocation =
            with_keys(&VOID, &[&call_key, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.meta, &k.trace, &k.held]);
        invocation
            .arg(self.call_outcome_ms)
            .arg(crate::domain::FailReason::Voided.code())
            .arg(call.publish_deadline.as_millis() as u64);
        for request in &call.requests {
            invocation.arg(request.user.get()).arg(call.nonce(request)).arg(request.quantity);
        }
        let answers: Vec<Vec<redis::Value>> = self.conn.invoke(&invocation).await?;
        if answers.len() != call.requests.len() {
            return Err(RedisCallError::Unexpected {
                script: "void.lua",
                answer: format!("{} answers to {} requests", answers.len(), call.requests.len()),
            });
        }
        answers.iter().map(|answer| parse_voided(answer)).collect()
    }
}

fn parse_voided(answer: &[redis::Value]) -> Result<Voided, RedisCallError> {
    let unexpected = || RedisCallError::Unexpected { script: "void.lua", answer: format!("{answer:?}") };
    let int = |i: usize| match answer.get(i) {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    };
    use super::protocol::void::*;
    match int(0).ok_or_else(unexpected)? {
        UNDONE => Ok(Voided::Undone),
        NOTHING => Ok(Voided::Nothing),
        STANDS => {
            let order_id = match answer.get(1) {
                Some(redis::Value::BulkString(bytes)) => {
                    std::str::from_utf8(bytes).ok().and_then(|id| OrderId::parse(id).ok())
                }
                _ => None,
            }
            .ok_or_else(unexpected)?;
            Ok(Voided::Stands {
                order_id,
                accepted_at: int(2).ok_or_else(unexpected)?,
                round: int(3).unwrap_or(0),
                slot: int(4).and_then(|slot| u32::try_from(slot).ok()).unwrap_or(0),
            })
        }
        _ => Err(unexpected()),
    }
}
