//! What joining a sale's waiting room and entering its draw share: the
//! request, the checks made before either touches Redis — the ids, the
//! solution's length, the user's identity, the per-client and per-user
//! limits — the proof of work a room or a draw asks, and the check that a
//! ticket or an entry read is its caller's.

use crate::admission::challenge::Challenge;
use crate::client_addr::ClientAddr;
use crate::http::auth;
use crate::http::errors::{BuyerError, RequestError};
use crate::http::extract::{from_serde, FromJsonBody};
use crate::http::state::Buyers;
use axum::http::HeaderMap;
use seckill_shared::domain::{SaleKey, UserId};
use serde::Deserialize;
use utoipa::ToSchema;

/// A buyer joins a sale's waiting room, or enters its draw.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = JoinRequest)]
pub struct JoinBody {
    #[schema(minimum = 1, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub activity_id: i64,
    #[schema(minimum = 1, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub sku_id: i64,
    #[schema(minimum = 1, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub user_id: i64,
    /// The challenge of `GET /api/seckill/queue/challenge`, where the room
    /// or the draw asks a proof of work.
    #[serde(default)]
    #[schema(nullable = false)]
    pub challenge: Option<String>,
    /// Its solution: SHA-256 of `challenge:solution` starts with the
    /// challenge's bits of zeros (at most 64 characters).
    #[serde(default)]
    #[schema(nullable = false, max_length = 64)]
    pub solution: Option<String>,
}

impl FromJsonBody for JoinBody {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        from_serde(bytes)
    }
}

/// Who joins which sale: `body` checked before anything is read — its
/// ids, its solution's length, the user's identity, the limits.
pub(super) fn joiner(
    state: &Buyers,
    client: ClientAddr,
    headers: &HeaderMap,
    body: &JoinBody,
) -> Result<(SaleKey, UserId), BuyerError> {
    let user = UserId::new(body.user_id).map_err(BuyerError::invalid)?;
    let sale = SaleKey::from_raw(body.activity_id, body.sku_id).map_err(BuyerError::invalid)?;
    // As the document says, whether or not a proof of work is asked.
    if body.solution.as_ref().is_some_and(|s| s.chars().count() > 64) {
        return Err(BuyerError::invalid("solution must be at most 64 characters"));
    }
    auth::require_user(&state.users, headers, user)?;
    state.limits.check_client(client.0).map_err(RequestError::RateLimited)?;
    state.limits.check(user).map_err(RequestError::RateLimited)?;
    Ok((sale, user))
}

/// The proof of work `body` brings, checked where `bits` are asked: its
/// nonce and expiry, for Redis to refuse a second use (none when 0).
pub(super) fn proof_of(
    state: &Buyers,
    (sale, user, bits): (SaleKey, UserId, u32),
    body: &JoinBody,
) -> Result<Option<Challenge>, BuyerError> {
    solved(state, (sale, user, bits), body.challenge.as_deref(), body.solution.as_deref())
}

/// The proof of work a room of `bits` asks of `user` (none when 0),
/// checked: a join's and a draw entry's.
fn solved(
    state: &Buyers,
    (sale, user, bits): (SaleKey, UserId, u32),
    asked: Option<&str>,
    solution: Option<&str>,
) -> Result<Option<Challenge>, BuyerError> {
    if bits == 0 {
        return Ok(None);
    }
    Challenge::check(&state.signer, asked, solution, (sale, user, bits), seckill_shared::now_ms())
        .map(Some)
        .map_err(|refused| BuyerError::ChallengeFailed(refused.to_string()))
}

/// The sale of a ticket or an entry `id`, and who reads it (`None`: no
/// identity configured) — within the status reads' per-client limit; 404
/// for an id of no sale.
pub(super) fn reader(
    state: &Buyers,
    client: ClientAddr,
    headers: &HeaderMap,
    id: &str,
) -> Result<(SaleKey, Option<UserId>), BuyerError> {
    let caller = auth::caller(&state.users, headers)?;
    state.status_reads.check_client(client.0).map_err(RequestError::RateLimited)?;
    let sale = seckill_shared::stock::queue::ticket_sale(id).ok_or(RequestError::NotFound)?;
    Ok((sale, caller))
}

/// Refuses a read of what belongs to another user than `caller`.
pub(super) fn owned_by(caller: Option<UserId>, holder: UserId, what: &str) -> Result<(), BuyerError> {
    match caller {
        Some(caller) if caller != holder => {
            Err(RequestError::Forbidden(format!("the {what} is another user's")).into())
        }
        _ => Ok(()),
    }
}
