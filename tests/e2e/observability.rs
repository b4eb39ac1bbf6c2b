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

/// The names the services record: `counter!("…"`, `gauge!("…"`,
/// `histogram!("…"` in their sources (a histogram also as its `_bucket`,
/// `_sum` and `_count` series).
fn exported() -> BTreeSet<String> {
    let mut files = Vec::new();
    for dir in ["shared/src", "services"] {
        rust_sources(&seckill_e2e::repo_root().join(dir), &mut files);
    }
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for macro_name in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in text.match_indices(macro_name) {
                let rest = text[at + macro_name.len()..].trim_start();
                let Some(rest) = rest.strip_prefix('"') else { continue };
                let name: String = rest.chars().take_while(|c| *c != '"').collect();
                if macro_name == "histogram!(" {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let exported = exported();
    assert!(
        exported.contains("seckill_edge_orders_total") && exported.contains("seckill_sale_consistent"),
        "{exported:?}"
    );
    for file in ["infra/observability/grafana-dashboard.json", "infra/observability/alerts.yaml"] {
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
