//! `seckill-compensator`: load settings, start telemetry, run until SIGINT/SIGTERM.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings: seckill_compensator::Settings = seckill_shared::config::load(seckill_shared::config::UnknownKeys::Refuse).context("loading settings")?;
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let service = seckill_compensator::Service::build(settings).await.context("starting the compensator")?;
    tracing::info!(addr = %service.health_addr(), "health and metrics listening");
    service.run(shutdown).await
}
