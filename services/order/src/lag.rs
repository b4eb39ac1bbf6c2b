//! The order group's lag per partition on `/metrics`, every few seconds
//! (what an operator watches drain), and the group standing still while
//! records wait ([`crate::standstill`]): this process's idle members are
//! then asked to join again.

use crate::standstill::StandStill;
use crate::Settings;
use seckill_shared::kafka::{self, Topics};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    let bound = settings.service.consumer.stall();
    let standstill = parking_lot::Mutex::new(StandStill::new(bound));
    seckill_shared::ops::shutdown::every("lag reporter", Duration::from_secs(5), shutdown, || async {
        let (kafka_settings, group, topic) = (settings.servers.kafka.clone(), group.clone(), topics.orders.clone());
        let lag = tokio::task::spawn_blocking(move || kafka::lag::lag(&kafka_settings, &group, &topic)).await??;
        for (partition, behind) in &lag.partitions {
            metrics::gauge!("seckill_order_consumer_lag", "partition" => partition.to_string()).set(*behind as f64);
        }
        let still = standstill.lock().observe(Instant::now(), &lag.highs, &lag.partitions);
        if !still.is_empty() {
            let which: Vec<String> = still
                .iter()
                .map(|s| {
                    format!("{}[{}]: {} waiting for {} s", topics.orders, s.partition, s.waiting, s.for_.as_secs())
                })
                .collect();
            tracing::error!(
                stall_secs = bound.as_secs(),
                "the order group stands still while records wait ({}); this process's idle members join it again",
                which.join(", ")
            );
            metrics::counter!("seckill_order_group_standstills_total").increment(1);
            rejoin.send_modify(|n| *n += 1);
        }
        Ok::<(), anyhow::Error>(())
    })
    .await
}
