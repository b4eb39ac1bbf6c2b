//! A draw's routes: enter, read an entry, read the draw. The draw lives
//! in Redis on the sale's waiting-room keys (`seckill_shared::stock::queue`);
//! this edge signs a winner's admission token and checks the proof of work.

use super::joining::{self, JoinBody};
use crate::admission::token::Token;
use crate::client_addr::ClientAddr;
use crate::draw::answers::{DrawBody, EntryBody};
use crate::http::auth;
use crate::http::bodies::ErrorBody;
use crate::http::errors::{BuyerError, RequestError};
use crate::http::extract::JsonBody;
use crate::http::state::{Buyers, Edge};
use axum::extract::{Extension, Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use seckill_shared::domain::SaleKey;
use seckill_shared::draw::{DrawState, EntryAnswer, EntryStatus, EntryView};

/// A draw's routes (buyer's API: CORS as the rest of it).
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/api/seckill/draw/entries", post(enter))
        .route("/api/seckill/draw/entries/{entry}", get(read))
        .route("/api/seckill/draw/{activityId}/{skuId}", get(draw))
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn redis(error: impl Into<anyhow::Error>) -> BuyerError {
    BuyerError::try_again(error)
}

/// What an entry answers; a winner's unused right is its signed token,
/// shown only to a caller identified as the entry's user (a user token, or
/// `auth.allow_anonymous`): with no identity configured, anyone could name
/// the user id and take the winner's right.
fn entry_body(state: &Buyers, sale: SaleKey, view: EntryView, draw: &DrawState) -> EntryBody {
    let won = view.status == EntryStatus::Won && !view.used && auth::identified(&state.users);
    let admission = won.then(|| {
        let token =
            Token { sale, round: view.round, user: view.user, ticket: view.entry.clone(), expires_ms: view.until_ms };
        token.sign(&state.signer)
    });
    let deadline = matches!(view.status, EntryStatus::Won | EntryStatus::Expired) && view.until_ms > 0 && !view.used;
    EntryBody {
        entry: view.entry,
        status: view.status,
        admission,
        admission_expires_at: deadline.then(|| time(view.until_ms)),
        ordered: view.used,
        place: view.place,
        draw_at: time(draw.draw_ms),
        seed_commitment: draw.seed_commitment.clone(),
    }
}

/// An entry's answer as the contract says it.
fn answer(state: &Buyers, sale: SaleKey, answer: EntryAnswer, draw: &DrawState) -> Result<Json<EntryBody>, BuyerError> {
    match answer {
        EntryAnswer::Entry(view) => Ok(Json(entry_body(state, sale, view, draw))),
        EntryAnswer::NotOpen { opens_ms } => Err(BuyerError::NotOpenYet(time(opens_ms))),
        EntryAnswer::Closed => Err(BuyerError::EntriesClosed),
        EntryAnswer::Full => Err(BuyerError::EntriesFull),
        EntryAnswer::NoDraw => Err(BuyerError::SaleNotFound),
        EntryAnswer::Unknown => Err(RequestError::NotFound.into()),
        EntryAnswer::Replayed => Err(BuyerError::ChallengeFailed("the challenge was used before".into())),
    }
}

/// Enters a sale's draw, once per user: the entry (the same one asked again).
#[utoipa::path(
    post,
    path = "/api/seckill/draw/entries",
    tag = "buyer",
    request_body(content = JoinBody, content_type = "application/json"),
    security((), ("user" = [])),
    responses(
        (status = 200, description = "The user's entry (the same one for an entry again): ENTERED until the draw, then WON (admission: the token for one order, until admissionExpiresAt), WAITLISTED (place), EXPIRED or LOST", body = EntryBody,
            links(("entry" = (operation_id = "read", parameters(("entry" = "$response.body#/entry")), description = "The entry, read")))),
        (status = 400, description = "INVALID_REQUEST", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 403, description = "SALE_NOT_ACTIVE with opensAt: before entries open; CHALLENGE_FAILED: the draw asks a proof of work and it is missing, wrong, expired or used before; FORBIDDEN: the token is another user's", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND: the sale has no draw", body = ErrorBody),
        (status = 409, description = "ENTRIES_CLOSED: after drawAt (or the sale closed) and the user holds no entry; ENTRIES_FULL: the draw holds its most entries (maxEntries) and the user holds none — nothing written either way", body = ErrorBody),
        (status = 408, description = "REQUEST_TIMEOUT", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn enter(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<JoinBody>,
) -> Result<Json<EntryBody>, BuyerError> {
    let (sale, user) = joining::joiner(&state, client, &headers, &body)?;
    let draw = state.stock.draws().draw_state(sale).await.map_err(redis)?.ok_or(BuyerError::SaleNotFound)?;
    let solved = joining::proof_of(&state, (sale, user, draw.challenge_bits), &body)?;
    let proof = solved.as_ref().map(|c| (c.nonce.as_str(), c.expires_ms));
    let entered = state.stock.draws().enter_draw(sale, user, proof).await.map_err(redis)?;
    answer(&state, sale, entered, &draw)
}

/// An entry, read by its holder.
#[utoipa::path(
    get,
    path = "/api/seckill/draw/entries/{entry}",
    tag = "buyer",
    security((), ("user" = [])),
    params(("entry" = String, Path, description = "As the entry answered it")),
    responses(
        (status = 200, description = "As an entry answers", body = EntryBody),
        (status = 403, description = "FORBIDDEN: the token is another user's", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such entry", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn read(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    Path(entry): Path<String>,
) -> Result<Json<EntryBody>, BuyerError> {
    let (sale, caller) = joining::reader(&state, client, &headers, &entry)?;
    let draw = state.stock.draws().draw_state(sale).await.map_err(redis)?.ok_or(RequestError::NotFound)?;
    let read = state.stock.draws().read_entry(&entry).await.map_err(redis)?;
    if let EntryAnswer::Entry(view) = &read {
        joining::owned_by(caller, view.user, "entry")?;
    }
    answer(&state, sale, read, &draw)
}

/// A sale's draw, for anyone: its times, its seed's commitment, and once
/// drawn the seed and the entry list's digest.
#[utoipa::path(
    get,
    path = "/api/seckill/draw/{activityId}/{skuId}",
    tag = "buyer",
    params(("activityId" = i64, Path, minimum = 1), ("skuId" = i64, Path, minimum = 1)),
    responses(
        (status = 200, description = "The draw", body = DrawBody),
        (status = 400, description = "INVALID_REQUEST: a bad id", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND: the sale has no draw", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn draw(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    Path((activity, sku)): Path<(String, String)>,
) -> Result<Json<DrawBody>, BuyerError> {
    state.status_reads.check_client(client.0).map_err(RequestError::RateLimited)?;
    let number = |text: &str| text.parse::<i64>().map_err(|_| BuyerError::invalid(format!("not an id: {text}")));
    let sale = SaleKey::from_raw(number(&activity)?, number(&sku)?).map_err(BuyerError::invalid)?;
    let draw = state.stock.draws().draw_state(sale).await.map_err(redis)?.ok_or(BuyerError::SaleNotFound)?;
    Ok(Json(draw_body(sale, draw)))
}

/// The draw as published.
pub fn draw_body(sale: SaleKey, draw: DrawState) -> DrawBody {
    let now = seckill_shared::now_ms();
    let state = match () {
        _ if draw.closed => "CLOSED",
        _ if draw.drawn => "DRAWN",
        _ if now >= draw.draw_ms => "DRAWING",
        _ if now >= draw.entries_open_ms => "OPEN",
        _ => "NOT_OPEN",
    };
    DrawBody {
        activity_id: sale.activity.get(),
        sku_id: sale.sku.get(),
        round: draw.round,
        state,
        entries_open_at: time(draw.entries_open_ms),
        draw_at: time(draw.draw_ms),
        claim_seconds: draw.claim_ms / 1000,
        seed_commitment: draw.seed_commitment,
        seed: draw.drawn.then_some(draw.seed),
        entries_digest: draw.drawn.then_some(draw.entries_digest),
        drawn_at: draw.drawn.then(|| time(draw.drawn_at_ms)),
        entries: draw.entries,
        winners: draw.winners,
        claimed: draw.claimed,
        promoted: draw.promoted,
        expired: draw.expired,
        lost: draw.lost,
        waitlisted: draw.waitlisted,
    }
}
