//! The metrics the order service exports, each with its help text;
//! described and exposed from the start by the host
//! ([`seckill_shared::ops::catalogue::publish`]).

use seckill_shared::ops::catalogue::{self, fail_reasons, Metric};

/// The order service's own metrics.
const ORDER: &[Metric] = &[
    Metric::counter("seckill_order_records_consumed_total", "Order records consumed from the orders topic"),
    Metric::counter("seckill_order_orders_written_total", "Orders written to PostgreSQL (CREATED)"),
    Metric::counter_by(
        "seckill_order_dlq_total",
        "reason",
        fail_reasons,
        "Order records sent to the dead-letter topic, by reason",
    ),
    Metric::counter("seckill_order_locked_batches_total", "Batches written again row by row after a conflict"),
    Metric::histogram("seckill_order_batch_size", "Records in one consumed batch"),
    Metric::histogram("seckill_order_batch_seconds", "Time to handle one batch, from consumed to offsets committed"),
    Metric::histogram("seckill_order_transaction_seconds", "Time of one batch's PostgreSQL transaction"),
    Metric::gauge("seckill_order_consumer_lag", "Records on the orders topic not yet consumed, by partition"),
    Metric::counter(
        "seckill_order_created_events_total",
        "CREATED events produced by the order service (again for a batch done again)",
    ),
    Metric::counter("seckill_events_relayed_total", "Order events sent from the outbox to the events topic"),
    Metric::gauge_zero(
        "seckill_relay_events_awaiting_created",
        "Order events the relay holds until the order group commits past their order's record (its CREATED event first)",
    ),
    Metric::gauge_zero(
        "seckill_relay_events_held_back",
        "Order events the relay cannot send yet because a transaction older than them is still open on the server",
    ),
    Metric::gauge_zero(
        "seckill_relay_held_back_seconds",
        "How long the oldest of the held-back order events has waited (0: none held back)",
    ),
];

/// What the order service exports: its own, and the shared library's it
/// records.
pub const ALL: &[&[Metric]] = &[
    ORDER,
    catalogue::SETTLING,
    catalogue::CONSUMING,
    catalogue::LEADING,
    catalogue::PARKING,
    catalogue::RETRYING,
    catalogue::PRODUCING,
];
