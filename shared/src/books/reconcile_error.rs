//! Why a reconciliation could not be made.

use crate::domain::SaleKey;

/// Why a reconciliation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The sale is not in PostgreSQL.
    #[error("sale {0} not found")]
    SaleNotFound(SaleKey),
    /// A source could not be read.
    #[error("could not read {source_name}: {error:#}")]
    Source {
        /// `redis`, `postgresql` or `kafka`.
        source_name: &'static str,
        /// Why.
        #[source]
        error: anyhow::Error,
    },
}

impl From<sqlx::Error> for ReconcileError {
    /// PostgreSQL could not be read (or did not answer within its deadline).
    fn from(error: sqlx::Error) -> Self {
        Self::Source { source_name: "postgresql", error: error.into() }
    }
}

/// Maps an error of `source_name` into a [`ReconcileError`].
pub(super) fn source<E: Into<anyhow::Error>>(source_name: &'static str) -> impl Fn(E) -> ReconcileError {
    move |error| ReconcileError::Source { source_name, error: error.into() }
}
