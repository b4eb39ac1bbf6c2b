//! Spans exported over OTLP (`SECKILL_OTLP_ENDPOINT`): one order's trace,
//! as a real receiver decodes it (the OpenTelemetry project's message
//! types, `infra/local/otlp_receiver.py`), goes from the buyer's request
//! at the edge to the CREATED event the relay sends, each hop a child of
//! the one before it; and the event on the topic carries the relay's span.

use rdkafka::message::Message;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::kafka::{header_str, TRACEPARENT_HEADER};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// The receiver, in a process of its own; the spans it received.
struct Receiver {
    process: tokio::process::Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    async fn start() -> Self {
        let root = seckill_e2e::repo_root();
        let out = std::env::temp_dir().join(format!("seckill-spans-{:08x}.jsonl", rand::random::<u32>()));
        let mut process = tokio::process::Command::new(root.join(".data/venv/bin/python"))
            .arg(root.join("infra/local/otlp_receiver.py"))
            .args(["0", out.to_str().expect("a utf-8 path")])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the OTLP receiver (make test-tools installs opentelemetry-proto)");
        let stdout = process.stdout.take().expect("its stdout");
        let mut first = String::new();
        tokio::io::BufReader::new(stdout).read_line(&mut first).await.expect("the receiver's port");
        Self { process, port: first.trim().parse().expect("a port"), out }
    }

    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().map(|line| serde_json::from_str(line).expect("a JSON span")).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.process.start_kill();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// The span named `name` among `trace`, exactly one.
fn one<'a>(trace: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<&Value> = trace.iter().filter(|s| s["name"] == name).collect();
    let seen: Vec<String> = trace.iter().map(|s| format!("{} ({})", s["name"], s["service"])).collect();
    assert_eq!(found.len(), 1, "one span {name} in the trace, which has {seen:?}");
    found[0]
}

fn assert_child(child: &Value, parent: &Value) {
    assert_eq!(child["parentSpanId"], parent["spanId"], "{} is a child of {}", child["name"], parent["name"]);
}

/// The edge (with `edge_extra` settings) and the order service as
/// processes exporting to `receiver`; a client of the edge, once it
/// answers.
async fn exporting_pipeline(env: &TestEnv, receiver: &Receiver, edge_extra: &[(&str, &str)]) -> (Child, Child, Client) {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child_env = env.child_env();
    child_env.push(("SECKILL_OTLP_ENDPOINT".into(), format!("http://127.0.0.1:{}", receiver.port)));
    let mut edge_env = [child_env.clone(), vec![("SECKILL_HTTP_ADDR".into(), format!("127.0.0.1:{http}"))]].concat();
    edge_env.extend(edge_extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let edge = Child::start("seckill-edge", &edge_env);
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    let order = Child::start("seckill-order", &child_env);
    let client = Client::new(format!("http://127.0.0.1:{http}"));
    eventually("the edge to answer", Duration::from_secs(60), || async {
        match client.try_send(hyper::Method::GET, "/readyz", None, &[]).await {
            Ok(reply) if reply.status == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    (edge, order, client)
}

/// `user`'s order of `sale`, sent with `headers`.
async fn send_order(
    client: &Client,
    sale: seckill_shared::domain::SaleKey,
    user: i64,
    headers: &[(&str, &str)],
) -> Reply {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    client.send(hyper::Method::POST, "/api/seckill/order", Some(body.as_bytes()), headers).await
}

/// An order's id, placed with `headers`.
async fn place(client: &Client, sale: seckill_shared::domain::SaleKey, user: i64, headers: &[(&str, &str)]) -> String {
    let reply = send_order(client, sale, user, headers).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    reply.json["orderId"].as_str().expect("an order id").to_owned()
}

/// A `traceparent` of a new trace id, sampled or not: (the id, the header).
fn client_trace(sampled: bool) -> (String, String) {
    let trace = format!("{:032x}", rand::random::<u128>() | 1);
    let header = format!("00-{trace}-{:016x}-{}", rand::random::<u64>() | 1, if sampled { "01" } else { "00" });
    (trace, header)
}

/// One order's trace (the buyer sent no `traceparent`), and one whose
/// `traceparent` (through a trusted proxy) says its trace is not sampled:
/// nothing of it is exported, no hop past the edge makes a span for it,
/// and its event carries that trace on, still unsampled. A probe's or an
/// unknown path's `traceparent` is not taken, even from the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_orders_trace_goes_from_the_request_to_its_created_event() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let receiver = Receiver::start().await;
    let trusted = [("SECKILL__AUTH__TRUSTED_PROXIES", "127.0.0.1/32")];
    let (edge, order, client) = exporting_pipeline(&env, &receiver, &trusted).await;
    let order_id = place(&client, sale, 7, &[]).await;
    let (unsampled_trace, unsampled) = client_trace(false);
    let quiet = place(&client, sale, 8, &[("traceparent", &unsampled)]).await;
    let mut not_taken = Vec::new();
    for path in ["/healthz", "/readyz", "/metrics", "/no/such/path"] {
        let (trace, header) = client_trace(true);
        client.send(hyper::Method::GET, path, None, &[("traceparent", &header)]).await;
        not_taken.push(trace);
    }
    let events = env.read_topic(&env.topics().events, 2, Duration::from_secs(60)).await;
    // Stopped, each service sends what it still buffers.
    assert!(edge.terminate().await && order.terminate().await, "both stop cleanly");

    let spans = receiver.spans();
    let services: std::collections::BTreeSet<&str> = spans.iter().filter_map(|s| s["service"].as_str()).collect();
    println!("{} spans received from {services:?}", spans.len());
    let carried = |order: &str| {
        let event = events.iter().find(|m| super::downstream::json(m)["orderId"] == order).expect("its event");
        event.headers().and_then(|h| header_str(h, TRACEPARENT_HEADER)).expect("a traceparent").to_owned()
    };
    assert!(!spans.iter().any(|s| s["traceId"] == unsampled_trace.as_str()), "an unsampled trace exported nothing");
    for trace in &not_taken {
        assert!(!spans.iter().any(|s| s["traceId"] == trace.as_str()), "a probe's traceparent was taken");
    }
    let quiet_carried = carried(&quiet);
    assert!(
        quiet_carried.starts_with(&format!("00-{unsampled_trace}-")) && quiet_carried.ends_with("-00"),
        "the buyer's trace carried on, unsampled: {quiet_carried}"
    );
    sampled_trace_is_whole(&env, &spans, &order_id, &carried(&order_id));
}

/// The order's trace: request → deduction, publish → consume → insert,
/// relay; every parent link intact, every span naming its service, the
/// event carrying the relay's span.
fn sampled_trace_is_whole(env: &TestEnv, spans: &[Value], order_id: &str, carried: &str) {
    let request = spans
        .iter()
        .find(|s| s["service"] == "seckill-edge" && s["attributes"]["order_id"] == order_id)
        .unwrap_or_else(|| panic!("the edge's request span of {order_id} among {} spans", spans.len()));
    let trace: Vec<Value> = spans.iter().filter(|s| s["traceId"] == request["traceId"]).cloned().collect();
    let topics = env.topics();
    let (deduct, publish) = (one(&trace, "EVALSHA deduct"), one(&trace, &format!("send {}", topics.orders)));
    let process = one(&trace, &format!("process {}", topics.orders));
    let (insert, relay) = (one(&trace, "INSERT orders"), one(&trace, &format!("send {}", topics.events)));
    assert_eq!((request["name"].as_str(), request["kind"].as_str()), (Some("POST /api/seckill/order"), Some("server")));
    assert_eq!(request["parentSpanId"], "", "the request starts the trace");
    assert_eq!(request["attributes"]["http.response.status_code"], 202);
    assert_child(deduct, request);
    assert_child(publish, request);
    assert_child(process, publish);
    assert_child(insert, process);
    assert_child(relay, process);
    for (span, kind, service) in [
        (deduct, "client", "seckill-edge"),
        (publish, "producer", "seckill-edge"),
        (process, "consumer", "seckill-order"),
        (insert, "client", "seckill-order"),
        (relay, "producer", "seckill-order"),
    ] {
        assert_eq!((span["kind"].as_str(), span["service"].as_str()), (Some(kind), Some(service)), "{}", span["name"]);
    }
    let consumed = &process["attributes"];
    assert_eq!(consumed["messaging.system"], "kafka");
    assert_eq!(consumed["messaging.consumer.group.name"], format!("{}seckill-order", env.kafka.topic_prefix));
    assert!(consumed["messaging.kafka.offset"].is_i64() && consumed["messaging.destination.partition.id"].is_string());
    assert_eq!(insert["attributes"]["db.system.name"], "postgresql");
    // No span of the trace points at a parent that is not in it, and every
    // span names its service.
    let ids: Vec<&Value> = trace.iter().map(|s| &s["spanId"]).collect();
    for span in &trace {
        assert!(span["parentSpanId"] == "" || ids.contains(&&span["parentSpanId"]), "a parent link broken: {span}");
        assert!(span["service"].as_str().is_some_and(|s| !s.is_empty()), "a span without a service: {span}");
    }
    // The event, as a consumer reads it, carries the relay's span.
    assert_eq!(carried, format!("00-{}-{}-01", relay["traceId"].as_str().unwrap(), relay["spanId"].as_str().unwrap()));
    println!("trace {}: {} spans, {} services", request["traceId"], trace.len(), {
        let mut services: Vec<&str> = trace.iter().filter_map(|s| s["service"].as_str()).collect();
        services.dedup();
        services.len()
    });
}

/// A buyer cannot make the pipeline export its requests: 10,000 orders
/// from a client that is no trusted proxy, each with a `traceparent` that
/// says "sampled", are sampled at the edge's own ratio (0.01: about 100
/// request spans; before, every one of the 10,000), and no hop past the
/// edge exports a span of a trace the edge did not keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyers_sampled_flag_does_not_force_tracing() {
    use futures::StreamExt;
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let receiver = Receiver::start().await;
    let ratio = [("SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO", "0.01")];
    let (edge, order, client) = exporting_pipeline(&env, &receiver, &ratio).await;
    let answers: Vec<u16> = futures::stream::iter(1..=10_000)
        .map(|user| {
            let client = client.clone();
            async move {
                let header = client_trace(true).1;
                send_order(&client, sale, user, &[("traceparent", header.as_str())]).await.status.as_u16()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(answers.iter().filter(|s| **s == 202).count(), 20, "the stock sold");
    env.read_topic(&env.topics().events, 20, Duration::from_secs(60)).await;
    assert!(edge.terminate().await && order.terminate().await, "both stop cleanly");
    let spans = receiver.spans();
    let requests: Vec<&Value> =
        spans.iter().filter(|s| s["service"] == "seckill-edge" && s["name"] == "POST /api/seckill/order").collect();
    // Binomial(10,000, 0.01): 100 ± 10; outside 40..=250 is six standard
    // deviations away.
    assert!((40..=250).contains(&requests.len()), "{} request spans of 10,000", requests.len());
    let kept: std::collections::BTreeSet<&str> = requests.iter().filter_map(|s| s["traceId"].as_str()).collect();
    for span in spans.iter().filter(|s| s["service"] == "seckill-order") {
        let trace = span["traceId"].as_str().unwrap_or_default();
        assert!(kept.contains(trace), "a span of a trace the edge did not keep: {span}");
    }
}
