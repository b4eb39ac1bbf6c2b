//! The crash tests' hook: with `SECKILL_TEST_HALT_AT=<point>` in its
//! environment, a service stops itself (SIGSTOP) the first time it reaches
//! that point, and the test kills it there. The order service's points:
//! `committed` (a batch's transaction committed, no CREATED event produced)
//! and `delivered` (every event delivered, the offsets not committed:
//! `tests/e2e/created_events.rs`); the edge's: `draw-frozen` (a draw's
//! entries frozen, the draw not applied) and `draw-sliced` (its first
//! slice applied, the rest not: `tests/e2e/draw_makers.rs`); the
//! compensator's: `failed-written` (a dead letter's order written FAILED,
//! its units not restored: `tests/e2e/compensator.rs`).
//! Compiled into every build: the tests run the binaries `make` builds,
//! without test features. The variable is read once; unset (as always
//! outside the tests), a point costs a load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

/// The point named by the environment, if any.
static POINT: LazyLock<Option<String>> = LazyLock::new(|| std::env::var("SECKILL_TEST_HALT_AT").ok());

/// Stops the process here when the environment names `point` (once).
pub fn at(point: &str) {
    static HALTED: AtomicBool = AtomicBool::new(false);
    if POINT.as_deref() != Some(point) || HALTED.swap(true, Ordering::SeqCst) {
        return;
    }
    tracing::warn!(point, "halting at a test's point (SIGSTOP)");
    stop_here();
}

/// Stops the whole process before this thread goes on. The signal is sent
/// to the calling thread (`raise`), which takes it on its way back from the
/// call and stops every thread with it. Sent to the process (`kill -STOP
/// <pid>`), another thread may take it: on a busy machine this one ran on
/// meanwhile and committed the batch's offsets (a clean-clone run's
/// failure).
#[allow(unsafe_code)]
fn stop_here() {
    // SAFETY: raise only sends a signal to the calling thread; SIGSTOP has
    // no handler to run.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
