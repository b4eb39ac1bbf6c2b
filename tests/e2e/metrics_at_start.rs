//! Every metric is described and exposed from the start (issue 47, item 6):
//! a dashboard panel or an alert on a counter reads 0 on a fresh service,
//! not "No data". Checked from the side of the one who relies on it: the
//! three services started as processes of their own, their `/metrics`
//! scraped as Prometheus would, against every name the Grafana dashboard
//! and the alert rules query; and the catalogue against the code.

use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, Child, TestEnv};
use seckill_shared::ops::catalogue::{fail_reasons, AtStart, Metric};
use std::collections::BTreeSet;
use std::time::Duration;

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// `binary` started with `address_variable` on a free port: the process and
/// its client.
fn start(env: &TestEnv, binary: &str, address_variable: &str) -> (Child, Client) {
    let addr = free_addr();
    let mut child_env = env.child_env();
    child_env.push((address_variable.into(), addr.clone()));
    (Child::start(binary, &child_env), Client::new(format!("http://{addr}")))
}

async fn scrape(client: &Client) -> Result<String, String> {
    match client.try_send(hyper::Method::GET, "/metrics", None, &[]).await {
        Ok(Reply { status, text, .. }) if status == 200 => Ok(text),
        other => Err(format!("{other:?}")),
    }
}

/// The names of the series `text` holds (`name{labels} value` lines).
fn series_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.split(['{', ' ']).next().unwrap_or_default().to_owned())
        .collect()
}

/// Each metric a `# TYPE` line names and no `# HELP` line describes.
fn undescribed(text: &str) -> Vec<String> {
    let named = |prefix: &str| -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| l.split(' ').next())
            .map(Into::into)
            .collect()
    };
    let helped = named("# HELP ");
    named("# TYPE ").into_iter().filter(|name| !helped.contains(name)).collect()
}

/// Freshly started, with one sale warmed and no order placed, the edge,
/// the order service and the compensator expose every metric the dashboard
/// and the alerts query — each counter labelled by reason or outcome at 0
/// for every value — and describe every metric they expose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freshly_started_services_expose_every_metric_the_dashboard_and_the_alerts_query() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let (_edge, edge) = start(&env, "seckill-edge", "SECKILL_HTTP_ADDR");
    let (_order, order) = start(&env, "seckill-order", "SECKILL__METRICS_ADDR");
    let (_compensator, compensator) = start(&env, "seckill-compensator", "SECKILL__METRICS_ADDR");
    let queried = super::observability::queried_metrics();
    // The gauges that are measurements (readiness, lag, the first audit)
    // appear once measured: each service measures at start.
    let scraped = eventually("every queried metric on a fresh service", Duration::from_secs(90), || async {
        let texts = [scrape(&edge).await?, scrape(&order).await?, scrape(&compensator).await?];
        let exposed: BTreeSet<String> = texts.iter().flat_map(|text| series_names(text)).collect();
        let missing: Vec<&String> = queried.iter().filter(|name| !exposed.contains(*name)).collect();
        if missing.is_empty() {
            Ok(texts)
        } else {
            Err(format!("not exposed: {missing:?}"))
        }
    })
    .await;
    let [edge_text, order_text, compensator_text] = &scraped;
    for (service, text) in [("edge", edge_text), ("order", order_text), ("compensator", compensator_text)] {
        assert_eq!(undescribed(text), Vec::<String>::new(), "the {service}'s metrics without a # HELP line");
    }
    // Every answer of the order table (OrderAnswer), the edge's outcomes.
    let outcomes = seckill_edge::order_answers::OrderAnswer::ALL.iter().map(|answer| answer.code());
    for outcome in outcomes {
        let series = format!("seckill_edge_orders_total{{outcome=\"{outcome}\"}} 0");
        assert!(edge_text.contains(&series), "{series} on the fresh edge:\n{edge_text}");
    }
    for reason in fail_reasons() {
        for (text, series) in [
            (order_text, format!("seckill_order_dlq_total{{reason=\"{reason}\"}} 0")),
            (order_text, format!("seckill_units_settled_total{{reason=\"{reason}\"}} 0")),
            (compensator_text, format!("seckill_units_settled_total{{reason=\"{reason}\"}} 0")),
            (compensator_text, format!("seckill_broken_promises_total{{reason=\"{reason}\"}} 0")),
        ] {
            assert!(text.contains(&series), "{series} on a fresh service:\n{text}");
        }
    }
    for (text, series) in [
        (compensator_text, "seckill_orders_expired_total 0"),
        (compensator_text, "seckill_units_returned_total 0"),
        (edge_text, "seckill_units_returned_total 0"),
        (edge_text, "seckill_edge_publishes_in_flight 0"),
    ] {
        assert!(text.contains(series), "{series} on a fresh service:\n{text}");
    }
    let label = format!("sale=\"{sale}\"");
    assert!(compensator_text.contains(&format!("seckill_sale_consistent{{{label}}} 1")), "{compensator_text}");
}

/// Every metric of every service's catalogue.
fn catalogues() -> Vec<&'static Metric> {
    [seckill_edge::metrics::ALL, seckill_order::metrics::ALL, seckill_compensator::metrics::ALL]
        .into_iter()
        .flat_map(|groups| groups.iter().flat_map(|group| group.iter()))
        .collect()
}

/// Every metric the code records is in a catalogue, and every catalogued
/// metric is recorded somewhere: a metric added without its description,
/// or one removed and still described, is noticed.
#[test]
fn the_catalogues_list_exactly_the_metrics_the_code_records() {
    let catalogued: BTreeSet<&str> = catalogues().iter().map(|m| m.name).collect();
    let recorded = super::observability::recorded_names();
    let undeclared: Vec<&String> = recorded.iter().filter(|name| !catalogued.contains(name.as_str())).collect();
    assert!(undeclared.is_empty(), "recorded and in no service's catalogue: {undeclared:?}");
    let sources = super::observability::sources_outside_the_catalogues();
    let stale: Vec<&&str> = catalogued.iter().filter(|name| !sources.contains(&format!("\"{name}\""))).collect();
    assert!(stale.is_empty(), "catalogued and recorded nowhere: {stale:?}");
    let zeroed_by_label = catalogues().iter().filter(|m| matches!(m.at_start, AtStart::ZeroBy(..))).count();
    assert!(zeroed_by_label >= 4, "the reason and outcome counters are zeroed per value");
}
