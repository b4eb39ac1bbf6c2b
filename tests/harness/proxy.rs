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
/// failed on the way back. And the connections open now can be cut off for
/// good ([`Pausable::cut_open_connections`]): they stay open and silent both
/// ways, as a path to a host that vanished without a reset, while new ones
/// are served.
pub struct Pausable {
    /// Where clients connect.
    pub addr: SocketAddr,
    paused: tokio::sync::watch::Sender<bool>,
    answers_held: tokio::sync::watch::Sender<bool>,
    /// Connections accepted before this number are cut off.
    cut_below: tokio::sync::watch::Sender<u64>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// What clients sent since the last pause, while paused.
    held: HeldLog,
}

/// Waits until a connection's bytes may go on: never, once it is cut off.
async fn until_open(
    flag: &mut tokio::sync::watch::Receiver<bool>,
    cut_below: &mut tokio::sync::watch::Receiver<u64>,
    number: u64,
) -> bool {
    loop {
        if *cut_below.borrow_and_update() > number {
            // Cut off: silent until the test ends.
            return std::future::pending().await;
        }
        if !*flag.borrow_and_update() {
            return true;
        }
        tokio::select! {
            changed = flag.changed() => if changed.is_err() { return false },
            changed = cut_below.changed() => if changed.is_err() { return false },
        }
    }
}

/// What clients sent while the proxy was paused (since the last pause).
type HeldLog = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

/// Copies `from` to `to`, each chunk once `flag` is down and the
/// connection not cut off. Reading goes on while the bytes are held, so
/// that what the client sends meanwhile is seen (`log`, when given, keeps
/// what arrived while held).
async fn pass_on(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut flag: tokio::sync::watch::Receiver<bool>,
    mut cut_below: tokio::sync::watch::Receiver<u64>,
    number: u64,
    log: Option<HeldLog>,
) {
    let (chunks, mut ready) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let watching = flag.clone();
    let reading = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        // An end is passed on (and so held) like bytes are: an empty chunk.
        while let Ok(n) = from.read(&mut buf).await {
            if let (Some(log), true) = (&log, *watching.borrow()) {
                log.lock().expect("the proxy's log").extend_from_slice(&buf[..n]);
            }
            if chunks.send(buf[..n].to_vec()).is_err() || n == 0 {
                break;
            }
        }
    });
    while let Some(chunk) = ready.recv().await {
        // A cut connection is never closed.
        if !until_open(&mut flag, &mut cut_below, number).await || chunk.is_empty() {
            break;
        }
        if to.write_all(&chunk).await.is_err() {
            break;
        }
    }
    reading.abort();
}

impl Pausable {
    /// Starts one (running until the test ends), not paused.
    pub async fn start(target: SocketAddr) -> Self {
        Self::serve(TcpListener::bind("127.0.0.1:0").await.expect("a proxy port"), target)
    }

    /// Starts one on `port` (which a test before may be letting go of).
    pub async fn start_on(port: u16, target: SocketAddr) -> Self {
        let started = std::time::Instant::now();
        loop {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => return Self::serve(listener, target),
                Err(error) if started.elapsed() > Duration::from_secs(30) => panic!("the proxy's port {port}: {error}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn serve(listener: TcpListener, target: SocketAddr) -> Self {
        let addr = listener.local_addr().expect("bound");
        let (paused, watching) = tokio::sync::watch::channel(false);
        let (answers_held, watching_answers) = tokio::sync::watch::channel(false);
        let (cut_below, watching_cut) = tokio::sync::watch::channel(0u64);
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = accepted.clone();
        let held = HeldLog::default();
        let log = held.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let number = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (watching, watching_answers, watching_cut) =
                    (watching.clone(), watching_answers.clone(), watching_cut.clone());
                let log = log.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pass_on(client_read, server_write, watching, watching_cut.clone(), number, Some(log)),
                        pass_on(server_read, client_write, watching_answers, watching_cut, number, None),
                    );
                });
            }
        });
        Self { addr, paused, answers_held, cut_below, accepted, held }
    }

    /// Holds every answer from now on (what clients send still goes on).
    pub fn hold_answers(&self) {
        self.answers_held.send_replace(true);
    }

    /// Holds everything clients send from now on.
    pub fn pause(&self) {
        self.held.lock().expect("the proxy's log").clear();
        self.paused.send_replace(true);
    }

    /// How many times `needle` occurs in what clients sent since the last
    /// pause while paused: a command held (a script's hash, say), to wait
    /// for before resuming.
    pub fn held(&self, needle: &str) -> usize {
        let held = self.held.lock().expect("the proxy's log");
        held.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
    }

    /// Passes the held bytes on, both ways, and everything after them.
    pub fn resume(&self) {
        self.paused.send_replace(false);
        self.answers_held.send_replace(false);
    }

    /// Cuts off every connection open now, for good (silent both ways,
    /// never closed), and serves the connections made from now on, nothing
    /// held.
    pub fn cut_open_connections(&self) {
        self.cut_below.send_replace(self.accepted.load(std::sync::atomic::Ordering::SeqCst));
        self.resume();
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
