//! The edge's settings by concern: rate limits, CORS, connections, status
//! reads, the admin throttle, and buyers' identity beyond the JWT.

use seckill_shared::config::Secret;
use serde::{Deserialize, Serialize};

/// Rate limits (GCRA, in process).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Requests per second across all users.
    pub global_per_second: u32,
    /// Burst across all users.
    pub global_burst: u32,
    /// Requests per second per user.
    pub per_user_per_second: u32,
    /// Burst per user.
    pub per_user_burst: u32,
    /// Orders per second per client address (the TCP peer, or the client a
    /// trusted proxy names: `auth.trusted_proxies`); 0 (the default): no
    /// per-client limit. One address cannot then spend the global budget
    /// with made-up user ids.
    pub per_client_per_second: u32,
    /// Burst per client address (0: one second's worth).
    pub per_client_burst: u32,
    /// How many users' (and client addresses') limiter states to keep
    /// before forgetting those that fully recovered (bounds memory under a
    /// flood of distinct user ids or addresses).
    pub max_tracked_users: usize,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        // Generous globally (the seed's 200-way burst of distinct users must
        // pass), strict per user (one buyer cannot hammer the sale).
        Self {
            global_per_second: 200_000,
            global_burst: 50_000,
            per_user_per_second: 5,
            per_user_burst: 10,
            per_client_per_second: 0,
            per_client_burst: 0,
            max_tracked_users: 500_000,
        }
    }
}

/// Which web origins may call the buyer's API from a browser.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorsSettings {
    /// Origins allowed to call `/api/*` (e.g. `https://shop.example`); empty:
    /// no CORS headers at all; `*`: any origin. The admin API never answers
    /// cross-origin. From the environment: comma-separated.
    #[serde(deserialize_with = "seckill_shared::config::list_or_comma_separated")]
    pub allowed_origins: Vec<String>,
    /// How long a browser may cache a preflight's answer.
    pub max_age_secs: u64,
}

impl Default for CorsSettings {
    fn default() -> Self {
        Self { allowed_origins: Vec::new(), max_age_secs: 600 }
    }
}

/// How the edge holds connections against slow and idle clients
/// ([`crate::serve`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionSettings {
    /// A connection that has not sent a whole request header within this
    /// long is closed: a new one (headers never finished) and one idle
    /// between two requests alike — this is the keep-alive idle timeout.
    pub header_timeout_ms: u64,
    /// A request body not received in full within this long is answered
    /// 408 `REQUEST_TIMEOUT` and its connection closed.
    pub body_timeout_ms: u64,
    /// A response the client has not taken within this long of the first
    /// write its socket could not take ends the connection (a client that
    /// pipelines requests and never reads would hold it forever).
    pub write_timeout_ms: u64,
    /// Most connections open at once; one more is closed at once. Lowered
    /// at start (with a warning) to stay below the descriptor limit.
    pub max_connections: usize,
    /// Most requests handled at once (health probes and metrics aside);
    /// one more is answered 503 `TRY_AGAIN` at once, nothing kept.
    pub max_in_flight: usize,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            header_timeout_ms: 10_000,
            body_timeout_ms: 10_000,
            write_timeout_ms: 10_000,
            max_connections: 10_000,
            max_in_flight: 4_096,
        }
    }
}

/// How buyers' status reads are kept from flooding PostgreSQL
/// ([`crate::status_reads`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatusReadSettings {
    /// Status reads per second per client where no user is known (user
    /// auth off); with user auth on, the per-user limit applies.
    pub per_client_per_second: u32,
    /// Burst of those per client.
    pub per_client_burst: u32,
    /// How long an order id neither Redis nor PostgreSQL knows is answered
    /// 404 without asking again (0: never remembered).
    pub miss_cache_ms: u64,
    /// PostgreSQL connections of status reads, apart from the pool of pay,
    /// cancel and warm-up (`database.max_connections`).
    pub pool_connections: u32,
}

impl Default for StatusReadSettings {
    fn default() -> Self {
        Self { per_client_per_second: 200, per_client_burst: 400, miss_cache_ms: 1_000, pool_connections: 2 }
    }
}

/// How failed admin authentications are throttled, per client
/// ([`crate::http`]'s admin guard).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminAuthSettings {
    /// Failed admin authentications a client recovers per minute.
    pub failures_per_minute: u32,
    /// Failures a client may make in a row before it is answered 429.
    pub failure_burst: u32,
}

impl Default for AdminAuthSettings {
    fn default() -> Self {
        Self { failures_per_minute: 10, failure_burst: 10 }
    }
}

/// The operators' console ([`crate::http::operators`]): apart from the
/// buyers' budget and pool, so a busy sale and a busy operator do not
/// starve each other.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Most console requests handled at once; one more is answered 503
    /// `TRY_AGAIN` at once, nothing done.
    pub max_in_flight: usize,
    /// PostgreSQL connections of the console (warm-ups, closes, reports,
    /// the dashboard, the dead-letter figures), apart from the buyers'.
    pub pool_connections: u32,
    /// The `seckillctl` a dead-letter run from the console is (a process
    /// of its own, not the edge's): a path, or a name looked up beside
    /// this binary, then on `PATH`.
    pub ctl_binary: String,
    /// A dead-letter run from the console is ended (its process killed)
    /// once it ran this long (s), answered 503 and recorded in the audit
    /// trail as ended at its deadline; what it did until then stays done.
    pub run_deadline_secs: u64,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self { max_in_flight: 64, pool_connections: 4, ctl_binary: "seckillctl".into(), run_deadline_secs: 600 }
    }
}

/// Buyers' identity beyond the JWT.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthSettings {
    /// With no user identity configured (`user_jwt_secret` unset), let
    /// anyone cancel an order and read orders by user id, and answer a
    /// repeat buyer their order id — acting for any user whose id they
    /// know. Off (the default): orders are still placed by the body's
    /// `userId` (the seed's contract), but those are refused with 401 and no
    /// answer names an order id to someone who only gave a user id. For
    /// demos and trusted networks; logged as a warning at start and shown
    /// on `/readyz`.
    pub allow_anonymous: bool,
    /// Gateway mode: the header the shop's API gateway puts the user id in
    /// (e.g. `x-user-id`), when it authenticates buyers itself.
    pub gateway_user_header: Option<String>,
    /// The proxies in front of the edge (CIDRs or addresses, e.g.
    /// `127.0.0.1/32,10.0.0.0/8`; from the environment: comma-separated):
    /// the one list of every use of a client's address. From these, the
    /// client is the right-most hop of `client_address_header` that is not
    /// itself a proxy of the list (the admin throttle, the per-client
    /// limits); and only from these is the gateway's user header believed.
    #[serde(deserialize_with = "seckill_shared::config::list_or_comma_separated")]
    pub trusted_proxies: Vec<String>,
    /// The header the trusted proxies name the client in: `x-forwarded-for`
    /// (the default) or `forwarded` (RFC 7239). Only that one is read.
    pub client_address_header: crate::client_addr::ForwardedHeader,
}

/// The waiting rooms, as this edge serves them ([`crate::admission`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionSettings {
    /// The key admission tokens and join challenges are signed with (32+
    /// bytes), the same at every edge so any edge verifies what another
    /// handed out (unset: a random key of this edge alone, with a warning).
    pub signing_key: Option<Secret>,
    /// How often this edge runs an admission pass of every room (ms): how
    /// soon a unit left or a sell-out is seen by the rooms.
    pub tick_ms: u64,
    /// How long a join's proof-of-work challenge may be used (seconds).
    pub challenge_ttl_secs: u64,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        Self { signing_key: None, tick_ms: 200, challenge_ttl_secs: 120 }
    }
}

/// How the edges finish warm-ups cut short.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WarmupResumeSettings {
    /// How often the resuming edge looks for warm-ups cut short (ms).
    pub every_ms: u64,
    /// The resumer's lease: another edge takes over this long after the
    /// resuming one stopped renewing it (ms).
    pub lease_ms: u64,
    /// Backoff between two runs of one warm-up that failed again.
    pub retry: seckill_shared::ops::retry::RetrySettings,
}

impl Default for WarmupResumeSettings {
    fn default() -> Self {
        Self { every_ms: 1_000, lease_ms: 5_000, retry: Default::default() }
    }
}
