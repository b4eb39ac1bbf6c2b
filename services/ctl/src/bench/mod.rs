//! `seckillctl bench`: an async load generator for the edge (HTTP/1.1
//! keep-alive, one connection per worker), the project's own version of the
//! seed's `curl | xargs` check. Prints the status/code distribution,
//! requests/s, latency percentiles from an HdrHistogram and the CPU the
//! generator itself used (it shares the machine with what it measures).

mod args;
mod worker;

pub use args::Args;

use crate::{reconcile, Failure, Settings};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use worker::WorkerResult;
#[cfg(test)]
use worker::{code_of, user_for};

/// One slot of the run's timeline.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Slot {
    /// When the slot starts, ms after the first request.
    pub start_ms: u64,
    /// Requests sent in the slot, by `status code`.
    pub outcomes: BTreeMap<String, u64>,
    /// Latency of those requests, milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The figures of one run.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchResult {
    /// Requests answered (or failed to connect).
    pub requests: u64,
    /// Count per `status code` pair, e.g. `202 QUEUED`.
    pub outcomes: BTreeMap<String, u64>,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Requests per second.
    pub requests_per_second: f64,
    /// Latency percentiles, milliseconds.
    pub latency_ms: BTreeMap<String, f64>,
    /// CPU the generator used, seconds.
    pub generator_cpu_seconds: f64,
    /// That CPU as a share of one core over the run (200 = both cores).
    pub generator_cpu_percent: f64,
    /// Time from the first request to the last 202 (sell-out), seconds.
    pub last_accept_seconds: Option<f64>,
    /// How long buyers were told SOLD_OUT while a unit was still to be
    /// had: from the first 410 answered to the sending of the last request
    /// that a 202 answered, seconds; 0 when every 410 came after it (a
    /// later buyer got a unit, so the unit was there when the 410 was
    /// said, unless one came back meanwhile).
    pub sold_out_while_a_unit_remained_seconds: f64,
    /// With `--timeline-ms`: the run slot by slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<Slot>>,
}

fn cpu_seconds() -> f64 {
    // utime and stime of this process, in clock ticks (100 per second).
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let utime: f64 = after.get(11)?.parse().ok()?;
            let stime: f64 = after.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Runs the load and returns its figures.
pub async fn load(args: &Args) -> anyhow::Result<BenchResult> {
    let total = match (args.requests, args.duration) {
        (Some(r), _) => r,
        (None, Some(_)) => u64::MAX,
        (None, None) => args.users,
    };
    let progress =
        if total == u64::MAX { indicatif::ProgressBar::new_spinner() } else { indicatif::ProgressBar::new(total) };
    let load = Arc::new(worker::Load {
        client: Client::builder(TokioExecutor::new()).pool_max_idle_per_host(args.concurrency).build_http(),
        args: args.clone(),
        next: AtomicU64::new(0),
        total,
        stop_at: args.duration.map(|d| Instant::now() + Duration::from_secs_f64(d)),
        started: Instant::now(),
        progress: progress.clone(),
    });
    let cpu_before = cpu_seconds();
    let workers: Vec<_> = (0..args.concurrency.max(1)).map(|_| tokio::spawn(worker::run(load.clone()))).collect();
    let mut all = WorkerResult::new();
    for worker in workers {
        all.merge(worker.await?)?;
    }
    progress.finish_and_clear();
    let seconds = load.started.elapsed().as_secs_f64();
    if let Some(path) = &args.accepted_out {
        let mut text = all.accepted.join("\n");
        text.push('\n');
        std::fs::write(path, text)?;
    }
    if let Some(path) = &args.answers_out {
        let text: String = all.answers.iter().map(|(user, status)| format!("{user} {status}\n")).collect();
        std::fs::write(path, text)?;
    }
    let cpu = cpu_seconds() - cpu_before;
    let histogram = &all.histogram;
    let requests = histogram.len();
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    let latency_ms = BTreeMap::from([
        ("p50".to_owned(), ms(0.5)),
        ("p90".to_owned(), ms(0.9)),
        ("p99".to_owned(), ms(0.99)),
        ("p99.9".to_owned(), ms(0.999)),
        ("max".to_owned(), histogram.max() as f64 / 1000.0),
    ]);
    Ok(BenchResult {
        requests,
        outcomes: all.outcomes,
        seconds,
        requests_per_second: requests as f64 / seconds,
        latency_ms,
        generator_cpu_seconds: cpu,
        generator_cpu_percent: cpu / seconds * 100.0,
        last_accept_seconds: all.last_accept.map(|d| d.as_secs_f64()),
        sold_out_while_a_unit_remained_seconds: sold_out_too_early(all.first_sold_out, all.last_accept_sent)
            .as_secs_f64(),
        timeline: args.timeline_ms.map(|slot_ms| timeline(all.samples, slot_ms.max(1))),
    })
}

/// How long before a unit was last sold the first buyer was told sold out:
/// zero when the first 410 was answered after the last 202's request left.
fn sold_out_too_early(first_sold_out: Option<Duration>, last_accept_sent: Option<Duration>) -> Duration {
    match (first_sold_out, last_accept_sent) {
        (Some(first), Some(last)) => last.saturating_sub(first),
        _ => Duration::ZERO,
    }
}

/// The samples grouped into slots of `slot_ms` by when they were sent.
fn timeline(samples: Vec<(u32, u32, String)>, slot_ms: u64) -> Vec<Slot> {
    let mut slots: BTreeMap<u64, (BTreeMap<String, u64>, Vec<u32>)> = BTreeMap::new();
    for (sent_ms, micros, outcome) in samples {
        let slot = slots.entry(u64::from(sent_ms) / slot_ms).or_default();
        *slot.0.entry(outcome).or_insert(0) += 1;
        slot.1.push(micros);
    }
    slots
        .into_iter()
        .map(|(index, (outcomes, mut micros))| {
            micros.sort_unstable();
            let at = |q: f64| f64::from(micros[((micros.len() - 1) as f64 * q).round() as usize]) / 1000.0;
            Slot { start_ms: index * slot_ms, outcomes, p50_ms: at(0.5), p99_ms: at(0.99) }
        })
        .collect()
}

/// Runs `bench`.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    let result = load(&args).await.map_err(Failure::failed)?;
    let accepted: u64 = result.outcomes.get("202 QUEUED").copied().unwrap_or(0);
    let report = if args.reconcile {
        let reconcile_args = reconcile::Args {
            activity: Some(args.activity),
            sku: Some(args.sku),
            release: None,
            wait_drain: Some(args.wait_drain),
            json: args.json,
        };
        Some(reconcile::report(settings, &reconcile_args).await?)
    } else {
        None
    };
    if args.json {
        let json = serde_json::json!({ "bench": result, "reconciliation": report });
        println!("{}", serde_json::to_string_pretty(&json).map_err(Failure::failed)?);
    } else {
        println!("{:<28} {:>10}", "status code", "count");
        for (outcome, count) in &result.outcomes {
            println!("{outcome:<28} {count:>10}");
        }
        println!("{:<28} {:>10}", "total", result.requests);
        println!(
            "{} requests in {:.2}s: {:.0} requests/s, concurrency {}",
            result.requests, result.seconds, result.requests_per_second, args.concurrency
        );
        let l = &result.latency_ms;
        println!(
            "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l["p50"], l["p90"], l["p99"], l["p99.9"], l["max"]
        );
        if let Some(last) = result.last_accept_seconds {
            println!("last 202 after {last:.3}s");
        }
        if result.sold_out_while_a_unit_remained_seconds > 0.0 {
            println!(
                "sold out answered {:.3}s before the last unit was sold",
                result.sold_out_while_a_unit_remained_seconds
            );
        }
        println!(
            "load generator CPU: {:.2}s ({:.0}% of one core; the machine has {})",
            result.generator_cpu_seconds,
            result.generator_cpu_percent,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
        if let Some(report) = &report {
            println!();
            reconcile::print(report, false);
            println!("{:<32} {} accepted, {} created", "202s vs orders", accepted, report.orders_created);
        }
    }
    match report {
        Some(report) if !report.consistent => {
            Err(Failure::failed(anyhow::anyhow!("the sale is NOT consistent after the run")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn users_are_distinct_without_retries_and_repeat_with_them() {
        let args = Wrapper::parse_from(["x", "--activity", "1", "--sku", "2", "--users", "100"]).args;
        let users: std::collections::HashSet<i64> = (0..100).map(|i| user_for(&args, i)).collect();
        assert_eq!(users.len(), 100, "every request a new user");
        let retrying =
            Wrapper::parse_from(["x", "--activity", "1", "--sku", "2", "--users", "100", "--same-user-ratio", "0.5"])
                .args;
        let users: std::collections::HashSet<i64> = (0..100).map(|i| user_for(&retrying, i)).collect();
        assert!(users.len() < 80, "about half repeat an earlier user, got {} distinct", users.len());
        assert!(users.iter().all(|u| (1..=100).contains(u)));
        let strided =
            Wrapper::parse_from(["x", "--activity", "1", "--sku", "2", "--users", "4", "--user-stride", "3"]).args;
        let users: Vec<i64> = (0..4).map(|i| user_for(&strided, i)).collect();
        assert_eq!(users, [1, 4, 7, 10], "every third user id");
    }

    #[test]
    fn codes_are_read_from_bodies() {
        assert_eq!(code_of(br#"{"code":"SOLD_OUT","message":"sold out"}"#), "SOLD_OUT");
        assert_eq!(code_of(b"ok"), "");
    }

    #[test]
    fn sold_out_is_too_early_only_when_a_later_request_got_a_unit() {
        let ms = Duration::from_millis;
        assert_eq!(sold_out_too_early(Some(ms(50)), Some(ms(40))), Duration::ZERO, "every 410 after the last sale");
        assert_eq!(sold_out_too_early(Some(ms(30)), Some(ms(45))), ms(15), "a 410, then a unit sold 15 ms later");
        assert_eq!(sold_out_too_early(None, Some(ms(45))), Duration::ZERO, "never sold out");
        assert_eq!(sold_out_too_early(Some(ms(5)), None), Duration::ZERO, "nothing sold");
    }

    #[test]
    fn the_timeline_groups_requests_by_when_they_were_sent() {
        let samples = vec![
            (5, 1_000, "202 QUEUED".to_owned()),
            (90, 3_000, "410 SOLD_OUT".to_owned()),
            (130, 2_000, "410 SOLD_OUT".to_owned()),
        ];
        let slots = timeline(samples, 100);
        assert_eq!(slots.len(), 2);
        assert_eq!((slots[0].start_ms, slots[0].outcomes.len(), slots[0].p99_ms), (0, 2, 3.0));
        assert_eq!((slots[1].start_ms, slots[1].outcomes["410 SOLD_OUT"], slots[1].p50_ms), (100, 1, 2.0));
    }
}
