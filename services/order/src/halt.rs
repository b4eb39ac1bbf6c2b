//! The crash tests' hook (feature `fault-injection`, tests only): with
//! `SECKILL_TEST_HALT_AT=<point>` in its environment, the order service
//! stops itself (SIGSTOP) the first time a batch reaches that point —
//! `committed` (its transaction committed, no CREATED event produced) or
//! `delivered` (every event delivered, the offsets not committed) — and
//! the test kills it there. Without the feature, nothing.

/// Stops the process here when the environment names `point`.
#[cfg(feature = "fault-injection")]
pub fn at(point: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static HALTED: AtomicBool = AtomicBool::new(false);
    if std::env::var("SECKILL_TEST_HALT_AT").as_deref() != Ok(point) || HALTED.swap(true, Ordering::SeqCst) {
        return;
    }
    tracing::warn!(point, "halting at a test's point (SIGSTOP)");
    let _ = std::process::Command::new("kill").arg("-STOP").arg(std::process::id().to_string()).status();
}

/// Nothing, without the test feature.
#[cfg(not(feature = "fault-injection"))]
pub fn at(_point: &str) {}
