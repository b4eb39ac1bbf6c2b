//! Every value the scripts of `lua/` store and the services read back,
//! each with the one function that parses it (and, where the services
//! write it too, the one that writes it), beside the protocol
//! ([`super::protocol`]): an order's state, a reservation's trace, a
//! waiting room's ticket, a release's take, a move between buckets as its
//! lender logs it.

use crate::domain::{Holding, OrderId, OrderStatus, UserId};
use crate::stock::keys::Bucket;
use crate::stock::protocol::TicketState;

/// What Redis knows of one order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderState {
    /// QUEUED, CREATED or FAILED.
    pub status: OrderStatus,
    pub user_id: i64,
    /// Why it failed, if it did.
    pub reason: Option<String>,
    /// When the edge accepted it (ms).
    pub accepted_at: i64,
}

/// A reservation's trace: `round|request id|traceparent|quantity|slot`, as
/// deduct.lua writes it (before quantities: the first three, for one unit
/// in place 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationTrace {
    pub round: i64,
    pub request_id: String,
    pub traceparent: String,
    /// What the order holds.
    pub held: Holding,
}

impl ReservationTrace {
    /// The fields of the value the scripts write.
    pub const FIELDS: usize = 5;

    /// Parses `round|request id|traceparent[|quantity|slot]` (a
    /// traceparent holds no `|`).
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split('|');
        let round = parts.next()?.parse().ok()?;
        let (request_id, traceparent) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        let held = match (parts.next(), parts.next()) {
            (Some(quantity), Some(slot)) => Holding { quantity: quantity.parse().ok()?, slot: slot.parse().ok()? },
            _ => Holding::ONE,
        };
        Some(Self { round, request_id, traceparent, held })
    }

    /// The record's headers: what is there.
    pub fn trace(&self) -> crate::kafka::Trace<'_> {
        fn some(s: &str) -> Option<&str> {
            (!s.is_empty()).then_some(s)
        }
        crate::kafka::Trace { request_id: some(&self.request_id), traceparent: some(&self.traceparent) }
    }
}

impl OrderState {
    /// The fields of the value the scripts write.
    pub const FIELDS: usize = 4;

    /// Parses `STATUS|user|reason|accepted_ms`.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.splitn(4, '|');
        let status = OrderStatus::parse(parts.next()?)?;
        let user_id = parts.next()?.parse().ok()?;
        let reason = parts.next().filter(|r| !r.is_empty()).map(str::to_owned);
        let accepted_at = parts.next()?.parse().ok()?;
        Some(Self { status, user_id, reason, accepted_at })
    }

    /// `STATUS|user|reason|accepted_ms`, as the scripts write it.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.status.as_str(),
            self.user_id,
            self.reason.as_deref().unwrap_or(""),
            self.accepted_at
        )
    }
}

/// A waiting-room ticket (or a draw's entry) as the room keeps it: the
/// value `user|state|expires_ms|admitted_ms|ended_ms` of its tickets hash
/// (lua/queue_setup.lua), read here only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TicketValue {
    pub user: i64,
    /// `None`: a letter no state has.
    pub state: Option<TicketState>,
    /// Its token's expiry (ms; 0: none).
    pub expires_ms: i64,
    pub admitted_ms: i64,
    /// When it ended: used, expired, abandoned or lost (ms; 0: not yet).
    pub ended_ms: i64,
}

impl TicketValue {
    /// The fields of the value the scripts write.
    pub const FIELDS: usize = 5;

    /// Parses the value; a missing or unreadable number is 0, a value
    /// without a user id is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        let fields: Vec<&str> = value.split('|').collect();
        let at = |i: usize| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0);
        Some(Self {
            user: fields.first()?.parse().ok()?,
            state: fields.get(1).and_then(|letter| TicketState::parse(letter)),
            expires_ms: at(2),
            admitted_ms: at(3),
            ended_ms: at(4),
        })
    }
}

/// A take's entry as `lua/release_take.lua` writes it:
/// `user|quantity|state|order id|at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeValue {
    pub user: UserId,
    pub quantity: i64,
    /// Its order made (the order's id), or still pending (`None`).
    pub order_id: Option<OrderId>,
}

impl TakeValue {
    /// The fields a take's value has.
    pub const FIELDS: usize = 5;

    /// Parses a take's value.
    pub fn parse(value: &str) -> Option<Self> {
        let fields: Vec<&str> = value.split('|').collect();
        let [user, quantity, state, order, _at] = fields[..] else { return None };
        Some(Self {
            user: UserId::new(user.parse().ok()?).ok()?,
            quantity: quantity.parse().ok()?,
            order_id: match state {
                "K" => Some(OrderId::parse(order).ok()?),
                _ => None,
            },
        })
    }
}

/// One move of units from one bucket of a sale to another, in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Unique per transfer (random).
    pub id: String,
    pub from: Bucket,
    pub to: Bucket,
    /// The round both buckets hold.
    pub round: i64,
}

impl Transfer {
    /// A transfer with a fresh id.
    pub fn new(from: Bucket, to: Bucket, round: i64) -> Self {
        Self { id: format!("{:016x}", rand::random::<u64>()), from, to, round }
    }
}

/// A transfer the lender logged, as `BucketMoves::transfers_lent` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedTransfer {
    pub transfer: Transfer,
    pub units: i64,
    /// When it was lent (Redis clock, ms).
    pub at_ms: i64,
}

impl LoggedTransfer {
    /// The fields of the value `lua/lend.lua` logs: `to|units|round|at_ms`.
    pub const FIELDS: usize = 4;

    /// Parses the log's value of transfer `id` lent by `from`.
    pub fn parse(from: Bucket, id: String, value: &str) -> Option<Self> {
        let mut fields = value.split('|').map(str::parse::<i64>);
        let (to, units, round, at_ms) =
            (fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?);
        let to = Bucket(u32::try_from(to).ok()?);
        Some(Self { transfer: Transfer { id, from, to, round }, units, at_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_states_round_trip() {
        let state =
            OrderState { status: OrderStatus::Failed, user_id: 42, reason: Some("NO_DB_STOCK".into()), accepted_at: 7 };
        assert_eq!(OrderState::parse(&state.encode()), Some(state));
        let queued = OrderState::parse("QUEUED|9||123").expect("valid");
        assert_eq!(queued.reason, None);
        assert_eq!(OrderState::parse("garbage"), None);
    }

    #[test]
    fn a_trace_says_what_its_order_holds_and_an_older_one_means_one_unit() {
        let now = ReservationTrace::parse("3|r-1|00-ab-cd-01|2|1").expect("valid");
        assert_eq!((now.round, now.request_id.as_str(), now.traceparent.as_str()), (3, "r-1", "00-ab-cd-01"));
        assert_eq!(now.held, Holding { quantity: 2, slot: 1 });
        let before = ReservationTrace::parse("3|r-1|").expect("valid");
        assert_eq!((before.traceparent.as_str(), before.held), ("", Holding::ONE));
        assert_eq!(ReservationTrace::parse("3|r-1|tp|x|1"), None);
    }

    #[test]
    fn a_ticket_value_reads_as_the_scripts_write_it() {
        let v = TicketValue::parse("42|A|1700000000500|1700000000000|0").unwrap();
        assert_eq!(
            (v.user, v.state, v.expires_ms, v.admitted_ms, v.ended_ms),
            (42, Some(TicketState::Admitted), 1_700_000_000_500, 1_700_000_000_000, 0)
        );
        assert_eq!(TicketValue::parse("7|W|0|0|0").unwrap().state, Some(TicketState::Waiting));
        assert_eq!(TicketValue::parse("7|Q").unwrap().state, None, "a letter no state has");
        assert_eq!(TicketValue::parse("x|W|0|0|0"), None, "no user id");
    }

    #[test]
    fn a_take_value_reads_its_state() {
        let pending = TakeValue::parse("5|2|P||100").unwrap();
        assert_eq!((pending.user.get(), pending.quantity, pending.order_id), (5, 2, None));
        let kept = TakeValue::parse("5|1|K|7-9-12-00000000deadbeef|100").unwrap();
        assert_eq!(kept.order_id.unwrap().as_str(), "7-9-12-00000000deadbeef");
        assert!(TakeValue::parse("5|1|K|100").is_none());
    }

    #[test]
    fn a_logged_transfer_reads_back_as_the_script_wrote_it() {
        let logged = LoggedTransfer::parse(Bucket(2), "t1".into(), "0|5|3|1700000000000").expect("well formed");
        assert_eq!(logged.transfer, Transfer { id: "t1".into(), from: Bucket(2), to: Bucket(0), round: 3 });
        assert_eq!((logged.units, logged.at_ms), (5, 1_700_000_000_000));
        for bad in ["", "0|5|3", "x|5|3|1", "-1|5|3|1"] {
            assert_eq!(LoggedTransfer::parse(Bucket(1), "t".into(), bad), None, "{bad:?}");
        }
    }
}
