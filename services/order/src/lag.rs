//! The order group's lag per partition on `/metrics`, every few seconds
//! (what an operator watches drain), and the group standing still while
//! records wait ([`seckill_shared::kafka::standstill`]): this process's idle
//! members are then asked to join again.

use crate::Settings;
use seckill_shared::kafka::standstill::{self, Watched};
use seckill_shared::kafka::{self, Topics};
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Publishes the group's lag per partition as a gauge, every few seconds;
/// bumps `rejoin` when a partition stands still past `consumer.stall_secs`.
pub async fn report_lag(
    settings: Arc<Settings>,
    rejoin: watch::Sender<u64>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let watched = Watched {
        kafka: settings.servers.kafka.clone(),
        group: kafka::order_group(&settings.servers.kafka),
        topic: Topics::new(&settings.servers.kafka).orders,
        stall: settings.service.consumer.stall(),
    };
    let gauges = |lag: &kafka::lag::Lag| {
        for (partition, behind) in &lag.partitions {
            metrics::gauge!("seckill_order_consumer_lag", "partition" => partition.to_string()).set(*behind as f64);
        }
    };
    standstill::watch("lag reporter", watched, gauges, rejoin, shutdown).await
}
