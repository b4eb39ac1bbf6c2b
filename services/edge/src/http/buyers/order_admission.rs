//! An order's admission from the sale's waiting room: the token of the
//! `Seckill-Admission` header checked (signature, sale, user, expiry) and
//! claimed in Redis for this order alone before the deduction, then spent
//! once the order is kept, or released when nothing was.

use crate::admission::token::{self, Token};
use crate::http::errors::BuyerError;
use crate::http::state::Buyers;
use axum::http::HeaderMap;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::stock::queue::Claim;

/// The order's claimed admission: `None` without the header (the
/// deduction refuses the order if the round admits through its room).
pub(super) async fn claim(
    state: &Buyers,
    headers: &HeaderMap,
    sale: SaleKey,
    user: UserId,
) -> Result<Option<Token>, BuyerError> {
    let Some(raw) = headers.get(token::HEADER) else {
        return Ok(None);
    };
    let refused = |why: String| BuyerError::AdmissionRequired(why);
    let raw = raw.to_str().map_err(|_| refused("the admission token is not one this shop signed".into()))?;
    let token = Token::verify(&state.signer, raw, sale, user, seckill_shared::now_ms())
        .map_err(|why| refused(why.to_string()))?;
    let claimed = match state.stock.waiting_room().claim_ticket(sale, &token.ticket, user, token.round).await {
        Ok(claimed) => claimed,
        Err(error) => {
            // The claim may have landed with its answer lost: given back,
            // so the buyer may order with the token again.
            settle_step(state, &token, false).await;
            return Err(BuyerError::try_again(error));
        }
    };
    match claimed {
        Claim::Claimed => Ok(Some(token)),
        Claim::Unconfirmed => {
            // Kept nothing: the claim is given back (an admission pass
            // settles it if that is lost too).
            settle_step(state, &token, false).await;
            Err(BuyerError::try_again(anyhow::anyhow!("the replicas did not confirm the admission's claim in time")))
        }
        Claim::Used => Err(refused("the admission token has placed an order already".into())),
        Claim::Expired => Err(refused("the admission token expired".into())),
        Claim::Foreign => Err(refused("the admission token is not of this sale's round".into())),
    }
}

/// The claimed `token` after its order: spent when the order may be kept
/// (accepted, or not known: one token places at most one order), released
/// when the order kept nothing (the buyer may try again with it).
pub(super) async fn settle(state: &Buyers, token: &Token, result: &super::order_outcome::Placed) {
    let kept = super::order_outcome::answer_of(result).may_have_kept();
    settle_step(state, token, kept).await;
}

/// Spends (`kept`) or releases the claimed `token`, confirmed by the
/// replicas.
async fn settle_step(state: &Buyers, token: &Token, kept: bool) {
    let (sale, ticket, user, round) = (token.sale, token.ticket.as_str(), token.user, token.round);
    match state.stock.waiting_room().settle_ticket(sale, ticket, user, round, kept).await {
        Ok(true) => {}
        // A ticket left claimed places no second order; an admission pass
        // settles it by what the sale says once its token's expiry and the
        // publish deadline have passed.
        Ok(false) => tracing::warn!(%sale, kept, "an admission's settling not confirmed by the replicas"),
        Err(error) => tracing::warn!(%sale, %error, kept, "an admission not settled"),
    }
}
