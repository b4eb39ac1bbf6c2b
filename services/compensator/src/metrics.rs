//! The metrics the compensator exports, each with its help text;
//! described and exposed from the start by the host
//! ([`seckill_shared::ops::catalogue::publish`]).

use seckill_shared::ops::catalogue::{self, fail_reasons, Metric};

/// The compensator's own metrics.
const COMPENSATOR: &[Metric] = &[
    Metric::counter_by(
        "seckill_broken_promises_total",
        "reason",
        fail_reasons,
        "Orders answered 202 that ended FAILED, by reason",
    ),
    Metric::counter("seckill_compensator_malformed_total", "Dead letters skipped because they could not be read"),
    Metric::counter(
        "seckill_dead_letters_index_conflicts_total",
        "Dead letters indexed at a position the index held with another record (a recreated topic)",
    ),
    Metric::counter("seckill_orders_expired_total", "Orders cancelled because their payment deadline passed"),
    Metric::counter("seckill_sweeper_republished_total", "Reservations whose record was lost, published again"),
    Metric::counter("seckill_sweeper_sale_failures_total", "Sweeps of one sale that failed (tried again next sweep)"),
    Metric::counter("seckill_sweeper_transfers_completed_total", "Units left between buckets that the sweeper landed"),
    Metric::counter(
        "seckill_release_takes_given_back_total",
        "Releases' takes whose order never came, given back by the sweep",
    ),
    Metric::gauge("seckill_sale_consistent", "1 when the last audit found the sale's books balanced, by sale"),
    Metric::gauge("seckill_sale_violations", "Invariants the last audit found broken, by sale"),
    Metric::gauge("seckill_sale_broken_promises", "Orders answered 202 that ended FAILED, by sale (last audit)"),
    Metric::gauge("seckill_sale_remaining", "Units left, by sale and store (redis, postgresql), at the last audit"),
    Metric::gauge("seckill_parked_records", "Records parked for an operator, at the last audit"),
    Metric::gauge("seckill_dlq_records", "Dead letters in the index, by reason, at the last audit"),
    Metric::gauge("seckill_dlq_records_by_sale", "Dead letters in the index, by sale, at the last audit"),
    Metric::gauge("seckill_dlq_replayed_records", "Dead letters replayed, at the last audit"),
    Metric::gauge("seckill_dlq_redriven_records", "Dead letters redriven, at the last audit"),
    Metric::gauge("seckill_dlq_oldest_timestamp_seconds", "When the oldest indexed dead letter was written (0: none)"),
    Metric::gauge("seckill_dlq_newest_timestamp_seconds", "When the newest indexed dead letter was written (0: none)"),
];

/// What the compensator exports: its own, and the shared library's it
/// records.
pub const ALL: &[&[Metric]] = &[
    COMPENSATOR,
    catalogue::SETTLING,
    catalogue::RETURNING,
    catalogue::CONSUMING,
    catalogue::PRODUCING,
    catalogue::LEADING,
    catalogue::PARKING,
    catalogue::LENDING,
    catalogue::RETRYING,
];
