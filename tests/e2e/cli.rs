//! The service binaries' command line: `--help`, `--version`, usage errors,
//! `--print-config` with secrets masked, and `seckillctl config` and
//! `dlq replay --limit`.

use seckill_e2e::{binary, TestEnv};
use seckill_shared::kafka::dlq_header;
use std::time::Duration;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = std::process::Command::new(binary(name))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .envs(env.iter().copied())
        .output()
        .expect("running a project binary");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const SERVICES: [(&str, &str); 3] =
    [("seckill-edge", "edge"), ("seckill-order", "order service"), ("seckill-compensator", "compensator")];

#[test]
fn every_service_answers_help_version_and_refuses_unknown_arguments() {
    for (name, what) in SERVICES {
        let help = run(name, &["--help"], &[]);
        assert_eq!(help.code, 0, "{name} --help: {}", help.stderr);
        assert!(help.stdout.to_lowercase().contains(what), "{name} --help says what it is: {}", help.stdout);
        for wanted in [
            "SECKILL_CONFIG",
            "SECKILL_REDIS_URL",
            "SECKILL_DATABASE_URL",
            "SECKILL_KAFKA_BROKERS",
            "SECKILL__SECTION__KEY",
            "--print-config",
        ] {
            assert!(help.stdout.contains(wanted), "{name} --help names {wanted}");
        }
        let examples: Vec<&str> = help
            .stdout
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter(|word| word.starts_with("SECKILL_") && word.contains('='))
            .collect();
        assert!(!examples.is_empty(), "{name} --help shows a setting given in the environment");
        for example in examples {
            let (key, value) = example.split_once('=').unwrap();
            let checked = run(name, &["--check-config"], &[(key, value)]);
            assert_eq!(checked.code, 0, "{name} --help's example {example} would start: {}", checked.stderr);
        }
        let version = run(name, &["--version"], &[]);
        assert_eq!(version.code, 0, "{name} --version");
        assert!(
            version.stdout.contains(env!("CARGO_PKG_VERSION")) && version.stdout.contains("commit "),
            "{}",
            version.stdout
        );
        let bogus = run(name, &["--bogus"], &[]);
        assert_eq!(bogus.code, 2, "{name} --bogus is a usage error, never a start: {}", bogus.stderr);
        assert!(bogus.stderr.contains("--bogus"), "{}", bogus.stderr);
    }
}

/// README's table of binaries names every command `seckillctl --help`
/// lists (the first word of each), so none is found only by accident.
#[test]
fn the_readme_names_every_command_of_seckillctl() {
    let readme = std::fs::read_to_string(seckill_e2e::repo_root().join("README.md")).unwrap();
    let row = readme.lines().find(|line| line.starts_with("| `seckillctl` |")).expect("README's row of seckillctl");
    let help = run("seckillctl", &["--help"], &[]);
    let commands: Vec<&str> = help
        .stdout
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .collect();
    assert!(commands.len() >= 10, "seckillctl --help lists its commands: {}", help.stdout);
    for command in commands {
        assert!(row.contains(&format!("`{command}")), "README's seckillctl row names `{command}`: {row}");
    }
}

#[test]
fn print_config_shows_the_effective_settings_with_secrets_masked() {
    let secrets = [
        ("SECKILL_ADMIN_TOKEN", "admin-s3cret"),
        ("SECKILL_USER_JWT_SECRET", "jwt-s3cret"),
        ("SECKILL_DATABASE_URL", "postgres://seckill:db-s3cret@db.internal:5432/seckill"),
        ("SECKILL_KEY_PREFIX", "prod:"),
        ("SECKILL__KAFKA__LINGER_MS", "7"),
    ];
    for (name, _) in SERVICES {
        let printed = run(name, &["--print-config"], &secrets);
        assert_eq!(printed.code, 0, "{name}: {}", printed.stderr);
        assert!(!printed.stdout.contains("s3cret"), "{name} printed a secret:\n{}", printed.stdout);
        assert!(printed.stdout.contains("postgres://seckill:********@db.internal:5432/seckill"), "{}", printed.stdout);
        assert!(
            printed.stdout.contains(r#"key_prefix = "prod:""#) && printed.stdout.contains("linger_ms = 7"),
            "{}",
            printed.stdout
        );
        let parsed: toml::Table = printed.stdout.parse().expect("the output is TOML");
        assert!(parsed.contains_key("redis") && parsed.contains_key("kafka"));
    }
    let edge = run("seckill-edge", &["--print-config"], &secrets);
    assert!(edge.stdout.contains(r#"admin_token = "********""#), "{}", edge.stdout);

    let invalid = run("seckill-order", &["--print-config"], &[("SECKILL__BATCH_SIZ", "3")]);
    assert_ne!(invalid.code, 0);
    assert!(invalid.stderr.contains("batch_siz"), "the bad key is named: {}", invalid.stderr);
    let wrong_type = run("seckill-compensator", &["--print-config"], &[("SECKILL__SWEEPER__INTERVAL_MS", "soon")]);
    assert_ne!(wrong_type.code, 0);
    assert!(
        wrong_type.stderr.contains("interval_ms") || wrong_type.stderr.contains("invalid type"),
        "{}",
        wrong_type.stderr
    );

    let via_ctl = run("seckillctl", &["config", "--service", "edge"], &secrets);
    assert_eq!(via_ctl.code, 0, "{}", via_ctl.stderr);
    assert!(via_ctl.stdout.contains("http_addr") && !via_ctl.stdout.contains("s3cret"), "{}", via_ctl.stdout);
    assert_eq!(run("seckillctl", &["config", "--service", "nope"], &[]).code, 2);
}

/// `--check-config`: exit 0 for settings that would start, 1 naming the
/// problem otherwise; the README's TOML example is among what starts, and a
/// secret is never shown, whatever type it was read as.
#[test]
fn check_config_says_whether_the_settings_would_start() {
    for (name, _) in SERVICES {
        let fine = run(name, &["--check-config"], &[]);
        assert_eq!((fine.code, fine.stdout.contains("would start")), (0, true), "{name}: {}", fine.stderr);
        let bad_url = run(name, &["--check-config"], &[("SECKILL_DATABASE_URL", "postgres://u:db-s3cret@h:99999/x")]);
        assert_eq!(bad_url.code, 1, "{name}: {}", bad_url.stdout);
        assert!(bad_url.stderr.contains("SECKILL_DATABASE_URL"), "{}", bad_url.stderr);
        assert!(!bad_url.stderr.contains("s3cret"), "{name} showed a password: {}", bad_url.stderr);
        let no_broker = run(name, &["--check-config"], &[("SECKILL_KAFKA_BROKERS", "kafka")]);
        assert_eq!(no_broker.code, 1, "{name}: {}", no_broker.stdout);
        // The span export, as docs/configuration.md gives it, and refused
        // where the exporter could not send (TLS, no scheme) or sample.
        let tracing =
            [("SECKILL_OTLP_ENDPOINT", "http://127.0.0.1:4318"), ("SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO", "0.01")];
        assert_eq!(run(name, &["--check-config"], &tracing).code, 0, "{name}: the export as documented");
        for (setting, value, named) in [
            ("SECKILL_OTLP_ENDPOINT", "https://collector:4318", "SECKILL_OTLP_ENDPOINT"),
            ("SECKILL_OTLP_ENDPOINT", "collector:4318", "SECKILL_OTLP_ENDPOINT"),
            ("SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO", "2", "otlp_sample_ratio"),
            // Every wait on PostgreSQL has a bound, the bounds in order.
            ("SECKILL__DATABASE__STATEMENT_TIMEOUT_MS", "0", "database.statement_timeout_ms"),
            ("SECKILL__DATABASE__LOCK_TIMEOUT_MS", "20000", "database.lock_timeout_ms"),
            ("SECKILL__DATABASE__CALL_DEADLINE_MS", "5000", "database.call_deadline_ms"),
            ("SECKILL__DATABASE__IDLE_IN_TRANSACTION_TIMEOUT_MS", "0", "idle_in_transaction_timeout_ms"),
        ] {
            let refused = run(name, &["--check-config"], &[(setting, value)]);
            assert_eq!(refused.code, 1, "{name} {setting}={value}: {}", refused.stdout);
            assert!(refused.stderr.contains(named), "{name} {setting}={value}: {}", refused.stderr);
        }
    }
    for (setting, value, named) in [
        ("SECKILL_USER_JWT_SECRET", "", "SECKILL_USER_JWT_SECRET"),
        ("SECKILL__DEDUCT_BATCH_MAX", "4000", "deduct_batch_max"),
        ("SECKILL__CONNECTIONS__MAX_IN_FLIGHT", "0", "max_in_flight"),
        ("SECKILL__CONSOLE__MAX_IN_FLIGHT", "0", "console.max_in_flight"),
        ("SECKILL__CONSOLE__POOL_CONNECTIONS", "0", "console.pool_connections"),
        ("SECKILL_REDIS_URL", "redis+sentinel://127.0.0.1:26379", "no master name"),
        ("SECKILL_REDIS_URL", "redis+cluster://127.0.0.1:7000/1", "a cluster has no database"),
        ("SECKILL__AUTH__TRUSTED_PROXIES", "127.0.0.1/32, 10.0.0.0/40", "is not an IP address or a CIDR"),
        ("SECKILL__CONNECTIONS__WRITE_TIMEOUT_MS", "0", "write_timeout_ms"),
        ("SECKILL__WARMUP_RESUME__EVERY_MS", "0", "warmup_resume.every_ms"),
    ] {
        let refused = run("seckill-edge", &["--check-config"], &[(setting, value)]);
        assert_eq!(refused.code, 1, "{setting}={value}: {}", refused.stdout);
        assert!(refused.stderr.contains(named), "{setting}={value}: {}", refused.stderr);
    }
    // The proxies as the README writes them.
    let proxies =
        run("seckill-edge", &["--check-config"], &[("SECKILL__AUTH__TRUSTED_PROXIES", "127.0.0.1/32,10.0.0.0/8")]);
    assert_eq!(proxies.code, 0, "{}", proxies.stderr);
    // The Redis Cluster topology's URL, as the README gives it.
    let cluster = run("seckill-edge", &["--check-config"], &[("SECKILL_REDIS_URL", seckill_e2e::REDIS_CLUSTER_URL)]);
    assert_eq!(cluster.code, 0, "{}", cluster.stderr);
    // A token that reads as a number is a token, never shown.
    let numeric = run("seckill-edge", &["--check-config"], &[("SECKILL__ADMIN_TOKEN", "7352189464021234")]);
    assert_eq!(numeric.code, 0, "{}", numeric.stderr);
    let numeric = run("seckill-edge", &["--print-config"], &[("SECKILL__USER_JWT_SECRET", "735218946402")]);
    assert!(!numeric.stdout.contains("735218946402") && !numeric.stderr.contains("735218946402"));
    // Secrets too short to resist guessing are refused at start, the length
    // named, the secret not shown.
    for (setting, value) in
        [("SECKILL_ADMIN_TOKEN", "short-t0ken"), ("SECKILL_USER_JWT_SECRET", "a-secret-of-25-characters")]
    {
        let short = run("seckill-edge", &["--check-config"], &[(setting, value)]);
        assert_eq!(short.code, 1, "{setting}: {}", short.stdout);
        assert!(short.stderr.contains("at least") && !short.stderr.contains(value), "{}", short.stderr);
    }

    // A consumer's stall bound below its session timeout would leave the
    // group while it works.
    for name in ["seckill-order", "seckill-compensator"] {
        let refused = run(name, &["--check-config"], &[("SECKILL__CONSUMER__STALL_SECS", "1")]);
        assert_eq!(refused.code, 1, "{name}: {}", refused.stdout);
        assert!(refused.stderr.contains("consumer.stall_secs"), "{name}: {}", refused.stderr);
    }
}

/// A setting spelt with one underscore would be ignored: it is refused,
/// naming the spelling meant; a variable of Kubernetes' service links is not
/// the service's and is left alone.
#[test]
fn a_setting_misspelt_in_the_environment_is_refused_naming_the_one_meant() {
    let misspelt = run("seckill-edge", &["--check-config"], &[("SECKILL_USER_JWT_LEEWAY_SECS", "5")]);
    assert_eq!(misspelt.code, 1, "{}", misspelt.stdout);
    assert!(misspelt.stderr.contains("SECKILL__USER_JWT_LEEWAY_SECS"), "{}", misspelt.stderr);
    let link = run("seckill-edge", &["--check-config"], &[("SECKILL_EDGE_SERVICE_HOST", "10.0.0.1")]);
    assert_eq!(link.code, 0, "{}", link.stderr);
}

/// The configuration page's examples, as written, would start: unknown
/// keys are refused, so each key is one the binary reads.
#[test]
fn the_configuration_pages_examples_would_start() {
    for (binary, example, shown) in [
        ("seckill-edge", "edge.toml", "max_in_flight = 4096"),
        ("seckill-order", "order.toml", "held_back_after_ms = 10000"),
        ("seckill-compensator", "compensator.toml", "lock_lease_ms = 10000"),
    ] {
        let printed = check_documented_toml(binary, example);
        assert!(printed.contains(shown), "{binary}: {printed}");
    }
}

/// Every setting a service prints (`--print-config`) is on the
/// configuration page: in its table of variables, or in one of its TOML
/// examples (a commented `# key = …` line counts).
#[test]
fn the_configuration_page_names_every_setting() {
    let page = std::fs::read_to_string(seckill_e2e::repo_root().join("docs/configuration.md")).unwrap();
    let rows: Vec<&str> = page.lines().filter(|line| line.starts_with("| `")).collect();
    let mut documented = std::collections::BTreeSet::new();
    for block in page.split("```toml\n").skip(1) {
        let block = &block[..block.find("```").expect("a TOML example ends")];
        let uncommented: Vec<&str> = block
            .lines()
            .map(|line| line.strip_prefix("# ").filter(|rest| rest.contains(" = ")).unwrap_or(line))
            .collect();
        documented.extend(setting_names(&uncommented.join("\n")));
    }
    assert!(documented.len() > 40, "the page's examples were read: {documented:?}");
    for (name, _) in SERVICES {
        let printed = run(name, &["--print-config"], &[]);
        let missing: Vec<String> = setting_names(&printed.stdout)
            .into_iter()
            .filter(|key| !documented.contains(key) && !rows.iter().any(|row| row.contains(&format!("`{key}`"))))
            .collect();
        assert!(missing.is_empty(), "{name}: settings docs/configuration.md does not name: {missing:?}");
    }
}

/// The dotted names of the settings in a TOML text.
fn setting_names(text: &str) -> Vec<String> {
    fn walk(table: &toml::Table, prefix: &str, names: &mut Vec<String>) {
        for (key, value) in table {
            match value {
                toml::Value::Table(inner) => walk(inner, &format!("{prefix}{key}."), names),
                _ => names.push(format!("{prefix}{key}")),
            }
        }
    }
    let mut names = Vec::new();
    walk(&text.parse::<toml::Table>().expect("TOML"), "", &mut names);
    names
}

/// Runs `--check-config` on the TOML example of docs/configuration.md named
/// `# {example}`, and answers what `--print-config` printed with it.
fn check_documented_toml(binary: &str, example: &str) -> String {
    let page = std::fs::read_to_string(seckill_e2e::repo_root().join("docs/configuration.md")).unwrap();
    let start = page.find(&format!("# {example}\n")).unwrap_or_else(|| panic!("docs/configuration.md's {example}"));
    let text = &page[start..start + page[start..].find("```").expect("the example ends")];
    let file = std::env::temp_dir().join(format!("{}-{example}", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let checked = run(binary, &["--check-config"], &[("SECKILL_CONFIG", file.to_str().unwrap())]);
    let printed = run(binary, &["--print-config"], &[("SECKILL_CONFIG", file.to_str().unwrap())]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(checked.code, 0, "docs/configuration.md's {example}: {}", checked.stderr);
    printed.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_takes_a_limit_and_the_next_run_resumes_after_it() {
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let records = env.order_records(sale, 1..11);
    let dlq = env.topics().dlq;
    for record in &records {
        let payload = serde_json::to_vec(record).unwrap();
        env.produce(&dlq, "k", &payload, &[(dlq_header::REASON, "DB_REJECTED"), (dlq_header::ATTEMPTS, "1")]).await;
    }
    for (run, expected) in [(1, 4), (2, 4), (3, 2), (4, 0)] {
        let replay = env.ctl(&["dlq", "replay", "--limit", "4"]).await;
        assert_eq!(replay.code, 0, "run {run}: {replay:?}");
        let lines = replay.stdout.lines().filter(|l| l.starts_with("replayed ")).count();
        assert_eq!(lines, expected, "run {run}:\n{}", replay.stdout);
    }
    let replayed = env.read_topic(&env.topics().orders, 10, Duration::from_secs(30)).await;
    let mut sources: Vec<String> = replayed
        .iter()
        .filter_map(|m| {
            let headers = rdkafka::Message::headers(m)?;
            seckill_shared::kafka::header_str(headers, dlq_header::REPLAYED_FROM).map(str::to_owned)
        })
        .collect();
    sources.sort();
    sources.dedup();
    assert_eq!(sources.len(), 10, "each dead letter replayed once across the limited runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_exits_zero_only_on_a_2xx_answer() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    // The command runs in a blocking thread: the edge answers on this runtime.
    let probe = |url: String| {
        tokio::task::spawn_blocking(move || run("seckillctl", &["probe", &url, "--timeout-ms", "2000"], &[]))
    };
    let healthy = probe(format!("http://{}/healthz", edge.addr)).await.unwrap();
    assert_eq!(healthy.code, 0, "a live edge's /healthz: {}", healthy.stderr);
    let missing = probe(format!("http://{}/no-such-path", edge.addr)).await.unwrap();
    assert_eq!(missing.code, 1, "a 404 is not healthy");
    assert!(missing.stderr.contains("404"), "{}", missing.stderr);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let refused = probe(format!("http://{closed}/healthz")).await.unwrap();
    assert_eq!(refused.code, 1, "nothing listening: {}", refused.stderr);
    let bad = probe("not a url".to_owned()).await.unwrap();
    assert_eq!(bad.code, 2, "an unparsable URL is a usage error");
}
