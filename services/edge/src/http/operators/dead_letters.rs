//! The dashboard's dead-letters page (`GET /admin/dead-letters`) and the
//! JSON it works with: the figures (`/admin/dead-letters/stats`, as `dlq
//! stats`), the records a filter takes (`/admin/dead-letters/records`, as
//! `dlq list`), and runs — a dry run, then the run itself
//! (`POST /admin/dead-letters/runs`), which is `seckillctl dlq` itself in a
//! process of its own (`seckill_shared::dlq`'s audited replay and redrive). Only a signed-in
//! admin acts: the session's name (or, with the bearer token, the body's
//! `operator`) is the run's operator, and every run — dry or not — is in
//! the audit trail (`/admin/dead-letters/runs`, `dlq runs`). A run names
//! its submission: the same form sent twice runs once. The run goes on in
//! its own process, so a browser that leaves does not cut it in half.

use super::dashboard::login_page;
use super::dead_letter_run;
use crate::http::auth;
use crate::http::errors::{OperatorError, RequestError};
use crate::http::extract::{from_serde, FromJsonBody, JsonBody};
use crate::http::pages::{asset, html};
use crate::http::state::Edge;
use crate::http::state::Operators;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use seckill_shared::db::dead_letters::Scope;
use seckill_shared::dlq::{self, runs::RunRow, Entry, Filter, RecordDone, RunError};

const PAGE: &str = include_str!("../../../assets/dead_letters.html");
const SCRIPT: &str = include_str!("../../../assets/dead_letters.js");

/// The most records a list answers.
const MOST_LISTED: usize = 1_000;

/// Dead-letter routes.
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/admin/dead-letters", get(page))
        .route("/admin/dead-letters/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/admin/dead-letters/stats", get(stats))
        .route("/admin/dead-letters/records", get(records))
        .route("/admin/dead-letters/runs", post(start_run).get(latest_runs))
        .route("/admin/dead-letters/runs/{run_id}", get(one_run))
}

/// The page, or the sign-in form leading back to it.
async fn page(State(state): State<Operators>, headers: HeaderMap) -> Response {
    match auth::require_admin_or_session(&state.settings, &state.sessions, &headers) {
        Ok(()) => html(StatusCode::OK, PAGE.to_owned()),
        Err(_) => login_page(StatusCode::OK, "", "/admin/dead-letters"),
    }
}

impl From<RunError> for OperatorError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Unreadable(error) => OperatorError::try_again(error),
            // A run that could not do what it was asked (a topic that
            // does not exist): the operator reads why.
            RunError::Failed(error) => OperatorError::invalid(format_args!("{error:#}")),
        }
    }
}

/// Which sale and since when the figures count.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsQuery {
    sale: Option<String>,
    since: Option<chrono::DateTime<chrono::Utc>>,
}

/// The dead letters' figures, with how many the index has not read yet.
async fn stats(
    State(state): State<Operators>,
    headers: HeaderMap,
    Query(query): Query<StatsQuery>,
) -> Result<Json<dlq::stats::Report>, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    let sale = query
        .sale
        .filter(|s| !s.is_empty())
        .map(|s| dlq::parse_sale(&s))
        .transpose()
        .map_err(OperatorError::invalid)?;
    let kafka = &state.settings.servers.kafka;
    let topic = seckill_shared::kafka::Topics::new(kafka).dlq;
    let report = dlq::stats::report(kafka, &state.console_db, &topic, Scope { since: query.since, sale })
        .await
        .map_err(OperatorError::try_again)?;
    Ok(Json(report))
}

/// A list's filter (empty fields: any) and length.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    sale: Option<String>,
    reason: Option<String>,
    order: Option<String>,
    since: Option<String>,
    limit: Option<usize>,
}

impl RecordsQuery {
    fn filter(&self) -> Result<Filter, OperatorError> {
        let given =
            |field: &Option<String>| field.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let since = given(&self.since)
            .map(|t| chrono::DateTime::parse_from_rfc3339(&t).map(|t| t.to_utc()))
            .transpose()
            .map_err(|e| OperatorError::invalid(format!("since: RFC 3339 ({e})")))?;
        let sale = given(&self.sale).map(|s| dlq::parse_sale(&s)).transpose().map_err(OperatorError::invalid)?;
        Ok(Filter { reason: given(&self.reason), order: given(&self.order), since, sale, position: None })
    }
}

/// The dead letters a filter takes, oldest first.
async fn records(
    State(state): State<Operators>,
    headers: HeaderMap,
    Query(query): Query<RecordsQuery>,
) -> Result<Json<Vec<Entry>>, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    let limit = query.limit.unwrap_or(200).clamp(1, MOST_LISTED);
    Ok(Json(dlq::list(&state.settings.servers, query.filter()?, limit).await?))
}

/// Which run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Replay,
    Redrive,
}

/// A run the page (or a script with the admin token) asks for.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunRequest {
    kind: Kind,
    #[serde(default)]
    filter: Filter,
    /// Say what would be done; change nothing.
    dry_run: bool,
    /// Why (required for a run that acts).
    #[serde(default)]
    note: String,
    /// The form's one-time key: sent twice, the run happens once.
    submission: String,
    /// Who, when the request carries the admin token rather than a session.
    operator: Option<String>,
    /// A replay to this topic instead of each record's own (it must exist).
    to: Option<String>,
    /// At most this many sent or placed.
    limit: Option<u64>,
    /// Also records re-produced `dlq.max_replays` times already.
    #[serde(default)]
    force: bool,
}

impl FromJsonBody for RunRequest {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        from_serde(bytes)
    }
}

/// A run as it ended (or, for a submission sent again, the run it started).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RunBody {
    run: RunRow,
    /// What it did with each record.
    records: Vec<RecordDone>,
}

/// Who acts: the session's name, else (with the admin token) the body's.
fn operator(state: &Operators, headers: &HeaderMap, asked: Option<&str>) -> Result<String, OperatorError> {
    if let Some(signed_in) = state.sessions.operator(headers) {
        return Ok(signed_in);
    }
    auth::require_admin(&state.settings, headers)?;
    asked
        .and_then(super::session::operator_name)
        .ok_or_else(|| OperatorError::invalid("operator: who runs it (a script with the admin token names itself)"))
}

/// Starts a run (`seckillctl`, a process of its own: [`dead_letter_run`])
/// and answers once it ended; the run goes on if the caller leaves.
async fn start_run(
    State(state): State<Operators>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Json<RunBody>, OperatorError> {
    let operator = operator(&state, &headers, request.operator.as_deref())?;
    if request.submission.trim().is_empty() || request.submission.len() > 128 {
        return Err(OperatorError::invalid("submission: the form's one-time key, 1 to 128 characters"));
    }
    if !request.dry_run && request.note.trim().is_empty() {
        return Err(OperatorError::invalid("note: say why (kept in the audit trail)"));
    }
    if request.kind == Kind::Redrive && request.to.is_some() {
        return Err(OperatorError::invalid(
            "to: a redrive places orders on the orders topic; only a replay takes a topic",
        ));
    }
    let asked = dead_letter_run::Asked {
        kind: match request.kind {
            Kind::Replay => "replay",
            Kind::Redrive => "redrive",
        },
        filter: request.filter,
        to: request.to,
        note: request.note.trim().to_owned(),
        operator,
        submission: request.submission,
        limit: request.limit,
        dry_run: request.dry_run,
        force: request.force,
    };
    let run_id = dead_letter_run::run(&state, asked).await?;
    Ok(Json(run_body(&state, run_id).await?))
}

async fn run_body(state: &Operators, run_id: i64) -> Result<RunBody, OperatorError> {
    let run = dlq::runs::latest(&state.console_db, 1, Some(run_id)).await?.pop().ok_or(RequestError::NotFound)?;
    let records = dlq::runs::records(&state.console_db, run_id).await?;
    Ok(RunBody { run, records })
}

/// The latest runs, newest first: the audit trail.
async fn latest_runs(State(state): State<Operators>, headers: HeaderMap) -> Result<Json<Vec<RunRow>>, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    Ok(Json(dlq::runs::latest(&state.console_db, 50, None).await?))
}

/// One run, with what it did with each record.
async fn one_run(
    State(state): State<Operators>,
    headers: HeaderMap,
    Path(run_id): Path<i64>,
) -> Result<Json<RunBody>, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    Ok(Json(run_body(&state, run_id).await?))
}
