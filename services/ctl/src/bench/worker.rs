//! One connection of the load: its requests, one after the other (on the
//! open loop's schedule with `--rate`), and the tally of their answers.

use super::args::Args;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What every connection of one load shares.
pub(super) struct Load {
    pub client: Client<HttpConnector, Full<Bytes>>,
    pub args: Args,
    /// The next request's number.
    pub next: AtomicU64,
    /// How many requests in all (`u64::MAX` with `--duration`).
    pub total: u64,
    pub stop_at: Option<Instant>,
    pub started: Instant,
    pub progress: indicatif::ProgressBar,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64: a cheap, deterministic per-request draw.
    x = x.wrapping_add(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// The user of request `i`: the next distinct user, or with probability
/// `same_user_ratio` one already seen (a retry).
pub(super) fn user_for(args: &Args, i: u64) -> i64 {
    let users = args.users.max(1);
    let draw = mix(args.seed ^ i);
    let repeat = (draw >> 11) as f64 / (1u64 << 53) as f64 <= args.same_user_ratio && i > 0;
    let index = if repeat { mix(draw) % i.min(users) } else { i % users };
    args.user_offset + 1 + index as i64 * args.user_stride
}

pub(super) fn code_of(body: &[u8]) -> String {
    let text = std::str::from_utf8(body).unwrap_or("");
    text.split_once("\"code\":\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(code, _)| code.to_owned())
        .unwrap_or_default()
}

pub(super) struct WorkerResult {
    pub(super) histogram: Histogram<u64>,
    pub(super) outcomes: BTreeMap<String, u64>,
    pub(super) last_accept: Option<Duration>,
    /// When the last request a 202 answered was sent.
    pub(super) last_accept_sent: Option<Duration>,
    /// When the first 410 SOLD_OUT was answered.
    pub(super) first_sold_out: Option<Duration>,
    pub(super) accepted: Vec<String>,
    /// With `--answers-out`: (user, status) of every order.
    pub(super) answers: Vec<(i64, u16)>,
    /// With `--timeline-ms`: (sent, ms after the start; latency, µs; outcome).
    pub(super) samples: Vec<(u32, u32, String)>,
}

fn order_id_of(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let (_, rest) = text.split_once("\"orderId\":\"")?;
    Some(rest.split_once('"')?.0.to_owned())
}

impl WorkerResult {
    /// An empty tally.
    pub(super) fn new() -> Self {
        Self {
            histogram: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
            outcomes: BTreeMap::new(),
            last_accept: None,
            last_accept_sent: None,
            first_sold_out: None,
            accepted: Vec::new(),
            answers: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Adds another connection's tally to this one.
    pub(super) fn merge(&mut self, mut other: WorkerResult) -> anyhow::Result<()> {
        self.accepted.append(&mut other.accepted);
        self.answers.append(&mut other.answers);
        self.samples.append(&mut other.samples);
        self.histogram.add(&other.histogram)?;
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_insert(0) += v;
        }
        self.last_accept = self.last_accept.max(other.last_accept);
        self.last_accept_sent = self.last_accept_sent.max(other.last_accept_sent);
        self.first_sold_out = self.first_sold_out.into_iter().chain(other.first_sold_out).min();
        Ok(())
    }

    /// Notes one answer (`status` and body, `None`: no answer came) of a
    /// request sent at `sent`; the outcome it is counted as.
    fn answered(&mut self, load: &Load, user: i64, sent: Instant, answer: Option<(u16, Bytes)>) -> String {
        let record_answers = load.args.answers_out.is_some() && load.args.get.is_none();
        let Some((status, body)) = answer else {
            if record_answers {
                self.answers.push((user, 0));
            }
            return "000 CONNECTION_ERROR".to_owned();
        };
        if status == 410 && self.first_sold_out.is_none() {
            self.first_sold_out = Some(load.started.elapsed());
        }
        let code = code_of(&body);
        // A promise: 202 QUEUED (202 UNCONFIRMED is neither a promise nor a
        // refusal).
        if status == 202 && code == "QUEUED" {
            self.last_accept = Some(load.started.elapsed());
            self.last_accept_sent = Some(sent.duration_since(load.started));
            if load.args.accepted_out.is_some() {
                self.accepted.extend(order_id_of(&body));
            }
        }
        if record_answers {
            self.answers.push((user, status));
        }
        format!("{status} {code}")
    }
}

/// The request for `user` (the order, or `--get`'s path), with `admission`
/// (the room's token) when the buyer has one.
fn request(args: &Args, user: i64, admission: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::builder();
    if let Some(traceparent) = &args.traceparent {
        builder = builder.header("traceparent", traceparent.as_str());
    }
    if let Some(token) = admission {
        builder = builder.header("seckill-admission", token);
    }
    match &args.get {
        Some(path) => builder.method(Method::GET).uri(format!("{}{}", args.url, path)).body(Full::new(Bytes::new())),
        None => {
            let quantity = args.quantity[user.unsigned_abs() as usize % args.quantity.len().max(1)];
            let body = match quantity {
                1 => format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, args.activity, args.sku),
                n => {
                    format!(r#"{{"activityId":{},"skuId":{},"userId":{user},"quantity":{n}}}"#, args.activity, args.sku)
                }
            };
            builder
                .method(Method::POST)
                .uri(format!("{}/api/seckill/order", args.url))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
        }
    }
    .expect("a valid request")
}

/// One connection: requests until the load's count or time is spent.
pub(super) async fn run(load: Arc<Load>) -> WorkerResult {
    let mut result = WorkerResult::new();
    loop {
        let i = load.next.fetch_add(1, Ordering::Relaxed);
        if i >= load.total || load.stop_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        if let Some(rate) = load.args.rate.filter(|r| *r > 0.0) {
            // Open loop: request i is due at i / rate seconds.
            tokio::time::sleep_until((load.started + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        }
        let user = user_for(&load.args, i);
        let admission = if load.args.through_room { admitted(&load, user).await } else { None };
        let sent = Instant::now();
        let answer = match load.client.request(request(&load.args, user, admission.as_deref())).await {
            Ok(response) => {
                let status = response.status().as_u16();
                Some((status, response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default()))
            }
            Err(_) => None,
        };
        let outcome = result.answered(&load, user, sent, answer);
        let micros = sent.elapsed().as_micros().clamp(1, 60_000_000) as u64;
        let _ = result.histogram.record(micros);
        if load.args.timeline_ms.is_some() {
            result.samples.push((sent.duration_since(load.started).as_millis() as u32, micros as u32, outcome.clone()));
        }
        *result.outcomes.entry(outcome).or_insert(0) += 1;
        load.progress.inc(1);
    }
    result
}

/// `user`'s way through the sale's waiting room: joined, the ticket polled
/// every 50 ms until it carries an admission token (at most a minute).
/// `None` when the room gave none (the order then goes without, and is
/// refused).
async fn admitted(load: &Load, user: i64) -> Option<String> {
    let args = &load.args;
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, args.activity, args.sku);
    let join = Request::post(format!("{}/api/seckill/queue", args.url))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request");
    let joined = json_of(load.client.request(join).await.ok()?).await?;
    let ticket = joined["ticket"].as_str()?.to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let poll = Request::get(format!("{}/api/seckill/queue/{ticket}", args.url))
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        if let Some(token) = json_of(load.client.request(poll).await.ok()?).await?["admission"].as_str() {
            return Some(token.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A response's body as JSON.
async fn json_of(response: hyper::Response<hyper::body::Incoming>) -> Option<serde_json::Value> {
    let body = response.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}
