//! The order group's lag per partition on `/metrics`, every few seconds
//! (what an operator watches drain), and the group standing still while
//! records wait ([`seckill_shared::kafka::standstill`]): this process's idle
//! members are then asked to join again.

use crate::Settings;
use seckill_shared::kafka::standstill::StandStill;
use seckill_shared::kafka::{self, Topics};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Publishes the group's lag per partition as a gauge, every few seconds;
/// bumps `rejoin` when a partition stands still past `consumer.stall_secs`.
pub async fn report_lag(
    settings: Arc<Settings>,
    rejoin: watch::Sender<u64>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let topics = Topics::new(&settings.servers.kafka);
    let group = kafka::order_group(&settings.servers.kafka);
    let standstill = parking_lot::Mutex::new(StandStill::new(settings.service.consumer.stall()));
    seckill_shared::ops::shutdown::every("lag reporter", Duration::from_secs(5), shutdown, || async {
        let (kafka_settings, name, topic) = (settings.servers.kafka.clone(), group.clone(), topics.orders.clone());
        let lag = tokio::task::spawn_blocking(move || kafka::lag::lag(&kafka_settings, &name, &topic)).await??;
        for (partition, behind) in &lag.partitions {
            metrics::gauge!("seckill_order_consumer_lag", "partition" => partition.to_string()).set(*behind as f64);
        }
        standstill.lock().report(&group, &topics.orders, &lag, &rejoin);
        Ok::<(), anyhow::Error>(())
    })
    .await
}
