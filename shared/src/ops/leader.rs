//! Singletons: jobs of which one instance runs at a time across all the
//! services' replicas — the reservation sweeper and the order-event relay.
//! A job takes a [`Seat`]; while its term lasts it leads, turn after turn;
//! it steps down when its term is lost (a renewal found the seat gone: the
//! holder was paused, cut off, or too slow), when a turn says so (its
//! fencing token was refused), and at shutdown. Another instance competes
//! meanwhile and takes the seat once it is free.
//!
//! Every term carries a fencing token greater than every earlier term's;
//! the job passes it to each write it guards, so a holder that lost its
//! term without knowing it (it was frozen) cannot write after its
//! successor. Two seats exist: the distributed Redis lock with its
//! watchdog ([`crate::ops::lock`], the sweeper's: its writes are fenced in
//! PostgreSQL's `lock_fences`), and a lease in PostgreSQL itself
//! ([`crate::ops::lease`], the relay's: its cursor is the database's).

use crate::ops::shutdown::pause;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a turn answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Lead on; the next turn after this long.
    Again(Duration),
    /// Give the seat up now (a newer holder wrote: this one must not lead).
    StepDown,
}

/// A term of office: who holds the seat, with which token, until when.
pub trait Term: Send + Sync {
    /// This term's fencing token: greater than every earlier term's.
    fn fence(&self) -> i64;
    /// This holder's unique id.
    fn holder(&self) -> &str;
    /// Cancelled when the term is found lost.
    fn lost(&self) -> CancellationToken;
    /// Gives the seat up (best effort: an unreleased seat expires).
    fn step_down(&self) -> impl Future<Output = ()> + Send;
}

/// A seat one instance at a time may hold.
pub trait Seat: Send + Sync {
    /// A term of this seat.
    type Term: Term;
    /// Tries once to take the seat; `None` while another holds it.
    fn take(&self) -> impl Future<Output = anyhow::Result<Option<Self::Term>>> + Send;
}

/// Competes for `seat` every `retry` while another instance holds it, and
/// while holding it runs `turn` (given the term) until shutdown. `what`
/// names the job in the log. Returns at shutdown, the seat given up.
pub async fn lead<S, F, Fut>(
    what: &'static str,
    seat: &S,
    retry: Duration,
    shutdown: &CancellationToken,
    mut turn: F,
) -> anyhow::Result<()>
where
    S: Seat,
    F: FnMut(Arc<S::Term>) -> Fut,
    Fut: Future<Output = Turn>,
{
    loop {
        let term = match seat.take().await {
            Ok(term) => term,
            Err(error) => {
                tracing::warn!(job = what, error = %format!("{error:#}"), "cannot compete for the seat");
                None
            }
        };
        let Some(term) = term.map(Arc::new) else {
            // Another instance leads (or the seat's store is down): later.
            if !pause(shutdown, retry).await {
                return Ok(());
            }
            continue;
        };
        tracing::info!(job = what, fence = term.fence(), holder = term.holder(), "this instance leads");
        metrics::counter!("seckill_leader_terms_total", "job" => what).increment(1);
        let lost = term.lost();
        let stopping = loop {
            let this_turn = tokio::select! {
                // The term was lost while the turn ran (a renewal found the
                // seat gone, or hung past the lease): the turn is abandoned
                // where it waits — what it had not written is not written
                // under this term, and its fence refuses it anyway.
                _ = lost.cancelled() => {
                    tracing::warn!(job = what, fence = term.fence(), "term lost during a turn; the turn is abandoned");
                    break false;
                }
                // The turn ended by itself.
                this_turn = turn(term.clone()) => this_turn,
            };
            let wait = match this_turn {
                Turn::Again(wait) => wait,
                Turn::StepDown => {
                    tracing::warn!(job = what, fence = term.fence(), "a newer holder wrote; stepping down");
                    break false;
                }
            };
            tokio::select! {
                // Stop with the service; the seat is given up below.
                _ = shutdown.cancelled() => break true,
                // The term is gone: stop writing at once.
                _ = lost.cancelled() => {
                    tracing::warn!(job = what, fence = term.fence(), "term lost; standing down");
                    break false;
                }
                // Next turn.
                _ = tokio::time::sleep(wait) => {}
            }
        };
        term.step_down().await;
        if stopping {
            return Ok(());
        }
    }
}
