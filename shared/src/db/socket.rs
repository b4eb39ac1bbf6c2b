//! The client's end of every PostgreSQL connection: TCP keepalives and
//! `TCP_USER_TIMEOUT` on the socket itself, so a server host that vanished
//! without a reset (powered off, partitioned) ends the connection in
//! seconds instead of the kernel's two hours of retransmissions.
//!
//! sqlx opens its sockets with `TcpStream::connect` and offers no hook to
//! set their options, so this is the closest sound version: right after a
//! pool makes a connection, every TCP socket of this process whose peer is
//! one of the database's addresses is given the options (setting them
//! again on a socket that has them changes nothing). Only the pools'
//! connections go to those addresses. Linux only (the sockets are found
//! in `/proc/self/fd`); elsewhere nothing is set and a warning says so.
//!
//! These bound a silent *network*. A server process that is frozen, or a
//! proxy that holds answers, still acknowledges every byte at the TCP
//! level: the client's own deadlines bound those waits
//! ([`super::within`], `database.call_deadline_ms`).

use crate::config::TcpKeepalive;
use std::net::SocketAddr;
use std::time::Duration;

/// Where the database listens, and the options its sockets get.
#[derive(Debug, Clone)]
pub struct SocketBounds {
    /// The servers' addresses (a host name: its port only).
    pub peers: Vec<(Option<std::net::IpAddr>, u16)>,
    pub keepalive: TcpKeepalive,
    pub user_timeout: Duration,
}

/// A socket's options as read back, for checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    pub peer: SocketAddr,
    /// This end's address (its port tells one connection from another).
    pub local: Option<SocketAddr>,
    pub keepalive: bool,
    pub keepalive_idle: Option<Duration>,
    pub user_timeout: Option<Duration>,
}

impl SocketBounds {
    /// Whether `peer` is one of the database's addresses.
    fn is_database(&self, peer: &SocketAddr) -> bool {
        self.peers.iter().any(|(ip, port)| *port == peer.port() && ip.is_none_or(|ip| ip == peer.ip()))
    }

    /// Gives every socket to the database the options; returns how many
    /// sockets it saw.
    pub fn apply(&self) -> usize {
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(self.keepalive.idle)
            .with_interval(self.keepalive.interval)
            .with_retries(self.keepalive.probes);
        each_tcp_socket(|socket, peer| {
            if !self.is_database(&peer) {
                return;
            }
            if let Err(error) = socket.set_tcp_keepalive(&keepalive) {
                tracing::debug!(%peer, %error, "a database socket's keepalive not set");
            }
            if let Err(error) = socket.set_tcp_user_timeout(Some(self.user_timeout)) {
                tracing::debug!(%peer, %error, "a database socket's TCP_USER_TIMEOUT not set");
            }
        })
    }

    /// The options of every socket to the database, as the kernel has them.
    pub fn read(&self) -> Vec<SocketOptions> {
        let mut found = Vec::new();
        each_tcp_socket(|socket, peer| {
            if self.is_database(&peer) {
                found.push(SocketOptions {
                    peer,
                    local: socket.local_addr().ok().and_then(|address| address.as_socket()),
                    keepalive: socket.keepalive().unwrap_or(false),
                    keepalive_idle: socket.tcp_keepalive_time().ok(),
                    user_timeout: socket.tcp_user_timeout().ok().flatten(),
                });
            }
        });
        found
    }
}

/// Calls `visit` with each connected TCP socket of this process and its
/// peer; returns how many it visited.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn each_tcp_socket(mut visit: impl FnMut(socket2::SockRef<'_>, SocketAddr)) -> usize {
    use std::os::fd::{BorrowedFd, RawFd};
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        tracing::warn!("/proc/self/fd unreadable: the database's sockets keep the kernel's TCP options");
        return 0;
    };
    let mut visited = 0;
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse::<RawFd>().ok()) else { continue };
        let is_socket =
            std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` was open a moment ago and is only used for
        // getsockopt/setsockopt/getpeername below, which do not take
        // ownership. Should another thread close it meanwhile, those calls
        // fail with EBADF (ignored); should the number be reused at once,
        // the peer is read from the descriptor as it is then, and only a
        // socket to the database is changed.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&borrowed);
        if !matches!(socket.r#type(), Ok(kind) if kind == socket2::Type::STREAM) {
            continue;
        }
        let Some(peer) = socket.peer_addr().ok().and_then(|address| address.as_socket()) else { continue };
        visited += 1;
        visit(socket, peer);
    }
    visited
}

#[cfg(not(target_os = "linux"))]
fn each_tcp_socket(_visit: impl FnMut(socket2::SockRef<'_>, SocketAddr)) -> usize {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tracing::warn!("not Linux: the database's sockets keep the kernel's TCP options"));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_database_addresses_are_its_sockets() {
        let bounds = SocketBounds {
            peers: vec![(Some("127.0.0.1".parse().unwrap()), 5441), (None, 5432)],
            keepalive: crate::config::TCP_KEEPALIVE,
            user_timeout: Duration::from_secs(10),
        };
        for (peer, is, why) in [
            ("127.0.0.1:5441", true, "an address of the URL"),
            ("127.0.0.2:5441", false, "another host on the same port"),
            ("10.0.0.9:5432", true, "a host name: any address on its port"),
            ("127.0.0.1:6379", false, "another port"),
        ] {
            assert_eq!(bounds.is_database(&peer.parse().unwrap()), is, "{peer}: {why}");
        }
    }

    #[test]
    fn a_socket_to_the_database_gets_the_options() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(address).unwrap();
        let bounds = SocketBounds {
            peers: vec![(Some(address.ip()), address.port())],
            keepalive: crate::config::TCP_KEEPALIVE,
            user_timeout: Duration::from_millis(7_000),
        };
        assert!(bounds.apply() >= 1, "the client's socket was seen");
        let read = bounds.read();
        assert_eq!(read.len(), 1, "{read:?}");
        assert!(read[0].keepalive, "{read:?}");
        assert_eq!(read[0].keepalive_idle, Some(crate::config::TCP_KEEPALIVE.idle), "{read:?}");
        assert_eq!(read[0].user_timeout, Some(Duration::from_millis(7_000)), "{read:?}");
    }
}
