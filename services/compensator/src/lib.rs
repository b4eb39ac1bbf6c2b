//! The compensator: settles every order that will never be written.
//!
//! - [`job`] consumes the dead-letter topic and settles each record's order.
//! - [`sweeper`] (a singleton across instances, under the distributed lock)
//!   settles reservations the order service never saw: the edge died between
//!   the deduction and the publish, or the publish timed out and never landed.
//!   It also settles the releases' takes left pending ([`release_sweep`]).
//! - [`settle`] is what both do to an order: PostgreSQL decides its fate
//!   (first row wins), and only a FAILED row restores the unit in Redis, at
//!   most once per order id.
//! - [`audit`] reconciles every live sale for Prometheus's gauges.
//! - [`deadlines`] cancels CREATED orders not paid by their deadline and
//!   gives their units back (every instance, rows shared by SKIP LOCKED).
//! - [`metrics`] lists what the service exports.

/// What `--help` says the service does.
pub const ABOUT: &str = "The compensator: consumes seckill.orders.dlq in the seckill-compensator group and settles each dead-lettered order (FAILED in PostgreSQL, its unit restored in Redis at most once), runs the reservation sweeper (one across all instances) for orders whose record never reached the order service, and cancels orders not paid by their deadline, giving their units back. Health and metrics on metrics_addr.";

pub mod audit;
pub mod deadlines;
pub mod job;
pub mod metrics;
pub mod release_sweep;
pub mod settings;
pub mod settle;
pub mod sweeper;

pub use settings::{Settings, SweeperSettings};

use seckill_shared::config::Servers;
use seckill_shared::ops::catalogue::Metric;
use seckill_shared::ops::host::{Connections, Hosted, ServiceSettings};
use seckill_shared::ops::shutdown::Background;
use std::sync::Arc;

/// The compensator: hosted by the shared skeleton, which connects and then
/// calls [`Hosted::start`].
pub type Service = seckill_shared::ops::host::Service<Settings>;

impl Hosted for Settings {
    const NAME: &'static str = "compensator";
    const BINARY: &'static str = "seckill-compensator";
    const ABOUT: &'static str = ABOUT;
    const METRICS: &'static [&'static [Metric]] = metrics::ALL;

    fn hosting(&self) -> (&ServiceSettings, &Servers) {
        (&self.service, &self.servers)
    }

    /// The DLQ consumer (and the watch that has it join its group again
    /// when the group stands still) and, when enabled, the sweeper and the
    /// deadline worker.
    fn start(settings: Arc<Self>, connections: Connections, background: &Background) -> anyhow::Result<()> {
        let (rejoin, rejoins) = tokio::sync::watch::channel(0);
        let dlq = job::DlqJob::new(settings.clone(), connections.clone())?.rejoining_on(rejoins);
        background.spawn("dlq consumer", dlq.run(background.shutdown().clone()));
        let watch =
            job::watch_group(settings.clone(), connections.topics.dlq.clone(), rejoin, background.shutdown().clone());
        background.spawn("dead-letter group watch", watch);
        if settings.sweeper.enabled {
            let sweeper = sweeper::Sweeper::new(settings.clone(), connections.clone(), background.clone())?;
            background.spawn("reservation sweeper", sweeper.run(background.shutdown().clone()));
        }
        if settings.deadlines.enabled {
            let (settings, connections) = (settings.clone(), connections.clone());
            background.spawn("payment deadlines", deadlines::run(settings, connections, background.shutdown().clone()));
        }
        if settings.audit.enabled {
            background.spawn("audit", audit::run(settings, connections, background.shutdown().clone()));
        }
        Ok(())
    }
}
