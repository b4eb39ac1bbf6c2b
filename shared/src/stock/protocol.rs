//! What the Redis scripts of `lua/` answer and write, defined once.
//!
//! Each script's answers are a module here: a named constant per code (the
//! Rust callers match on these, never on a bare number) and the table
//! `ANSWERS` of them all, with what each means. The values the scripts
//! write are defined beside: an order's status (`STATUS|user|reason|
//! accepted_ms`, [`crate::stock::OrderState`], its statuses those of
//! [`crate::domain::OrderStatus`]) and a waiting-room ticket's state
//! ([`TicketState`], `user|state|expires_ms|admitted_ms|ended_ms`).
//!
//! `tests/code/script_protocol.rs` reads every script and fails when one
//! answers a code, or writes an order status or a ticket state, that this
//! file does not name, and when a code named here is answered by no
//! script; the waiting room's and the draw's reply words are checked both
//! ways against their readers.

/// One script's answers.
#[derive(Debug, Clone, Copy)]
pub struct Answers {
    /// Its file in `lua/`.
    pub script: &'static str,
    /// Each code it answers: the code, its constant's name, what it means.
    pub codes: &'static [(i64, &'static str, &'static str)],
    /// What any other answer of zero or more means (a count, a token, a
    /// time), when the script answers such.
    pub otherwise: Option<&'static str>,
}

macro_rules! answers {
    (
        $(#[doc = $doc:literal])*
        $module:ident = $file:literal $(, otherwise $other:literal)?;
        $($name:ident = $code:literal: $meaning:literal;)*
    ) => {
        $(#[doc = $doc])*
        pub mod $module {
            $(#[doc = $meaning] pub const $name: i64 = $code;)*
            /// The table of this script's answers.
            pub const ANSWERS: super::Answers = super::Answers {
                script: $file,
                codes: &[$(($code, stringify!($name), $meaning)),*],
                otherwise: answers!(@otherwise $($other)?),
            };
        }
    };
    (@otherwise) => { None };
    (@otherwise $other:literal) => { Some($other) };
}

answers! {
    /// The deduction: one answer per request, this code first.
    deduct = "deduct.lua";
    ACCEPTED = 1: "accepted: the units taken, the order QUEUED and reserved";
    SALE_NOT_FOUND = -1: "Redis holds no round of the sale (nothing kept)";
    SALE_NOT_ACTIVE = -2: "outside the sale's window (nothing kept)";
    ALREADY_PURCHASED = -3: "the user holds an order of the round (its id follows)";
    SOLD_OUT = -4: "fewer units left in the bucket than asked (nothing kept; the units left follow)";
    VOIDED = -5: "the call was voided by an edge that gave up hearing it (nothing kept)";
    OTHER_BUCKET = -6: "the user's home is another bucket (nothing kept)";
    WARMING = -7: "a warm-up is replacing the round (nothing kept; ask again)";
    ADMISSION_REQUIRED = -8: "the round sells only with an admission from its room (nothing kept)";
    LIMIT_REACHED = -9: "the user's units held plus those asked pass the limit (nothing kept; held and limit follow)";
    OVER_MAX_PER_ORDER = -10: "more units asked than one order may hold (nothing kept; the most follows)";
}

answers! {
    /// Voiding a deduction call whose outcome was not heard: per request.
    void = "void.lua";
    NOTHING = 0: "the request holds nothing";
    UNDONE = 1: "its order was undone: the unit back, the buyer free, FAILED";
    STANDS = 2: "its order stands (past its publish deadline, or written since)";
}

answers! {
    /// The edge's rollback of an order whose publish definitely failed.
    rollback = "rollback.lua";
    NOT_RESTORED = 0: "no longer QUEUED, or past its publish deadline: nothing restored";
    RESTORED = 1: "the unit went back";
}

answers! {
    /// The compensator settling a dead-lettered order.
    compensate = "compensate.lua";
    DONE = 1: "settled now";
    ALREADY_DONE = 0: "settled by an earlier call";
    UNKNOWN_ORDER = -1: "Redis never minted this order";
    CREATED = -2: "the order is CREATED: never restored";
    ROLLED_BACK = -3: "the edge rolled it back already";
}

answers! {
    /// A customer's units taken in a release, before their order's deduction.
    release_take = "release_take.lua";
    NO_RELEASE = 0: "the activity declares no release (nothing taken)";
    TAKEN = 1: "taken, or taken before (held and limit follow)";
    LIMIT_REACHED = -9: "the user's units in the release plus those asked pass its limit (nothing taken; held and limit follow)";
}

answers! {
    /// A release's take kept for the order made with it.
    release_keep = "release_keep.lua";
    KEPT = 1: "kept, now or before, for this order";
    GONE = -1: "no such take (swept or given back): the order must not be published";
}

answers! {
    /// A release's takes given back.
    release_give = "release_give.lua", otherwise "the units and the takes given back now";
}

answers! {
    /// Cancelled orders followed in Redis.
    cancel = "cancel.lua", otherwise "the units given back now";
}

answers! {
    /// A sale's round closed early.
    close = "close.lua", otherwise "the end in force (ms)";
    NO_ROUND = 0: "Redis holds no round of the sale";
}

answers! {
    /// A write read back to learn whether the replicas have it.
    confirm = "confirm.lua", otherwise "the field's value, or 1 for a set member (false: not there)";
}

answers! {
    /// Orders written to PostgreSQL marked CREATED.
    follow_created = "follow_created.lua", otherwise "how many orders changed status";
}

answers! {
    /// A round frozen before a warm-up replaces it.
    freeze = "freeze.lua";
    REFUSED = 0: "the round has orders in flight";
    FROZEN = 1: "frozen, or no round to freeze";
}

answers! {
    /// Half a bucket's units lent to another.
    lend = "lend.lua", otherwise "the units lent";
    NOTHING_LEFT = 0: "no unit left to lend";
    OTHER_ROUND = -1: "the bucket holds another round, or none";
    IN_TRANSIT = -2: "none left here, but units this bucket lent are on their way";
}

answers! {
    /// Lent units taken in by the borrowing bucket.
    receive = "receive.lua";
    NOW = 1: "taken in now";
    BEFORE = 0: "taken in before";
    OTHER_ROUND = -1: "the bucket holds another round now: not added";
}

answers! {
    /// Lent units given back to the lender.
    unlend = "unlend.lua", otherwise "the units given back";
}

answers! {
    /// A fenced lock taken.
    lock = "lock.lua", otherwise "the fencing token";
    HELD_ELSEWHERE = 0: "another holder has the lock";
}

answers! {
    /// A fenced lock's lease renewed.
    renew = "renew.lua";
    LOST = 0: "the lock is not the caller's any more";
    RENEWED = 1: "renewed";
}

answers! {
    /// A fenced lock released.
    unlock = "unlock.lua";
    NOT_HELD = 0: "the lock was no longer the caller's: nothing deleted";
    RELEASED = 1: "released";
}

answers! {
    /// A round loaded.
    warmup = "warmup.lua";
    REFUSED = 0: "the previous round has orders in flight";
    LOADED = 1: "loaded";
    LOADED_BEFORE = 2: "loaded before by this warm-up: left as it is";
}

answers! {
    /// A waiting room's admission pass.
    queue_admit = "queue_admit.lua", otherwise "{admitted now, waiting, active, stale claims}";
}

answers! {
    /// An admission claimed, spent or released for one order.
    queue_claim = "queue_claim.lua";
    CLAIMED = 1: "claimed (spend and release answer it too)";
    USED = 0: "used, or claimed by an order in flight";
    EXPIRED = -1: "expired";
    FOREIGN = -2: "not this user's, not this round's, or unknown";
}

answers! {
    /// A waiting room opened, closed or taken away.
    queue_setup = "queue_setup.lua";
    DONE = 0: "closed, or taken away";
    OPENED = 1: "opened";
    OPEN_ALREADY = 2: "open for this round already: left as it is";
}

answers! {
    /// A ticket joined or read.
    queue_ticket = "queue_ticket.lua", otherwise "{status, ticket, user, place, ...}, status a word";
}

answers! {
    /// A draw's entries and the draw (entering and reading answer a
    /// table; freezing and applying a code).
    queue_draw = "queue_draw.lua", otherwise "{status, entry, user, ...}, status a word";
    DONE = 1: "frozen (freeze); drawn now (apply); the cursor moved (published)";
    NOT_YET = 0: "before the draw's time (freeze); drawn before (apply)";
    MORE = 2: "a slice of the draw done, more to do (apply): asked again from meta 'apply_at'";
    NO_DRAW_TO_MAKE = -1: "no draw to make: none, made already, or the sale closed first (freeze, apply)";
    NOT_WHOLE = -2: "the line does not hold every entry ranked, or another list was begun: rank again";
    LATER_TERM = -3: "a maker or publisher of a later term acted on the draw: nothing written";
}

/// Every script's answers, one entry per file of `lua/`.
pub const ALL: &[Answers] = &[
    deduct::ANSWERS,
    void::ANSWERS,
    rollback::ANSWERS,
    compensate::ANSWERS,
    cancel::ANSWERS,
    release_take::ANSWERS,
    release_keep::ANSWERS,
    release_give::ANSWERS,
    close::ANSWERS,
    confirm::ANSWERS,
    follow_created::ANSWERS,
    freeze::ANSWERS,
    lend::ANSWERS,
    receive::ANSWERS,
    unlend::ANSWERS,
    lock::ANSWERS,
    renew::ANSWERS,
    unlock::ANSWERS,
    warmup::ANSWERS,
    queue_admit::ANSWERS,
    queue_claim::ANSWERS,
    queue_draw::ANSWERS,
    queue_setup::ANSWERS,
    queue_ticket::ANSWERS,
];

/// A waiting-room ticket's state, the second field of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketState {
    /// In the line.
    Waiting,
    /// Admitted: may order until the token's expiry.
    Admitted,
    /// Claimed by an order in flight.
    Claimed,
    /// Used by an order.
    Used,
    /// Admitted and not used in time.
    Expired,
    /// Waiting and not polled for the room's `abandon` time.
    Abandoned,
    /// A draw's entry still waiting when the sale ended.
    Lost,
}

impl TicketState {
    /// Every state.
    pub const ALL: [TicketState; 7] =
        [Self::Waiting, Self::Admitted, Self::Claimed, Self::Used, Self::Expired, Self::Abandoned, Self::Lost];

    /// The letter the scripts write.
    pub fn letter(self) -> &'static str {
        match self {
            Self::Waiting => "W",
            Self::Admitted => "A",
            Self::Claimed => "C",
            Self::Used => "U",
            Self::Expired => "E",
            Self::Abandoned => "X",
            Self::Lost => "L",
        }
    }

    /// The state a letter names.
    pub fn parse(letter: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.letter() == letter)
    }

    /// What the state means, what a poll of the ticket reads in it (a closed
    /// room reads `CLOSED` whatever the state), and what the buyer may do.
    pub fn row(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Waiting => (
                "in the line (before the start: in the shuffled pre-queue)",
                "`WAITING` with its place (0 before the start), or `SOLD_OUT` once the room is; a draw's entry: `ENTERED`, then `WAITLISTED` with its place",
                "poll; a ticket not polled for the room's abandon time is abandoned",
            ),
            Self::Admitted => (
                "admitted by a pass, its token not yet used",
                "`ADMITTED` with the token's expiry (a draw's entry: `WON`)",
                "order once with the `Seckill-Admission` token before it expires",
            ),
            Self::Claimed => (
                "an order with the token in flight",
                "`ADMITTED`",
                "wait for the order's answer: it spends the claim (order kept) or releases it (nothing kept)",
            ),
            Self::Used => ("the token placed an order", "`ADMITTED`", "follow the order"),
            Self::Expired => (
                "admitted and not used before the token's expiry",
                "`WAITING` at the back of the line (the poll rejoins it), or `SOLD_OUT`; a draw's entry: `EXPIRED`, final",
                "poll again",
            ),
            Self::Abandoned => (
                "waiting and not polled for the room's abandon time: its place given up",
                "`WAITING` at the back of the line (the poll rejoins it), or `SOLD_OUT`",
                "poll again",
            ),
            Self::Lost => {
                (
                    "a draw's entry still waitlisted when the sale ended (a draw with no end: when nothing can serve its waitlist any more)",
                    "`LOST` (a draw's entry)",
                    "nothing: final",
                )
            }
        }
    }

    /// The states as a markdown table, as the docs show it.
    pub fn table() -> String {
        let mut out = String::from("| state (letter) | means | a poll reads | the buyer may |\n|---|---|---|---|\n");
        for state in Self::ALL {
            let (means, reads, may) = state.row();
            out.push_str(&format!("| {state:?} (`{}`) | {means} | {reads} | {may} |\n", state.letter()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_is_listed_once_and_its_codes_once() {
        let mut scripts: Vec<&str> = ALL.iter().map(|a| a.script).collect();
        scripts.sort_unstable();
        scripts.dedup();
        assert_eq!(scripts.len(), ALL.len());
        for answers in ALL {
            let mut codes: Vec<i64> = answers.codes.iter().map(|c| c.0).collect();
            codes.sort_unstable();
            codes.dedup();
            assert_eq!(codes.len(), answers.codes.len(), "{}", answers.script);
        }
        assert_eq!(
            deduct::ANSWERS.codes[3],
            (-3, "ALREADY_PURCHASED", "the user holds an order of the round (its id follows)")
        );
    }

    #[test]
    fn ticket_states_round_trip() {
        for state in TicketState::ALL {
            assert_eq!(TicketState::parse(state.letter()), Some(state));
        }
        assert_eq!(TicketState::parse("Q"), None);
    }
}
