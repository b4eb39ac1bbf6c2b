//! The metrics every order request records, each a handle made once: the
//! recorder's registry is looked up (the name hashed, a label set built)
//! on first use, not on every record. What they mean is in `metrics.rs`.

use metrics::{Gauge, Histogram};
use std::sync::LazyLock;

/// `seckill_edge_request_seconds`.
pub static REQUEST_SECONDS: LazyLock<Histogram> = LazyLock::new(|| metrics::histogram!("seckill_edge_request_seconds"));

/// `seckill_edge_deduct_seconds`.
pub static DEDUCT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| metrics::histogram!("seckill_edge_deduct_seconds"));

/// `seckill_edge_publish_seconds`.
pub static PUBLISH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| metrics::histogram!("seckill_edge_publish_seconds"));

/// `seckill_edge_publishes_in_flight`.
pub static PUBLISHES_IN_FLIGHT: LazyLock<Gauge> = LazyLock::new(|| metrics::gauge!("seckill_edge_publishes_in_flight"));

/// `seckill_edge_deduct_batch_size`.
pub static DEDUCT_BATCH_SIZE: LazyLock<Histogram> =
    LazyLock::new(|| metrics::histogram!("seckill_edge_deduct_batch_size"));
