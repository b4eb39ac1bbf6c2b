//! `seckill-edge`: read the command line and settings, start telemetry,
//! serve until SIGINT/SIGTERM.

use anyhow::Context;
use seckill_shared::cli::ServiceArgs;

// Every request allocates a little (the order record, its id, the response);
// mimalloc's thread-local free lists beat glibc's arenas at that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = ServiceArgs::parse_for("seckill-edge", seckill_edge::ABOUT);
    let Some(settings) = args.settings::<seckill_edge::Settings>()? else { return Ok(()) };
    seckill_shared::telemetry::init_tracing(&settings.servers.telemetry);
    let shutdown = seckill_shared::shutdown::shutdown_signal();
    let app = seckill_edge::Application::build(settings).await.context("starting the edge")?;
    app.run(shutdown).await
}
