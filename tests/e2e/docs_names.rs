//! The commands of the docs that cannot run here — a Make target that
//! takes minutes, a script that stops the servers, an image built, a
//! cluster to talk to — checked against what they name: the target, the
//! script and its flags, the Dockerfile's arguments, the Compose service
//! and the `seckillctl` form it runs, the Kubernetes objects, keys and
//! ports (`make deploy-check`, against the rendered overlay), an admin
//! route in the API document. Every line of every ```sh
//! block is run (tests/e2e/docs_commands.rs) or checked here; a line of a
//! kind neither knows fails.

use super::docs_commands::{CtlHelp, BINARIES};
use seckill_e2e::doc_commands::{self, flags};
use seckill_e2e::repo_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_other_command_the_docs_show_names_what_exists() {
    let mut ctl = CtlHelp::default();
    let mut checked = 0;
    for block in doc_commands::sh_blocks(&repo_root()) {
        if block.lines.iter().any(|line| line.contains("target/release/seckill-edge &")) {
            continue; // the README's walkthrough: run as a whole
        }
        for line in &block.lines {
            let place = format!("{}: `{line}`", block.place);
            let command = inner_command(line);
            let first = command.split_whitespace().next().unwrap_or_default();
            match first {
                _ if BINARIES.contains(&first) => continue, // run
                "make" => make_target(&place, command),
                "cargo" => cargo(&place, command),
                "docker" => docker(&place, command, &mut ctl),
                "kubectl" | "kind" | "podman" => assert!(
                    block.place.starts_with(KUBERNETES_PAGE),
                    "{place}: only {KUBERNETES_PAGE}'s cluster commands are checked (make deploy-check)"
                ),
                "curl" => admin_route(&place, command),
                "openssl" => {}
                _ if first.starts_with("infra/") => script(&place, command),
                _ => panic!("{place}: no test runs or checks a command of this kind"),
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "checked {checked}");
}

/// The command a line runs: `export X=$(cmd)` and `X=$(cmd)` run `cmd`.
fn inner_command(line: &str) -> &str {
    let line = line.strip_prefix("export ").unwrap_or(line);
    match line.split_once("=$(") {
        Some((name, rest)) if !name.contains(' ') => rest.trim_end_matches(')'),
        _ => line,
    }
}

fn make_target(place: &str, command: &str) {
    let makefile = read("Makefile");
    for word in command.split_whitespace().skip(1) {
        match word.split_once('=') {
            Some((variable, _)) => {
                assert!(makefile.contains(&format!("$({variable})")), "{place}: the Makefile reads no {variable}")
            }
            None => assert!(
                makefile.lines().any(|l| l.starts_with(&format!("{word}:"))),
                "{place}: the Makefile has no target {word}"
            ),
        }
    }
}

fn cargo(place: &str, command: &str) {
    let sub = command.split_whitespace().nth(1).expect("a cargo command");
    let help = std::process::Command::new("cargo").args([sub, "--help"]).output().expect("cargo");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in flags(command) {
        assert!(help.contains(&flag), "{place}: cargo {sub} has no {flag}");
    }
}

fn script(place: &str, command: &str) {
    let path = command.split_whitespace().next().expect("a script");
    let file = repo_root().join(path);
    let mode = std::os::unix::fs::PermissionsExt::mode(&file.metadata().expect(place).permissions());
    assert!(mode & 0o111 != 0, "{place}: {path} is not executable");
    let text = read(path);
    for flag in flags(command) {
        assert!(text.contains(&flag), "{place}: {path} takes no {flag}");
    }
}

/// `docker build` against the Dockerfile's arguments; `docker compose`
/// against the Compose file, a `run` against its service and, for `ctl`,
/// seckillctl's own commands.
fn docker(place: &str, command: &str, ctl: &mut CtlHelp) {
    let words: Vec<&str> = command.split_whitespace().collect();
    if words.get(1) == Some(&"build") {
        let dockerfile = read("Dockerfile");
        for (at, _) in words.iter().enumerate().filter(|(_, w)| **w == "--build-arg") {
            let name = words[at + 1].split('=').next().expect("NAME=value");
            assert!(dockerfile.contains(&format!("ARG {name}")), "{place}: the Dockerfile takes no {name}");
        }
        return;
    }
    assert_eq!(&words[1..3], ["compose", "-f"], "{place}: a Compose command names its file");
    let compose = read(words[3]);
    if words.get(4) != Some(&"run") {
        return;
    }
    let service = words[5..].iter().find(|w| !w.starts_with('-')).expect("a service");
    let entry = compose.split(&format!("\n  {service}:\n")).nth(1).unwrap_or_else(|| panic!("{place}: no {service}"));
    let binary = entry.lines().find_map(|l| l.trim().strip_prefix("entrypoint: [\"/usr/local/bin/")).expect(place);
    assert!(binary.starts_with("seckillctl\""), "{place}: {service} runs {binary}");
    let args = command.split_once(&format!(" {service} ")).expect(place).1;
    ctl.check(place, &format!("seckillctl {args}"));
}

/// The page whose Kubernetes commands `make deploy-check` checks against
/// the overlay they apply, as rendered (deploy/check/docs.go).
const KUBERNETES_PAGE: &str = "docs/deployment.md";

/// A `curl` to the console (not run: it needs a cluster): its method and
/// path are an operation of the API document, on the port of the edge's
/// address that answers it (`admin_addr` for `/admin/`, else `http_addr`,
/// as `seckill-edge --print-config` gives them).
fn admin_route(place: &str, command: &str) {
    let document: serde_json::Value = serde_json::from_str(&read("api/openapi.json")).expect("api/openapi.json");
    let words: Vec<&str> = command.split_whitespace().collect();
    let method = words.iter().position(|w| *w == "-X").map_or("get", |at| words[at + 1]).to_lowercase();
    let url = words.iter().find(|w| w.starts_with("127.0.0.1:")).expect("a local URL");
    let (port, path) = url["127.0.0.1:".len()..].split_at(url.find('/').expect("a path") - "127.0.0.1:".len());
    let setting = if path.starts_with("/admin/") { "admin_addr" } else { "http_addr" };
    assert_eq!(edge_port(setting), port, "{place}: {path} is answered on the edge's {setting}");
    let found = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .any(|(template, operations)| operations.get(&method).is_some() && matches(template, path));
    assert!(found, "{place}: the API document has no {method} {path}");
}

fn matches(template: &str, path: &str) -> bool {
    let (template, path): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    template.len() == path.len() && template.iter().zip(&path).all(|(t, p)| t.starts_with('{') || t == p)
}

/// The port of the edge's `setting` (an address) by default.
fn edge_port(setting: &str) -> String {
    let printed = std::process::Command::new(seckill_e2e::binary("seckill-edge"))
        .arg("--print-config")
        .env_remove("SECKILL_HTTP_ADDR")
        .env_remove("SECKILL_ADMIN_ADDR")
        .output()
        .expect("seckill-edge --print-config");
    let printed = String::from_utf8_lossy(&printed.stdout);
    let line = printed.lines().find(|l| l.starts_with(&format!("{setting} = "))).expect("the setting printed");
    line.trim_end_matches('"').rsplit(':').next().expect("a port").to_owned()
}
