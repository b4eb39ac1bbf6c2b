//! What befalls PostgreSQL's primary in `make chaos-pg`: killed (`kill -9`
//! of its process group: every socket reset, the client notices at once),
//! frozen (`SIGSTOP` of the group and of every backend — each is a session
//! of its own, so stopping the group alone leaves every open connection
//! served: the host alive and silent, the kernel acknowledging every byte
//! sent to it, nothing answered) or cut off (the
//! services reach each node through a proxy; the primary's proxy holds
//! everything both ways, a connection's end included, while the node is
//! frozen so the monitor fails over — once the node thaws and is demoted,
//! the services' connections to it stay open and silent: only their own
//! deadlines end them).

use crate::pg_ha::{self, NodeGroup};
use crate::proxy::Pausable;
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// A fault of the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgFault {
    Kill,
    Freeze,
    Cut,
}

/// A proxy in front of each node, through which the services reach them.
pub struct NodeProxies {
    proxies: Vec<(&'static str, Pausable)>,
}

impl NodeProxies {
    /// One proxy per node.
    pub async fn start() -> Self {
        let mut proxies = Vec::new();
        for node in pg_ha::NODES {
            let target = format!("127.0.0.1:{}", pg_ha::port(node)).parse().expect("an address");
            proxies.push((node, Pausable::start(target).await));
        }
        Self { proxies }
    }

    /// The URL of `database` through the proxies, in the nodes' order.
    pub fn url(&self, database: &str) -> String {
        let hosts: Vec<String> = self.proxies.iter().map(|(_, p)| p.addr.to_string()).collect();
        format!("postgres://seckill:seckill@{}/{database}?target_session_attrs=read-write", hosts.join(","))
    }

    /// Holds everything to and from `node`, for good.
    fn cut(&self, node: &str) {
        let (_, proxy) = self.proxies.iter().find(|(n, _)| *n == node).expect("a proxy per node");
        proxy.pause();
        proxy.hold_answers();
    }
}

/// A fault applied to a node.
pub struct Applied {
    pub fault: PgFault,
    pub node: String,
    /// When it struck.
    pub at: Instant,
    /// A frozen node's group, to thaw.
    group: Option<NodeGroup>,
}

impl PgFault {
    /// Strikes `node` now (its process group looked up first, so the
    /// fault lands at once); a cut needs the services behind `proxies`.
    pub fn strike(self, node: &str, proxies: Option<&NodeProxies>) -> Applied {
        let group = NodeGroup::of(node);
        let (at, group) = match self {
            Self::Kill => (group.kill(), None),
            Self::Freeze => (group.freeze(), Some(group)),
            Self::Cut => {
                proxies.expect("a cut needs the services behind the proxies").cut(node);
                (group.freeze(), Some(group))
            }
        };
        Applied { fault: self, node: node.to_owned(), at, group }
    }

    /// How the notes name it.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Kill => "killed",
            Self::Freeze => "frozen (SIGSTOP)",
            Self::Cut => "cut off (its proxy holding everything) and frozen",
        }
    }
}

impl Applied {
    /// Itself and when it struck (what [`Watch::around`] takes).
    pub fn timed(self) -> (Self, Instant) {
        let at = self.at;
        (self, at)
    }

    /// The node back: started again (killed), thawed (frozen; a cut one's
    /// proxy still holds every connection the services made through it).
    pub fn end(mut self) {
        match self.group.take() {
            None => pg_ha::start(&self.node),
            Some(group) => group.thaw(),
        }
    }
}

/// A scenario that failed half-way does not leave its node frozen for the
/// next (whose formation would never be whole).
impl Drop for Applied {
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            group.thaw();
        }
    }
}

/// A fault watched from outside: how long after it the first write (a
/// count growing past `before`) and the first relayed event were seen.
pub struct Watch {
    /// The count before the fault.
    pub before: i64,
    write: JoinHandle<Option<Duration>>,
    relay: JoinHandle<Option<Duration>>,
}

impl Watch {
    /// Reads `count_sql` and the relay's cursor through `db`, then runs
    /// `strike` (answering what it struck and when) and watches both.
    pub async fn around<T>(db: &PgPool, count_sql: String, strike: impl FnOnce() -> (T, Instant)) -> (T, Watch) {
        let before: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count_sql.clone()))
            .fetch_one(db)
            .await
            .expect("the count before the fault");
        let cursor = relay_cursor(db).await;
        let (struck, at) = strike();
        let write = super::pg::first_write_seen(db.clone(), count_sql, before, at);
        let relay = first_relay_seen(db.clone(), cursor, at);
        (struck, Watch { before, write, relay })
    }

    /// (first write, first event relayed) after the fault.
    pub async fn seen(self) -> (Option<Duration>, Option<Duration>) {
        (self.write.await.expect("the write watcher"), self.relay.await.expect("the relay watcher"))
    }
}

/// Where the relay's cursor is now (read before a fault, through `db`).
async fn relay_cursor(db: &PgPool) -> String {
    sqlx::query_scalar(CURSOR).fetch_one(db).await.expect("the relay's cursor")
}

const CURSOR: &str = "SELECT xid::text || ':' || id FROM order_events_relayed";

/// How long after `since` the relay first moved its cursor past `before`
/// (events it sent were delivered) — read through `db`, the pool that
/// follows the primary. What moves in the first 200 ms was on its way
/// before the fault. (`before` is read ahead: this pool's reads fail
/// until it follows the new primary, by when the relay may have caught
/// up.)
fn first_relay_seen(db: PgPool, mut before: String, since: Instant) -> JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        while since.elapsed() < Duration::from_secs(180) {
            let read = sqlx::query_scalar::<_, String>(CURSOR).fetch_one(&db);
            if let Ok(Ok(cursor)) = tokio::time::timeout(Duration::from_secs(1), read).await {
                if since.elapsed() < Duration::from_millis(200) {
                    before = cursor;
                } else if cursor != before {
                    return Some(since.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}
