//! `seckill-order`: load settings, start telemetry, consume until SIGINT/SIGTERM.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings: seckill_order::Settings = seckill_shared::config::load(seckill_shared::config::UnknownKeys::Refuse).context("loading settings")?;
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let service = seckill_order::Service::build(settings).await.context("starting the order service")?;
    tracing::info!(addr = %service.health_addr(), "health and metrics listening");
    service.run(shutdown).await
}
