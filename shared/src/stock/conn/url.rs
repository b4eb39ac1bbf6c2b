//! The forms of `SECKILL_REDIS_URL`, taken apart (nothing is connected
//! here), and the TCP settings of every connection.

/// A `redis+sentinel://` URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    pub(super) sentinels: Vec<String>,
    pub(super) master: String,
    pub(super) db: i64,
}

impl SentinelUrl {
    /// `redis+sentinel://h1:p1,h2:p2/master[?db=N]`; `None` for another scheme.
    pub(super) fn parse(url: &str) -> Option<Result<Self, String>> {
        let rest = url.strip_prefix("redis+sentinel://")?;
        let bad = |why: &str| Some(Err(format!("{url}: {why} (redis+sentinel://host:port[,host:port]/master[?db=N])")));
        let (hosts, path) = match rest.split_once('/') {
            Some(split) => split,
            None => return bad("no master name"),
        };
        let (master, query) = path.split_once('?').unwrap_or((path, ""));
        if master.is_empty() {
            return bad("no master name");
        }
        let db = match query.strip_prefix("db=") {
            Some(db) => match db.parse() {
                Ok(db) => db,
                Err(_) => return bad("db is not a number"),
            },
            None if query.is_empty() => 0,
            None => return bad("unknown query"),
        };
        let sentinels: Vec<String> =
            hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{h}")).collect();
        if sentinels.is_empty() {
            return bad("no sentinel address");
        }
        Some(Ok(Self { sentinels, master: master.to_owned(), db }))
    }
}

/// The nodes of a `redis+cluster://h1:p1,h2:p2` URL (as `redis://` URLs);
/// `None` for another scheme.
pub(super) fn cluster_nodes(url: &str) -> Option<Result<Vec<String>, String>> {
    let rest = url.strip_prefix("redis+cluster://")?;
    let hosts = rest.strip_suffix('/').unwrap_or(rest);
    if hosts.contains(['/', '?']) {
        return Some(Err(format!("{url}: a cluster has no database or query (redis+cluster://host:port[,host:port])")));
    }
    let nodes: Vec<String> = hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{h}")).collect();
    if nodes.is_empty() {
        return Some(Err(format!("{url}: no node address (redis+cluster://host:port[,host:port])")));
    }
    Some(Ok(nodes))
}

/// Every connection to Redis: TCP keepalives
/// ([`crate::config::TCP_KEEPALIVE`]), so a primary that vanished without a
/// reset (a VM paused, a network cut) is noticed in about half a minute
/// instead of the kernel's two hours.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = crate::config::TCP_KEEPALIVE;
    redis::io::tcp::TcpSettings::default().set_keepalive(
        TcpKeepalive::new().with_time(keepalive.idle).with_interval(keepalive.interval).with_retries(keepalive.probes),
    )
}

/// Whether `url` is one [`RedisConn::connect`](super::RedisConn::connect) takes (connecting to
/// nothing): `redis://`, `rediss://`, `unix://`, `redis+sentinel://` or
/// `redis+cluster://`.
pub fn check_url(url: &str) -> Result<(), String> {
    if let Some(nodes) = cluster_nodes(url) {
        return nodes.and_then(|nodes| {
            redis::cluster::ClusterClient::new(nodes)
                .map(|_| ())
                .map_err(|e| format!("{}: {e}", crate::config::masked_url(url)))
        });
    }
    match SentinelUrl::parse(url) {
        Some(parsed) => parsed.map(|_| ()),
        None => redis::Client::open(url).map(|_| ()).map_err(|e| format!("{}: {e}", crate::config::masked_url(url))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_their_sentinels_and_master() {
        let url = SentinelUrl::parse("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/seckill")
            .unwrap()
            .unwrap();
        assert_eq!(url.sentinels.len(), 3);
        assert_eq!((url.master.as_str(), url.db), ("seckill", 0));
        let with_db = SentinelUrl::parse("redis+sentinel://s:1/m?db=2").unwrap().unwrap();
        assert_eq!(with_db.db, 2);
        assert!(SentinelUrl::parse("redis://127.0.0.1:6379/0").is_none(), "another scheme");
        for bad in
            ["redis+sentinel://s:1", "redis+sentinel://s:1/", "redis+sentinel:///m", "redis+sentinel://s:1/m?db=x"]
        {
            assert!(matches!(SentinelUrl::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn cluster_urls_name_their_nodes() {
        let nodes = cluster_nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001/").unwrap().unwrap();
        assert_eq!(nodes, ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
        assert!(cluster_nodes("redis://127.0.0.1:6379").is_none(), "another scheme");
        for bad in ["redis+cluster://", "redis+cluster://h:1/0", "redis+cluster://h:1?db=2"] {
            assert!(matches!(cluster_nodes(bad), Some(Err(_))), "{bad}");
        }
        assert!(check_url("redis+cluster://127.0.0.1:7000").is_ok());
    }
}
