//! Redis by capability. [`Stock`] is the connection, its key layout and
//! its replica settings; what the services do with it goes through one of
//! its handles, each named by what it does and holding the scripts it
//! runs (its files beside this one, each `impl` of its handle):
//!
//! | handle | what it does | its files |
//! |---|---|---|
//! | [`Orders`] | the sale's deduction and its returns: deduct (batched or under the lock), void, roll back, cancel, compensate, the CREATED mark, an order's status as the replicas hold it | `deduct.rs`, `lock_deduction.rs`, `void.rs`, `rollback.rs`, `cancel.rs`, `compensate.rs`, `follow_created.rs`, `order_state.rs`, `confirm.rs` |
//! | [`WaitingRoom`] | the room: its set-up, tickets, admission passes, claims of a token | `queue/setup.rs`, `queue/ticket.rs`, `queue/admit.rs`, `queue/claim.rs`, `queue/mod.rs` |
//! | [`Draws`] | a draw's entries, the draw, its outcomes | `../draw/entries.rs`, `../draw/state.rs` (the draw's folder) |
//! | [`BucketMoves`] | the buckets' directory and the stock moved between them | `directory.rs`, `buckets.rs`, `borrow.rs`, `lend.rs` |
//! | [`Books`] | the sale read whole, for the books and the sweeper | `snapshot.rs` |
//! | [`WarmUps`] | a round written, replaced or closed | `warmup.rs` |
//! | [`Releases`] | a release's declaration and its takes across sizes | `release.rs` |
//!
//! A handle borrows the [`Stock`] (`stock.orders().deduct_batch(…)`) and
//! costs nothing to take.

use super::Stock;

/// Declares a handle and the [`Stock`] method that takes it.
macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident => $take:ident,)*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy)]
            pub struct $name<'a>(&'a Stock);

            impl std::ops::Deref for $name<'_> {
                type Target = Stock;
                fn deref(&self) -> &Stock {
                    self.0
                }
            }
        )*

        impl Stock {
            $(
                $(#[$doc])*
                pub fn $take(&self) -> $name<'_> {
                    $name(self)
                }
            )*
        }
    };
}

handles! {
    /// The sale's deduction and its returns, and an order's status.
    Orders => orders,
    /// The waiting room: set-up, tickets, admission passes, claims.
    WaitingRoom => waiting_room,
    /// A draw's entries, the draw and its outcomes.
    Draws => draws,
    /// The buckets' directory and the stock moved between them.
    BucketMoves => bucket_moves,
    /// The sale read whole (the books, the sweeper).
    Books => books,
    /// A round written, replaced or closed.
    WarmUps => warm_ups,
    /// A release's declaration and its takes across sizes.
    Releases => releases,
}
