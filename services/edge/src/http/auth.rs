//! Credentials: the admin bearer token, and the buyer's identity
//! ([`crate::identity`]: a JWT or the gateway's header) that must name the
//! user the request acts for.

use super::errors::RequestError;
use super::operators::session::Sessions;
use super::state::Users;
use crate::identity::bearer;
use crate::settings::Settings;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use seckill_shared::domain::UserId;
use std::net::SocketAddr;

/// Refuses the request unless it carries `Authorization: Bearer <admin token>`.
/// With no admin token configured, the admin API refuses everything.
pub fn require_admin(settings: &Settings, headers: &HeaderMap) -> Result<(), RequestError> {
    check_admin_token(
        settings,
        bearer(headers).ok_or_else(|| RequestError::Unauthorized("missing bearer token".into()))?,
    )
}

/// Whether `given` is the admin token (compared in constant time); with
/// no admin token configured, nothing is.
pub fn check_admin_token(settings: &Settings, given: &str) -> Result<(), RequestError> {
    let Some(expected) =
        settings.admin_token.as_ref().map(seckill_shared::config::Secret::expose).filter(|t| !t.is_empty())
    else {
        return Err(RequestError::Unauthorized("the admin API is disabled (SECKILL_ADMIN_TOKEN is not set)".into()));
    };
    if constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(RequestError::Unauthorized("invalid admin token".into()))
    }
}

/// Admin routes a browser reads: the dashboard's session cookie, or the
/// admin bearer token.
pub fn require_admin_or_session(
    settings: &Settings,
    sessions: &Sessions,
    headers: &HeaderMap,
) -> Result<(), RequestError> {
    if sessions.is_signed_in(headers) {
        return Ok(());
    }
    require_admin(settings, headers)
}

/// The user the request is for: `None` when no identity is configured,
/// 401 when one is and the request names no user it can prove.
pub fn caller(users: &Users, headers: &HeaderMap) -> Result<Option<UserId>, RequestError> {
    let Some(identity) = users.identity.as_deref() else { return Ok(None) };
    identity.user(&users.settings, headers).map(Some).map_err(|refused| RequestError::Unauthorized(refused.to_string()))
}

/// In gateway mode (the only mode it is layered in: `super::router`), a
/// buyer's request keeps the gateway's user header only when it came from a
/// trusted proxy.
pub async fn gateway_header_from_trusted_proxies(
    State(users): State<Users>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(identity) = users.identity.as_deref() {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        identity.drop_untrusted_header(request.headers_mut(), peer);
    }
    next.run(request).await
}

/// When user auth is on, checks the JWT and that its `sub` is `user`.
pub fn require_user(users: &Users, headers: &HeaderMap, user: UserId) -> Result<(), RequestError> {
    match caller(users, headers)? {
        Some(subject) if subject != user => Err(RequestError::Forbidden("the token is for another user".into())),
        _ => Ok(()),
    }
}

/// Whether the request may act for `user` where acting for someone else
/// would do harm (cancel an order, read orders by user id): the JWT names
/// `user`; with no identity configured, only under `auth.allow_anonymous`.
pub fn require_identity(users: &Users, headers: &HeaderMap, user: UserId) -> Result<(), RequestError> {
    if !identified(users) {
        return Err(RequestError::Unauthorized(
            "no user identity is configured: this needs a user token (or auth.allow_anonymous)".into(),
        ));
    }
    require_user(users, headers, user)
}

/// Whether an answer may name the user's order to this request: the user
/// was identified by a token, or anonymous requests are trusted.
pub fn identified(users: &Users) -> bool {
    users.identity.is_some() || users.settings.auth.allow_anonymous
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
