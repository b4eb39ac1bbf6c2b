//! The edge's refusals, by audience. [`RequestError`] is what any request
//! can be refused for — its body, its credentials, its rate, its path, a
//! part unavailable, a bug; each audience's error holds it and adds its
//! own: [`BuyerError`], [`ProviderError`], [`OperatorError`]. Each maps
//! every variant, exhaustively, to a [`Refused`]: its code (whose one HTTP
//! status `error_codes.rs` declares), its `{"code","message",…}` body, the
//! wait a `Retry-After` names, and — a 5xx only — the cause, which travels
//! to the `observe` middleware to be logged once with the request's ids,
//! never answered.

mod buyer;
mod operator;
mod payment_refusal;
mod provider;
mod refused;
mod request;

pub use buyer::BuyerError;
pub use operator::OperatorError;
pub use provider::ProviderError;
pub(crate) use refused::{ErrorDetail, Refused};
pub(crate) use request::audience_error;
pub use request::RequestError;
