//! The operator's API: warm a sale up, close it, and read its
//! reconciliation.

use crate::http::auth;
use crate::http::bodies::{ErrorBody, WarmupBody};
use crate::http::errors::{OperatorError, RequestError};
use crate::http::extract::{from_serde, FromJsonBody, JsonBody};
use crate::http::state::Edge;
use crate::http::state::Operators;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::routing::{post, put};
use axum::{Json, Router};
use seckill_shared::books::{self, ReconcileError, Report};
use seckill_shared::db::SaleRow;
use seckill_shared::domain::{ActivityId, Limits, SaleKey, SkuId};
use seckill_shared::sales::{self, WarmupError, WarmupRequest};

/// Admin routes.
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/admin/sales/{activity_id}/{sku_id}", put(warm_up).get(report))
        .route("/admin/sales/{activity_id}/{sku_id}/close", post(close))
        .route("/admin/releases/{activity_id}", put(super::releases::declare).get(super::releases::report))
}

impl FromJsonBody for WarmupBody {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        from_serde(bytes)
    }
}

/// A warm-up's answer: the sale as PostgreSQL holds it and, for a draw,
/// the draw as `GET /api/seckill/draw/{a}/{s}` shows it — its seed's
/// commitment published before any entry.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WarmedUp)]
pub struct WarmedUpBody {
    #[serde(flatten)]
    pub sale: seckill_shared::db::SaleRow,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub draw: Option<crate::draw::answers::DrawBody>,
}

fn sale_from_path(activity: &str, sku: &str) -> Result<SaleKey, OperatorError> {
    let activity: ActivityId = activity.parse().map_err(OperatorError::invalid)?;
    let sku: SkuId = sku.parse().map_err(OperatorError::invalid)?;
    Ok(SaleKey::new(activity, sku))
}

/// Creates a sale or starts its next round.
#[utoipa::path(
    put,
    path = "/admin/sales/{activityId}/{skuId}",
    tag = "admin",
    security(("admin" = [])),
    params(("activityId" = i64, Path, minimum = 1), ("skuId" = i64, Path, minimum = 1)),
    request_body(content = WarmupBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Warmed up (the replicas have it): stock set (never added), buyers cleared; with an end, every key of the sale expires after the end, the payment window and redis.sale_key_margin_secs. The Seckill-Warmup-Id header names the warm-up; asked again with it (warmupId, or Idempotency-Key), the same answer. A draw's warm-up answers the draw too, with its seedCommitment", body = WarmedUpBody, headers(("Seckill-Warmup-Id" = String, description = "The warm-up's id")),
            links(("report" = (operation_id = "report", parameters(("activityId" = "$request.path.activityId"), ("skuId" = "$request.path.skuId")), description = "The sale this warm-up set up, reconciled")))),
        (status = 400, description = "INVALID_REQUEST: a bad id, stock, window or limit", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: no or a wrong admin token", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this client failed to authenticate too often (Retry-After)", body = ErrorBody),
        (status = 409, description = "SALE_BUSY: another warm-up runs, the previous round has orders in flight (force to replace it), or the warm-up id was used for another request", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis or PostgreSQL unavailable (each PostgreSQL call bounded by database.call_deadline_ms), or the replicas did not confirm the warm-up — the message names which; the sale's lock is given back: repeat it with the same warmupId to finish it", body = ErrorBody),
    )
)]
pub(crate) async fn warm_up(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path((activity, sku)): Path<(String, String)>,
    JsonBody(body): JsonBody<WarmupBody>,
) -> Result<([(HeaderName, HeaderValue); 1], Json<WarmedUpBody>), OperatorError> {
    auth::require_admin(&state.settings, &headers)?;
    let sale = sale_from_path(&activity, &sku)?;
    let asked_id = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let id = body.warmup_id.or(asked_id).unwrap_or_else(|| format!("w-{:016x}", rand::random::<u64>()));
    let request = WarmupRequest {
        id: Some(id.clone()),
        sale,
        stock: body.stock,
        starts_at: body.starts_at,
        ends_at: body.ends_at,
        force: body.force,
        payment_window_seconds: body.payment_window_seconds,
        buckets: body.buckets,
        admission: body.admission,
        draw: body.draw,
        limits: Limits::asked(body.per_user_limit, body.max_per_order),
    };
    let header_value = HeaderValue::from_str(&id).map_err(OperatorError::invalid)?;
    // A task of its own: a client that hangs up does not cut the warm-up
    // in half (it runs to its end; repeating the id answers it).
    let job = tokio::spawn({
        let state = state.clone();
        async move {
            let deadline = state.settings.servers.database.call_deadline();
            sales::warmup(
                &state.stock,
                &state.console_db,
                deadline,
                &state.locks,
                &state.settings.warmup_lock,
                &request,
            )
            .await
        }
    });
    let row = job.await.map_err(|e| RequestError::Internal(e.into()))?.map_err(warmup_refusal)?;
    // Units may have come back: this edge stops trusting its flag at once
    // (other edges within their flag's time to live).
    state.sold_out.clear(sale);
    state.homes.forget(sale);
    tracing::info!(sale = %sale, warmup = %id, stock = row.total_stock, round = row.round, "sale warmed up");
    let draw = match state.stock.draws().draw_state(sale).await {
        Ok(draw) => draw.map(|d| crate::http::buyers::draw::draw_body(sale, d)),
        Err(error) => return Err(OperatorError::try_again(error)),
    };
    Ok(([(HeaderName::from_static("seckill-warmup-id"), header_value)], Json(WarmedUpBody { sale: row, draw })))
}

/// Closes a sale now: no order is accepted after it (an end only moves
/// earlier), and every key of the sale expires once the payment window and
/// the margin have passed; the sweeper, the audit and the dashboard forget
/// it then. Closing again changes nothing more.
#[utoipa::path(
    post,
    path = "/admin/sales/{activityId}/{skuId}/close",
    tag = "admin",
    security(("admin" = [])),
    params(("activityId" = i64, Path, minimum = 1), ("skuId" = i64, Path, minimum = 1)),
    responses(
        (status = 200, description = "Closed: the sale with its end", body = SaleRow),
        (status = 400, description = "INVALID_REQUEST: a bad id", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this client failed to authenticate too often (Retry-After)", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND", body = ErrorBody),
        (status = 409, description = "SALE_BUSY: a warm-up of the sale runs", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis or PostgreSQL unavailable (each PostgreSQL call bounded by database.call_deadline_ms), or the replicas did not confirm the end — the message names which; the sale's lock is given back: close it again", body = ErrorBody),
    )
)]
pub(crate) async fn close(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path((activity, sku)): Path<(String, String)>,
) -> Result<Json<SaleRow>, OperatorError> {
    auth::require_admin(&state.settings, &headers)?;
    let sale = sale_from_path(&activity, &sku)?;
    let deadline = state.settings.servers.database.call_deadline();
    let row = sales::close(&state.stock, &state.console_db, deadline, &state.locks, &state.settings.warmup_lock, sale)
        .await
        .map_err(warmup_refusal)?;
    tracing::info!(sale = %sale, ends_at = ?row.ends_at, "sale closed");
    Ok(Json(row))
}

/// What a warm-up's or a close's failure answers.
fn warmup_refusal(error: WarmupError) -> OperatorError {
    match error {
        WarmupError::Invalid(why) => OperatorError::invalid(why),
        WarmupError::NotFound(_) => OperatorError::SaleNotFound,
        WarmupError::Busy(_) | WarmupError::InFlight(_) | WarmupError::IdReused(_) => {
            OperatorError::SaleBusy(error.to_string())
        }
        WarmupError::Redis(_) => OperatorError::Unanswered { what: "Redis", cause: error.into() },
        WarmupError::Db(_) => OperatorError::Unanswered { what: "PostgreSQL", cause: error.into() },
        WarmupError::NotReplicated(_) => OperatorError::Unanswered { what: "the Redis replicas", cause: error.into() },
    }
}

/// The sale's reconciliation: every term of the invariant and the verdict.
#[utoipa::path(
    get,
    path = "/admin/sales/{activityId}/{skuId}",
    tag = "admin",
    security(("admin" = [])),
    params(("activityId" = i64, Path, minimum = 1), ("skuId" = i64, Path, minimum = 1)),
    responses(
        (status = 200, description = "The report", body = Report),
        (status = 400, description = "INVALID_REQUEST: a bad id", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this client failed to authenticate too often (Retry-After)", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: a source could not be read", body = ErrorBody),
    )
)]
pub(crate) async fn report(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path((activity, sku)): Path<(String, String)>,
) -> Result<Json<Report>, OperatorError> {
    auth::require_admin(&state.settings, &headers)?;
    let sale = sale_from_path(&activity, &sku)?;
    let report = books::reconcile(&state.stock, &state.console_db, Some(&state.settings.servers.kafka), sale, false)
        .await
        .map_err(|error| match error {
            ReconcileError::SaleNotFound(_) => OperatorError::SaleNotFound,
            ReconcileError::Source { .. } => OperatorError::try_again(error),
        })?;
    Ok(Json(report))
}
