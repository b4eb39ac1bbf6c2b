//! The metrics the edge exports, each with its help text; described and
//! exposed from the start by [`seckill_shared::ops::catalogue::publish`].

use crate::order_answers::OrderAnswer;
use seckill_shared::ops::catalogue::{self, Metric};

/// Every outcome `seckill_edge_orders_total` counts: the answers of the
/// order table.
fn order_outcomes() -> Vec<&'static str> {
    OrderAnswer::ALL.iter().map(|answer| answer.code()).collect()
}

/// The edge's own metrics.
const EDGE: &[Metric] = &[
    Metric::counter_by(
        "seckill_edge_orders_total",
        "outcome",
        order_outcomes,
        "Orders answered, by outcome: the answer of the order table (QUEUED, UNCONFIRMED or an error code)",
    ),
    Metric::histogram("seckill_edge_request_seconds", "Time from a request's arrival to its answer, every route"),
    Metric::histogram("seckill_edge_deduct_seconds", "Time an order's deduction in Redis took"),
    Metric::histogram("seckill_edge_publish_seconds", "Time an order's publish to Kafka took, until acknowledged"),
    Metric::gauge_zero("seckill_edge_publishes_in_flight", "Orders deducted and not yet acknowledged by Kafka"),
    Metric::gauge(
        "seckill_warmups_unfinished",
        "Sales whose last warm-up stopped short and is being finished (on the edge that resumes them)",
    ),
    Metric::counter("seckill_warmups_resumed_total", "Warm-ups cut short that the edges finished by themselves"),
    Metric::histogram("seckill_edge_deduct_batch_size", "Deductions sent to Redis in one pipelined batch"),
    Metric::counter("seckill_edge_deduct_queue_full_total", "Deductions refused because the batcher's queue was full"),
    Metric::counter("seckill_edge_deduct_asked_again_total", "Deductions whose answer was lost and asked for again"),
    Metric::counter(
        "seckill_edge_deduct_not_replicated_total",
        "Deductions a replica did not confirm in time (answered 202 UNCONFIRMED or voided)",
    ),
    Metric::counter("seckill_edge_void_deferred_total", "Voids of a refused order left to retry in the background"),
    Metric::counter("seckill_edge_void_abandoned_total", "Voids given up in the background, left to the sweeper"),
    Metric::counter(
        "seckill_edge_publish_ambiguous_total",
        "Publishes whose fate Kafka did not tell (answered 202 UNCONFIRMED)",
    ),
    Metric::counter("seckill_edge_rollback_failed_total", "Deductions that could not be undone after a failed publish"),
    Metric::counter("seckill_edge_producer_rebuilt_total", "Kafka producers rebuilt after a fatal error"),
    Metric::counter("seckill_edge_kafka_circuit_opened_total", "Times the circuit to Kafka opened"),
    Metric::gauge_zero("seckill_edge_kafka_circuit_open", "1 while the circuit to Kafka is open (orders answered 503)"),
    Metric::gauge("seckill_edge_kafka_requests_sent", "Requests the producer sent the brokers, by request kind"),
    Metric::gauge("seckill_edge_ready", "1 when the last readiness check found every dependency answering"),
    Metric::counter("seckill_edge_readiness_checks_total", "Readiness checks made (at most one a second)"),
    Metric::counter("seckill_edge_connections_refused_total", "Connections refused at connections.max_connections"),
    Metric::counter(
        "seckill_edge_connections_write_timeouts_total",
        "Connections reset because their answer was not read within connections.write_timeout_ms",
    ),
    Metric::counter("seckill_edge_admin_auth_failures_total", "Admin requests with a wrong or missing token"),
    Metric::counter("seckill_edge_admin_auth_throttled_total", "Admin requests refused 429 after too many failures"),
    Metric::counter("seckill_edge_borrowings_total", "Units borrowed by a bucket from another one"),
    Metric::counter("seckill_edge_units_borrowed_total", "Units moved into a bucket by borrowing"),
    Metric::counter("seckill_edge_borrow_gave_up_total", "Borrowings given up (no bucket had units to lend in time)"),
    Metric::counter(
        "seckill_edge_release_give_failed_total",
        "Releases' takes this edge could not give back (left to the sweep)",
    ),
    Metric::counter("seckill_payment_notifications_refused_total", "Payment notifications refused (bad signature)"),
    Metric::counter_per("seckill_payments_refund_due_total", "Payments recorded as a refund due, by reason"),
    Metric::counter_per("seckill_queue_admitted_total", "Buyers admitted from the waiting room, by sale"),
    Metric::counter_per(
        "seckill_queue_stale_claims_total",
        "Admissions claimed by an order that never settled them, settled by a pass as used or expired, by sale and outcome",
    ),
    Metric::gauge("seckill_queue_waiting", "Buyers in the waiting room, by sale"),
    Metric::gauge("seckill_queue_active", "Admitted buyers whose token is not yet used, by sale"),
    Metric::gauge("seckill_queue_admitted_last_minute", "Buyers admitted in the last minute, by sale"),
    Metric::gauge("seckill_queue_expired", "Admission tokens that expired unused, by sale"),
    Metric::gauge("seckill_queue_abandoned", "Tickets abandoned (their holders stopped asking), by sale"),
    Metric::gauge("seckill_queue_sold_out", "1 once the room's last pass found the sale sold out, by sale"),
    Metric::gauge("seckill_queue_wait_seconds", "Estimated wait for the last place in the room (-1: unknown), by sale"),
    Metric::counter("seckill_draws_made_total", "Draws this edge made (one per draw across the edges)"),
    Metric::counter_per(
        "seckill_draw_events_published_total",
        "Draw outcomes this edge published to seckill.draw-events, by type",
    ),
    Metric::gauge("seckill_draw_entries", "A draw's entries, by sale"),
    Metric::gauge("seckill_draw_winners", "Entries that won at the draw, by sale"),
    Metric::gauge("seckill_draw_claimed", "Rights a draw's winners used to order, by sale"),
    Metric::gauge("seckill_draw_promoted", "Entries promoted from the waitlist, by sale"),
    Metric::gauge("seckill_draw_expired", "Rights that lapsed unused, by sale"),
    Metric::gauge("seckill_draw_lost", "Entries still waitlisted when the sale ended, by sale"),
    Metric::gauge("seckill_draw_waitlisted", "Entries waitlisted now, by sale"),
    Metric::gauge(
        "seckill_draw_events_unpublished",
        "Draw outcomes recorded and not yet on seckill.draw-events, by sale",
    ),
];

/// What the edge exports: its own, and the shared library's it records.
pub const ALL: &[&[Metric]] =
    &[EDGE, catalogue::RETURNING, catalogue::LENDING, catalogue::RETRYING, catalogue::PRODUCING, catalogue::LEADING];
