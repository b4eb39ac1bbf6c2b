//! An admission token used for one order, once (`lua/queue_claim.lua`).
//! Every step is confirmed by the replicas as a deduction is (`WAIT` behind
//! it): a claim, spend or release a failover lost would bring a ticket
//! back to a state its order has left.

use super::super::with_keys;
use crate::domain::{SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static QUEUE_CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/queue_claim.lua")));

/// What claiming a ticket for an order found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Claimed for this order: no other order may use it.
    Claimed,
    /// Claimed, but the replicas did not confirm it in time: the caller
    /// releases it and keeps nothing.
    Unconfirmed,
    /// Used by an order already, or claimed by one in flight.
    Used,
    /// Its token expired.
    Expired,
    /// Not this user's, not this round's, or unknown.
    Foreign,
}

impl crate::stock::WaitingRoom<'_> {
    /// Claims `ticket` of `sale` (round `round`) for an order of `user`.
    pub async fn claim_ticket(
        self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<Claim, RedisCallError> {
        use crate::stock::protocol::queue_claim::*;
        Ok(match self.ticket_step(sale, "claim", ticket, user, round).await? {
            (CLAIMED, true) => Claim::Claimed,
            (CLAIMED, false) => Claim::Unconfirmed,
            (USED, _) => Claim::Used,
            (EXPIRED, _) => Claim::Expired,
            _ => Claim::Foreign,
        })
    }

    /// Settles a ticket claimed by an order that never settled it
    /// ([`super::Admitted::stale`]) by what the sale says: used if its user
    /// holds an order in the round (the one it placed), else released —
    /// past its token's expiry, that is expired, and its place goes on.
    /// Answers whether it was taken as used.
    pub async fn settle_stale_claim(
        self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<bool, RedisCallError> {
        let used = self.orders().user_order(sale, user).await?.is_some();
        self.settle_ticket(sale, ticket, user, round, used).await?;
        Ok(used)
    }

    /// The claimed ticket's order is decided: spent when it was accepted
    /// (`used`), else released — it may be used again until its token
    /// expires. Asked again while the replicas do not confirm it (the
    /// script does nothing the second time, and the `WAIT` behind it
    /// covers the first write too); answers whether they did.
    pub async fn settle_ticket(
        self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
        used: bool,
    ) -> Result<bool, RedisCallError> {
        let step = if used { "spend" } else { "release" };
        for _ in 0..SETTLE_TRIES {
            if self.ticket_step(sale, step, ticket, user, round).await?.1 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One step, and whether the replicas asked for confirmed it.
    async fn ticket_step(
        self,
        sale: SaleKey,
        step: &str,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<(i64, bool), RedisCallError> {
        let k = self.keys.queue(sale);
        let keys = k.claim();
        let (user, round) = (user.get().to_string(), round.to_string());
        let args = [step, ticket, &user, &round];
        let (replicas, timeout) = self.replica_acks;
        if replicas == 0 {
            let mut invocation = with_keys(&QUEUE_CLAIM, &keys);
            invocation.arg(&args[..]);
            return Ok((self.conn.invoke(&invocation).await?, true));
        }
        let keys = keys.map(String::as_str);
        let (answer, acks): (i64, u32) =
            self.conn.script_then_wait(&QUEUE_CLAIM, &keys, &args, replicas, timeout).await?;
        Ok((answer, acks >= replicas))
    }
}

/// How many times a spend or release is asked for before it is left to the
/// admission passes unconfirmed.
const SETTLE_TRIES: usize = 3;
