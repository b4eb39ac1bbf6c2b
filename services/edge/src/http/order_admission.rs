//! An order's admission from the sale's waiting room: the token of the
//! `Seckill-Admission` header checked (signature, sale, user, expiry) and
//! claimed in Redis for this order alone before the deduction, then spent
//! once the order is kept, or released when nothing was.

use super::{ApiError, AppState};
use crate::admission::token::{self, Token};
use axum::http::HeaderMap;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::stock::queue::Claim;

/// The order's claimed admission: `None` without the header (the
/// deduction refuses the order if the round admits through its room).
pub(super) async fn claim(
    state: &AppState,
    headers: &HeaderMap,
    sale: SaleKey,
    user: UserId,
) -> Result<Option<Token>, ApiError> {
    let Some(raw) = headers.get(token::HEADER) else {
        return Ok(None);
    };
    let refused = |why: String| ApiError::AdmissionRequired(why);
    let raw = raw.to_str().map_err(|_| refused("the admission token is not one this shop signed".into()))?;
    let token = Token::verify(&state.signer, raw, sale, user, seckill_shared::now_ms())
        .map_err(|why| refused(why.to_string()))?;
    let claimed = state
        .stock
        .claim_ticket(sale, &token.ticket, user, token.round)
        .await
        .map_err(|e| ApiError::TryAgain(e.into()))?;
    match claimed {
        Claim::Claimed => Ok(Some(token)),
        Claim::Used => Err(refused("the admission token has placed an order already".into())),
        Claim::Expired => Err(refused("the admission token expired".into())),
        Claim::Foreign => Err(refused("the admission token is not of this sale's round".into())),
    }
}

/// The claimed `token` after its order: spent when the order may be kept
/// (accepted, or not known: one token places at most one order), released
/// when the order kept nothing (the buyer may try again with it).
pub(super) async fn settle<T>(state: &AppState, token: &Token, result: &Result<T, ApiError>) {
    let kept = matches!(result, Ok(_) | Err(ApiError::Unconfirmed(_) | ApiError::Internal(_)));
    let (sale, ticket, user, round) = (token.sale, token.ticket.as_str(), token.user, token.round);
    let settled = if kept {
        state.stock.spend_ticket(sale, ticket, user, round).await
    } else {
        state.stock.release_ticket(sale, ticket, user, round).await
    };
    if let Err(error) = settled {
        // A claimed ticket stays claimed: it places no second order, and
        // leaves the room's active count when the round ends.
        tracing::warn!(%sale, %error, kept, "an admission not settled");
    }
}
