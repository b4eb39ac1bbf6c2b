//! Units moved between two buckets of a sale (`lua/lend.lua`, then
//! `lua/receive.lua`): two slots, so two scripts, tied by a transfer id.
//!
//! The lender logs the transfer under its id in its own slot; the receiver
//! keeps the ids it took in. Either call asked again with the same id does
//! nothing more, so a caller that did not hear an answer asks again, and
//! whoever finds a logged transfer the receiver never took in (the caller
//! died between the two) completes it: [`Stock::transfers_lent`], then
//! [`Stock::receive`] and [`Stock::forget_transfer`]. Units are never made
//! or lost on the way: while a transfer is logged and not received, the
//! lender's `lent` counter is ahead of the receivers' `borrowed` by exactly
//! its units.

use super::keys::Bucket;
use super::{with_keys, Stock};
use crate::domain::SaleKey;
use crate::redis_conn::RedisCallError;
use redis::{AsyncCommands, Script};
use std::sync::LazyLock;

static LEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/lend.lua")));
static RECEIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/receive.lua")));

/// One move of units from one bucket of a sale to another, in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Unique per transfer (random).
    pub id: String,
    pub from: Bucket,
    pub to: Bucket,
    /// The round both buckets hold.
    pub round: i64,
}

impl Transfer {
    /// A transfer with a fresh id.
    pub fn new(from: Bucket, to: Bucket, round: i64) -> Self {
        Self { id: format!("{:016x}", rand::random::<u64>()), from, to, round }
    }
}

/// What the lender did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lent {
    /// These units left the lender for the receiver.
    Units(i64),
    /// The lender had none left.
    Nothing,
    /// The lender had none left, but units it lent are on their way to
    /// another bucket: the sale is not sold out until they arrive.
    InTransit,
    /// The lender holds another round (or none): nothing moved.
    OtherRound,
}

/// What the receiver did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// The units were added now.
    Now,
    /// They had been added before (asked again).
    Before,
    /// The receiver holds another round now: the units went with the round
    /// they were lent in.
    OtherRound,
}

/// A transfer the lender logged, as [`Stock::transfers_lent`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedTransfer {
    pub transfer: Transfer,
    pub units: i64,
    /// When it was lent (Redis clock, ms).
    pub at_ms: i64,
}

impl Stock {
    /// The first half of `transfer` (`lua/lend.lua`): half the lender's
    /// units, rounded up, leave it, logged under the transfer's id.
    pub async fn lend(&self, sale: SaleKey, transfer: &Transfer) -> Result<Lent, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        let mut invocation = with_keys(&LEND, &[&k.meta, &k.stock, &k.lent]);
        invocation.arg(&transfer.id).arg(transfer.to.0).arg(transfer.round);
        match self.conn.invoke::<i64>(&invocation).await? {
            -2 => Ok(Lent::InTransit),
            -1 => Ok(Lent::OtherRound),
            0 => Ok(Lent::Nothing),
            units if units > 0 => Ok(Lent::Units(units)),
            other => Err(RedisCallError::Unexpected { script: "lend.lua", answer: other.to_string() }),
        }
    }

    /// The second half (`lua/receive.lua`): the receiver adds the `units`
    /// lent, once per transfer.
    pub async fn receive(&self, sale: SaleKey, transfer: &Transfer, units: i64) -> Result<Received, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.to);
        let mut invocation = with_keys(&RECEIVE, &[&k.meta, &k.stock, &k.received]);
        invocation.arg(&transfer.id).arg(units).arg(transfer.round);
        match self.conn.invoke::<i64>(&invocation).await? {
            1 => Ok(Received::Now),
            0 => Ok(Received::Before),
            -1 => Ok(Received::OtherRound),
            other => Err(RedisCallError::Unexpected { script: "receive.lua", answer: other.to_string() }),
        }
    }

    /// Drops a transfer from its lender's log once the receiver has it.
    pub async fn forget_transfer(&self, sale: SaleKey, transfer: &Transfer) -> Result<(), RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hdel::<_, _, ()>(&k.lent, &transfer.id)).await
    }

    /// The transfers a bucket logged and has not forgotten: each either
    /// received already or still to be.
    pub async fn transfers_lent(&self, sale: SaleKey, from: Bucket) -> Result<Vec<LoggedTransfer>, RedisCallError> {
        let k = self.keys.bucket(sale, from);
        let mut conn = self.conn.clone();
        let log: Vec<(String, String)> = self.conn.bounded(conn.hgetall(&k.lent)).await?;
        Ok(log.into_iter().filter_map(|(id, value)| parse_logged(from, id, &value)).collect())
    }

    /// Completes every transfer of the sale's buckets lent before
    /// `lent_before_ms` (Redis clock) and still logged: a borrower that
    /// died or gave up between lending and receiving leaves one. Received
    /// (now, or already) and forgotten; answers how many units arrived now.
    pub async fn complete_transfers(&self, sale: SaleKey, lent_before_ms: i64) -> Result<i64, RedisCallError> {
        let mut arrived = 0;
        for bucket in self.directory(sale).await?.buckets {
            for logged in self.transfers_lent(sale, bucket).await? {
                if logged.at_ms >= lent_before_ms {
                    continue;
                }
                if self.receive(sale, &logged.transfer, logged.units).await? == Received::Now {
                    arrived += logged.units;
                }
                self.forget_transfer(sale, &logged.transfer).await?;
            }
        }
        Ok(arrived)
    }
}

/// `to|units|round|at_ms`, as `lua/lend.lua` logs it.
fn parse_logged(from: Bucket, id: String, value: &str) -> Option<LoggedTransfer> {
    let mut fields = value.split('|').map(str::parse::<i64>);
    let (to, units, round, at_ms) =
        (fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?);
    let to = Bucket(u32::try_from(to).ok()?);
    Some(LoggedTransfer { transfer: Transfer { id, from, to, round }, units, at_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_transfer_reads_back_as_the_script_wrote_it() {
        let logged = parse_logged(Bucket(2), "t1".into(), "0|5|3|1700000000000").expect("well formed");
        assert_eq!(logged.transfer, Transfer { id: "t1".into(), from: Bucket(2), to: Bucket(0), round: 3 });
        assert_eq!((logged.units, logged.at_ms), (5, 1_700_000_000_000));
        for bad in ["", "0|5|3", "x|5|3|1", "-1|5|3|1"] {
            assert_eq!(parse_logged(Bucket(1), "t".into(), bad), None, "{bad:?}");
        }
    }
}
