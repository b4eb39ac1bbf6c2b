//! The edge's OpenAPI 3.1 document, generated from the handlers' own
//! annotations (utoipa), served at `GET /openapi.json` and committed as
//! `api/openapi.json` (a test keeps the two equal). The types here describe
//! the JSON bodies; the handlers build them.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::AppState;

/// Every error is this body.
#[derive(ToSchema)]
#[schema(as = Error, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ErrorBody {
    /// The stable code.
    pub code: ErrorCode,
    /// In words, for a human.
    pub message: String,
    /// `ALREADY_PURCHASED` only: the user's order in this sale.
    #[schema(nullable = false)]
    pub order_id: Option<String>,
}

/// The codes of the contract's errors.
#[derive(ToSchema)]
#[schema(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
pub enum ErrorCode {
    InvalidRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unauthorized,
    Forbidden,
    RateLimited,
    SaleNotFound,
    SaleNotActive,
    AlreadyPurchased,
    SoldOut,
    OrderNotFound,
    OrderPending,
    PaymentLate,
    AlreadyPaid,
    OrderFailed,
    SaleBusy,
    NotFound,
    MethodNotAllowed,
    TryAgain,
    Internal,
}

/// A buyer's request for one unit.
#[derive(ToSchema, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = OrderRequest)]
#[allow(dead_code)]
pub struct OrderRequestBody {
    #[schema(minimum = 1, format = Int64)]
    pub activity_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub sku_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub user_id: i64,
}

/// The order is accepted and queued; follow it by its id.
#[derive(ToSchema)]
#[schema(as = Queued, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct QueuedBody {
    #[schema(pattern = "^QUEUED$")]
    pub code: String,
    pub order_id: String,
}

/// Where an order stands.
#[derive(ToSchema)]
#[schema(as = OrderStatus, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct OrderStatusBody {
    pub order_id: String,
    #[schema(minimum = 1, format = Int64)]
    pub activity_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub sku_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub user_id: i64,
    /// QUEUED, CREATED (awaiting payment until payDeadline), PAID,
    /// CANCELLED or FAILED.
    #[schema(pattern = "^(QUEUED|CREATED|PAID|CANCELLED|FAILED)$")]
    pub status: String,
    /// Why it failed or was cancelled (a stable code: EXPIRED,
    /// BUYER_CANCELLED, or a failure's), when it was.
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// Until when a written order awaits payment (RFC 3339).
    #[schema(format = DateTime, nullable = false)]
    pub pay_deadline: Option<String>,
    #[schema(format = DateTime, nullable = false)]
    pub paid_at: Option<String>,
    #[schema(format = DateTime, nullable = false)]
    pub cancelled_at: Option<String>,
}

/// Who pays or cancels: the order's buyer (`{"userId": U}`, also the
/// parsed body of those routes).
#[derive(ToSchema, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = OrderOwner)]
pub struct OrderOwnerBody {
    #[schema(minimum = 1, format = Int64)]
    pub user_id: i64,
}

/// A warm-up: stock is set, never added; buyers cleared.
#[derive(ToSchema, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = Warmup)]
#[allow(dead_code)]
pub struct WarmupBody {
    #[schema(minimum = 0, maximum = 1_000_000_000, format = Int64)]
    pub stock: i64,
    /// RFC 3339; open when absent.
    #[schema(format = DateTime, nullable = false)]
    pub starts_at: Option<String>,
    /// RFC 3339; open when absent.
    #[schema(format = DateTime, nullable = false)]
    pub ends_at: Option<String>,
    /// Replace a round that still has orders in flight.
    #[schema(nullable = false)]
    pub force: Option<bool>,
    /// How long a CREATED order awaits payment before it is cancelled and
    /// its unit sold again (default 900).
    #[schema(minimum = 1, maximum = 604_800, nullable = false)]
    pub payment_window_seconds: Option<i64>,
}

/// A sale as PostgreSQL holds it after the warm-up.
#[derive(ToSchema)]
#[schema(as = Sale, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct SaleBody {
    pub activity_id: i64,
    pub sku_id: i64,
    pub round: i32,
    pub total_stock: i64,
    pub remaining_stock: i64,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    pub payment_window_seconds: i32,
}

/// The reconciliation of one sale: every term of the invariant, and the
/// verdict (`consistent`, `violations`).
#[derive(ToSchema)]
#[schema(as = Reconciliation, rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ReconciliationBody {
    pub activity_id: i64,
    pub sku_id: i64,
    pub round: i32,
    pub total_stock: i64,
    pub consistent: bool,
    pub violations: Vec<String>,
}

/// Adds the bearer schemes: the admin token, and the user's HS256 JWT.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |format: &str| SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format(format).build());
        components.add_security_scheme("admin", bearer("admin token (SECKILL_ADMIN_TOKEN)"));
        components.add_security_scheme("user", bearer("HS256 JWT whose sub is the user (when SECKILL_USER_JWT_SECRET is set)"));
    }
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill edge",
        description = "The flash-sale edge: place an order, follow it, warm a sale up and reconcile it. Every error is {\"code\",\"message\"}.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        super::order::place_order,
        super::order::get_order,
        super::order::get_result,
        super::lifecycle::pay,
        super::lifecycle::cancel,
        super::admin::warm_up,
        super::admin::report,
        super::health::healthz,
        super::health::ready,
        super::health::metrics,
        openapi_json,
    ),
    components(schemas(ErrorBody, ErrorCode, OrderRequestBody, QueuedBody, OrderStatusBody, OrderOwnerBody, WarmupBody, SaleBody, ReconciliationBody)),
    modifiers(&Security),
    tags((name = "buyer", description = "Orders and their status"), (name = "admin", description = "Warm-up and reconciliation"), (name = "operations", description = "Health, readiness, metrics, this document"))
)]
pub struct ApiDoc;

/// The document as JSON, as served and committed.
pub fn document() -> String {
    ApiDoc::openapi().to_pretty_json().expect("the document serializes") + "\n"
}

/// `GET /openapi.json`.
pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi_json))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json() -> Json<serde_json::Value> {
    Json(serde_json::to_value(ApiDoc::openapi()).expect("the document serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `api/openapi.json` is this document; `UPDATE_OPENAPI=1 cargo test`
    /// writes it after a change of the API.
    #[test]
    fn the_committed_document_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api/openapi.json");
        let generated = document();
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &generated).expect("writing api/openapi.json");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(committed == generated, "api/openapi.json is stale: run UPDATE_OPENAPI=1 cargo test -p seckill-edge");
    }

    #[test]
    fn every_status_and_code_of_the_contract_is_documented() {
        let text = document();
        for code in [
            "INVALID_REQUEST", "PAYLOAD_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE", "UNAUTHORIZED", "FORBIDDEN", "RATE_LIMITED",
            "SALE_NOT_FOUND", "SALE_NOT_ACTIVE", "ALREADY_PURCHASED", "SOLD_OUT", "ORDER_NOT_FOUND", "SALE_BUSY", "NOT_FOUND",
            "METHOD_NOT_ALLOWED", "TRY_AGAIN",
        ] {
            assert!(text.contains(code), "{code} is documented");
        }
        for status in ["\"200\"", "\"202\"", "\"400\"", "\"401\"", "\"403\"", "\"404\"", "\"409\"", "\"410\"", "\"413\"", "\"415\"", "\"429\"", "\"503\""] {
            assert!(text.contains(status), "status {status} is documented");
        }
        assert!(text.contains("\"openapi\": \"3.1.0\""));
    }
}
