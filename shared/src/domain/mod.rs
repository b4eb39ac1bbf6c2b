//! Domain types: validated ids and the sale key ([`SaleKey`], [`OrderId`]),
//! the Kafka order record ([`OrderRecord`]) and order event
//! ([`OrderEvent`]), a round's limits on units ([`Limits`]), and order status with the reason codes of failures
//! ([`OrderStatus`], [`FailReason`]).

mod event;
mod ids;
pub mod integer;
mod limits;
mod record;
mod status;

pub use event::OrderEvent;
pub use ids::{ActivityId, IdError, OrderId, SaleKey, SkuId, UserId};
pub use limits::{Holding, Limits, MAX_QUANTITY};
pub use record::{OrderRecord, RecordError};
pub use status::{FailReason, Fate, OrderStatus};
