//! The operators' room: the admin API (warm a sale up, close it, its
//! books; declare a release and read its books), the dashboard with its sign-in, and the dead-letters page.
//! Served on `admin_addr` (loopback unless set otherwise), with a budget
//! (`console.max_in_flight`) and a database pool (`console.pool_connections`)
//! of its own; failed admin authentications are counted, logged and
//! throttled per client around all of it ([`admin_guard`]).

pub(crate) mod admin;
pub mod admin_guard;
mod dashboard;
mod dead_letter_run;
mod dead_letters;
pub(crate) mod releases;
pub mod session;

use crate::http::errors::RequestError;
use crate::http::state::{Edge, Operators};
use axum::{middleware, Router};

/// The operators' routes.
pub fn router(state: &Operators) -> Router<Edge> {
    let method_not_allowed = || async { RequestError::MethodNotAllowed };
    admin::router()
        .method_not_allowed_fallback(method_not_allowed)
        .merge(dashboard::router().method_not_allowed_fallback(method_not_allowed))
        .merge(dead_letters::router().method_not_allowed_fallback(method_not_allowed))
        .layer(middleware::from_fn_with_state(state.admin_throttle.clone(), admin_guard::guard))
}
