//! The operator's API of releases: declare an activity a release (one
//! limit of units per customer across its sizes), and read its books.

use crate::http::auth;
use crate::http::bodies::ErrorBody;
use crate::http::errors::{OperatorError, RequestError};
use crate::http::extract::{from_serde, FromJsonBody, JsonBody};
use crate::http::state::Operators;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use seckill_shared::books::{self, ReleaseBooksError, ReleaseReport};
use seckill_shared::domain::ActivityId;

/// The most units one customer may be allowed across a release.
const MOST_PER_CUSTOMER: u32 = 1_000;

/// A release's limit.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = Release)]
pub struct ReleaseBody {
    /// Units one customer may hold across the release's sizes (its SKUs'
    /// sales), in live orders: 1 to 1000. Each size's own perUserLimit
    /// still holds.
    #[schema(minimum = 1, maximum = 1000, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub per_customer_limit: u32,
}

impl FromJsonBody for ReleaseBody {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        from_serde(bytes)
    }
}

/// Declares an activity a release: one limit of units per customer across
/// its sizes.
#[utoipa::path(
    put,
    path = "/admin/releases/{activityId}",
    tag = "admin",
    security(("admin" = [])),
    params(("activityId" = i64, Path, minimum = 1)),
    request_body(content = ReleaseBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Declared (the replicas have it), in force on every edge within a second: an order of any of the activity's sizes that would take a customer past the limit is 409 LIMIT_REACHED naming the release. A new limit replaces the old; orders placed stand. Declare it before the sizes sell: orders placed before it are not counted", body = ReleaseBody,
            links(("books" = (operation_id = "release_report", parameters(("activityId" = "$request.path.activityId")), description = "The release's books")))),
        (status = 400, description = "INVALID_REQUEST: a bad id or limit", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this client failed to authenticate too often (Retry-After)", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: Redis unavailable, or the replicas did not confirm; declare it again", body = ErrorBody),
    )
)]
pub(crate) async fn declare(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path(activity): Path<String>,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Json<ReleaseBody>, OperatorError> {
    auth::require_admin(&state.settings, &headers)?;
    let activity: ActivityId = activity.parse().map_err(OperatorError::invalid)?;
    if !(1..=MOST_PER_CUSTOMER).contains(&body.per_customer_limit) {
        return Err(OperatorError::invalid(format!("perCustomerLimit must be 1 to {MOST_PER_CUSTOMER}")));
    }
    state
        .stock
        .releases()
        .declare_release(activity, body.per_customer_limit)
        .await
        .map_err(|error| OperatorError::Unanswered { what: "Redis", cause: error.into() })?;
    state.releases.declared(activity);
    tracing::info!(%activity, limit = body.per_customer_limit, "release declared");
    Ok(Json(body))
}

/// A release's books: no customer over its limit in PostgreSQL's rows, and
/// the takes in Redis counting at least what those rows hold.
#[utoipa::path(
    get,
    path = "/admin/releases/{activityId}",
    tag = "admin",
    operation_id = "release_report",
    security(("admin" = [])),
    params(("activityId" = i64, Path, minimum = 1)),
    responses(
        (status = 200, description = "The release's books", body = ReleaseReport),
        (status = 400, description = "INVALID_REQUEST: a bad id", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: the activity declares no release", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this client failed to authenticate too often (Retry-After)", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: a source could not be read", body = ErrorBody),
    )
)]
pub(crate) async fn report(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path(activity): Path<String>,
) -> Result<Json<ReleaseReport>, OperatorError> {
    auth::require_admin(&state.settings, &headers)?;
    let activity: ActivityId = activity.parse().map_err(OperatorError::invalid)?;
    match books::reconcile_release(&state.stock, &state.console_db, activity).await {
        Ok(report) => Ok(Json(report)),
        Err(ReleaseBooksError::NotARelease(_)) => Err(RequestError::NotFound.into()),
        Err(error) => Err(OperatorError::try_again(error)),
    }
}
