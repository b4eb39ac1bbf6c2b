//! What an operator's request can be refused: a sale unknown, busy with
//! another warm-up, or a part that did not answer (named), and every
//! request's.

use super::{audience_error, Refused, RequestError};
use crate::error_codes::ErrorCode;
use axum::response::{IntoResponse, Response};

/// Everything the operators' routes refuse.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// Any request's refusal.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Unknown or not warmed-up sale.
    #[error("sale not found or not warmed up")]
    SaleNotFound,
    /// A warm-up that would disturb orders in flight, or another warm-up.
    #[error("{0}")]
    SaleBusy(String),
    /// What the request needed did not answer (or refused): `what` is
    /// named — PostgreSQL, Redis, the Redis replicas — the cause logged,
    /// never answered. Nothing was kept beyond what repeating the request
    /// finishes.
    #[error("{what} did not answer; try again")]
    Unanswered {
        what: &'static str,
        #[source]
        cause: anyhow::Error,
    },
}

audience_error!(OperatorError);

impl OperatorError {
    /// What it answers.
    pub fn refused(&self) -> Refused {
        match self {
            Self::Request(error) => error.refused(),
            Self::SaleNotFound => Refused::new(ErrorCode::SaleNotFound, self),
            Self::SaleBusy(_) => Refused::new(ErrorCode::SaleBusy, self),
            Self::Unanswered { cause, .. } => {
                Refused::new(ErrorCode::TryAgain, self).caused_by(format_args!("{cause:#}"))
            }
        }
    }
}

impl IntoResponse for OperatorError {
    fn into_response(self) -> Response {
        self.refused().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_part_is_named_and_its_cause_only_logged() {
        let error = OperatorError::Unanswered { what: "PostgreSQL", cause: anyhow::anyhow!("10.0.0.7 refused") };
        let refused = error.refused();
        assert_eq!(
            (refused.body().code, refused.body().message.as_str()),
            (ErrorCode::TryAgain, "PostgreSQL did not answer; try again")
        );
        assert_eq!(OperatorError::SaleBusy("x".into()).into_response().status().as_u16(), 409);
        assert_eq!(OperatorError::SaleNotFound.into_response().status().as_u16(), 404);
    }
}
