//! What crosses both stores for one order: Redis following the fate
//! PostgreSQL decided ([`fate`]), and cancellations with the return of
//! their units ([`cancellation`]).

pub mod cancellation;
pub mod fate;
