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
/// Its answers can be held too ([`Pausable::hold_answers`]): the server
/// runs what it is sent and the client hears nothing, as a network that
/// failed on the way back.
pub struct Pausable {
    /// Where clients connect.
    pub addr: SocketAddr,
    paused: tokio::sync::watch::Sender<bool>,
    answers_held: tokio::sync::watch::Sender<bool>,
}

impl Pausable {
    /// Starts one (running until the test ends), not paused.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a proxy port");
        let addr = listener.local_addr().expect("bound");
        let (paused, watching) = tokio::sync::watch::channel(false);
        let (answers_held, watching_answers) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut watching = watching.clone();
                let mut watching_answers = watching_answers.clone();
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
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = server_read.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            // Held while answers are held.
                            if watching_answers.wait_for(|held| !held).await.is_err() {
                                break;
                            }
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    tokio::join!(upstream, downstream);
                });
            }
        });
        Self { addr, paused, answers_held }
    }

    /// Holds every answer from now on (what clients send still goes on).
    pub fn hold_answers(&self) {
        self.answers_held.send_replace(true);
    }

    /// Holds everything clients send from now on.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Passes the held bytes on, both ways, and everything after them.
    pub fn resume(&self) {
        self.paused.send_replace(false);
        self.answers_held.send_replace(false);
    }
}

/// A proxy to `target` whose link can be severed right after a request
/// went through: once [`Severing::sever_after_next`] is called, the next
/// chunk a client sends is passed on (the server runs it), `then` runs (what
/// the server meets next: a failover, say), the answer is thrown away and
/// that client's connection closed — a server that ran a command and was
/// cut off before it could answer. Later connections are served.
pub struct Severing {
    /// Where clients connect.
    pub addr: SocketAddr,
    armed: Hook,
}

/// What runs once the severed request has gone through.
type Hook = std::sync::Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

impl Severing {
    /// Starts one on `port` (running until the test ends).
    pub async fn start(port: u16, target: SocketAddr) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("the proxy's port");
        let addr = listener.local_addr().expect("bound");
        let armed: Hook = Arc::default();
        let watching = armed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let armed = watching.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let cut = Arc::new(AtomicBool::new(false));
                    let answers_cut = cut.clone();
                    let downstream = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = server_read.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            // Thrown away, the connection left open until
                            // the hook has run (closing it would have the
                            // client resend at once).
                            if answers_cut.load(Ordering::SeqCst) {
                                continue;
                            }
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let then = armed.lock().expect("the proxy's hook").take();
                        if then.is_some() {
                            cut.store(true, Ordering::SeqCst);
                        }
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if let Some(then) = then {
                            // The server runs it; then what it meets next.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            tokio::task::spawn_blocking(then).await.expect("the proxy's hook");
                            break;
                        }
                    }
                    downstream.abort();
                });
            }
        });
        Self { addr, armed }
    }

    /// Severs the link after the next chunk any client sends, running
    /// `then` before the client's connection closes.
    pub fn sever_after_next(&self, then: impl FnOnce() + Send + 'static) {
        *self.armed.lock().expect("the proxy's hook") = Some(Box::new(then));
    }
}
