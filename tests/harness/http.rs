//! A small keep-alive HTTP client for the tests.

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::collections::BTreeMap;

/// A response, its body parsed as JSON when it is JSON.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body as JSON (`Null` when it is not).
    pub json: Value,
    /// Raw body.
    pub text: String,
}

impl Reply {
    /// The body's `code`.
    pub fn code(&self) -> &str {
        self.json["code"].as_str().unwrap_or("")
    }
}

/// Asserts the contract's refusal: `status`, the body's `code`, and a
/// message for a human; `case` says which case failed.
pub fn assert_error(reply: &Reply, status: u16, code: &str, case: &str) {
    assert_eq!((reply.status.as_u16(), reply.code()), (status, code), "{case}: {}", reply.text);
    assert!(reply.json["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: a message is given");
}

/// The secret the tests' edges check payment notifications with.
pub const WEBHOOK_SECRET: &str = "whsec_tests_0123456789abcdef0123456789";

/// The provider's `Seckill-Signature` for `body`, signed now with
/// [`WEBHOOK_SECRET`].
pub fn signed_now(body: &str) -> String {
    seckill_edge::signature::sign(WEBHOOK_SECRET.as_bytes(), chrono::Utc::now().timestamp(), body.as_bytes())
}

/// The client.
#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Client {
    /// A client for `base` (`http://host:port`).
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            inner: HyperClient::builder(TokioExecutor::new()).pool_max_idle_per_host(512).build_http(),
            base: base.into(),
        }
    }

    /// Sends a request; panics if it cannot be sent.
    pub async fn send(&self, method: Method, path: &str, body: Option<&[u8]>, headers: &[(&str, &str)]) -> Reply {
        self.try_send(method, path, body, headers).await.expect("HTTP request")
    }

    /// An operator's call: `method` on `path` with the harness's admin
    /// token (a console's address).
    pub async fn admin(&self, method: Method, path: &str, body: Option<&[u8]>) -> Reply {
        let auth = format!("Bearer {}", crate::ADMIN_TOKEN);
        self.send(method, path, body, &[("authorization", &auth)]).await
    }

    /// Sends a request with exactly the headers given (no content type
    /// added); panics if it cannot be sent.
    pub async fn send_raw(&self, method: Method, path: &str, body: Option<Vec<u8>>, headers: &[(&str, &str)]) -> Reply {
        self.exchange(method, path, body.map(Bytes::from), headers).await.expect("HTTP request")
    }

    /// Sends a request (a body as JSON); `Err` when no answer came
    /// (connection refused, ...).
    pub async fn try_send(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Result<Reply, String> {
        let mut all = headers.to_vec();
        if body.is_some() && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
            all.push(("content-type", "application/json"));
        }
        self.exchange(method, path, body.map(Bytes::copy_from_slice), &all).await
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        headers: &[(&str, &str)],
    ) -> Result<Reply, String> {
        let mut builder = Request::builder().method(method).uri(format!("{}{}", self.base, path));
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let request = builder.body(Full::new(body.unwrap_or_default())).expect("request");
        let response = self.inner.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply { status, headers, json, text })
    }

    /// `POST /api/seckill/order`.
    pub async fn order(&self, activity: i64, sku: i64, user: i64) -> Reply {
        let body = format!(r#"{{"activityId":{activity},"skuId":{sku},"userId":{user}}}"#);
        self.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[]).await
    }

    /// `POST /api/seckill/order` for `quantity` units.
    pub async fn order_units(&self, activity: i64, sku: i64, user: i64, quantity: u32) -> Reply {
        let body = format!(r#"{{"activityId":{activity},"skuId":{sku},"userId":{user},"quantity":{quantity}}}"#);
        self.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[]).await
    }

    /// Each of `users` orders once (never again after a 503), at most
    /// `concurrency` at a time: the answers, counted by status.
    pub async fn order_each(
        &self,
        activity: i64,
        sku: i64,
        users: impl IntoIterator<Item = i64>,
        concurrency: usize,
    ) -> BTreeMap<u16, usize> {
        let statuses: Vec<u16> = stream::iter(users)
            .map(|user| async move { self.order(activity, sku, user).await.status.as_u16() })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let mut counts = BTreeMap::new();
        for status in statuses {
            *counts.entry(status).or_default() += 1;
        }
        counts
    }

    /// The payment provider's notification that `payment_id` paid
    /// `order_id`, signed now with [`WEBHOOK_SECRET`].
    pub async fn pay(&self, order_id: &str, payment_id: &str) -> Reply {
        let body = serde_json::json!({
            "paymentId": payment_id, "orderId": order_id, "status": "SUCCEEDED", "amount": 9900, "currency": "CNY"
        })
        .to_string();
        self.notify(&body, &signed_now(&body)).await
    }

    /// A payment notification with the signature header given.
    pub async fn notify(&self, body: &str, signature: &str) -> Reply {
        self.send(Method::POST, "/api/payments/notify", Some(body.as_bytes()), &[("seckill-signature", signature)])
            .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None, &[]).await
    }
}

/// The value of one series in a Prometheus text page (`series` is the name
/// with its labels, as exposed: `name{label="v"}`), read from its sample
/// line only. A `# HELP` line can hold the same words: a help text that
/// starts "1 while …" once made `contains("name 1")` true before the
/// gauge was ever set.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_help_line_is_not_a_sample() {
        let page = "# HELP circuit_open 1 while open\n# TYPE circuit_open gauge\ncircuit_open 0\nother{a=\"b\"} 3\n";
        assert_eq!(super::sample(page, "circuit_open"), Some(0.0), "the sample, not the help text");
        assert_eq!(super::sample(page, "other{a=\"b\"}"), Some(3.0), "a labelled series");
        assert_eq!(super::sample(page, "circuit"), None, "a prefix of a name is not the name");
    }
}
