//! The metrics a service exports, declared once: each with its help text,
//! described to the recorder at start, and every counter (and every gauge
//! whose value at start is known) exposed from the start — at 0 for each
//! label value the code can emit — so that a dashboard reads 0 where it
//! would read "No data" and an alert on a rate can tell "none" from "not
//! scraped". A series whose label is known only later (a sale, a partition)
//! appears with its first value; a gauge that is a measurement appears once
//! it is measured (the first audit, the first readiness check), never as a
//! 0 nobody measured.
//!
//! The metrics recorded by the shared library are here, by job; each
//! service lists its own in its `metrics.rs` and names the shared groups it
//! uses.

use crate::domain::FailReason;

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// A value that is set.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
}

/// The series a metric has at start.
#[derive(Debug, Clone, Copy)]
pub enum AtStart {
    /// One unlabelled series at 0.
    Zero,
    /// One series at 0 for each value of the label.
    ZeroBy(&'static str, fn() -> Vec<&'static str>),
    /// None: its labels, or its value, are known only once measured.
    Measured,
}

/// One metric as a service exports it.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Its Prometheus name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its `# HELP` line.
    pub help: &'static str,
    /// What is exposed before the first event.
    pub at_start: AtStart,
}

impl Metric {
    /// A counter at 0 from the start.
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Self { name, kind: Kind::Counter, help, at_start: AtStart::Zero }
    }

    /// A counter at 0 from the start for each of `values()` of `label`.
    pub const fn counter_by(
        name: &'static str,
        label: &'static str,
        values: fn() -> Vec<&'static str>,
        help: &'static str,
    ) -> Self {
        Self { name, kind: Kind::Counter, help, at_start: AtStart::ZeroBy(label, values) }
    }

    /// A counter whose label values are known only when it counts.
    pub const fn counter_per(name: &'static str, help: &'static str) -> Self {
        Self { name, kind: Kind::Counter, help, at_start: AtStart::Measured }
    }

    /// A gauge that is 0 at start (nothing in flight, nothing open).
    pub const fn gauge_zero(name: &'static str, help: &'static str) -> Self {
        Self { name, kind: Kind::Gauge, help, at_start: AtStart::Zero }
    }

    /// A gauge that appears with its first measurement.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self { name, kind: Kind::Gauge, help, at_start: AtStart::Measured }
    }

    /// A histogram, its buckets empty from the start.
    pub const fn histogram(name: &'static str, help: &'static str) -> Self {
        Self { name, kind: Kind::Histogram, help, at_start: AtStart::Zero }
    }
}

/// Describes every metric of `groups` and exposes what [`AtStart`] says.
/// Adding 0 changes no series that already counts (several services in one
/// test process share the recorder).
pub fn publish(groups: &[&[Metric]]) {
    crate::ops::telemetry::metrics_handle();
    for metric in groups.iter().flat_map(|group| group.iter()) {
        describe(metric);
        match metric.at_start {
            AtStart::Zero => zero(metric, None),
            AtStart::ZeroBy(label, values) => {
                for value in values() {
                    zero(metric, Some((label, value)));
                }
            }
            AtStart::Measured => {}
        }
    }
}

fn describe(metric: &Metric) {
    match metric.kind {
        Kind::Counter => metrics::describe_counter!(metric.name, metric.help),
        Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
        Kind::Histogram => metrics::describe_histogram!(metric.name, metric.help),
    }
}

fn zero(metric: &Metric, label: Option<(&'static str, &'static str)>) {
    let labels: Vec<metrics::Label> = label.map(|(k, v)| metrics::Label::new(k, v)).into_iter().collect();
    match metric.kind {
        Kind::Counter => metrics::counter!(metric.name, labels).increment(0),
        Kind::Gauge => metrics::gauge!(metric.name, labels).increment(0.0),
        // Registered, a histogram renders its buckets at 0.
        Kind::Histogram => drop(metrics::histogram!(metric.name, labels)),
    }
}

/// Every failure reason's code: the label values of the settling counters.
pub fn fail_reasons() -> Vec<&'static str> {
    FailReason::ALL.iter().map(|reason| reason.code()).collect()
}

/// Retries of the one retry policy (`ops::retry`), every service.
pub const RETRYING: &[Metric] =
    &[Metric::counter_per("seckill_retries_total", "Attempts retried after a transient failure, by what was retried")];

/// Consumer groups (`kafka::context`).
pub const CONSUMING: &[Metric] = &[
    Metric::counter_per("seckill_consumer_rebalances_total", "Partition rebalances seen, by consumer group"),
    Metric::counter_per(
        "seckill_consumer_commit_failures_total",
        "Offset commits the broker refused (the batch is delivered again), by consumer group",
    ),
    Metric::gauge_zero(
        "seckill_consumer_stalled_members",
        "Group members of this process whose batch (or record) has not been done for consumer.stall_secs",
    ),
    Metric::counter_per(
        "seckill_consumer_standstills_total",
        "Times a partition's committed offset stood still for consumer.stall_secs while records waited, by consumer group",
    ),
    Metric::counter_per(
        "seckill_consumer_rejoins_total",
        "Times a member joined its group again with a consumer made anew, by consumer group",
    ),
];

/// Producers made anew after a fatal error (`kafka::renewing`).
pub const PRODUCING: &[Metric] = &[Metric::counter_per(
    "seckill_producers_renewed_total",
    "Kafka producers made anew after a fatal error of the idempotent producer, by producer",
)];

/// Singletons led through `ops::leader`.
pub const LEADING: &[Metric] =
    &[Metric::counter_per("seckill_leader_terms_total", "Terms this instance led a singleton job, by job")];

/// Orders settled FAILED and compensated (`orders::fate`).
pub const SETTLING: &[Metric] = &[Metric::counter_by(
    "seckill_units_settled_total",
    "reason",
    fail_reasons,
    "Units of orders settled FAILED and compensated in Redis (restored or written off), by reason",
)];

/// Units of cancelled and expired orders given back
/// (`orders::cancellation`).
pub const RETURNING: &[Metric] = &[
    Metric::counter("seckill_units_returned_total", "Units of cancelled or expired orders given back to the sale"),
    Metric::counter(
        "seckill_units_return_failures_total",
        "Returns of a sale's cancelled units to Redis that failed (the next round tries again)",
    ),
];

/// Records parked for an operator (`db::parked`).
pub const PARKING: &[Metric] =
    &[Metric::counter_per("seckill_parked_records_total", "Records parked for an operator, by who parked them")];

/// Stock lent between buckets (`stock::lend`).
pub const LENDING: &[Metric] = &[Metric::counter(
    "seckill_transfer_steps_unconfirmed_total",
    "Steps of a bucket move not confirmed by a replica in time, left logged for the next look",
)];

#[cfg(test)]
mod tests {
    use super::*;

    /// Zeroed at start, a counter then counts from 0 and a second start
    /// (another service of the same process) does not reset it.
    #[test]
    fn a_counter_is_exposed_at_zero_and_a_second_publish_keeps_its_count() {
        const GROUP: &[Metric] = &[
            Metric::counter_by("seckill_catalogue_test_total", "reason", fail_reasons, "test"),
            Metric::gauge("seckill_catalogue_test_measured", "test"),
        ];
        publish(&[GROUP]);
        let rendered = crate::ops::telemetry::metrics_handle().render();
        for reason in fail_reasons() {
            let series = format!("seckill_catalogue_test_total{{reason=\"{reason}\"}} 0");
            assert!(rendered.contains(&series), "{series} in\n{rendered}");
        }
        assert!(rendered.contains("# HELP seckill_catalogue_test_total test"), "{rendered}");
        assert!(!rendered.contains("seckill_catalogue_test_measured"), "a measurement is not made up: {rendered}");
        metrics::counter!("seckill_catalogue_test_total", "reason" => "VOIDED").increment(3);
        publish(&[GROUP]);
        let rendered = crate::ops::telemetry::metrics_handle().render();
        assert!(rendered.contains("seckill_catalogue_test_total{reason=\"VOIDED\"} 3"), "{rendered}");
    }
}
