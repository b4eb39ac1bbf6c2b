//! The project's JSON Schemas (`schemas/`), checked with the reference
//! implementation of JSON Schema (Python's `jsonschema`, draft 2020-12, in
//! the test tools' virtualenv that `make test-tools` makes): one process
//! checks every instance of a test, the schemas resolving each other by
//! their `$id`.

use std::io::Write;
use std::process::{Command, Stdio};

/// The errors of each instance against `schema` (a file of `schemas/`), in
/// order; an empty list is a valid instance.
pub fn errors(schema: &str, instances: &[serde_json::Value]) -> Vec<Vec<String>> {
    let root = crate::repo_root();
    let python = root.join(".data/venv/bin/python");
    assert!(python.exists(), "{} is missing: run make test-tools (make test does)", python.display());
    let mut child = Command::new(python)
        .arg(root.join("tests/harness/validate_schema.py"))
        .arg(root.join("schemas"))
        .arg(schema)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the schema validator");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for instance in instances {
            writeln!(stdin, "{instance}").expect("writing an instance");
        }
    }
    let output = child.wait_with_output().expect("the schema validator");
    assert!(output.status.success(), "{schema}: {}", String::from_utf8_lossy(&output.stderr));
    let verdicts: Vec<Vec<String>> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a verdict"))
        .collect();
    assert_eq!(verdicts.len(), instances.len(), "one verdict per instance");
    verdicts
}

/// Asserts every instance (each named by `what`) matches `schema`.
pub fn assert_valid(schema: &str, instances: &[(serde_json::Value, String)]) {
    let values: Vec<serde_json::Value> = instances.iter().map(|(v, _)| v.clone()).collect();
    for ((value, what), errors) in instances.iter().zip(errors(schema, &values)) {
        assert!(errors.is_empty(), "{what} does not match {schema}: {errors:?}\n{value}");
    }
}

/// Whether `instance` matches `schema`.
pub fn is_valid(schema: &str, instance: &serde_json::Value) -> bool {
    errors(schema, std::slice::from_ref(instance)).remove(0).is_empty()
}
