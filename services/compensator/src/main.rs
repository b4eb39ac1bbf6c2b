//! `seckill-compensator`: read the command line and settings, start
//! telemetry, run until SIGINT/SIGTERM.

use anyhow::Context;
use seckill_shared::cli::ServiceArgs;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = ServiceArgs::parse_for("seckill-compensator", seckill_compensator::ABOUT);
    let Some(settings) = args.settings::<seckill_compensator::Settings>()? else { return Ok(()) };
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let service = seckill_compensator::Service::build(settings).await.context("starting the compensator")?;
    tracing::info!(addr = %service.health_addr(), "health and metrics listening");
    service.run(shutdown).await
}
