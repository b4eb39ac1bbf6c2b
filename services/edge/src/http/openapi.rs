//! The edge's OpenAPI 3.1 document, generated from the handlers' own
//! annotations (utoipa), served at `GET /openapi.json` and committed as
//! `api/openapi.json` (a test keeps the two equal). The bodies it describes
//! are the handlers' own types ([`super::bodies`], and the shared library's
//! sale row and reconciliation report).

use super::bodies::{
    ErrorBody, OrderOwnerBody, OrderRequestBody, OrderStatusBody, PaymentNotificationBody, PaymentOutcomeCode,
    PaymentRecordedBody, QueuedBody, QueuedCode, WarmupBody,
};
use super::operators::admin::WarmedUpBody;
use crate::error_codes::ErrorCode;
use crate::http::state::Edge;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use seckill_shared::books::Report;
use seckill_shared::db::SaleRow;
use seckill_shared::domain::OrderStatus;
use seckill_shared::stock::SaleSnapshot;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// Adds the bearer schemes: the admin token, and the user's HS256 JWT.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |format: &str| {
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format(format).build())
        };
        components.add_security_scheme("admin", bearer("admin token (SECKILL_ADMIN_TOKEN)"));
        components.add_security_scheme(
            "user",
            bearer("A JWT whose sub is the user: HS256 with SECKILL_USER_JWT_SECRET, or RS256/ES256 of a key in SECKILL_USER_JWKS"),
        );
    }
}

/// States what an order id is exactly, where a path takes one: three
/// positive 64-bit integers (a pattern can say "at most 2^63 − 1" only
/// digit by digit) and a nonce of letters and digits, 96 characters in all.
struct OrderIdPaths;

/// A positive 64-bit integer in decimal, without leading zeros: up to 18
/// digits, or 19 no greater than 9223372036854775807.
const POSITIVE_I64: &str = "(?:[1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6]|9223372036854775807)";

impl Modify for OrderIdPaths {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let n = POSITIVE_I64;
        let pattern = format!("^{n}-{n}-{n}-[0-9A-Za-z]+$");
        let operations = openapi.paths.paths.values_mut().flat_map(|item| [item.get.as_mut(), item.post.as_mut()]);
        let parameters = operations.flatten().flat_map(|operation| operation.parameters.iter_mut().flatten());
        let inline = parameters.filter_map(|p| match p {
            utoipa::openapi::RefOr::T(parameter) => Some(parameter),
            utoipa::openapi::RefOr::Ref(_) => None,
        });
        for parameter in inline.filter(|p| p.name == "orderId") {
            let schema =
                ObjectBuilder::new().schema_type(Type::String).pattern(Some(pattern.clone())).max_length(Some(96));
            parameter.schema = Some(schema.into());
        }
    }
}

/// Says which address answers which operation: the buyers' and the
/// payment provider's on `http_addr`, the operators' (`/admin/…`) on
/// `admin_addr` — each path of theirs carries its own `servers`, so a
/// generated client calls them there (the defaults; a deployment names its
/// own).
struct Addresses;

impl Modify for Addresses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::server::ServerBuilder;
        let server =
            |url: &str, description: &str| ServerBuilder::new().url(url).description(Some(description)).build();
        openapi.servers = Some(vec![server(
            "http://127.0.0.1:8080",
            "The buyers' and the payment provider's address (http_addr); the operators' paths name theirs",
        )]);
        for (_, item) in openapi.paths.paths.iter_mut().filter(|(path, _)| path.starts_with("/admin/")) {
            item.servers = Some(vec![server(
                "http://127.0.0.1:9080",
                "The operators' address (admin_addr): inside the deployment only, never behind the buyers' ingress",
            )]);
        }
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
        super::buyers::order::place_order,
        super::buyers::order::get_order,
        super::buyers::order::get_result,
        super::buyers::checkout::cancel,
        super::buyers::queue::join,
        super::buyers::queue::poll,
        super::buyers::queue::challenge,
        super::buyers::draw::enter,
        super::buyers::draw::read,
        super::buyers::draw::draw,
        super::provider::payments::notify,
        super::operators::admin::warm_up,
        super::operators::admin::report,
        super::operators::admin::close,
        super::operators::releases::declare,
        super::operators::releases::report,
        super::health::healthz,
        super::health::ready,
        super::health::metrics,
        openapi_json,
    ),
    components(schemas(
        ErrorBody, ErrorCode, OrderRequestBody, QueuedBody, QueuedCode, OrderStatusBody, OrderStatus, OrderOwnerBody, WarmupBody, WarmedUpBody, SaleRow,
        Report, SaleSnapshot, PaymentNotificationBody, PaymentRecordedBody, PaymentOutcomeCode,
        super::buyers::joining::JoinBody, super::buyers::queue_bodies::TicketBody, super::buyers::queue_bodies::ChallengeBody,
        seckill_shared::sales::Admission, seckill_shared::sales::Challenge,
        crate::draw::answers::EntryBody, crate::draw::answers::DrawBody,
        seckill_shared::draw::Draw, seckill_shared::draw::EntryStatus,
        super::operators::releases::ReleaseBody, seckill_shared::books::ReleaseReport, seckill_shared::books::CustomerUnits
    )),
    modifiers(&Security, &OrderIdPaths, &Addresses),
    tags((name = "buyer", description = "Orders and their status"), (name = "payments", description = "The payment provider's signed notifications: the only way an order becomes PAID"), (name = "admin", description = "Warm-up, close, releases and reconciliation: served on the operators' address (admin_addr, default 127.0.0.1:9080), not the buyers' — there these paths answer 404 unless admin_addr is set to http_addr"), (name = "operations", description = "Health, readiness, metrics, this document"))
)]
pub struct ApiDoc;

/// The document as JSON, as served and committed.
pub fn document() -> String {
    ApiDoc::openapi().to_pretty_json().expect("the document serializes") + "\n"
}

/// `GET /openapi.json`.
pub fn router() -> Router<Edge> {
    Router::new().route("/openapi.json", get(openapi_json))
}

/// This document (made once: an open route must cost a request little).
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json() -> ([(axum::http::HeaderName, &'static str); 1], Bytes) {
    static DOCUMENT: OnceLock<Bytes> = OnceLock::new();
    let document = DOCUMENT.get_or_init(|| Bytes::from(document()));
    ([(axum::http::header::CONTENT_TYPE, "application/json")], document.clone())
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
            "INVALID_REQUEST",
            "PAYLOAD_TOO_LARGE",
            "UNSUPPORTED_MEDIA_TYPE",
            "UNAUTHORIZED",
            "FORBIDDEN",
            "RATE_LIMITED",
            "SALE_NOT_FOUND",
            "SALE_NOT_ACTIVE",
            "ADMISSION_REQUIRED",
            "CHALLENGE_FAILED",
            "ENTRIES_CLOSED",
            "ENTRIES_FULL",
            "ALREADY_PURCHASED",
            "SOLD_OUT",
            "ORDER_NOT_FOUND",
            "SALE_BUSY",
            "NOT_FOUND",
            "METHOD_NOT_ALLOWED",
            "TRY_AGAIN",
        ] {
            assert!(text.contains(code), "{code} is documented");
        }
        for status in [
            "\"200\"", "\"202\"", "\"400\"", "\"401\"", "\"403\"", "\"404\"", "\"409\"", "\"410\"", "\"413\"",
            "\"415\"", "\"429\"", "\"503\"",
        ] {
            assert!(text.contains(status), "status {status} is documented");
        }
        assert!(text.contains("\"openapi\": \"3.1.0\""));
    }
}
