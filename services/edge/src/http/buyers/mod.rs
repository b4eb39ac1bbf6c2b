//! The buyers' room: placing an order and reading it, cancelling it, the
//! waiting room (join, poll, proof of work) and its page, a draw's entries. Served on
//! `http_addr`, inside the buyers' `connections.max_in_flight` budget; the
//! API (not the page) under CORS and, in gateway mode, the gateway's header
//! check.

pub(crate) mod checkout;
mod cors;
pub(crate) mod draw;
pub(crate) mod joining;
pub(crate) mod order;
mod order_admission;
mod order_outcome;
mod order_release;
pub(crate) mod order_request;
pub(crate) mod queue;
pub(crate) mod queue_bodies;
mod queue_page;

use crate::http::auth;
use crate::http::errors::RequestError;
use crate::http::state::{Buyers, Edge};
use axum::{middleware, Router};

/// The buyers' routes.
pub fn router(state: &Buyers) -> Router<Edge> {
    // Each group answers a wrong method itself, inside its layers: a CORS
    // preflight to the buyer's API is answered by its CORS layer first.
    let method_not_allowed = || async { RequestError::MethodNotAllowed };
    let api = order::router()
        .merge(checkout::router())
        .merge(queue::router())
        .merge(draw::router())
        .method_not_allowed_fallback(method_not_allowed);
    // Gateway mode only: the hot path pays for no layer it does not need.
    let api = match state.users.identity.as_deref() {
        Some(crate::identity::Identity::Gateway { .. }) => {
            api.layer(middleware::from_fn_with_state(state.users.clone(), auth::gateway_header_from_trusted_proxies))
        }
        _ => api,
    };
    let api = match cors::layer(&state.settings.cors) {
        Some(cors) => api.layer(cors).layer(middleware::map_response(cors::preflight_no_content)),
        None => api,
    };
    // The waiting room's page: a browser's, outside CORS (same origin).
    let page = queue_page::router().method_not_allowed_fallback(method_not_allowed);
    api.merge(page)
}
