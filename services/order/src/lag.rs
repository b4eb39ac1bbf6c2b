//! The order group's lag per partition on `/metrics`, every few seconds
//! (what an operator watches drain).

use crate::Settings;
use seckill_shared::kafka::{self, Topics};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Publishes the group's lag per partition as a gauge, every few seconds.
pub async fn report_lag(settings: Arc<Settings>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let topics = Topics::new(&settings.servers.kafka);
    let group = kafka::order_group(&settings.servers.kafka);
    seckill_shared::ops::shutdown::every("lag reporter", Duration::from_secs(5), shutdown, || async {
        let (kafka_settings, group, topic) = (settings.servers.kafka.clone(), group.clone(), topics.orders.clone());
        let lag = tokio::task::spawn_blocking(move || kafka::lag::lag(&kafka_settings, &group, &topic)).await??;
        for (partition, behind) in lag.partitions {
            metrics::gauge!("seckill_order_consumer_lag", "partition" => partition.to_string()).set(behind as f64);
        }
        Ok::<(), anyhow::Error>(())
    })
    .await
}
