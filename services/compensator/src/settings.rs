//! The compensator's settings: its jobs' own, beside the servers' and the
//! service's (address, telemetry) shared with every service.

use seckill_shared::config::Servers;
use seckill_shared::ops::host::ServiceSettings;
use serde::{Deserialize, Serialize};

/// Settings of `seckill-compensator`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub sweeper: SweeperSettings,
    pub deadlines: DeadlineSettings,
    pub audit: AuditSettings,
    #[serde(flatten)]
    pub service: ServiceSettings,
    #[serde(flatten)]
    pub servers: Servers,
}

impl Default for Settings {
    fn default() -> Self {
        let mut servers = Servers::default();
        // One record at a time, and the sweeper: few connections suffice.
        servers.database.max_connections = 4;
        Self {
            sweeper: SweeperSettings::default(),
            deadlines: DeadlineSettings::default(),
            audit: AuditSettings::default(),
            service: ServiceSettings::listening_on("127.0.0.1:9102"),
            servers,
        }
    }
}

/// The reservation sweeper's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweeperSettings {
    /// Run the sweeper in this process (one instance sweeps at a time).
    pub enabled: bool,
    /// Margin after a reservation's publish deadline (set by the edge from
    /// its own delivery timeout, on Redis's clock) before it may be swept:
    /// room for a broker that appends a record the edge already gave up on.
    pub grace_ms: u64,
    /// Time between sweeps.
    pub interval_ms: u64,
    /// Lease of the sweeper's lock (renewed by its watchdog).
    pub lock_lease_ms: u64,
    /// Most reservations settled per sale per sweep.
    pub batch: usize,
}

impl Default for SweeperSettings {
    fn default() -> Self {
        Self { enabled: true, grace_ms: 10_000, interval_ms: 2_000, lock_lease_ms: 10_000, batch: 500 }
    }
}

/// The payment-deadline worker's settings ([`crate::deadlines`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadlineSettings {
    /// Run the worker in this process (every instance may).
    pub enabled: bool,
    /// Time between polls when nothing is due.
    pub poll_ms: u64,
    /// Most orders cancelled per transaction (a full batch polls again at
    /// once).
    pub batch: i64,
}

impl Default for DeadlineSettings {
    fn default() -> Self {
        Self { enabled: true, poll_ms: 100, batch: 1000 }
    }
}

/// The audit's settings ([`crate::audit`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Export the gauges from this process.
    pub enabled: bool,
    /// Time between audits.
    pub interval_ms: u64,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self { enabled: true, interval_ms: 15_000 }
    }
}
