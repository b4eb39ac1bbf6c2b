//! The operators' live sale dashboard: `GET /admin/dashboard` (the page, or
//! its sign-in form), `POST /admin/login` (field `token`: the admin token,
//! exchanged for a session cookie) and `/admin/logout`, and behind them
//! the figures as JSON (`/admin/dashboard/snapshot`) and as Server-Sent
//! Events once a second (`/admin/dashboard/events`), which take the
//! session cookie or the admin bearer token. The page's script and style
//! are embedded in the binary: nothing is fetched from elsewhere.

use crate::dashboard::Figures;
use crate::http::auth;
use crate::http::errors::{OperatorError, RequestError};
use crate::http::pages::{asset, html};
use crate::http::state::Edge;
use crate::http::state::Operators;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use std::convert::Infallible;
use std::sync::Arc;

const PAGE: &str = include_str!("../../../assets/dashboard.html");
const LOGIN: &str = include_str!("../../../assets/login.html");
const SCRIPT: &str = include_str!("../../../assets/dashboard.js");
const STYLE: &str = include_str!("../../../assets/dashboard.css");

/// Dashboard routes.
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/admin/dashboard", get(page))
        .route("/admin/dashboard/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/admin/dashboard/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/admin/dashboard/snapshot", get(snapshot))
        .route("/admin/dashboard/events", get(events))
        .route("/admin/login", post(login).layer(DefaultBodyLimit::max(4096)))
        .route("/admin/logout", post(logout))
}

/// The pages a sign-in may lead back to.
const PAGES: [&str; 2] = ["/admin/dashboard", "/admin/dead-letters"];

/// The sign-in form (`message` above it), leading back to `next`.
pub(super) fn login_page(status: StatusCode, message: &str, next: &str) -> Response {
    let next = PAGES.iter().find(|page| **page == next).unwrap_or(&PAGES[0]);
    html(status, LOGIN.replace("<!--message-->", message).replace("<!--next-->", next))
}

/// The dashboard, or the sign-in form when the browser has no session.
async fn page(State(state): State<Operators>, headers: HeaderMap) -> Response {
    if auth::require_admin_or_session(&state.settings, &state.sessions, &headers).is_ok() {
        html(StatusCode::OK, page_for(&state))
    } else {
        login_page(StatusCode::OK, "", PAGES[0])
    }
}

/// The page, with a warning under its title when anyone may act for any
/// user (`auth.allow_anonymous` with no identity configured).
fn page_for(state: &Operators) -> String {
    if state.users.identity.is_none() && state.settings.auth.allow_anonymous {
        let warning = "<p class=\"warning\" id=\"anonymous\">auth.allow_anonymous: no user identity is configured \
                       — anyone may cancel any order and read orders by user id</p>";
        PAGE.replacen("</h1>", &format!("</h1>\n  {warning}"), 1)
    } else {
        PAGE.to_owned()
    }
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
    /// Who signs in (the audit trail's operator of what they do).
    #[serde(default)]
    name: String,
    /// The page to go back to.
    #[serde(default)]
    next: String,
}

/// The operator a sign-in names: the form's name, cleaned
/// ([`super::session::operator_name`]); a form without one (a script
/// posting the token alone) is the dashboard's admin.
fn operator_of(name: &str) -> String {
    super::session::operator_name(name).unwrap_or_else(|| "admin (dashboard)".into())
}

/// Exchanges the admin token for a session cookie, then back to the page.
async fn login(State(state): State<Operators>, Form(form): Form<LoginForm>) -> Result<Response, OperatorError> {
    // Guessing tokens costs what any request costs.
    state.limits.check_global().map_err(RequestError::RateLimited)?;
    if let Err(refused) = auth::check_admin_token(&state.settings, &form.token) {
        return Ok(login_page(StatusCode::UNAUTHORIZED, &format!("<p class=\"error\">{refused}</p>"), &form.next));
    }
    let cookie = state.sessions.open(&operator_of(&form.name));
    let next = PAGES.iter().find(|page| **page == form.next).unwrap_or(&PAGES[0]);
    Ok((StatusCode::SEE_OTHER, [(LOCATION, next.parse().expect("a path")), (SET_COOKIE, cookie)]).into_response())
}

/// Ends the session.
async fn logout(State(state): State<Operators>, headers: HeaderMap) -> Response {
    let cookie = state.sessions.close(&headers);
    (StatusCode::SEE_OTHER, [(LOCATION, "/admin/dashboard".parse().expect("a path")), (SET_COOKIE, cookie)])
        .into_response()
}

/// The latest figures as JSON.
async fn snapshot(State(state): State<Operators>, headers: HeaderMap) -> Result<Json<Arc<Figures>>, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    let figures = state
        .dashboard
        .current()
        .await
        .ok_or_else(|| RequestError::Internal(anyhow::anyhow!("the collector sent nothing")))?;
    Ok(Json(figures))
}

/// The figures as Server-Sent Events (`figures`), one set a second, for as
/// long as the credentials hold: the stream ends at sign-out, when the
/// session expires, or when the admin token changes.
async fn events(State(state): State<Operators>, headers: HeaderMap) -> Result<Response, OperatorError> {
    auth::require_admin_or_session(&state.settings, &state.sessions, &headers)?;
    let receiver = state.dashboard.watch();
    let stream = futures::stream::unfold((receiver, state, headers), |(mut receiver, state, headers)| async move {
        receiver.changed().await.ok()?;
        if auth::require_admin_or_session(&state.settings, &state.sessions, &headers).is_err() {
            return None;
        }
        let figures = receiver.borrow_and_update().clone()?;
        let event = Event::default()
            .event("figures")
            .json_data(&*figures)
            .unwrap_or_else(|_| Event::default().comment("unserializable"));
        Some((Ok::<_, Infallible>(event), (receiver, state, headers)))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}
