//! The Grafana dashboard and the Prometheus alert rules under
//! `infra/observability/` name only metrics the services export, and the
//! rules are valid PromQL that fire on the series they watch (promtool's
//! own check and rule unit tests, `alerts.test.yaml`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `seckill_…` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    text.match_indices("seckill_")
        .filter(|(at, _)| !text[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(at, _)| {
            text[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect()
        })
        .collect()
}

fn rust_sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The services' and the shared library's Rust sources, each without its
/// test modules (`#[cfg(test)]`: what tests record is not exported; the
/// code after one is).
fn service_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for dir in ["shared/src", "services"] {
        rust_sources(&seckill_e2e::repo_root().join(dir), &mut files);
    }
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let code = seckill_e2e::rust_code::without_test_modules(&text);
            (file, code)
        })
        .collect()
}

/// The names the services record, with the macro that records each:
/// `counter!("…"`, `gauge!("…"`, `histogram!("…"`.
fn recorded() -> BTreeSet<(String, &'static str)> {
    let mut names = BTreeSet::new();
    for (_, text) in service_sources() {
        for macro_name in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in text.match_indices(macro_name) {
                let rest = text[at + macro_name.len()..].trim_start();
                let Some(rest) = rest.strip_prefix('"') else { continue };
                names.insert((rest.chars().take_while(|c| *c != '"').collect(), macro_name));
            }
        }
    }
    names
}

/// The names the services record (see [`recorded`]).
pub(crate) fn recorded_names() -> BTreeSet<String> {
    recorded().into_iter().map(|(name, _)| name).collect()
}

/// The series names the services export: what they record, a histogram
/// also as its `_bucket`, `_sum` and `_count` series.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, macro_name) in recorded() {
        if macro_name == "histogram!(" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name);
    }
    names
}

/// The text of every source but the metrics catalogues (each service's
/// `metrics.rs`, `shared/src/ops/catalogue.rs`): where a metric is
/// recorded.
pub(crate) fn sources_outside_the_catalogues() -> String {
    service_sources()
        .into_iter()
        .filter(|(file, _)| !file.ends_with("metrics.rs") && !file.ends_with("ops/catalogue.rs"))
        .map(|(_, text)| text)
        .collect()
}

const OBSERVABILITY_FILES: [&str; 2] =
    ["infra/observability/grafana-dashboard.json", "infra/observability/alerts.yaml"];

/// Every metric the Grafana dashboard and the alert rules query.
pub(crate) fn queried_metrics() -> BTreeSet<String> {
    OBSERVABILITY_FILES
        .iter()
        .flat_map(|file| {
            names_in(&std::fs::read_to_string(seckill_e2e::repo_root().join(file)).expect("an observability file"))
        })
        .collect()
}

#[test]
fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let exported = exported();
    assert!(
        exported.contains("seckill_edge_orders_total") && exported.contains("seckill_sale_consistent"),
        "{exported:?}"
    );
    for file in OBSERVABILITY_FILES {
        let text = std::fs::read_to_string(seckill_e2e::repo_root().join(file)).expect("an observability file");
        let used = names_in(&text);
        assert!(used.len() >= 5, "{file} names the metrics it reads: {used:?}");
        let unknown: Vec<&String> = used.iter().filter(|name| !exported.contains(*name)).collect();
        assert!(unknown.is_empty(), "{file} names metrics no service exports: {unknown:?}");
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(seckill_e2e::repo_root().join("infra/observability/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert!(dashboard["panels"].as_array().is_some_and(|p| !p.is_empty()), "a Grafana dashboard with panels");
}

#[test]
fn a_misspelt_metric_would_be_found() {
    let exported = exported();
    let used = names_in("sum(rate(seckill_edge_order_total[1m])) and seckill_edge_ready");
    let unknown: Vec<&String> = used.iter().filter(|name| !exported.contains(*name)).collect();
    assert_eq!(unknown, [&"seckill_edge_order_total".to_owned()]);
}

#[test]
fn the_alert_rules_check_and_fire_as_their_unit_tests_say() {
    let dir = seckill_e2e::repo_root().join("infra/observability");
    for args in [["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]] {
        let output = std::process::Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (Debian's prometheus package) is installed by make test (make test-tools)");
        assert!(
            output.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
