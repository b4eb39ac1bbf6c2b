//! Domain types: validated ids and the sale key ([`ids`]), the Kafka order
//! record ([`record`]) and order event ([`event`]), and order status with
//! the reason codes of failures ([`status`]).

mod event;
mod ids;
mod record;
mod status;

pub use event::OrderEvent;
pub use ids::{ActivityId, IdError, OrderId, SaleKey, SkuId, UserId};
pub use record::{OrderRecord, RecordError};
pub use status::{FailReason, Fate, OrderStatus};
