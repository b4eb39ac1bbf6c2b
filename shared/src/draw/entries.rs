//! A draw's entries, the draw and its outcomes' events in Redis
//! (`lua/queue_draw.lua`, on the sale's waiting-room keys: its own slot).
//! The ranking itself is computed by the caller from the frozen entries
//! ([`crate::draw::proof`]) and written here as the line.

use crate::domain::{SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use crate::stock::queue::{new_ticket, ticket_sale};
use crate::stock::with_keys;
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

/// The entries one slice of a draw's apply takes: about 10 ms of Redis's
/// time each (five commands an entry), so a million entries are 500 short
/// calls, never one long one.
pub const APPLY_SLICE: usize = 2_000;

/// The entries one HSCAN of a draw's entries asks for.
const ENTRIES_A_SCAN: usize = 5_000;

static QUEUE_DRAW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/queue_draw.lua")));

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EntryStatus {
    /// Entered; the draw is still to come.
    Entered,
    /// Drawn (or promoted): may order until its token expires.
    Won,
    /// Drawn behind the winners: promoted if a right lapses or units
    /// come back.
    Waitlisted,
    /// Won and let the right lapse (final).
    Expired,
    /// Still waitlisted when the sale ended (final).
    Lost,
}

/// An entry as its holder reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryView {
    pub entry: String,
    pub user: UserId,
    pub status: EntryStatus,
    /// `Won`: when its token expires (ms); `Expired`: when it did.
    pub until_ms: i64,
    /// `Waitlisted`: its place from 1.
    pub place: Option<u64>,
    pub round: i64,
    /// `Won`: its order was placed (no token any more).
    pub used: bool,
}

/// What entering or reading answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryAnswer {
    Entry(EntryView),
    /// Entries open at `opens_ms`.
    NotOpen {
        opens_ms: i64,
    },
    /// Entries are closed and the user holds none: nothing was written.
    Closed,
    /// The sale has no draw.
    NoDraw,
    /// No such entry.
    Unknown,
    /// The proof-of-work challenge was used before.
    Replayed,
    /// The draw holds its most entries: nothing was written.
    Full,
}

/// What applying a draw did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Drawn now.
    Made,
    /// Drawn before (by another maker, or an earlier try).
    Before,
    /// A maker or publisher of a later lease term acted on the draw:
    /// nothing written.
    LaterTerm,
}

/// A draw's outcome as Redis recorded it, for the publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRow {
    /// The stream's id: the publisher's cursor.
    pub id: String,
    /// `won`, `waitlisted`, `promoted`, `expired`, `lost`.
    pub kind: String,
    pub entry: String,
    pub user: UserId,
    /// `won`, `promoted`: the token's expiry; `expired`: the one it had (ms).
    pub until_ms: i64,
    /// `won`: the rank; `waitlisted`: the place on the list (from 1).
    pub place: i64,
    pub at_ms: i64,
}

/// What a draw holds of its seed before the draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrawSecret {
    /// The commitment to a seed kept in PostgreSQL.
    Committed(String),
    /// The seed itself (a draw warmed before seeds left Redis).
    InRedis(String),
}

impl crate::stock::Draws<'_> {
    /// `user` enters `sale`'s draw (their entry again if they hold one);
    /// `challenge`: the nonce and expiry (ms) of the proof of work solved.
    pub async fn enter_draw(
        self,
        sale: SaleKey,
        user: UserId,
        challenge: Option<(&str, i64)>,
    ) -> Result<EntryAnswer, RedisCallError> {
        let (nonce, until) = challenge.unwrap_or(("", 0));
        let args = ["enter".to_owned(), user.get().to_string(), new_ticket(sale), nonce.to_owned(), until.to_string()];
        parse(self.draw_step(sale, &args).await?)
    }

    /// Runs `queue_draw.lua`'s step `args` on `sale`'s keys; where the
    /// replicas must confirm writes (`redis.min_replica_acks`), with `WAIT`
    /// behind it: a step that changes the draw (an entry, the freeze, the
    /// draw applied) is on a replica before it is answered, as a claim is —
    /// else [`RedisCallError::NotConfirmed`] (each step is idempotent:
    /// asked again, it is confirmed or made again the same).
    async fn draw_step<T: redis::FromRedisValue>(self, sale: SaleKey, args: &[String]) -> Result<T, RedisCallError> {
        let queue = self.keys.queue(sale);
        let keys = queue.all();
        let (replicas, timeout) = self.replica_acks;
        if replicas == 0 {
            let mut invocation = with_keys(&QUEUE_DRAW, &keys);
            invocation.arg(args);
            return self.conn.invoke(&invocation).await;
        }
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (answer, confirmed): (T, u32) =
            self.conn.script_then_wait(&QUEUE_DRAW, &keys, &args, replicas, timeout).await?;
        if confirmed < replicas {
            return Err(RedisCallError::NotConfirmed { script: "queue_draw.lua", asked: replicas, confirmed });
        }
        Ok(answer)
    }

    /// Whether `sale`'s draw as this primary holds it, and every outcome
    /// recorded before now, is on the replicas asked for
    /// (`redis.min_replica_acks`): its outcomes are published only then,
    /// so a draw lost in a failover is made again, the same, before anyone
    /// is told. A sale with no draw made has nothing to confirm.
    pub async fn draw_confirmed(self, sale: SaleKey) -> Result<bool, RedisCallError> {
        let meta = self.keys.queue(sale).all()[0].clone();
        let found = self.orders().confirm_field(&meta, &meta, "drawn").await?;
        Ok(!matches!(found, crate::stock::Confirmation::Unconfirmed(_)))
    }

    /// What `entry` reads now.
    pub async fn read_entry(self, entry: &str) -> Result<EntryAnswer, RedisCallError> {
        let Some(sale) = ticket_sale(entry) else {
            return Ok(EntryAnswer::Unknown);
        };
        let mut invocation = with_keys(&QUEUE_DRAW, &self.keys.queue(sale).all());
        invocation.arg("read").arg(entry);
        parse(self.conn.invoke(&invocation).await?)
    }

    /// Freezes `sale`'s entries for its draw: `Some(true)` frozen (no entry
    /// is taken from now on), `Some(false)` too early, `None` no draw to
    /// make.
    pub async fn freeze_draw(self, sale: SaleKey) -> Result<Option<bool>, RedisCallError> {
        use crate::stock::protocol::queue_draw::*;
        Ok(match self.draw_step::<i64>(sale, &["freeze".to_owned()]).await? {
            DONE => Some(true),
            NOT_YET => Some(false),
            _ => None,
        })
    }

    /// What `sale`'s draw holds of its seed before the draw: the
    /// commitment to a seed kept in PostgreSQL
    /// ([`crate::draw::seed`]), or, for a draw warmed before seeds
    /// left Redis, the seed itself (`None`: no draw).
    pub async fn draw_secret(self, sale: SaleKey) -> Result<Option<DrawSecret>, RedisCallError> {
        let meta = self.keys.queue(sale).all()[0].clone();
        let mut conn = self.conn.clone();
        let (commitment, seed): (Option<String>, Option<String>) =
            self.conn.bounded(redis::AsyncCommands::hmget(&mut conn, meta, &["commitment", "seed"])).await?;
        Ok(match (commitment.filter(|c| !c.is_empty()), seed.filter(|s| !s.is_empty())) {
            (Some(commitment), _) => Some(DrawSecret::Committed(commitment)),
            (None, Some(seed)) => Some(DrawSecret::InRedis(seed)),
            (None, None) => None,
        })
    }

    /// Every entry of `sale`'s draw: (entry id, user).
    /// Read by HSCAN, a few thousand a call: a million entries never hold
    /// Redis for one long HGETALL (an entry seen twice is one entry).
    pub async fn draw_entries(self, sale: SaleKey) -> Result<Vec<(String, UserId)>, RedisCallError> {
        let tickets = self.keys.queue(sale).all()[2].clone();
        let mut all: HashMap<String, String> = HashMap::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("HSCAN");
            scan.arg(&tickets).arg(cursor).arg("COUNT").arg(ENTRIES_A_SCAN);
            let mut conn = self.conn.clone();
            let (next, fields): (u64, Vec<String>) = self.conn.bounded(scan.query_async(&mut conn)).await?;
            for pair in fields.chunks_exact(2) {
                all.insert(pair[0].clone(), pair[1].clone());
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(all
            .into_iter()
            .filter_map(|(entry, value)| {
                let user = crate::stock::TicketValue::parse(&value)?.user;
                Some((entry, UserId::new(user).ok()?))
            })
            .collect())
    }

    /// Writes `ranked` (entry ids, in drawn order) as the draw's line, then
    /// makes the draw once, as the holder of the lease term `fence`, in
    /// slices of [`APPLY_SLICE`] entries (each its own script, confirmed by
    /// the replicas; a draw a maker left half made is finished from where it
    /// stopped, with the winners it fixed): the first `winners` admitted,
    /// the rest waitlisted, each an event. `Some(Made)`, `Some(Before)`;
    /// `Some(LaterTerm)`: a later term acted on the draw (nothing written);
    /// `None`: the line was not whole (rank again).
    pub async fn apply_draw(
        self,
        sale: SaleKey,
        ranked: &[String],
        (winners, digest, seed): (i64, &str, &str),
        fence: i64,
    ) -> Result<Option<Applied>, RedisCallError> {
        use crate::stock::protocol::queue_draw::*;
        let k = self.keys.queue(sale);
        let line = k.all()[1].clone();
        for (chunk_at, chunk) in ranked.chunks(1_000).enumerate() {
            let mut pipe = redis::pipe();
            let scored: Vec<(usize, &String)> =
                chunk.iter().enumerate().map(|(i, entry)| (chunk_at * 1_000 + i, entry)).collect();
            pipe.zadd_multiple(&line, &scored).ignore();
            self.conn.pipe::<()>(&pipe).await?;
        }
        let mut from = self.applied_through(sale).await?;
        loop {
            let args = [
                "apply".to_owned(),
                winners.to_string(),
                digest.to_owned(),
                ranked.len().to_string(),
                fence.to_string(),
                seed.to_owned(),
                from.to_string(),
                APPLY_SLICE.to_string(),
            ];
            match self.draw_step::<i64>(sale, &args).await? {
                NOT_WHOLE => return Ok(None),
                LATER_TERM => return Ok(Some(Applied::LaterTerm)),
                DONE => return Ok(Some(Applied::Made)),
                MORE => {
                    // The crash tests stop an edge here: a slice made, the draw not.
                    crate::ops::halt::at("draw-sliced");
                    let next = self.applied_through(sale).await?;
                    if next == from {
                        return Err(RedisCallError::Unexpected {
                            script: "queue_draw.lua",
                            answer: format!("apply stood still at {next}"),
                        });
                    }
                    from = next;
                }
                _ => return Ok(Some(Applied::Before)),
            }
        }
    }

    /// The rank the next slice of `sale`'s draw starts at (0: none made).
    async fn applied_through(self, sale: SaleKey) -> Result<i64, RedisCallError> {
        let meta = self.keys.queue(sale).all()[0].clone();
        let mut conn = self.conn.clone();
        let at: Option<i64> = self.conn.bounded(redis::AsyncCommands::hget(&mut conn, meta, "apply_at")).await?;
        Ok(at.unwrap_or(0))
    }

    /// Up to `count` of `sale`'s outcomes recorded after `after` (a stream
    /// id; `0-0`: from the first).
    pub async fn draw_outcomes(
        self,
        sale: SaleKey,
        after: &str,
        count: usize,
    ) -> Result<Vec<OutcomeRow>, RedisCallError> {
        let events = self.keys.queue(sale).all()[8].clone();
        let mut conn = self.conn.clone();
        let read: Vec<(String, Vec<String>)> = self
            .conn
            .bounded(
                redis::cmd("XRANGE")
                    .arg(&events)
                    .arg(format!("({after}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(read
            .into_iter()
            .filter_map(|(id, fields)| {
                let pairs: HashMap<&str, &str> =
                    fields.chunks(2).filter_map(|p| Some((p.first()?.as_str(), p.get(1)?.as_str()))).collect();
                let text = |name: &str| pairs.get(name).copied().unwrap_or_default().to_owned();
                let number = |name: &str| text(name).parse::<i64>().unwrap_or(0);
                Some(OutcomeRow {
                    kind: text("type"),
                    entry: text("entry"),
                    user: UserId::new(number("user")).ok()?,
                    until_ms: number("until"),
                    place: number("place"),
                    at_ms: number("at"),
                    id,
                })
            })
            .collect())
    }

    /// Records that `sale`'s outcomes up to `id` (`count` of them now) are
    /// on the topic, for the publisher of the lease term `fence`: `false`
    /// when a publisher of a later term moved the cursor (nothing written:
    /// this one's term is over).
    pub async fn outcomes_published(
        self,
        sale: SaleKey,
        id: &str,
        count: usize,
        fence: i64,
    ) -> Result<bool, RedisCallError> {
        use crate::stock::protocol::queue_draw::*;
        let mut invocation = with_keys(&QUEUE_DRAW, &self.keys.queue(sale).all());
        invocation.arg("published").arg(id).arg(count).arg(fence);
        Ok(self.conn.invoke::<i64>(&invocation).await? != LATER_TERM)
    }
}

type Reply = (String, String, String, i64, i64, i64, i64, i64);

fn parse(reply: Reply) -> Result<EntryAnswer, RedisCallError> {
    let (status, entry, user, until_ms, place, round, opens_ms, used) = reply;
    let status = match status.as_str() {
        "ENTERED" => EntryStatus::Entered,
        "WON" => EntryStatus::Won,
        "WAITLISTED" => EntryStatus::Waitlisted,
        "EXPIRED" => EntryStatus::Expired,
        "LOST" => EntryStatus::Lost,
        "NOT_OPEN" => return Ok(EntryAnswer::NotOpen { opens_ms }),
        "DRAW_CLOSED" => return Ok(EntryAnswer::Closed),
        "NO_DRAW" => return Ok(EntryAnswer::NoDraw),
        "UNKNOWN" => return Ok(EntryAnswer::Unknown),
        "REPLAYED" => return Ok(EntryAnswer::Replayed),
        "ENTRIES_FULL" => return Ok(EntryAnswer::Full),
        other => return Err(RedisCallError::Unexpected { script: "queue_draw.lua", answer: other.to_owned() }),
    };
    let user = user
        .parse::<i64>()
        .ok()
        .and_then(|u| UserId::new(u).ok())
        .ok_or_else(|| RedisCallError::Unexpected { script: "queue_draw.lua", answer: format!("user {user}") })?;
    Ok(EntryAnswer::Entry(EntryView {
        entry,
        user,
        status,
        until_ms,
        place: u64::try_from(place).ok().filter(|p| *p > 0),
        round,
        used: used == 1,
    }))
}
