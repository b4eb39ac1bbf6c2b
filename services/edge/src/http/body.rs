//! The one way a handler reads a JSON body: within the configured limit
//! (413 over it), as UTF-8 JSON of the expected shape (400 otherwise),
//! every refusal an [`ApiError`].

use super::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};

/// A body parsed into `T`.
pub struct JsonBody<T>(pub T);

/// How a type is read from a JSON body.
pub trait FromJsonBody: Sized {
    /// Parses `bytes`; a refusal names what is wrong.
    fn from_json(bytes: &[u8]) -> Result<Self, ApiError>;
}

impl<T: FromJsonBody> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = read(request, state.settings.body_limit_bytes).await?;
        T::from_json(&bytes).map(JsonBody)
    }
}

/// Parses with serde (derived types: the admin API).
pub fn from_serde<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::InvalidRequest(format!("request body: {e}")))
}

/// Reads the body within `limit`: 413 over it, 400 when it cannot be read.
async fn read(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(request.into_body(), limit).await.map_err(|error| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut too_large = false;
        while let Some(current) = source {
            too_large |= current.is::<http_body_util::LengthLimitError>();
            source = current.source();
        }
        if too_large {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::InvalidRequest(format!("could not read the request body: {error}"))
        }
    })
}
