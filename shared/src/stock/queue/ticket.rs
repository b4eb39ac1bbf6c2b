//! Joining a waiting room and reading a ticket (`lua/queue_ticket.lua`).

use super::super::with_keys;
use super::ticket_sale;
use crate::domain::{SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static QUEUE_TICKET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/queue_ticket.lua")));

/// What a ticket reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TicketStatus {
    /// In line (its place is known once the sale starts).
    Waiting,
    /// Let in: its holder may place one order until the token expires.
    Admitted,
    /// No unit left to buy; waiting on in case one comes back.
    SoldOut,
    /// The sale is over.
    Closed,
}

/// A ticket as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketView {
    pub ticket: String,
    pub user: UserId,
    pub status: TicketStatus,
    /// Place in line, from 1 (`None`: before the start, nobody has one).
    pub place: Option<u64>,
    /// When the admission token expires (ms; admitted only).
    pub expires_ms: i64,
    pub round: i64,
    /// Admissions of the room in the last minute.
    pub admitted_last_minute: i64,
    /// The room's rate (0: unlimited).
    pub admit_per_minute: i64,
}

impl TicketView {
    /// The estimated wait (seconds), by the admissions of the last minute
    /// or the room's rate; `None` when neither says.
    pub fn wait_seconds(&self) -> Option<u64> {
        super::wait_seconds(self.place?, self.admitted_last_minute, self.admit_per_minute)
    }
}

/// What a join or a read answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketAnswer {
    Ticket(TicketView),
    /// The pre-queue opens at `opens_ms`.
    NotOpen {
        opens_ms: i64,
    },
    /// The sale has no waiting room.
    NoRoom,
    /// No such ticket.
    Unknown,
    /// The proof-of-work challenge was used before.
    Replayed,
    /// The sale is over (joining after its end).
    Closed,
    /// No unit left (joining a sold-out room).
    SoldOut,
}

impl crate::stock::WaitingRoom<'_> {
    /// `user` joins `sale`'s room (the same ticket again if they hold one
    /// this round); `challenge`: the nonce and expiry (ms) of the
    /// proof-of-work challenge they solved, used once.
    pub async fn join_room(
        self,
        sale: SaleKey,
        user: UserId,
        challenge: Option<(&str, i64)>,
    ) -> Result<TicketAnswer, RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_TICKET, &k.all());
        let (nonce, until) = challenge.unwrap_or(("", 0));
        invocation.arg("join").arg(user.get()).arg(super::new_ticket(sale)).arg(nonce).arg(until);
        parse(self.conn.invoke(&invocation).await?)
    }

    /// What `ticket` reads now (a waiting ticket read is one still wanted).
    pub async fn read_ticket(self, ticket: &str) -> Result<TicketAnswer, RedisCallError> {
        let Some(sale) = ticket_sale(ticket) else {
            return Ok(TicketAnswer::Unknown);
        };
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_TICKET, &k.all());
        invocation.arg("poll").arg(ticket);
        parse(self.conn.invoke(&invocation).await?)
    }
}

type Reply = (String, String, String, i64, i64, i64, i64, i64, i64);

fn parse(reply: Reply) -> Result<TicketAnswer, RedisCallError> {
    let (status, ticket, user, place, expires_ms, round, opens_ms, recent, per_minute) = reply;
    let status = match status.as_str() {
        "WAITING" => TicketStatus::Waiting,
        "ADMITTED" => TicketStatus::Admitted,
        "SOLD_OUT" if ticket.is_empty() => return Ok(TicketAnswer::SoldOut),
        "SOLD_OUT" => TicketStatus::SoldOut,
        "CLOSED" if ticket.is_empty() => return Ok(TicketAnswer::Closed),
        "CLOSED" => TicketStatus::Closed,
        "NOT_OPEN" => return Ok(TicketAnswer::NotOpen { opens_ms }),
        "NO_ROOM" => return Ok(TicketAnswer::NoRoom),
        "UNKNOWN" => return Ok(TicketAnswer::Unknown),
        "REPLAYED" => return Ok(TicketAnswer::Replayed),
        other => {
            return Err(RedisCallError::Unexpected { script: "queue_ticket.lua", answer: other.to_owned() });
        }
    };
    let user = user
        .parse::<i64>()
        .ok()
        .and_then(|u| UserId::new(u).ok())
        .ok_or_else(|| RedisCallError::Unexpected { script: "queue_ticket.lua", answer: format!("user {user}") })?;
    Ok(TicketAnswer::Ticket(TicketView {
        ticket,
        user,
        status,
        place: u64::try_from(place).ok().filter(|p| *p > 0),
        expires_ms,
        round,
        admitted_last_minute: recent,
        admit_per_minute: per_minute,
    }))
}
