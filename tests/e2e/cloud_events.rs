//! The events topic as a CloudEvents consumer reads it: every record, read
//! with the CloudEvents SDK's Kafka binding (Python's `cloudevents`
//! package, `tests/downstream/cloud_events.py`), is a CloudEvent whose
//! attributes agree with its JSON value.

use rdkafka::message::{Headers, Message, OwnedMessage};
use std::io::Write;

/// The `ce_source` the tests' order services are configured with.
pub(crate) const SOURCE: &str = "https://shop.example/seckill/order-events";

/// Every record in `events` passes the SDK's reading; what it printed.
pub(crate) fn read_with_the_sdk(events: &[OwnedMessage]) -> String {
    let repo = seckill_e2e::repo_root();
    let python = repo.join(".data/venv/bin/python");
    assert!(python.exists(), "{} is missing: `make test` installs it (make test-tools)", python.display());
    let mut lines = String::new();
    for message in events {
        let headers: serde_json::Map<String, serde_json::Value> = message
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_owned(), hex::encode(h.value.unwrap_or_default()).into())).collect())
            .unwrap_or_default();
        let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
        let record =
            serde_json::json!({"headers": headers, "key": text(message.key()), "value": text(message.payload())});
        lines.push_str(&format!("{record}\n"));
    }
    let mut child = std::process::Command::new(python)
        .arg(repo.join("tests/downstream/cloud_events.py"))
        .arg(SOURCE)
        .arg(repo.join("schemas/order-events.v1.json"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running the CloudEvents reader");
    child.stdin.take().expect("stdin").write_all(lines.as_bytes()).expect("writing the records");
    let output = child.wait_with_output().expect("the reader ends");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the CloudEvents SDK read:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
