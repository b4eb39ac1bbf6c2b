//! The edge's HTTP surface: the two listeners' routers. Its rooms are by
//! audience, each a folder with its own router and its own state
//! ([`state`]: what `lib.rs` hands each audience):
//! [`buyers`] and the payment [`provider`] on `http_addr`, the
//! [`operators`] on `admin_addr`. Beside them: [`observe`] wraps every
//! request (ids, span, metrics, the one log line of a failure);
//! [`extract`] is the one way a JSON body is read; [`auth`] checks the
//! admin token, sessions and user tokens; [`health`] (its readiness found
//! by [`readiness`]) and [`openapi`] are served on the buyers' address.

mod auth;
pub mod bodies;
pub mod buyers;
pub(crate) mod errors;
mod extract;
mod health;
mod observe;
pub mod openapi;
pub mod operators;
mod pages;
pub mod provider;
pub mod readiness;
pub mod state;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::BoxError;
use axum::Router;
use errors::RequestError;
use state::Edge;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;

/// The router of `http_addr`: the buyers' and the provider's routes within
/// `connections.max_in_flight`, the operators' too (within their own
/// budget) when the console shares the address; the probes, metrics and
/// the API document outside any budget, so an edge at its limit is still
/// seen alive and ready.
pub fn public_router(edge: Edge) -> Router {
    let settings = &edge.buyers.settings;
    let rooms = within(
        buyers::router(&edge.buyers).merge(provider::router()),
        settings.connections.max_in_flight,
        "connections.max_in_flight",
    );
    let rooms = if settings.console_shares_address() { rooms.merge(console(&edge)) } else { rooms };
    let method_not_allowed = || async { RequestError::MethodNotAllowed };
    finish(rooms.merge(health::router().method_not_allowed_fallback(method_not_allowed)).merge(openapi::router()), edge)
}

/// The router of `admin_addr`: the operators' routes and the probes.
pub fn console_router(edge: Edge) -> Router {
    let method_not_allowed = || async { RequestError::MethodNotAllowed };
    finish(console(&edge).merge(health::probes().method_not_allowed_fallback(method_not_allowed)), edge)
}

/// The operators' routes within their own budget.
fn console(edge: &Edge) -> Router<Edge> {
    within(operators::router(&edge.operators), edge.operators.settings.console.max_in_flight, "console.max_in_flight")
}

/// `routes`, with requests beyond `max` answered 503 at once, nothing done.
fn within(routes: Router<Edge>, max: usize, setting: &'static str) -> Router<Edge> {
    routes.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(move |_: BoxError| async move {
                RequestError::TryAgain(anyhow::anyhow!("the edge is at {setting}"))
            }))
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::new(max)),
    )
}

/// Every path or method nothing serves answers the contract's JSON error;
/// the body limit is enforced by our own extractor (413 with the
/// contract's body), so axum's default limit must not answer first.
fn finish(routes: Router<Edge>, edge: Edge) -> Router {
    routes
        .fallback(|| async { RequestError::NotFound })
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(observe::observe))
        .with_state(edge)
}
