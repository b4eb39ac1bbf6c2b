//! Every command the docs show, read from the Markdown (so a doc edit is
//! tested) and run against the real servers: the README's walkthrough as
//! one script, every line of a ```sh block that calls a project binary, and
//! the flags of every `seckillctl` form the docs quote, against the
//! command's own `--help`. What cannot run here (a cluster, an image) is
//! checked against what it names: tests/e2e/docs_names.rs.

use seckill_e2e::doc_commands::{self, flags, required_part};
use seckill_e2e::{binary, repo_root, TestEnv};
use std::collections::HashMap;
use std::process::{Command, Output};

/// The project's binaries, as a line of the docs calls them.
pub const BINARIES: [&str; 4] = ["seckill-edge", "seckill-order", "seckill-compensator", "seckillctl"];

/// Forms whose example refers to something the test's fresh servers do
/// not hold, with the refusal that shows the command itself works.
const REFUSED_HERE: [(&str, &str); 1] = [("seckillctl dlq show 0:42", "no record at 0:42")];

/// Forms run here with one of their own optional parts, so that they do
/// not load the machine the rest of the suite shares: the benchmark's
/// 20,000 requests at 256 at once (its `[--requests N]`) made other tests'
/// edges answer 503 under `make test-stress`.
const BOUNDED_HERE: [(&str, &str); 1] = [("seckillctl bench ", " --requests 100")];

fn bin_dir() -> String {
    binary("seckillctl").parent().expect("the binaries' directory").display().to_string()
}

/// `script` run by bash in the repository's root with `env` and the
/// project's binaries first on the PATH, `set -e`, every job it started in
/// the background stopped when it ends, and the whole of it bounded.
fn bash(script: &str, env: &[(String, String)]) -> Output {
    let wrapped = format!(
        "set -eo pipefail\ntrap 'code=$?; kill $(jobs -p) 2>/dev/null || true; wait; exit $code' EXIT\n{script}\n"
    );
    let path = format!("{}:{}", bin_dir(), std::env::var("PATH").unwrap_or_default());
    Command::new("timeout")
        .args(["-k", "10", "180", "bash", "-c", &wrapped])
        .current_dir(repo_root())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("PATH", path)
        .output()
        .expect("running bash")
}

fn shown(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The README's "Running a service by hand", as a newcomer pastes it: the
/// servers brought up, the three services started in the background, a
/// sale warmed, one order placed and the books reconciled. Its build line
/// is the one thing not run (the suite runs on the build `make test` just
/// made; its flags are checked against `cargo build --help`), and the
/// edge's documented port is moved to a free one, as every test does.
#[tokio::test]
async fn the_readme_walkthrough_runs_as_written() {
    let test = TestEnv::new().await;
    let block = doc_commands::sh_blocks(&repo_root())
        .into_iter()
        .find(|block| block.place.starts_with("README.md") && block.lines.iter().any(|l| l.contains("seckill-edge &")))
        .expect("README's walkthrough starts the edge in the background");
    let addr = format!("127.0.0.1:{}", seckill_e2e::chaos::free_port());
    let mut script = Vec::new();
    for line in &block.lines {
        if let Some(build) = line.strip_prefix("cargo build ") {
            let help = Command::new("cargo").args(["build", "--help"]).output().expect("cargo build --help");
            let help = String::from_utf8_lossy(&help.stdout);
            for flag in flags(build) {
                assert!(help.contains(&flag), "{}: `cargo build {build}`: cargo has no {flag}", block.place);
            }
            continue;
        }
        script.push(line.replace("target/release/", &format!("{}/", bin_dir())).replace("127.0.0.1:8080", &addr));
    }
    let mut env = test.child_env();
    env.push(("SECKILL_HTTP_ADDR".into(), addr));
    let output = bash(&script.join("\n"), &env);
    let text = shown(&output);
    assert!(output.status.success(), "{}, run as a script:\n{text}", block.place);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(r#""code":"QUEUED""#), "the walkthrough's order is accepted:\n{text}");
    let figure = |name: &str| {
        stdout.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().last()).map(str::to_owned)
    };
    assert_eq!(figure("orders created (postgresql)").as_deref(), Some("1"), "its order is written:\n{text}");
    assert_eq!(figure("verdict").as_deref(), Some("consistent"), "{text}");
}

/// Every line of a ```sh block that calls a project binary by name runs
/// against this test's servers, in the order the docs give them (the
/// warm-up before the reports), its optional parts left out: each exits 0,
/// or is refused as [`REFUSED_HERE`] says. `127.0.0.1:8080` is an edge of
/// the test's (served by this test's runtime while the commands run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_a_project_binary_the_docs_show_runs() {
    let test = TestEnv::new().await;
    let edge = test.spawn_edge(test.edge_settings()).await;
    seckill_e2e::wait_ready(&seckill_e2e::http::Client::new(edge.url())).await;
    let env = test.child_env();
    let mut ran = 0;
    for block in doc_commands::sh_blocks(&repo_root()) {
        for line in block.lines.iter().filter(|line| BINARIES.iter().any(|b| line.starts_with(&format!("{b} ")))) {
            let mut command = required_part(line).replace("127.0.0.1:8080", &edge.addr.to_string());
            if let Some((_, bound)) = BOUNDED_HERE.iter().find(|(form, _)| command.starts_with(form)) {
                assert!(
                    line.contains(&format!("[{}", bound.trim().split(' ').next().unwrap())),
                    "{line} offers {bound}"
                );
                command.push_str(bound);
            }
            let output = bash(&command, &env);
            let refusal = REFUSED_HERE.iter().find(|(form, _)| *form == command).map(|(_, said)| *said);

            match refusal {
                None => assert!(output.status.success(), "{}: `{command}`:\n{}", block.place, shown(&output)),
                Some(said) => assert!(
                    output.status.code() == Some(1) && String::from_utf8_lossy(&output.stderr).contains(said),
                    "{}: `{command}` is refused here as `{said}`:\n{}",
                    block.place,
                    shown(&output)
                ),
            }
            ran += 1;
        }
    }
    assert!(ran >= 15, "the operators' guide shows the tools at work; ran {ran}");
    edge.stop().await;
}

/// The command path and flags of every `seckillctl` form the docs show
/// (in ```sh blocks, quoted inline, after a `$ ` prompt), checked against
/// `--help` of that very command: a renamed or removed flag fails here.
#[test]
fn every_seckillctl_form_the_docs_show_exists_with_its_flags() {
    let root = repo_root();
    let mut forms: Vec<(String, String)> = doc_commands::inline_forms(&root);
    for block in doc_commands::sh_blocks(&root) {
        let ctl = |line: &&String| line.starts_with("seckillctl ") || line.contains("/seckillctl ");
        forms.extend(block.lines.iter().filter(ctl).map(|line| (block.place.clone(), line.clone())));
    }
    for document in doc_commands::documents(&root) {
        let text = std::fs::read_to_string(root.join(&document)).unwrap();
        forms.extend(text.lines().filter_map(|l| l.strip_prefix("$ seckillctl ")).map(|rest| {
            let rest = rest.split("  #").next().unwrap_or(rest);
            (document.clone(), format!("seckillctl {rest}"))
        }));
    }
    assert!(forms.len() >= 40, "the docs show the operator's tool; found {}", forms.len());
    let mut ctl = CtlHelp::default();
    for (place, form) in &forms {
        ctl.check(place, form);
    }
}

/// `seckillctl`'s own help, asked once a command.
#[derive(Default)]
pub struct CtlHelp {
    helps: HashMap<Vec<String>, String>,
}

impl CtlHelp {
    /// Panics unless `form` (`… seckillctl WORDS [FLAGS]`) names a command
    /// of seckillctl and only flags that command has.
    pub fn check(&mut self, place: &str, form: &str) {
        let words: Vec<&str> = form.split_whitespace().skip_while(|w| !w.ends_with("seckillctl")).skip(1).collect();
        let mut path: Vec<&str> = Vec::new();
        for word in &words {
            if !self.subcommands(&path).iter().any(|command| command == word) {
                break;
            }
            path.push(word);
        }
        assert!(!path.is_empty(), "{place}: `{form}` names no command of seckillctl");
        let help = self.help_of(&path);
        for flag in flags(form) {
            let listed = [" ", "\n", "="].iter().any(|after| help.contains(&format!("{flag}{after}")));
            assert!(listed, "{place}: `{form}`: `seckillctl {}` has no {flag}", path.join(" "));
        }
    }

    fn help_of(&mut self, path: &[&str]) -> String {
        let key: Vec<String> = path.iter().map(|w| w.to_string()).collect();
        self.helps
            .entry(key)
            .or_insert_with(|| {
                let output = Command::new(binary("seckillctl")).args(path).arg("--help").output().expect("seckillctl");
                assert!(output.status.success(), "seckillctl {} --help", path.join(" "));
                String::from_utf8_lossy(&output.stdout).into_owned()
            })
            .clone()
    }

    /// The commands `seckillctl <path> --help` lists.
    fn subcommands(&mut self, path: &[&str]) -> Vec<String> {
        self.help_of(path)
            .lines()
            .skip_while(|line| !line.starts_with("Commands:"))
            .skip(1)
            .take_while(|line| line.starts_with("  "))
            .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
            .collect()
    }
}
