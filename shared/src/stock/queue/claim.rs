//! An admission token used for one order, once (`lua/queue_claim.lua`).

use super::super::{with_keys, Stock};
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
    /// Used by an order already, or claimed by one in flight.
    Used,
    /// Its token expired.
    Expired,
    /// Not this user's, not this round's, or unknown.
    Foreign,
}

impl Stock {
    /// Claims `ticket` of `sale` (round `round`) for an order of `user`.
    pub async fn claim_ticket(
        &self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<Claim, RedisCallError> {
        Ok(match self.ticket_step(sale, "claim", ticket, user, round).await? {
            1 => Claim::Claimed,
            0 => Claim::Used,
            -1 => Claim::Expired,
            _ => Claim::Foreign,
        })
    }

    /// The claimed ticket's order was accepted: the ticket is used.
    pub async fn spend_ticket(
        &self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<(), RedisCallError> {
        self.ticket_step(sale, "spend", ticket, user, round).await.map(drop)
    }

    /// The claimed ticket's order kept nothing: it may be used again until
    /// its token expires.
    pub async fn release_ticket(
        &self,
        sale: SaleKey,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<(), RedisCallError> {
        self.ticket_step(sale, "release", ticket, user, round).await.map(drop)
    }

    async fn ticket_step(
        &self,
        sale: SaleKey,
        step: &str,
        ticket: &str,
        user: UserId,
        round: i64,
    ) -> Result<i64, RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_CLAIM, &k.claim());
        invocation.arg(step).arg(ticket).arg(user.get()).arg(round);
        self.conn.invoke(&invocation).await
    }
}
