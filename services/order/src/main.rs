//! `seckill-order`: read the command line and settings, start telemetry,
//! consume until SIGINT/SIGTERM.

use anyhow::Context;
use seckill_shared::cli::ServiceArgs;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = ServiceArgs::parse_for("seckill-order", seckill_order::ABOUT);
    let Some(settings) = args.settings::<seckill_order::Settings>()? else { return Ok(()) };
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let service = seckill_order::Service::build(settings).await.context("starting the order service")?;
    tracing::info!(addr = %service.health_addr(), "health and metrics listening");
    service.run(shutdown).await
}
