//! One cancellation token for the whole process, cancelled by SIGINT or
//! SIGTERM. Loops check it at safe points only (between batches).

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGINT or SIGTERM.
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let ctrl_c = async {
            // If the handler cannot be installed, only SIGTERM stops us.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        #[cfg(unix)]
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminate = std::future::pending::<()>();
        tokio::select! {
            // Interactive stop.
            _ = ctrl_c => tracing::info!("SIGINT received, shutting down"),
            // Orchestrated stop.
            _ = terminate => tracing::info!("SIGTERM received, shutting down"),
        }
        trigger.cancel();
    });
    token
}
