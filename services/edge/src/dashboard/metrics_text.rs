//! What the dashboard reads of this edge's own metrics: the order outcome
//! counters and the request-latency histogram, from the Prometheus text
//! the recorder renders for `/metrics` (nothing new is recorded on the
//! request path). Two readings a second apart give the rates and the
//! latency quantiles of that second.

use std::collections::BTreeMap;

const OUTCOMES: &str = "seckill_edge_orders_total";
const LATENCY_BUCKETS: &str = "seckill_edge_request_seconds_bucket";

/// One reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Orders answered so far, by outcome code.
    pub outcomes: BTreeMap<String, f64>,
    /// Requests so far at or under each bucket's bound (seconds; +Inf last).
    pub latency: Vec<(f64, f64)>,
}

/// Reads the two metrics out of Prometheus text.
pub fn read(text: &str) -> Reading {
    let mut reading = Reading::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        if let Some(labels) = series.strip_prefix(OUTCOMES) {
            if let Some(outcome) = label(labels, "outcome") {
                *reading.outcomes.entry(outcome.to_owned()).or_default() += value;
            }
        } else if let Some(labels) = series.strip_prefix(LATENCY_BUCKETS) {
            let bound = match label(labels, "le") {
                Some("+Inf") => f64::INFINITY,
                Some(le) => match le.parse() {
                    Ok(bound) => bound,
                    Err(_) => continue,
                },
                None => continue,
            };
            reading.latency.push((bound, value));
        }
    }
    reading.latency.sort_by(|a, b| a.0.total_cmp(&b.0));
    reading
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let inner = labels.strip_prefix('{')?.strip_suffix('}')?;
    inner.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

/// Per second between two readings `seconds` apart, by outcome.
pub fn rates(before: &Reading, after: &Reading, seconds: f64) -> BTreeMap<String, f64> {
    after
        .outcomes
        .iter()
        .map(|(outcome, now)| {
            let then = before.outcomes.get(outcome).copied().unwrap_or(0.0);
            (outcome.clone(), ((now - then).max(0.0)) / seconds.max(1e-3))
        })
        .collect()
}

/// The `q` quantile (0..1) of the requests answered between two readings,
/// in seconds, interpolated within its bucket as Prometheus's
/// `histogram_quantile` does; `None` when none were answered.
pub fn quantile(before: &Reading, after: &Reading, q: f64) -> Option<f64> {
    let then: BTreeMap<u64, f64> = before.latency.iter().map(|(b, c)| (b.to_bits(), *c)).collect();
    let buckets: Vec<(f64, f64)> = after
        .latency
        .iter()
        .map(|(bound, count)| (*bound, count - then.get(&bound.to_bits()).copied().unwrap_or(0.0)))
        .collect();
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let within = count - below;
            return Some(if within > 0.0 { lower + (bound - lower) * (rank - below) / within } else { bound });
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# TYPE seckill_edge_orders_total counter
seckill_edge_orders_total{outcome=\"QUEUED\"} 10
seckill_edge_orders_total{outcome=\"SOLD_OUT\"} 5
seckill_edge_request_seconds_bucket{le=\"0.001\"} 10
seckill_edge_request_seconds_bucket{le=\"0.01\"} 15
seckill_edge_request_seconds_bucket{le=\"+Inf\"} 15
";
    const AFTER: &str = "seckill_edge_orders_total{outcome=\"QUEUED\"} 30
seckill_edge_orders_total{outcome=\"SOLD_OUT\"} 85
seckill_edge_orders_total{outcome=\"TRY_AGAIN\"} 2
seckill_edge_request_seconds_bucket{le=\"0.001\"} 60
seckill_edge_request_seconds_bucket{le=\"0.01\"} 113
seckill_edge_request_seconds_bucket{le=\"+Inf\"} 115
";

    #[test]
    fn rates_are_the_counters_differences_per_second() {
        let rates = rates(&read(BEFORE), &read(AFTER), 2.0);
        assert_eq!(rates["QUEUED"], 10.0);
        assert_eq!(rates["SOLD_OUT"], 40.0);
        assert_eq!(rates["TRY_AGAIN"], 1.0, "an outcome first seen counts from zero");
    }

    #[test]
    fn quantiles_come_from_the_buckets_of_the_interval() {
        let (before, after) = (read(BEFORE), read(AFTER));
        // 100 requests in between: 50 under 1 ms, 48 under 10 ms, 2 above.
        let p50 = quantile(&before, &after, 0.5).unwrap();
        assert!((p50 - 0.001).abs() < 1e-9, "{p50}");
        let p90 = quantile(&before, &after, 0.9).unwrap();
        assert!(p90 > 0.001 && p90 < 0.01, "{p90}");
        assert_eq!(quantile(&before, &after, 0.999), Some(0.01), "beyond the last bound: its lower edge");
        assert_eq!(quantile(&after, &after, 0.5), None, "nothing answered");
    }
}
