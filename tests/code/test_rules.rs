//! Rules the tests themselves keep, checked by reading them: a fault (a
//! stop, a kill, a proxy paused or resumed, a connection dropped) is placed
//! by the state that makes it meaningful — a metric, a row, a lag, a log
//! line — waited for and asserted, never by a bare sleep before it. A
//! machine busier than the author's makes a sleep too short, and the fault
//! then lands where it proves nothing.
//!
//! A sleep that *is* what is tested (an outage of a given length, a
//! deadline passing) says so in a comment on it or just above it that
//! starts with `Timed on purpose:`.

use crate::code_map::{code_only, read};

/// The calls that inject a fault, as the harness names them.
const FAULT_CALLS: &[&str] = &[
    ".pause()",
    ".resume()",
    ".hold_answers()",
    ".cut_open_connections()",
    ".sever_after_next(",
    "signal(",
    "kill9(",
    ".terminate(",
    ".kill()",
    ".freeze()",
    ".thaw()",
    "pg_ha::kill(",
    "fail_over(",
    "cut_off_replica(",
    "kill_and_promote(",
    "faults::inject(",
    "infra_async(",
    "set_database_reachable(",
    "drop(connection)",
    "drop(stream)",
];

/// How many lines of code after a sleep are read for a fault.
const LINES_AFTER: usize = 3;

/// The marker that makes a sleep the thing under test.
const MARKER: &str = "Timed on purpose:";

/// Every `.rs` file under `tests/` but this folder's own (the rule's
/// words are in it), with its text.
fn test_sources() -> Vec<(String, String)> {
    let root = seckill_e2e::repo_root();
    let mut found = Vec::new();
    let mut pending = vec!["tests".to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap().filter_map(Result::ok) {
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                if path != "tests/code" {
                    pending.push(path);
                }
            } else if path.ends_with(".rs") {
                found.push((path.clone(), read(&path)));
            }
        }
    }
    found.sort();
    found
}

/// Each place in `text` (a path's, for the message) where a sleep is
/// followed by a fault call within [`LINES_AFTER`] lines of code, unless the
/// sleep is marked as the thing under test.
fn sleeps_placing_faults(path: &str, text: &str) -> Vec<String> {
    let code = code_only(text);
    let code_lines: Vec<&str> = code.lines().collect();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in code_lines.iter().enumerate() {
        if !line.contains("sleep(") {
            continue;
        }
        let marked = lines[at.saturating_sub(4)..=at].iter().any(|l| l.contains(MARKER));
        let after = code_lines[at + 1..].iter().filter(|l| !l.trim().is_empty()).take(LINES_AFTER);
        let fault = after.flat_map(|l| FAULT_CALLS.iter().filter(move |call| l.contains(**call))).next();
        if let (Some(fault), false) = (fault, marked) {
            found.push(format!("{path}:{}: a sleep places `{fault}`", at + 1));
        }
    }
    found
}

#[test]
fn no_fault_is_placed_by_a_bare_sleep() {
    let found: Vec<String> = test_sources().iter().flat_map(|(path, text)| sleeps_placing_faults(path, text)).collect();
    assert!(
        found.is_empty(),
        "wait for the state that makes the fault meaningful instead (or mark the sleep `{MARKER}` when it is what is tested):\n{}",
        found.join("\n")
    );
}

/// The rule's own cases: a violation it must catch, and what it lets pass.
#[test]
fn the_sleep_rule_catches_a_planted_violation() {
    let cases = [
        ("tokio::time::sleep(Duration::from_secs(2)).await;\nfirst.signal(\"STOP\");\n", 1, "a sleep then a stop"),
        ("sleep(d).await;\n\n// a comment\nlet x = 1;\nproxy.resume();\n", 1, "two lines of code later"),
        ("sleep(d).await;\nlet a = 1;\nlet b = 2;\nlet c = 3;\nproxy.resume();\n", 0, "too far to be placed by it"),
        ("// Timed on purpose: the outage lasts 2 s.\nsleep(d).await;\nproxy.resume();\n", 0, "marked"),
        ("sleep(d).await;\nlet s = \".signal(\";\n", 0, "a fault's name in a string"),
        ("eventually(\"x\", d, check).await;\nfirst.signal(\"STOP\");\n", 0, "a wait for a state"),
    ];
    for (text, expected, case) in cases {
        assert_eq!(sleeps_placing_faults("planted.rs", text).len(), expected, "{case}");
    }
}
