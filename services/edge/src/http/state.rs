//! What each audience's handlers hold: the buyers', the payment
//! provider's and the operators' parts, each its own state, and the probes'.
//! `lib.rs` builds the parts once and hands each audience only its own;
//! a handler names the part it takes (`State<Buyers>`, …) and axum takes
//! it from [`Edge`], the routers' one state, by [`FromRef`].

use super::operators::admin_guard::AdminThrottle;
use super::operators::session::Sessions;
use super::readiness::Readiness;
use crate::identity::Identity;
use crate::limit::RateLimits;
use crate::publish::Publisher;
use crate::settings::Settings;
use crate::sold_out::SoldOutFlags;
use axum::extract::FromRef;
use seckill_shared::ops::lock::LockClient;
use seckill_shared::stock::Stock;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

/// The routers' state: every audience's part, each taken by [`FromRef`].
#[derive(Clone)]
pub struct Edge {
    pub buyers: Buyers,
    pub provider: Provider,
    pub operators: Operators,
    pub readiness: Arc<Readiness>,
    pub body: BodyLimits,
}

/// How requests name their user: the configured identity (`None`: none)
/// and the settings it reads (leeway, `auth.allow_anonymous`).
#[derive(Clone)]
pub struct Users {
    pub identity: Option<Arc<Identity>>,
    pub settings: Arc<Settings>,
}

/// How a JSON body is read: its limit and deadline.
#[derive(Clone, Copy)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub deadline: Duration,
}

/// One audience's state: its parts behind one `Arc` (axum clones the state
/// for every request).
macro_rules! audience {
    ($(#[$doc:meta])* $name:ident, $parts:ident, $field:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(pub Arc<$parts>);

        impl std::ops::Deref for $name {
            type Target = $parts;
            fn deref(&self) -> &$parts {
                &self.0
            }
        }

        impl FromRef<Edge> for $name {
            fn from_ref(edge: &Edge) -> Self {
                edge.$field.clone()
            }
        }
    };
}

audience!(
    /// The buyers' state: orders, the waiting room, the draw's entries.
    Buyers,
    BuyersParts,
    buyers
);
audience!(
    /// The payment provider's state: its notifications.
    Provider,
    ProviderParts,
    provider
);
audience!(
    /// The operators' state: the admin API, the dashboard, dead letters.
    Operators,
    OperatorsParts,
    operators
);

impl FromRef<Edge> for Arc<Readiness> {
    fn from_ref(edge: &Edge) -> Self {
        edge.readiness.clone()
    }
}

impl FromRef<Edge> for BodyLimits {
    fn from_ref(edge: &Edge) -> Self {
        edge.body
    }
}

/// What the buyers' handlers use.
pub struct BuyersParts {
    pub settings: Arc<Settings>,
    pub users: Users,
    pub stock: Stock,
    /// PostgreSQL: pay and cancel.
    pub db: PgPool,
    /// PostgreSQL for status reads: a pool of their own.
    pub status_db: PgPool,
    /// Per-client limits and remembered misses of status reads.
    pub status_reads: Arc<crate::status_reads::StatusReads>,
    pub publisher: Publisher,
    pub limits: Arc<RateLimits>,
    pub sold_out: Arc<SoldOutFlags>,
    /// Locks of the lock deduction.
    pub locks: LockClient,
    /// Deductions, batched per sale's bucket.
    pub batcher: Arc<crate::batch::Batcher>,
    /// Orders being placed, each a task of its own: a client that hangs up
    /// drops its request, not its order (waited for at shutdown).
    pub orders: tokio_util::task::TaskTracker,
    /// The sales' buckets, and units borrowed between them.
    pub homes: Arc<crate::home::Homes>,
    /// Signs and checks admission tokens and join challenges.
    pub signer: crate::admission::Signer,
    /// Which activities are releases (a limit across their sizes).
    pub releases: Arc<crate::known_releases::Releases>,
}

/// What the provider's handlers use.
pub struct ProviderParts {
    pub settings: Arc<Settings>,
    pub stock: Stock,
    pub db: PgPool,
}

/// What the operators' handlers use.
pub struct OperatorsParts {
    pub settings: Arc<Settings>,
    pub users: Users,
    pub stock: Stock,
    /// PostgreSQL for the console: a pool of its own.
    pub console_db: PgPool,
    /// Locks of the warm-up and the close.
    pub locks: LockClient,
    /// This edge's sold-out flags and buckets, reset by a warm-up.
    pub sold_out: Arc<SoldOutFlags>,
    pub homes: Arc<crate::home::Homes>,
    /// The buyers' limits, shown on the dashboard.
    pub limits: Arc<RateLimits>,
    /// The dashboard's browser sessions.
    pub sessions: Sessions,
    /// Failed admin authentications, per client.
    pub admin_throttle: Arc<AdminThrottle>,
    /// The dashboard's figures.
    pub dashboard: Arc<crate::dashboard::Dashboard>,
    /// Which activities are releases, forgotten when one is declared here.
    pub releases: Arc<crate::known_releases::Releases>,
}

impl BuyersParts {
    /// The bound on one call to PostgreSQL (`database.call_deadline_ms`):
    /// a server that never answers is answered 503, not waited on.
    pub fn db_deadline(&self) -> Duration {
        self.settings.servers.database.call_deadline()
    }
}

impl ProviderParts {
    /// As [`BuyersParts::db_deadline`].
    pub fn db_deadline(&self) -> Duration {
        self.settings.servers.database.call_deadline()
    }
}
