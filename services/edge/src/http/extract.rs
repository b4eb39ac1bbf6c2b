//! The one way a handler reads a JSON body: declared `application/json`
//! (415 otherwise — a browser's simple cross-origin POST is `text/plain`
//! and must not place an order), within the configured limit (413 over it),
//! received within `connections.body_timeout_ms` (408 otherwise: hyper then
//! closes the connection, its body unread), of the expected shape (400
//! otherwise), every refusal an [`RequestError`].

use super::errors::RequestError;
use super::state::BodyLimits;
use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::header;

/// A body parsed into `T`.
pub struct JsonBody<T>(pub T);

/// How a type is read from a JSON body.
pub trait FromJsonBody: Sized {
    /// Parses `bytes`; a refusal names what is wrong.
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError>;
}

impl<S: Send + Sync, T: FromJsonBody> FromRequest<S> for JsonBody<T>
where
    BodyLimits: FromRef<S>,
{
    type Rejection = RequestError;

    async fn from_request(request: Request, state: &S) -> Result<Self, RequestError> {
        let limits = BodyLimits::from_ref(state);
        let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(is_json) {
            return Err(RequestError::UnsupportedMediaType(content_type.unwrap_or("none").chars().take(64).collect()));
        }
        let deadline = limits.deadline;
        let bytes = tokio::time::timeout(deadline, read(request, limits.max_bytes))
            .await
            .map_err(|_| RequestError::RequestTimeout(deadline))??;
        T::from_json(&bytes).map(JsonBody)
    }
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Parses with serde (derived types: the admin API).
pub fn from_serde<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RequestError> {
    serde_json::from_slice(bytes).map_err(|e| RequestError::InvalidRequest(format!("request body: {e}")))
}

/// Reads the body within `limit`: 413 over it, 400 when it cannot be read.
async fn read(request: Request, limit: usize) -> Result<Bytes, RequestError> {
    axum::body::to_bytes(request.into_body(), limit).await.map_err(|error| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut too_large = false;
        while let Some(current) = source {
            too_large |= current.is::<http_body_util::LengthLimitError>();
            source = current.source();
        }
        if too_large {
            RequestError::PayloadTooLarge(limit)
        } else {
            RequestError::InvalidRequest(format!("could not read the request body: {error}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn only_json_is_json() {
        for (value, json) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("application/jsonp", false),
            ("", false),
        ] {
            assert_eq!(is_json(value), json, "{value}");
        }
    }
}
