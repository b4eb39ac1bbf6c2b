//! The operator's API: warm a sale up, and read its reconciliation.

use super::body::{from_serde, FromJsonBody, JsonBody};
use super::{auth, ApiError, AppState};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::put;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use seckill_shared::domain::{ActivityId, SaleKey, SkuId};
use seckill_shared::reconcile::{self, ReconcileError};
use seckill_shared::warmup::{self, WarmupError, WarmupRequest};
use serde_json::Value;

/// Admin routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/admin/sales/{activity_id}/{sku_id}", put(warm_up).get(report))
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WarmupBody {
    stock: i64,
    #[serde(default)]
    starts_at: Option<DateTime<Utc>>,
    #[serde(default)]
    ends_at: Option<DateTime<Utc>>,
    /// Warm up even when the previous round has orders in flight.
    #[serde(default)]
    force: bool,
}

impl FromJsonBody for WarmupBody {
    fn from_json(bytes: &[u8]) -> Result<Self, ApiError> {
        from_serde(bytes)
    }
}

fn sale_from_path(activity: &str, sku: &str) -> Result<SaleKey, ApiError> {
    let activity: ActivityId = activity.parse().map_err(ApiError::invalid)?;
    let sku: SkuId = sku.parse().map_err(ApiError::invalid)?;
    Ok(SaleKey::new(activity, sku))
}

async fn warm_up(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((activity, sku)): Path<(String, String)>,
    JsonBody(body): JsonBody<WarmupBody>,
) -> Result<Json<Value>, ApiError> {
    auth::require_admin(&state, &headers)?;
    let sale = sale_from_path(&activity, &sku)?;
    let request = WarmupRequest { sale, stock: body.stock, starts_at: body.starts_at, ends_at: body.ends_at, force: body.force };
    let row = warmup::warmup(&state.stock, &state.db, &state.locks, &state.settings.warmup_lock, &request)
        .await
        .map_err(|error| match error {
            WarmupError::Invalid(why) => ApiError::InvalidRequest(why),
            WarmupError::Busy(_) | WarmupError::InFlight(_) => ApiError::SaleBusy(error.to_string()),
            WarmupError::Redis(_) | WarmupError::Db(_) => ApiError::TryAgain(error.into()),
        })?;
    // Units may have come back: this edge stops trusting its flag at once
    // (other edges within their flag's time to live).
    state.sold_out.clear(sale);
    tracing::info!(sale = %sale, stock = row.total_stock, round = row.round, "sale warmed up");
    Ok(Json(serde_json::to_value(row).map_err(anyhow::Error::from)?))
}

async fn report(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((activity, sku)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    auth::require_admin(&state, &headers)?;
    let sale = sale_from_path(&activity, &sku)?;
    let report = reconcile::reconcile(&state.stock, &state.db, Some(&state.settings.servers.kafka), sale, false)
        .await
        .map_err(|error| match error {
            ReconcileError::SaleNotFound(_) => ApiError::SaleNotFound,
            ReconcileError::Source { .. } => ApiError::TryAgain(error.into()),
        })?;
    Ok(Json(serde_json::to_value(report).map_err(anyhow::Error::from)?))
}
