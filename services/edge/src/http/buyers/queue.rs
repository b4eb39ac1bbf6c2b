//! The waiting room's routes: join, poll a ticket, take a proof-of-work
//! challenge. The room is Redis's (`seckill_shared::stock::queue`); this
//! edge signs the admission tokens and checks the challenges.

use super::joining::{self, JoinBody};
use super::queue_bodies::{ChallengeBody, TicketBody};
use crate::admission::challenge::Challenge;
use crate::admission::token::Token;
use crate::client_addr::ClientAddr;
use crate::http::auth;
use crate::http::bodies::ErrorBody;
use crate::http::errors::{BuyerError, RequestError};
use crate::http::extract::JsonBody;
use crate::http::state::Buyers;
use crate::http::state::Edge;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::queue::{TicketAnswer, TicketStatus, TicketView};
use std::collections::HashMap;

/// The waiting room's routes (buyer's API: CORS as the rest of it).
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/api/seckill/queue", post(join))
        .route("/api/seckill/queue/challenge", get(challenge))
        .route("/api/seckill/queue/{ticket}", get(poll))
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// What a ticket answers: its status, place and wait, and once admitted
/// the signed token.
fn ticket_body(state: &Buyers, sale: SaleKey, view: TicketView) -> TicketBody {
    let admitted = view.status == TicketStatus::Admitted;
    let admission = admitted.then(|| {
        let token = Token {
            sale,
            round: view.round,
            user: view.user,
            ticket: view.ticket.clone(),
            expires_ms: view.expires_ms,
        };
        token.sign(&state.signer)
    });
    let poll_after_ms = match view.status {
        TicketStatus::Waiting => 1_000,
        TicketStatus::SoldOut => 5_000,
        TicketStatus::Admitted | TicketStatus::Closed => 0,
    };
    TicketBody {
        position: view.place,
        wait_seconds: view.wait_seconds(),
        admission,
        admission_expires_at: admitted.then(|| time(view.expires_ms)),
        poll_after_ms,
        ticket: view.ticket,
        status: view.status,
        seed_commitment: None,
    }
}

/// A join or a read's answer as the contract says it.
fn answer(state: &Buyers, sale: SaleKey, answer: TicketAnswer) -> Result<Json<TicketBody>, BuyerError> {
    let closed = |status| TicketBody {
        ticket: String::new(),
        status,
        position: None,
        wait_seconds: None,
        admission: None,
        admission_expires_at: None,
        poll_after_ms: 0,
        seed_commitment: None,
    };
    match answer {
        TicketAnswer::Ticket(view) => Ok(Json(ticket_body(state, sale, view))),
        TicketAnswer::NotOpen { opens_ms } => Err(BuyerError::NotOpenYet(time(opens_ms))),
        TicketAnswer::NoRoom => Err(BuyerError::SaleNotFound),
        TicketAnswer::Unknown => Err(RequestError::NotFound.into()),
        TicketAnswer::Replayed => Err(BuyerError::ChallengeFailed("the challenge was used before".into())),
        TicketAnswer::Closed => Ok(Json(closed(TicketStatus::Closed))),
        TicketAnswer::SoldOut => Ok(Json(closed(TicketStatus::SoldOut))),
    }
}

fn redis(error: impl Into<anyhow::Error>) -> BuyerError {
    BuyerError::try_again(error)
}

/// Joins a sale's waiting room: the ticket, and where it stands.
#[utoipa::path(
    post,
    path = "/api/seckill/queue",
    tag = "buyer",
    request_body(content = JoinBody, content_type = "application/json"),
    security((), ("user" = [])),
    responses(
        (status = 200, description = "The user's ticket (the same one for a join again in the round): WAITING (position once the sale starts, waitSeconds), ADMITTED (admission: the token for one order), SOLD_OUT (no unit left now; admission resumes if one comes back), CLOSED", body = TicketBody,
            links(("ticket" = (operation_id = "poll", parameters(("ticket" = "$response.body#/ticket")), description = "The ticket, polled")))),
        (status = 400, description = "INVALID_REQUEST", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 403, description = "SALE_NOT_ACTIVE with opensAt: before the pre-queue opens; CHALLENGE_FAILED: the room asks a proof of work and it is missing, wrong, expired or used before; FORBIDDEN: the token is another user's", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND: the sale has no waiting room", body = ErrorBody),
        (status = 408, description = "REQUEST_TIMEOUT: the body did not arrive within connections.body_timeout_ms", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: not declared application/json", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn join(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<JoinBody>,
) -> Result<Json<TicketBody>, BuyerError> {
    let (sale, user) = joining::joiner(&state, client, &headers, &body)?;
    let room = state.stock.waiting_room().room(sale).await.map_err(redis)?.ok_or(BuyerError::SaleNotFound)?;
    let solved = joining::proof_of(&state, (sale, user, room.challenge_bits), &body)?;
    let proof = solved.as_ref().map(|c| (c.nonce.as_str(), c.expires_ms));
    let joined = state.stock.waiting_room().join_room(sale, user, proof).await.map_err(redis)?;
    let Json(mut body) = answer(&state, sale, joined)?;
    body.seed_commitment = Some(room.seed_commitment);
    Ok(Json(body))
}

/// A ticket, polled at its `pollAfterMs`.
#[utoipa::path(
    get,
    path = "/api/seckill/queue/{ticket}",
    tag = "buyer",
    security((), ("user" = [])),
    params(("ticket" = String, Path, description = "As a join answered it")),
    responses(
        (status = 200, description = "As a join answers", body = TicketBody),
        (status = 403, description = "FORBIDDEN: the token is another user's", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such ticket", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn poll(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    Path(ticket): Path<String>,
) -> Result<Json<TicketBody>, BuyerError> {
    let (sale, caller) = joining::reader(&state, client, &headers, &ticket)?;
    let read = state.stock.waiting_room().read_ticket(&ticket).await.map_err(redis)?;
    if let TicketAnswer::Ticket(view) = &read {
        joining::owned_by(caller, view.user, "ticket")?;
    }
    answer(&state, sale, read)
}

/// A proof-of-work challenge for `userId`'s join, signed and expiring.
#[utoipa::path(
    get,
    path = "/api/seckill/queue/challenge",
    tag = "buyer",
    security((), ("user" = [])),
    params(
        ("activityId" = i64, Query, minimum = 1),
        ("skuId" = i64, Query, minimum = 1),
        ("userId" = i64, Query, minimum = 1),
    ),
    responses(
        (status = 200, description = "The challenge, its bits and expiry", body = ChallengeBody),
        (status = 400, description = "INVALID_REQUEST", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND: no waiting room, or one that asks no proof of work", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn challenge(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<ChallengeBody>, BuyerError> {
    let (sale, user) = super::order::sale_and_user(&query)?;
    auth::require_user(&state.users, &headers, user)?;
    state.limits.check_client(client.0).map_err(RequestError::RateLimited)?;
    let room = state.stock.waiting_room().room(sale).await.map_err(redis)?.ok_or(BuyerError::SaleNotFound)?;
    if room.challenge_bits == 0 {
        return Err(BuyerError::SaleNotFound);
    }
    let ttl_ms = state.settings.admission.challenge_ttl_secs as i64 * 1000;
    let issued = Challenge::new(sale, user, room.challenge_bits, seckill_shared::now_ms(), ttl_ms);
    Ok(Json(ChallengeBody {
        challenge: issued.sign(&state.signer),
        bits: issued.bits,
        expires_at: time(issued.expires_ms),
    }))
}
