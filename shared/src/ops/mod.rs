//! How a service runs: its command line ([`cli`]), the skeleton every
//! binary runs in ([`host`]), logging and metrics ([`telemetry`]), spans
//! exported over OTLP ([`trace_export`]), the metrics each exports,
//! described at start ([`catalogue`]), stopping cleanly ([`shutdown`]),
//! the crash tests' stop at a named point ([`halt`]), and the seats of the
//! singletons: the Redis lock ([`lock`]) with its fencing tokens in
//! PostgreSQL ([`fence`]), the PostgreSQL lease ([`lease`]), the one loop
//! every singleton leads through ([`leader`]), and the one retry policy
//! ([`retry`]).

pub mod catalogue;
pub mod cli;
pub mod fence;
pub mod halt;
pub mod host;
pub mod leader;
pub mod lease;
pub mod lock;
pub mod retry;
pub mod shutdown;
pub mod telemetry;
pub mod trace_export;
