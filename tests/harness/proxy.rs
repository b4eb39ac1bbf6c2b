//! A TCP proxy on loopback that delays everything a client sends: one
//! service's slow network to a server, while the others reach it directly.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts a proxy to `target` that holds each chunk a client sends for
/// `delay` before passing it on (answers come back at once). Runs until the
/// test ends; returns the address to connect to.
pub async fn delaying(target: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a proxy port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(target).await else { return };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let upstream = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        tokio::time::sleep(delay).await;
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let downstream = async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                };
                tokio::join!(upstream, downstream);
            });
        }
    });
    addr
}

/// A proxy to `target` that can be paused: while paused, what clients send
/// is held (connections stay open, nothing reaches the server), as a
/// server that stopped answering; resumed, the held bytes go on in order.
pub struct Pausable {
    /// Where clients connect.
    pub addr: SocketAddr,
    paused: tokio::sync::watch::Sender<bool>,
}

impl Pausable {
    /// Starts one (running until the test ends), not paused.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a proxy port");
        let addr = listener.local_addr().expect("bound");
        let (paused, watching) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut watching = watching.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let upstream = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = client_read.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            // Held while paused.
                            if watching.wait_for(|paused| !paused).await.is_err() {
                                break;
                            }
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let downstream = async move {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    };
                    tokio::join!(upstream, downstream);
                });
            }
        });
        Self { addr, paused }
    }

    /// Holds everything clients send from now on.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Passes the held bytes on, and everything after them.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}
