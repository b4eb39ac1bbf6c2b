//! A verifiable draw, all of it: its settings at warm-up ([`settings`]),
//! its seed kept in PostgreSQL and committed before the entries open
//! ([`seed`]), the ranking anyone can recompute from the published seed and
//! the entries' digest ([`proof`]); in Redis, on the sale's waiting-room
//! keys (its own slot), its entries, the draw and its outcomes
//! ([`entries`]: the stock's [`Draws`](crate::stock::Draws) handle, with
//! `lua/queue_draw.lua`) and its figures ([`state`]).

mod entries;
pub mod proof;
pub mod seed;
mod settings;
mod state;

pub use entries::{Applied, DrawSecret, EntryAnswer, EntryStatus, EntryView, OutcomeRow, APPLY_SLICE};
pub use settings::{Draw, MAX_CLAIM_SECONDS};
pub use state::DrawState;
