//! A redrive of an order in a release takes the customer's units in the
//! release again (its dead-lettered order gave them back), as the edge
//! does: before the deduction, under the take id the new order's nonce
//! names (derived from the redrive's call, so a run asked again takes
//! once); kept before the new record is published; given back when the
//! redrive placed nothing.

use super::{Redrive, Verdict};
use crate::dlq::RunError;
use crate::domain::{OrderId, OrderRecord};
use crate::stock::{Take, TakeId};
use std::time::Duration;

/// How long a redrive's take may stay pending before the sweep may give it
/// back (its order not found made).
const PENDING: Duration = Duration::from_secs(60);

impl Redrive<'_> {
    /// Takes `original`'s units in its release, if its activity is one:
    /// `Err` the verdict when the customer is at the release's limit.
    pub(super) async fn take_in_release(
        &self,
        original: &OrderRecord,
        nonce: &str,
    ) -> Result<Result<Option<TakeId>, Verdict>, RunError> {
        let sale = original.sale();
        let take = TakeId::new(sale.sku, nonce);
        let stock = &self.tools.stock;
        let taken = stock.releases().release_take(sale.activity, &take, original.user_id, original.quantity, PENDING);
        Ok(match taken.await.map_err(RunError::unreadable)? {
            Take::NoRelease => Ok(None),
            Take::Taken { .. } => Ok(Some(take)),
            Take::LimitReached { held, limit } => {
                Err(Verdict::refused(format!("the customer holds {held} of release {}'s {limit} units", sale.activity)))
            }
        })
    }

    /// Keeps `take` for `order_id` before its record is published: `false`
    /// when the sweep gave it back meanwhile (the order must not be).
    pub(super) async fn keep_in_release(&self, take: Option<&TakeId>, order_id: &OrderId) -> Result<bool, RunError> {
        match take {
            Some(take) => self.tools.stock.releases().release_keep(take, order_id).await.map_err(RunError::unreadable),
            None => Ok(true),
        }
    }

    /// Gives `take` back: the redrive placed nothing with it.
    pub(super) async fn give_in_release(&self, original: &OrderRecord, take: &TakeId) -> Result<(), RunError> {
        let stock = &self.tools.stock;
        stock
            .releases()
            .release_give(original.sale().activity, std::slice::from_ref(take), false)
            .await
            .map_err(RunError::unreadable)?;
        Ok(())
    }
}
