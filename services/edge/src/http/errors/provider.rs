//! What the payment provider's notification can be refused: the order's
//! state refusing its payment, and every request's.

use super::{audience_error, Refused, RequestError};
use crate::ledger::PaymentError;
use axum::response::{IntoResponse, Response};

/// Everything the provider's route refuses.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Any request's refusal (a bad signature is `UNAUTHORIZED`).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A payment the order's state refuses (or the ledger did not answer).
    #[error(transparent)]
    Payment(#[from] PaymentError),
}

audience_error!(ProviderError);

impl ProviderError {
    /// What it answers.
    pub fn refused(&self) -> Refused {
        match self {
            Self::Request(error) => error.refused(),
            Self::Payment(error) => super::payment_refusal::refused(error),
        }
    }
}

impl IntoResponse for ProviderError {
    fn into_response(self) -> Response {
        self.refused().into_response()
    }
}
