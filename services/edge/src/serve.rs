//! How the edge holds its connections (on each of its listeners: the
//! buyers' and the operators'), so that slow or idle clients cannot
//! pin it. It defends itself whatever stands in front of it: the Compose
//! file's HAProxy passes a slow client's bytes on, and a Kubernetes
//! Service does not look at them at all.
//!
//! - a connection that has not sent a whole request header within
//!   `connections.header_timeout_ms` is closed — a new one, and one idle
//!   between two requests alike (hyper starts the deadline whenever the
//!   connection waits for a request, so it is the keep-alive idle timeout
//!   too);
//! - a body not read within `connections.body_timeout_ms` is answered 408
//!   and the connection closed (the body reader, [`crate::http`]);
//! - at most `connections.max_connections` are open — checked below the
//!   process's descriptor limit at start; one more is closed at once;
//! - a response not written within `connections.write_timeout_ms` of the
//!   first write the client's socket could not take ends the connection
//!   ([`crate::write_deadline`]): a client that never reads holds no permit;
//! - at most `connections.max_in_flight` buyers' requests are handled at
//!   once (health probes and metrics aside, [`crate::http::public_router`]),
//!   and `console.max_in_flight` operators' ([`crate::http::console_router`]);
//!   one more is answered 503 at once, nothing kept.
//!
//! Every request carries its [`ClientAddr`]: the TCP peer, or the client a
//! trusted proxy names ([`crate::client_addr`]).

use crate::client_addr::{ClientAddr, FromTrustedProxy, TrustedProxies};
use crate::settings::ConnectionSettings;
use crate::write_deadline::WriteDeadline;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Descriptors kept for everything else the edge opens (Redis, Kafka and
/// PostgreSQL connections, files).
const RESERVED_DESCRIPTORS: u64 = 512;

/// Accepts and serves connections until `shutdown`; then stops accepting,
/// lets requests in flight finish (closing idle connections at once) and
/// returns when the last connection is closed or after `drain`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &ConnectionSettings,
    proxies: Arc<TrustedProxies>,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let write_timeout = Duration::from_millis(settings.write_timeout_ms);
    let max_connections = connection_cap(settings.max_connections);
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(Duration::from_millis(settings.header_timeout_ms));
    let permits = Arc::new(Semaphore::new(max_connections));
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, or a connection reset while queued:
                // the listener itself is fine; wait a moment and go on.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics::counter!("seckill_edge_connections_refused_total").increment(1);
            drop(stream);
            continue;
        };
        // The peer's address as axum's ConnectInfo, and the client's (the
        // peer, or whom a trusted proxy names) for what counts per client.
        let proxies = proxies.clone();
        let service = router.clone().map_request(move |mut request: axum::http::Request<hyper::body::Incoming>| {
            let client = ClientAddr(proxies.client(peer.ip(), request.headers()));
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(client);
            request.extensions_mut().insert(FromTrustedProxy(proxies.trusts(peer.ip())));
            request
        });
        let stream = WriteDeadline::new(stream, write_timeout);
        let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that went away, or was cut off by a deadline: either
            // way the connection is over.
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(?drain, "connections still open at the end of the shutdown timeout");
    }
}

/// `configured`, or less when the process may not open that many
/// descriptors beside the ones it keeps for its servers. The soft limit is
/// raised to the hard one first (as Go's runtime does at start).
fn connection_cap(configured: usize) -> usize {
    let limit = raise_descriptor_limit();
    let room = usize::try_from(limit.saturating_sub(RESERVED_DESCRIPTORS)).unwrap_or(usize::MAX).max(1);
    if configured > room {
        tracing::warn!(
            configured,
            descriptor_limit = limit,
            used = room,
            "connections.max_connections is above what the descriptor limit allows; using less"
        );
        room
    } else {
        configured
    }
}

/// The process's descriptor limit after raising the soft limit to the hard.
#[allow(unsafe_code)]
fn raise_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return u64::MAX;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}
