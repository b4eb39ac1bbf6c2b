//! Guessing the admin token is slow and seen. Around the admin API and the
//! dashboard: every failed admin authentication (a 401 there) is counted
//! (`seckill_edge_admin_auth_failures_total`) and logged with the client's
//! address; a client past `admin_auth.failures_per_minute` (burst
//! `admin_auth.failure_burst`) is answered 429 `RATE_LIMITED`, before its
//! credentials are looked at, until its failures have recovered. Successful
//! requests cost nothing. The address is the TCP peer's: behind a proxy,
//! the proxy is the client.

use crate::client_addr::ClientAddr;
use crate::http::errors::RequestError;
use crate::limit::KeyedLimiter;
use crate::settings::AdminAuthSettings;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clients blocked at once, at most; past it the ones whose block ended
/// go, and if none has, the one closest to its end.
const MAX_BLOCKED: usize = 10_000;

/// Guessing clients whose failures are tracked before the recovered are
/// forgotten.
const MAX_TRACKED: usize = 10_000;

/// Failed admin authentications, per client.
pub struct AdminThrottle {
    failures: Arc<KeyedLimiter<IpAddr>>,
    /// Clients over their failures, and until when.
    blocked: Mutex<HashMap<IpAddr, Instant>>,
}

impl AdminThrottle {
    /// A throttle from settings.
    pub fn new(settings: &AdminAuthSettings) -> Self {
        let quota = crate::limit::quota_per_minute(settings.failures_per_minute, settings.failure_burst);
        Self { failures: KeyedLimiter::new(quota, MAX_TRACKED), blocked: Mutex::default() }
    }

    /// How long `client` is still blocked, if it is.
    fn blocked_for(&self, client: IpAddr) -> Option<Duration> {
        let blocked = self.blocked.lock();
        let until = *blocked.get(&client)?;
        until.checked_duration_since(Instant::now())
    }

    /// Counts a failure of `client`; blocks it when that was one too many.
    fn failed(&self, client: IpAddr) {
        if let Err(wait) = self.failures.check(&client) {
            let mut blocked = self.blocked.lock();
            let now = Instant::now();
            if blocked.len() >= MAX_BLOCKED {
                blocked.retain(|_, until| *until > now);
            }
            if blocked.len() >= MAX_BLOCKED {
                let soonest = blocked.iter().min_by_key(|(_, until)| **until).map(|(client, _)| *client);
                if let Some(client) = soonest {
                    blocked.remove(&client);
                }
            }
            blocked.insert(client, now + wait);
        }
    }

    /// Forgets the failures of clients that recovered and the blocks that
    /// ended (the limiter clean-up, every 30 s).
    pub fn shrink(&self) {
        self.failures.shrink();
        let now = Instant::now();
        self.blocked.lock().retain(|_, until| *until > now);
    }
}

/// The middleware: 429 for a blocked client, a failure counted and logged
/// for every 401.
pub async fn guard(State(throttle): State<Arc<AdminThrottle>>, request: Request, next: Next) -> Response {
    let client = request.extensions().get::<ClientAddr>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |client| client.0);
    if let Some(wait) = throttle.blocked_for(client) {
        metrics::counter!("seckill_edge_admin_auth_throttled_total").increment(1);
        return RequestError::RateLimited(wait).into_response();
    }
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        metrics::counter!("seckill_edge_admin_auth_failures_total").increment(1);
        tracing::warn!(%client, path, "admin authentication failed");
        throttle.failed(client);
    }
    response
}
