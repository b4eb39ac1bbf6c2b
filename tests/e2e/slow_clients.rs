//! Slow and idle clients cannot pin the edge (docs/security.md):
//! headers and bodies have deadlines, idle keep-alive connections end,
//! connections are capped and requests beyond the in-flight limit are
//! answered 503 at once, while the probes and buyers keep being answered.

use hyper::Method;
use seckill_e2e::http::{assert_error, Client};
use seckill_e2e::TestEnv;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Half a request: headers never finished.
const HALF_HEADERS: &[u8] = b"POST /api/seckill/order HTTP/1.1\r\nHost: edge\r\nContent-Ty";

/// Whole headers, then a body that never arrives in full.
const HALF_BODY: &[u8] = b"POST /api/seckill/order HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"activityId\":";
/// The same, a warm-up on the operators' console.
const HALF_WARMUP: &[u8] = b"PUT /admin/sales/1/1 HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"stock\":";

/// Opens `count` connections that each send `bytes` and then nothing.
async fn slow_clients(addr: std::net::SocketAddr, count: usize, bytes: &'static [u8]) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(addr).await.expect("connecting");
        stream.write_all(bytes).await.expect("sending half a request");
        streams.push(stream);
    }
    streams
}

/// What the edge sent on `stream` before closing it, or `None` when it is
/// still open after `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buffer = [0u8; 1024];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.is_ok().then_some(received)
}

/// Whether the edge already answered (or closed) `stream`.
/// Holds `count` places of `addr` with requests whose bodies never come
/// (`bytes`), until `probe` is answered 503. The probe takes a place while
/// it is answered, so a holder arriving then is itself shed (answered 503):
/// such a holder is replaced by a new one.
async fn hold_places<F, Fut>(addr: std::net::SocketAddr, count: usize, bytes: &'static [u8], probe: F) -> Vec<TcpStream>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = seckill_e2e::http::Reply>,
{
    let mut holders = slow_clients(addr, count, bytes).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reply = probe().await;
        if reply.status == 503 {
            return holders;
        }
        assert!(tokio::time::Instant::now() < deadline, "{count} places were not taken within 30 s: {reply:?}");
        for holder in &mut holders {
            if answered(holder) {
                *holder = slow_clients(addr, 1, bytes).await.remove(0);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn answered(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 256];
    !matches!(stream.try_read(&mut buffer), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_slow_clients_are_cut_off_while_the_edge_answers() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.connections.header_timeout_ms = 5_000;
    settings.connections.body_timeout_ms = 5_000;
    let edge = env.spawn_edge(settings).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let client = Client::new(edge.url());

    let mut headers = slow_clients(edge.addr, 1_000, HALF_HEADERS).await;
    let mut bodies = slow_clients(edge.addr, 1_000, HALF_BODY).await;
    // One that asked once and then stays idle, keep-alive.
    let mut idle = TcpStream::connect(edge.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200", "the idle connection's first request is answered");

    // With 2,000 slow clients connected, the probes and a buyer are answered.
    assert_eq!(client.get("/healthz").await.status, 200);
    seckill_e2e::wait_ready(&client).await;
    let reply = client.order(sale.activity.get(), sale.sku.get(), 1).await;
    assert_eq!(reply.status, 202, "{reply:?}");

    // Every slow one is cut off (the deadlines are 5 s; 30 s is the bound).
    for (i, stream) in headers.iter_mut().enumerate() {
        let closed = closed_within(stream, Duration::from_secs(30)).await;
        assert!(closed.is_some(), "half-header connection {i} still open after 30 s");
    }
    for (i, stream) in bodies.iter_mut().enumerate() {
        let answer = closed_within(stream, Duration::from_secs(30)).await;
        let answer = answer.unwrap_or_else(|| panic!("half-body connection {i} still open after 30 s"));
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "a body that never came is answered 408: {answer}");
        assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    }
    assert!(closed_within(&mut idle, Duration::from_secs(30)).await.is_some(), "an idle keep-alive connection ends");
    // Nothing a slow client sent kept anything: one order, the buyer's.
    assert_eq!(env.redis_stock(sale).await, 9);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_limit_are_answered_503_at_once() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.connections.max_in_flight = 4;
    settings.connections.body_timeout_ms = 60_000;
    let edge = env.spawn_edge(settings).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let client = Client::new(edge.url());
    seckill_e2e::wait_ready(&client).await;

    // Four requests whose bodies never come hold the four places.
    let probe = || client.get("/api/seckill/order/00000000-0000-0000-0000-000000000000");
    let holders = hold_places(edge.addr, 4, HALF_BODY, probe).await;
    let reply = client.order(sale.activity.get(), sale.sku.get(), 3).await;
    assert_error(&reply, 503, "TRY_AGAIN", "beyond max_in_flight");
    assert_eq!(env.redis_stock(sale).await, 10, "a shed request kept nothing");
    assert_eq!(client.get("/readyz").await.status, 200, "the probes are outside the limit");

    drop(holders);
    seckill_e2e::eventually("places free again", Duration::from_secs(10), || async {
        let reply = client.order(sale.activity.get(), sale.sku.get(), 3).await;
        if reply.status == 202 {
            Ok(())
        } else {
            Err(format!("{}", reply.status))
        }
    })
    .await;
    edge.stop().await;
}

/// The buyers and the operators each have their own budget: a console
/// request is answered while the buyers' places are taken, and a buyer
/// orders while the console's are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_and_the_buyers_each_have_their_own_in_flight_budget() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.connections.max_in_flight = 2;
    settings.console.max_in_flight = 2;
    settings.connections.body_timeout_ms = 60_000;
    let edge = env.spawn_edge(settings).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let (buyers, console) = (Client::new(edge.url()), Client::new(edge.console_url()));
    seckill_e2e::wait_ready(&buyers).await;
    let bearer = format!("Bearer {}", seckill_e2e::ADMIN_TOKEN);
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let headers = [("authorization", bearer.as_str())];
    let report = || console.send(hyper::Method::GET, &path, None, &headers);

    let buyers_probe = || buyers.get("/api/seckill/order/00000000-0000-0000-0000-000000000000");
    let holders = hold_places(edge.addr, 2, HALF_BODY, buyers_probe).await;
    assert_error(&buyers.order(sale.activity.get(), sale.sku.get(), 3).await, 503, "TRY_AGAIN", "buyers full");
    let answered = report().await;
    assert_eq!(answered.status, 200, "the console answers while the buyers' budget is spent: {}", answered.text);
    drop(holders);

    let held = hold_places(edge.console, 2, HALF_WARMUP, report).await;
    assert_error(&report().await, 503, "TRY_AGAIN", "beyond console.max_in_flight");
    seckill_e2e::eventually("a buyer orders while the console is full", Duration::from_secs(10), || async {
        let reply = buyers.order(sale.activity.get(), sale.sku.get(), 3).await;
        if reply.status == 202 {
            Ok(())
        } else {
            Err(format!("{}", reply.status))
        }
    })
    .await;
    assert_eq!(env.redis_stock(sale).await, 9, "one order, the buyer's; the shed requests kept nothing");
    drop(held);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.connections.max_connections = 20;
    settings.connections.header_timeout_ms = 60_000;
    let edge = env.spawn_edge(settings).await;

    let held = slow_clients(edge.addr, 20, HALF_HEADERS).await;
    let mut extra = TcpStream::connect(edge.addr).await.unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n").await;
    let answer = closed_within(&mut extra, Duration::from_secs(10)).await;
    assert_eq!(answer, Some(Vec::new()), "the 21st connection is closed unanswered");

    drop(held);
    let client = Client::new(edge.url());
    seckill_e2e::eventually("served again under the cap", Duration::from_secs(10), || async {
        match client.try_send(Method::GET, "/healthz", None, &[]).await {
            Ok(reply) if reply.status == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    edge.stop().await;
}

/// The OpenAPI document (about 55 KB) asked for a hundred times, pipelined.
fn pipelined_requests() -> Vec<u8> {
    b"GET /openapi.json HTTP/1.1\r\nHost: edge\r\n\r\n".repeat(100)
}

/// `n` connections with a 1 KiB receive buffer, opened and holding their
/// places without sending anything yet.
async fn connections_with_small_buffers(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut connections = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(1024).unwrap();
        connections.push(socket.connect(addr).await.expect("connecting"));
    }
    connections
}

/// Each connection pipelines requests for a large answer and then never
/// reads it: from here on each is a reader whose answer the edge cannot
/// finish writing.
async fn never_read(connections: &mut [TcpStream]) {
    let requests = pipelined_requests();
    for connection in connections {
        connection.write_all(&requests).await.expect("sending the pipelined requests");
    }
}

/// `request` over a connection of its own (`Connection: close`): the
/// answer's status, 0 when none came (the connection was refused or cut).
async fn once(addr: std::net::SocketAddr, request: &str) -> u16 {
    let Ok(mut stream) = TcpStream::connect(addr).await else { return 0 };
    if stream.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// 3,000 clients with a 1 KiB receive buffer pipeline requests for a large
/// answer and never read: they hold every connection of
/// `connections.max_connections`. Each is cut off (reset) within
/// `connections.write_timeout_ms` plus 5 s, and a buyer is answered then.
/// (Before: hyper has no write deadline; they held their connections, and
/// every buyer was refused, for as long as they cared to.)
///
/// The places are taken first by connections that send nothing (the header
/// deadline, ten minutes here, is not what is tested), so that how long this
/// machine takes to open 3,000 sockets cannot start any write deadline
/// before the buyer is shown refused; only then does every one send its
/// requests, and the cut is measured from the last of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_clients_that_never_read_are_cut_off_and_a_buyer_is_answered() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.connections.max_connections = 3_000;
    assert_eq!(settings.connections.write_timeout_ms, 10_000, "the default write timeout is what is cut at");
    settings.connections.header_timeout_ms = 600_000;
    let edge = env.spawn_edge(settings).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    // Connections of their own, closed after each answer: no idle pooled
    // connection holds a place.
    seckill_e2e::eventually("the edge to be ready", Duration::from_secs(30), || async {
        match once(edge.addr, "GET /readyz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n").await {
            200 => Ok(()),
            status => Err(status.to_string()),
        }
    })
    .await;

    let mut readers = connections_with_small_buffers(edge.addr, 3_000).await;
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":1}}"#, sale.activity, sale.sku);
    let order = format!(
        "POST /api/seckill/order HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // They hold every connection (accepted in the order they connected,
    // before the buyer's): a buyer now is refused at once.
    assert_eq!(once(edge.addr, &order).await, 0, "the readers hold every connection (else this shows nothing)");
    never_read(&mut readers).await;
    let all_sent = tokio::time::Instant::now();
    // The edge has begun answering each (its write deadline starts once the
    // socket takes no more): the first byte of every reader's answer.
    for (i, reader) in readers.iter_mut().enumerate() {
        let mut first = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(60), reader.read_exact(&mut first)).await;
        // (An error: answered and already cut off.)
        assert!(read.is_ok(), "reader {i} got no answer within 60 s");
    }
    // Generous: only an edge that does not cut them off misses it (the
    // machine is shared; what it took is printed, not asserted).
    let patience = all_sent + Duration::from_millis(10_000) + Duration::from_secs(60);

    let mut refused = 0;
    loop {
        match once(edge.addr, &order).await {
            202 => break,
            0 => refused += 1,
            status => panic!("the buyer was answered {status}"),
        }
        assert!(tokio::time::Instant::now() < patience, "no buyer answered within the write timeout + 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answered = all_sent.elapsed();
    // The edge cut every reader off (its own count), then each reader finds
    // its connection closed. (Reading a reader before its cut would take
    // what the edge waits to write and lift the deadline.)
    let client = Client::new(edge.url());
    let cut = seckill_e2e::eventually("every reader cut off", patience - tokio::time::Instant::now(), || async {
        let metrics = client.get("/metrics").await.text;
        match seckill_e2e::http::sample(&metrics, "seckill_edge_connections_write_timeouts_total") {
            Some(n) if n >= 3_000.0 => Ok(all_sent.elapsed()),
            other => Err(format!("{other:?} write timeouts counted")),
        }
    })
    .await;
    for (i, reader) in readers.iter_mut().enumerate() {
        assert!(
            closed_within(reader, Duration::from_secs(10)).await.is_some(),
            "reader {i} still connected after its cut"
        );
    }
    println!(
        "3,000 readers that never read: the buyer answered after {answered:?} ({refused} refused meanwhile); all cut off by {cut:?}"
    );
    assert_eq!(env.redis_stock(sale).await, 9, "the buyer's order, nothing else");
    edge.stop().await;
}
