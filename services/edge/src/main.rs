//! `seckill-edge`: load settings, start telemetry, serve until SIGINT/SIGTERM.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings: seckill_edge::Settings = seckill_shared::config::load().context("loading settings")?;
    seckill_shared::telemetry::init_tracing(&settings.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let app = seckill_edge::Application::build(settings).await.context("starting the edge")?;
    app.run(shutdown).await
}
