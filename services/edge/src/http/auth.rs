//! Credentials: the admin bearer token, and the optional user JWT (HS256)
//! whose `sub` must be the user the request acts for.

use super::{ApiError, AppState};
use axum::http::{header, HeaderMap};
use seckill_shared::domain::UserId;

/// Refuses the request unless it carries `Authorization: Bearer <admin token>`.
/// With no admin token configured, the admin API refuses everything.
pub fn require_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    check_admin_token(state, bearer(headers).ok_or_else(|| ApiError::Unauthorized("missing bearer token".into()))?)
}

/// Whether `given` is the admin token (compared in constant time); with
/// no admin token configured, nothing is.
pub fn check_admin_token(state: &AppState, given: &str) -> Result<(), ApiError> {
    let Some(expected) = state.settings.admin_token.as_deref().filter(|t| !t.is_empty()) else {
        return Err(ApiError::Unauthorized("the admin API is disabled (SECKILL_ADMIN_TOKEN is not set)".into()));
    };
    if constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized("invalid admin token".into()))
    }
}

/// Admin routes a browser reads: the dashboard's session cookie, or the
/// admin bearer token.
pub fn require_admin_or_session(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    if state.sessions.is_signed_in(headers) {
        return Ok(());
    }
    require_admin(state, headers)
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: serde_json::Value,
}

/// The user the request's JWT is for: `None` when user auth is off, 401
/// when it is on and the token is missing or invalid.
pub fn caller(state: &AppState, headers: &HeaderMap) -> Result<Option<UserId>, ApiError> {
    let Some(key) = state.user_key.as_ref() else { return Ok(None) };
    let token = bearer(headers).ok_or_else(|| ApiError::Unauthorized("missing bearer token".into()))?;
    let validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    // The library's words stay in the log: they tell a forger what to fix.
    let data = jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|error| {
        tracing::info!(%error, "user token refused");
        ApiError::Unauthorized("invalid token".into())
    })?;
    let subject = match &data.claims.sub {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => return Err(ApiError::Unauthorized("token subject is not a user id".into())),
    };
    subject.parse().map(Some).map_err(|_| ApiError::Unauthorized("token subject is not a user id".into()))
}

/// When user auth is on, checks the JWT and that its `sub` is `user`.
pub fn require_user(state: &AppState, headers: &HeaderMap, user: UserId) -> Result<(), ApiError> {
    match caller(state, headers)? {
        Some(subject) if subject != user => Err(ApiError::Forbidden("the token is for another user".into())),
        _ => Ok(()),
    }
}

/// Whether the request may act for `user` where acting for someone else
/// would do harm (cancel an order, read orders by user id): the JWT names
/// `user`; with no identity configured, only under `auth.allow_anonymous`.
pub fn require_identity(state: &AppState, headers: &HeaderMap, user: UserId) -> Result<(), ApiError> {
    if state.user_key.is_none() && !state.settings.auth.allow_anonymous {
        return Err(ApiError::Unauthorized(
            "no user identity is configured: this needs a user token (or auth.allow_anonymous)".into(),
        ));
    }
    require_user(state, headers, user)
}

/// Whether an answer may name the user's order to this request: the user
/// was identified by a token, or anonymous requests are trusted.
pub fn identified(state: &AppState) -> bool {
    state.user_key.is_some() || state.settings.auth.allow_anonymous
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
