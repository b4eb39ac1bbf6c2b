//! Units moved between two buckets of a sale (`lua/lend.lua`, then
//! `lua/receive.lua`): two slots, so two scripts, tied by a transfer id.
//!
//! The lender logs the transfer under its id in its own slot; the receiver
//! keeps the ids it took in. Either call asked again with the same id does
//! nothing more, so a caller that did not hear an answer asks again, and
//! whoever finds a logged transfer the receiver never took in (the caller
//! died between the two) completes it: [`BucketMoves::transfers_lent`](crate::stock::BucketMoves::transfers_lent), then
//! [`BucketMoves::finish_transfer`](crate::stock::BucketMoves::finish_transfer). Units are never made or lost on the way:
//! while a transfer is logged and not received, the lender's `lent` counter
//! is ahead of the receivers' `borrowed` by exactly its units.
//!
//! Each step is on the replicas (`redis.min_replica_acks`) before the next
//! is built on it ([`BucketMoves::finish_transfer`](crate::stock::BucketMoves::finish_transfer)): a receiver adds units only
//! once the lend is confirmed (a failover of the lender that lost the lend
//! would otherwise leave the units in both buckets), and a lender forgets
//! a move only once the receipt is confirmed (else a failover of the
//! receiver would lose them). A step not confirmed leaves the transfer
//! logged, to be finished later. A receiver in another round refuses the
//! units; they go back to the lender while it holds the round they were
//! lent in (`lua/unlend.lua`), never forgotten on the way.

use super::confirm::Confirmation;
use super::keys::Bucket;
use super::values::{LoggedTransfer, Transfer};
use super::with_keys;
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use redis::{AsyncCommands, Script};
use std::sync::LazyLock;

static LEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/lend.lua")));
static RECEIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/receive.lua")));
static UNLEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/unlend.lua")));

/// How many times a transfer's step is asked (or confirmed) before its
/// caller gives up and leaves the transfer logged, to be finished later.
const ASKS: u32 = 3;

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

/// What finishing a lent transfer came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The receiver has the units (`true`: added now; `false`: before),
    /// confirmed, and the move is forgotten.
    Arrived(bool),
    /// The receiver holds another round: these units went back to the
    /// lender (0: the lender moved on too, and they went with the round).
    GivenBack(i64),
    /// A step is not on the replicas yet (or was lost in a failover): the
    /// transfer stays logged, and whoever finds it logged finishes it.
    Pending,
}

impl crate::stock::BucketMoves<'_> {
    /// The first half of `transfer` (`lua/lend.lua`): half the lender's
    /// units, rounded up, leave it, logged under the transfer's id.
    #[tracing::instrument(name = "lend", skip_all, fields(%sale, transfer = %transfer.id))]
    pub async fn lend(self, sale: SaleKey, transfer: &Transfer) -> Result<Lent, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        let mut invocation = with_keys(&LEND, &[&k.meta, &k.stock, &k.lent]);
        invocation.arg(&transfer.id).arg(transfer.to.0).arg(transfer.round);
        use super::protocol::lend::*;
        match self.conn.invoke::<i64>(&invocation).await? {
            IN_TRANSIT => Ok(Lent::InTransit),
            OTHER_ROUND => Ok(Lent::OtherRound),
            NOTHING_LEFT => Ok(Lent::Nothing),
            units if units > 0 => Ok(Lent::Units(units)),
            other => Err(RedisCallError::Unexpected { script: "lend.lua", answer: other.to_string() }),
        }
    }

    /// The second half (`lua/receive.lua`): the receiver adds the `units`
    /// lent, once per transfer.
    #[tracing::instrument(name = "receive", skip_all, fields(%sale, transfer = %transfer.id))]
    pub async fn receive(self, sale: SaleKey, transfer: &Transfer, units: i64) -> Result<Received, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.to);
        let mut invocation = with_keys(&RECEIVE, &[&k.meta, &k.stock, &k.received]);
        invocation.arg(&transfer.id).arg(units).arg(transfer.round);
        use super::protocol::receive::*;
        match self.conn.invoke::<i64>(&invocation).await? {
            NOW => Ok(Received::Now),
            BEFORE => Ok(Received::Before),
            OTHER_ROUND => Ok(Received::OtherRound),
            other => Err(RedisCallError::Unexpected { script: "receive.lua", answer: other.to_string() }),
        }
    }

    /// A transfer the receiver refused (another round) back to its lender
    /// (`lua/unlend.lua`): the units given back.
    pub async fn unlend(self, sale: SaleKey, transfer: &Transfer) -> Result<i64, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        let mut invocation = with_keys(&UNLEND, &[&k.meta, &k.stock, &k.lent]);
        invocation.arg(&transfer.id);
        self.conn.invoke(&invocation).await
    }

    /// The rest of a move whose lend is done: the lend confirmed, the units
    /// received, the receipt confirmed, the move forgotten — each step only
    /// on one the replicas have.
    #[tracing::instrument(name = "finish_transfer", skip_all, fields(%sale, transfer = %transfer.id))]
    pub async fn finish_transfer(
        self,
        sale: SaleKey,
        transfer: &Transfer,
        units: i64,
    ) -> Result<Finished, RedisCallError> {
        if !self.on_replicas(|| self.lend_confirmed(sale, transfer)).await? {
            return Ok(Finished::Pending);
        }
        let received = self.asked_again(|| self.receive(sale, transfer, units)).await?;
        if received == Received::OtherRound {
            return Ok(Finished::GivenBack(self.asked_again(|| self.unlend(sale, transfer)).await?));
        }
        if !self.on_replicas(|| self.receipt_confirmed(sale, transfer)).await? {
            return Ok(Finished::Pending);
        }
        self.asked_again(|| self.forget_transfer(sale, transfer)).await?;
        Ok(Finished::Arrived(received == Received::Now))
    }

    /// Whether a step is confirmed, asking again (up to [`ASKS`] times)
    /// while the replicas have not confirmed it in time or the answer was
    /// not heard; `false` when it is missing or still not confirmed.
    async fn on_replicas<F, Fut>(self, confirm: F) -> Result<bool, RedisCallError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Confirmation<()>, RedisCallError>>,
    {
        for ask in 1..=ASKS {
            match confirm().await {
                Ok(Confirmation::Confirmed(())) => return Ok(true),
                Ok(Confirmation::Missing) => return Ok(false),
                Ok(Confirmation::Unconfirmed(())) => {}
                Err(error) if error.unheard() && ask < ASKS => {}
                Err(error) if error.unheard() => return Ok(false),
                Err(error) => return Err(error),
            }
        }
        metrics::counter!("seckill_transfer_steps_unconfirmed_total").increment(1);
        Ok(false)
    }

    /// `call` again, up to [`ASKS`] times in all, while its answer is not
    /// heard (a timeout, a dropped connection): the transfer scripts and
    /// `HDEL` answer a repeat as the first.
    pub(super) async fn asked_again<T, F, Fut>(self, call: F) -> Result<T, RedisCallError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisCallError>>,
    {
        let mut asks = 1;
        loop {
            match call().await {
                Err(error) if error.unheard() && asks < ASKS => asks += 1,
                answer => return answer,
            }
        }
    }

    /// Whether `transfer` is logged by its lender and the replicas have it.
    pub async fn lend_confirmed(self, sale: SaleKey, transfer: &Transfer) -> Result<Confirmation<()>, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        Ok(self.orders().confirm_field(&k.lent, &k.meta, &transfer.id).await?.map(|_| ()))
    }

    /// Whether the receiver of `transfer` took it in and the replicas have it.
    pub async fn receipt_confirmed(
        self,
        sale: SaleKey,
        transfer: &Transfer,
    ) -> Result<Confirmation<()>, RedisCallError> {
        let k = self.keys.bucket(sale, transfer.to);
        Ok(self.orders().confirm_member(&k.received, &k.meta, &transfer.id).await?.map(|_| ()))
    }

    /// Drops a transfer from its lender's log once the receiver has it.
    pub async fn forget_transfer(self, sale: SaleKey, transfer: &Transfer) -> Result<(), RedisCallError> {
        let k = self.keys.bucket(sale, transfer.from);
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hdel::<_, _, ()>(&k.lent, &transfer.id)).await
    }

    /// The transfers a bucket logged and has not forgotten: each either
    /// received already or still to be.
    pub async fn transfers_lent(self, sale: SaleKey, from: Bucket) -> Result<Vec<LoggedTransfer>, RedisCallError> {
        let k = self.keys.bucket(sale, from);
        let mut conn = self.conn.clone();
        let log: Vec<(String, String)> = self.conn.bounded(conn.hgetall(&k.lent)).await?;
        Ok(log.into_iter().filter_map(|(id, value)| LoggedTransfer::parse(from, id, &value)).collect())
    }

    /// Finishes every transfer of the sale's buckets lent before
    /// `lent_before_ms` (Redis clock) and still logged: a borrower that
    /// died or gave up between lending and receiving, or found a step not
    /// yet on the replicas, leaves one ([`BucketMoves::finish_transfer`](crate::stock::BucketMoves::finish_transfer)).
    /// Answers how many units arrived now (or went back to their lender).
    pub async fn complete_transfers(self, sale: SaleKey, lent_before_ms: i64) -> Result<i64, RedisCallError> {
        let mut arrived = 0;
        for bucket in self.directory(sale).await?.buckets {
            for logged in self.transfers_lent(sale, bucket).await? {
                if logged.at_ms >= lent_before_ms {
                    continue;
                }
                match self.finish_transfer(sale, &logged.transfer, logged.units).await? {
                    Finished::Arrived(true) => arrived += logged.units,
                    Finished::GivenBack(units) => arrived += units,
                    Finished::Arrived(false) | Finished::Pending => {}
                }
            }
        }
        Ok(arrived)
    }
}
