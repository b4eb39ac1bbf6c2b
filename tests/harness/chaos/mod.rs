//! Fault injection: the real binaries as child processes, a sale driven by
//! `seckillctl bench`, faults injected while it runs (process signals, the
//! infra scripts, injected records), then drain, reconcile and check every
//! accepted order. On the single-node topology (`make chaos`) or the
//! replicated one behind HAProxy (`make chaos-cluster`).

pub mod draw;
mod faults;
pub mod pg;
pub mod pg_drain;
pub mod pg_faults;
mod pg_payments;
mod pipeline;
pub mod release;
mod run;

pub use pg_payments::payments_through;
pub use run::run;

pub use faults::{sentinel_primary, wait_redis_replicated, Fault};
pub use pipeline::{free_port, Kind, Pipeline};

use crate::Topology;
use std::collections::BTreeMap;
use std::time::Duration;

/// A scenario: a sale, a load, and faults at given times into the load.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name in the report.
    pub name: &'static str,
    /// Which servers it runs on.
    pub topology: Topology,
    /// Seed of the load's user choice (the run can be replayed).
    pub seed: u64,
    /// Units on sale.
    pub stock: i64,
    /// Stock buckets the units are spread over (1: none).
    pub buckets: u32,
    /// Distinct users.
    pub users: u64,
    /// Requests sent.
    pub requests: u64,
    /// Requests per second.
    pub rate: f64,
    /// Connections.
    pub concurrency: usize,
    /// Share of requests that retry an earlier user.
    pub retry_ratio: f64,
    /// Units one buyer may hold (the warm-up's `perUserLimit`; its
    /// `maxPerOrder` too).
    pub per_user_limit: u32,
    /// What the buyers ask for: `seckillctl bench --quantity` (`1`, or a
    /// mix such as `1,2`, by user).
    pub quantities: &'static str,
    /// Faults, each at its time after the load starts.
    pub faults: Vec<(Duration, Fault)>,
}

impl Scenario {
    /// The suites' usual sale on `topology`: 3,000 units (one bucket), 8,000 buyers,
    /// 10,000 requests at 500/s over 64 connections, a tenth of them a
    /// buyer asking again; each fault at its ms into the load.
    pub fn flash_sale(topology: Topology, name: &'static str, seed: u64, faults: Vec<(u64, Fault)>) -> Self {
        Self {
            name,
            topology,
            seed,
            stock: 3_000,
            buckets: 1,
            users: 8_000,
            requests: 10_000,
            rate: 500.0,
            concurrency: 64,
            retry_ratio: 0.1,
            per_user_limit: 1,
            quantities: "1",
            faults: faults.into_iter().map(|(ms, f)| (Duration::from_millis(ms), f)).collect(),
        }
    }
}

/// What a scenario run showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: &'static str,
    pub requests: u64,
    /// 202 answers.
    pub accepted: u64,
    /// Orders CREATED.
    pub created: i64,
    /// The units they hold.
    pub units: i64,
    /// Buyers whose live orders hold more than their limit.
    pub over_limit: i64,
    /// Orders whose units the compensator and sweeper restored.
    pub restored: i64,
    /// Orders whose units were written off.
    pub written_off: i64,
    /// 503 TRY_AGAIN answers: definite publish failures (rolled back),
    /// Redis unreachable, a producer being rebuilt (nothing deducted).
    pub try_again: i64,
    /// 202 UNCONFIRMED answers: Redis did not confirm in time whether the
    /// request kept a unit (neither a promise nor a refusal).
    pub unconfirmed: i64,
    /// Accepted orders (202) that ended FAILED, by reason: broken promises.
    pub accepted_failed: BTreeMap<String, i64>,
    /// Buyers told only 503 who hold an order afterwards: broken promises
    /// too ("nothing was kept").
    pub refused_but_kept: i64,
    /// Accepted orders Redis has no status for after the run: deductions it
    /// acknowledged and then lost.
    pub lost_by_redis: i64,
    /// The reconciliation verdict.
    pub verdict: String,
    /// From the end of the load to a drained pipeline.
    pub drain: Duration,
}

impl Outcome {
    /// A Markdown table row.
    pub fn row(&self) -> String {
        let failed = if self.accepted_failed.is_empty() {
            "-".to_owned()
        } else {
            self.accepted_failed.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s |",
            self.name,
            self.requests,
            self.accepted,
            self.created,
            self.units,
            self.over_limit,
            self.restored,
            self.written_off,
            self.try_again,
            self.unconfirmed,
            failed,
            self.refused_but_kept,
            self.lost_by_redis,
            self.verdict,
            self.drain.as_secs_f64()
        )
    }
}

/// The header of [`Outcome::row`].
pub const TABLE_HEADER: &str = "| scenario | requests | 202 QUEUED | orders created | units they hold | users over their limit | orders restored | written off | 503 TRY_AGAIN | 202 UNCONFIRMED | broken promises (202 QUEUED → FAILED) | 503 with an order | deductions Redis lost | reconciliation | drain |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
