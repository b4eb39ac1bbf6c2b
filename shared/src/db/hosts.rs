//! The database URL, with one host or several as libpq writes them —
//! `postgres://u:p@h1:5441,h2:5442/seckill?target_session_attrs=read-write`,
//! what `pg_autoctl show uri` prints — and a pool that follows the primary.
//!
//! sqlx connects a pool to one host, so this is the closest sound version
//! of libpq's multi-host connect: the pool connects to one host at a time
//! (the first at start); with `target_session_attrs=read-write` (or
//! `primary`) every new connection is checked once made and refused when it
//! landed on a standby or a read-only server, so the pool never hands one
//! out; and a follower task asks each host once a second which is the
//! writable primary and points the pool's new connections there. A
//! connection that loses its server fails its query and is dropped (sqlx
//! tests an idle one before handing it out). So after a failover the pool's
//! connections come from the new primary within about a second of its
//! promotion; what was in flight failed, and the callers' own retries
//! decide what to do (the order service writes its batch again: first row
//! wins). Without several hosts, nothing follows and nothing is checked:
//! the pool is sqlx's own. A connection made before the pool moved, or
//! before its host answered read-only (a primary demoted in place), is
//! closed when next asked for, not handed out to fail its writes.

use super::socket::SocketBounds;
use parking_lot::Mutex;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the follower asks which host is the primary.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// How long one host may take to answer that.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The hosts a database URL names.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// One connection's options per host, in the URL's order.
    pub options: Vec<PgConnectOptions>,
    /// `target_session_attrs=read-write` or `primary`: only a writable
    /// primary is used.
    pub read_write: bool,
}

/// What is wrong with a database URL (it never holds the password).
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("not a postgres:// or postgresql:// URL")]
    Scheme,
    #[error("no host")]
    NoHost,
    #[error("host '{0}': the port is not a number from 1 to 65535")]
    Port(String),
    #[error("target_session_attrs={0}: the pipeline writes, so 'any', 'read-write' or 'primary'")]
    SessionAttrs(String),
    #[error("host '{host}': {error}")]
    Options { host: String, error: String },
}

/// Parses a URL of one host or several (each `host`, `host:port` or
/// `[v6]:port`; 5432 when no port is given).
pub fn parse(url: &str) -> Result<Hosts, UrlError> {
    let (scheme, rest) =
        url.split_once("://").filter(|(s, _)| matches!(*s, "postgres" | "postgresql")).ok_or(UrlError::Scheme)?;
    let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
    let (userinfo, hostlist) = authority.rsplit_once('@').map_or(("", authority), |(u, h)| (u, h));
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut read_write = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                read_write = match value {
                    "any" => false,
                    "read-write" | "primary" => true,
                    other => return Err(UrlError::SessionAttrs(other.to_owned())),
                }
            }
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() { String::new() } else { format!("?{}", kept.join("&")) };
    let at = if userinfo.is_empty() { String::new() } else { format!("{userinfo}@") };
    let mut options = Vec::new();
    for host in hostlist.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(UrlError::NoHost);
        }
        let with_port = with_port(host)?;
        let one = format!("{scheme}://{at}{with_port}{path}{query}");
        let parsed = PgConnectOptions::from_str(&one).map_err(|e| UrlError::Options {
            host: host.to_owned(),
            error: crate::config::masked_url(&e.to_string()),
        })?;
        options.push(parsed);
    }
    Ok(Hosts { options, read_write })
}

/// `host:port`, the port 5432 when none is given.
fn with_port(host: &str) -> Result<String, UrlError> {
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => {
            let (address, after) = v6.split_once(']').ok_or_else(|| UrlError::Port(host.to_owned()))?;
            (format!("[{address}]"), after.strip_prefix(':'))
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        },
    };
    let port = match port {
        Some(port) => port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| UrlError::Port(host.to_owned()))?,
        None => 5432,
    };
    Ok(format!("{name}:{port}"))
}

/// When the pool last found its host no longer the writable primary (it
/// moved, or the host answered read-only): a connection made before then
/// is closed instead of handed out.
#[derive(Clone)]
struct Moved(Arc<Mutex<Option<Instant>>>);

impl Moved {
    fn now(&self) {
        *self.0.lock() = Some(Instant::now());
    }

    /// Whether a connection `age` old was made before the last move.
    fn predates(&self, age: Duration) -> bool {
        self.0.lock().is_some_and(|moved| moved.elapsed() < age)
    }
}

/// A pool over `hosts` (connections made lazily), each new connection's
/// socket given `socket`'s bounds; checked and following the primary when
/// the URL asks for a writable one and names several.
pub fn pool(hosts: Hosts, options: PgPoolOptions, socket: SocketBounds) -> PgPool {
    let first = hosts.options[0].clone();
    let read_write = hosts.read_write;
    let moved = Moved(Arc::default());
    let options = options.after_connect(move |connection, _| {
        let socket = socket.clone();
        Box::pin(async move {
            socket.apply();
            if !read_write || writable(connection).await? {
                Ok(())
            } else {
                Err(sqlx::Error::Configuration("connected to a standby or a read-only server".into()))
            }
        })
    });
    let options = if read_write {
        let moved = moved.clone();
        // A connection made on the host the pool left (a primary demoted in
        // place stays up, read-only) would fail every write it is given.
        options.before_acquire(move |_, meta| {
            let fresh = !moved.predates(meta.age);
            Box::pin(async move { Ok(fresh) })
        })
    } else {
        options
    };
    let pool = options.connect_lazy_with(first);
    if hosts.options.len() > 1 {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(follow(pool.clone(), hosts, moved));
            }
            Err(_) => tracing::warn!("no runtime: the pool stays on the URL's first host"),
        }
    }
    pool
}

/// Whether the server takes writes: not in recovery, and not read-only.
async fn writable(connection: &mut sqlx::PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT NOT pg_is_in_recovery() AND current_setting('default_transaction_read_only') = 'off' AS "writable!""#
    )
    .fetch_one(connection)
    .await
}

/// What a host said when asked whether it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// It answers (and, when asked for, takes writes).
    Serves,
    /// It answered: a standby, or read-only.
    ReadOnly,
    /// No answer within the probe's bound.
    Silent,
}

/// What `options`' server says now (with `read_write`, whether it takes
/// writes).
async fn probe(options: &PgConnectOptions, read_write: bool) -> Probe {
    let probe = async {
        let mut connection = options.clone().connect().await?;
        let answer = if read_write { writable(&mut connection).await } else { Ok(true) };
        let _ = sqlx::Connection::close(connection).await;
        answer
    };
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(true)) => Probe::Serves,
        Ok(Ok(false)) => Probe::ReadOnly,
        _ => Probe::Silent,
    }
}

/// Points `pool`'s new connections at a host that serves (the writable
/// primary, with `read_write`), asking once a second while the pool is
/// open: the host it uses while that one serves, else the first of the
/// others, in the URL's order, that does. When the host it used answers
/// read-only, or the pool moves, every connection made before is closed
/// rather than handed out (`moved`).
async fn follow(pool: PgPool, hosts: Hosts, moved: Moved) {
    let mut current = 0;
    let describe = |i: usize| format!("{}:{}", hosts.options[i].get_host(), hosts.options[i].get_port());
    let mut first = true;
    while !pool.is_closed() {
        // At once the first time: the URL's first host may be the standby.
        if !std::mem::take(&mut first) {
            tokio::select! {
                // The pool closed: nothing left to follow for.
                _ = pool.close_event() => return,
                // The next look.
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            }
        }
        let here = probe(&hosts.options[current], hosts.read_write).await;
        if here == Probe::Serves {
            continue;
        }
        if here == Probe::ReadOnly {
            // Demoted in place: its sessions are up but refuse writes.
            moved.now();
        }
        for candidate in (0..hosts.options.len()).filter(|i| *i != current) {
            if probe(&hosts.options[candidate], hosts.read_write).await == Probe::Serves {
                tracing::warn!(from = %describe(current), to = %describe(candidate), "the database's primary moved; new connections follow it");
                pool.set_connect_options(hosts.options[candidate].clone());
                moved.now();
                current = candidate;
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(url: &str) -> Vec<String> {
        parse(url).unwrap().options.iter().map(|o| format!("{}:{}", o.get_host(), o.get_port())).collect()
    }

    #[test]
    fn one_host_or_several_as_libpq_writes_them() {
        assert_eq!(hosts("postgres://u:p@db:5432/x"), ["db:5432"]);
        assert_eq!(hosts("postgresql://u@db/x"), ["db:5432"], "the default port");
        let ha = "postgres://seckill:seckill@127.0.0.1:5441,127.0.0.1:5442/seckill?target_session_attrs=read-write";
        assert_eq!(hosts(ha), ["127.0.0.1:5441", "127.0.0.1:5442"]);
        let parsed = parse(ha).unwrap();
        assert!(parsed.read_write);
        assert_eq!(parsed.options[1].get_database(), Some("seckill"));
        assert_eq!(parsed.options[1].get_username(), "seckill");
        assert_eq!(hosts("postgres://u@[::1]:5441,h2/x?sslmode=disable"), ["[::1]:5441", "h2:5432"]);
        assert!(!parse("postgres://u@a,b/x?target_session_attrs=any").unwrap().read_write);
        assert!(parse("postgres://u@a,b/x?target_session_attrs=primary").unwrap().read_write);
    }

    #[test]
    fn a_url_no_host_could_be_reached_with_is_refused_naming_why() {
        for (url, why) in [
            ("mysql://u@h/x", "postgres://"),
            ("postgres://u@/x", "no host"),
            ("postgres://u@a,,b/x", "no host"),
            ("postgres://u@a:99999/x", "the port"),
            ("postgres://u@a:5441,b:x/x", "the port"),
            ("postgres://u@a,b/x?target_session_attrs=standby", "read-write"),
        ] {
            let error = parse(url).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(why), "{url}: {error}");
        }
        let secret = parse("postgres://u:hunter2@a:99999/x").err().unwrap().to_string();
        assert!(!secret.contains("hunter2"), "{secret}");
    }
}
