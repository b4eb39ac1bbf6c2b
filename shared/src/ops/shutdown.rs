//! Stopping cleanly: one cancellation token for the whole process, cancelled
//! by SIGINT or SIGTERM, and the tracker every background task runs on, so
//! a service waits for them (bounded) and logs how each ended. Loops check
//! the token only at safe points (between batches).

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

/// Waits `wait`, or until `shutdown`: whether to go on (`false`: the
/// service is stopping). Every loop of the services pauses through here.
pub async fn pause(shutdown: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        // Stop with the service.
        _ = shutdown.cancelled() => false,
        // Time for the next turn.
        _ = tokio::time::sleep(wait) => true,
    }
}

/// Runs `turn` every `interval` until `shutdown`. A failed turn is logged
/// (as `what`) and the next one comes at its time: a periodic job outlives
/// a dependency that is down.
pub async fn every<F, Fut, E>(
    what: &'static str,
    interval: Duration,
    shutdown: CancellationToken,
    mut turn: F,
) -> Result<(), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    loop {
        if let Err(error) = turn().await {
            tracing::warn!(task = what, error = %format!("{error:#}"), "failed; will try again");
        }
        if !pause(&shutdown, interval).await {
            return Ok(());
        }
    }
}

/// Logs how a long-running task ended: a task that ends silently is a bug.
pub async fn report_exit<E: std::fmt::Display>(name: &'static str, task: impl Future<Output = Result<(), E>>) {
    match task.await {
        Ok(()) => tracing::debug!(task = name, "task finished"),
        Err(error) => tracing::error!(task = name, %error, "task failed"),
    }
}

/// The background tasks of one service: spawned on one tracker, told to
/// stop by one token.
#[derive(Clone, Default)]
pub struct Background {
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl Background {
    /// Tasks stopped by `shutdown`.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self { tracker: TaskTracker::new(), shutdown }
    }

    /// The token that tells the tasks to stop.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Spawns a task whose end is logged.
    pub fn spawn<E: std::fmt::Display + 'static>(
        &self,
        name: &'static str,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) {
        self.tracker.spawn(report_exit(name, task));
    }

    /// Stops accepting tasks and waits for the running ones, at most
    /// `timeout`; whether they all ended.
    pub async fn wait(&self, timeout: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(timeout, self.tracker.wait()).await.is_ok()
    }
}
