//! `seckill-edge`: load settings, start telemetry, serve until SIGINT/SIGTERM.

use anyhow::Context;

// Every request allocates a little (the order record, its id, the response);
// mimalloc's thread-local free lists beat glibc's arenas at that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings: seckill_edge::Settings = seckill_shared::config::load(seckill_shared::config::UnknownKeys::Refuse).context("loading settings")?;
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let app = seckill_edge::Application::build(settings).await.context("starting the edge")?;
    app.run(shutdown).await
}
