//! The services a test runs: in this process (`Running`), or as child
//! processes of the project's binaries (`Child`, `seckillctl`).

use crate::{binary, TestEnv, ADMIN_TOKEN};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

impl TestEnv {
    /// One order-service worker over this test's servers, driven by the test
    /// turn by turn ([`seckill_order::consumer::Worker::try_execute_batch`]).
    pub async fn order_worker(&self) -> seckill_order::consumer::Worker {
        self.order_worker_with(std::sync::Arc::new(self.order_settings()))
    }

    /// [`TestEnv::order_worker`] with these settings.
    pub fn order_worker_with(
        &self,
        settings: std::sync::Arc<seckill_order::Settings>,
    ) -> seckill_order::consumer::Worker {
        let connections = self.connections();
        let dead_letters =
            seckill_order::dead_letters::DeadLetters::new(&settings.servers.kafka, connections.topics.dlq.clone())
                .expect("dead-letter producer");
        seckill_order::consumer::Worker::new(0, settings, connections, dead_letters).expect("a worker")
    }

    /// Starts an edge in this process.
    pub async fn spawn_edge(&self, settings: seckill_edge::Settings) -> Running {
        let app = seckill_edge::Application::build(settings).await.expect("building the edge");
        Self::run_edge(app)
    }

    /// Runs an edge the test built itself (to keep a handle on its parts).
    pub fn run_edge(app: seckill_edge::Application) -> Running {
        let addr = app.local_addr();
        let console = app.console_addr();
        Running { console, ..Running::spawn(addr, |shutdown| app.run(shutdown)) }
    }

    /// Everything the consuming services work with, over this test's servers.
    pub fn connections(&self) -> seckill_shared::ops::host::Connections {
        seckill_shared::ops::host::Connections {
            stock: self.stock.clone(),
            db: self.db.clone(),
            topics: self.topics(),
            stalls: Default::default(),
        }
    }

    /// Starts an order service in this process.
    pub async fn spawn_order(&self, settings: seckill_order::Settings) -> Running {
        let service = seckill_order::Service::build(settings).await.expect("building the order service");
        let addr = service.health_addr();
        Running::spawn(addr, |shutdown| service.run(shutdown))
    }

    /// Starts a compensator in this process.
    pub async fn spawn_compensator(&self, settings: seckill_compensator::Settings) -> Running {
        let service = seckill_compensator::Service::build(settings).await.expect("building the compensator");
        let addr = service.health_addr();
        Running::spawn(addr, |shutdown| service.run(shutdown))
    }

    /// The environment a child process of the project needs to join this test.
    pub fn child_env(&self) -> Vec<(String, String)> {
        vec![
            ("SECKILL_REDIS_URL".into(), self.redis.url.clone()),
            ("SECKILL_KEY_PREFIX".into(), self.redis.key_prefix.clone()),
            ("SECKILL_KAFKA_BROKERS".into(), self.kafka.brokers.clone()),
            ("SECKILL_TOPIC_PREFIX".into(), self.kafka.topic_prefix.clone()),
            ("SECKILL__KAFKA__ORDER_PARTITIONS".into(), self.kafka.order_partitions.to_string()),
            ("SECKILL__KAFKA__SESSION_TIMEOUT_MS".into(), self.kafka.session_timeout_ms.to_string()),
            ("SECKILL_DATABASE_URL".into(), self.database.url.clone()),
            ("SECKILL_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()),
            // An edge's console on a free port: tests run side by side.
            ("SECKILL_ADMIN_ADDR".into(), "127.0.0.1:0".into()),
            ("RUST_LOG".into(), std::env::var("SECKILL_TEST_CHILD_LOG").unwrap_or_else(|_| "warn".into())),
        ]
    }
}

/// A service running in this process.
pub struct Running {
    /// Its HTTP (edge: the buyers') or health (others) address.
    pub addr: SocketAddr,
    /// The edge's operators' console (the same as `addr` elsewhere).
    pub console: SocketAddr,
    shutdown: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    fn spawn<F, Fut>(addr: SocketAddr, run: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(run(shutdown.clone()));
        Self { addr, console: addr, shutdown, handle }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://console`: the edge's operators' routes.
    pub fn console_url(&self) -> String {
        format!("http://{}", self.console)
    }

    /// Stops it gracefully and waits (bounded).
    pub async fn stop(self) {
        self.shutdown.cancel();
        match tokio::time::timeout(Duration::from_secs(40), self.handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("service failed: {error:#}"),
            Ok(Err(join)) => panic!("service panicked: {join}"),
            Err(_) => panic!("service did not stop within 40s"),
        }
    }
}

/// What a finished `seckillctl` run printed.
#[derive(Debug)]
pub struct CtlOutput {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl TestEnv {
    /// Runs `seckillctl args...` against this test's servers.
    pub async fn ctl(&self, args: &[&str]) -> CtlOutput {
        self.ctl_with_env(args, &[]).await
    }

    /// [`TestEnv::ctl`] with more environment variables.
    pub async fn ctl_with_env(&self, args: &[&str], extra: &[(&str, &str)]) -> CtlOutput {
        let output = tokio::process::Command::new(binary("seckillctl"))
            .args(args)
            .envs(self.child_env())
            .envs(extra.iter().copied())
            .output()
            .await
            .expect("running seckillctl");
        CtlOutput {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// A project binary running as a child process, killed when dropped.
pub struct Child {
    inner: tokio::process::Child,
    log: std::path::PathBuf,
}

impl Child {
    /// Starts `name` with `env` (stdout/stderr to a log file under target/).
    pub fn start(name: &str, env: &[(String, String)]) -> Self {
        Self::start_with_args(name, &[], env)
    }

    /// Starts `name args...` with `env`.
    pub fn start_with_args(name: &str, args: &[&str], env: &[(String, String)]) -> Self {
        let log_dir = binary(name).parent().expect("dir").join("e2e-logs");
        std::fs::create_dir_all(&log_dir).expect("log dir");
        let path = log_dir.join(format!("{name}-{}.log", rand::random::<u32>()));
        let log = std::fs::File::create(&path).expect("log file");
        let inner = tokio::process::Command::new(binary(name))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("starting a child process");
        Self { inner, log: path }
    }

    /// The last `n` warnings and errors the process logged, one line each
    /// (colours stripped, long lines cut): what a failed test shows.
    pub fn warnings(&self, n: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let plain = |line: &str| {
            let mut out = String::with_capacity(line.len());
            let mut chars = line.chars();
            while let Some(c) = chars.next() {
                if c == '\u{1b}' {
                    chars.by_ref().find(|c| c.is_ascii_alphabetic());
                } else {
                    out.push(c);
                }
            }
            out
        };
        let lines: Vec<String> = text
            .lines()
            .map(plain)
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(|l| l.chars().take(240).collect())
            .collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }

    /// Whether the process logged a line containing `needle` (a step it
    /// announces, such as "running"): what a test waits for before a fault.
    pub fn logged(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().any(|line| line.contains(needle))
    }

    /// Whether the process is stopped (SIGSTOP, or a halt hook's stop):
    /// its state in /proc.
    pub fn stopped(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // "pid (comm) S …": the state follows the command's closing parenthesis.
        stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.inner.id().expect("a running child has a pid")
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.inner.id().expect("running child has a pid");
        let sent =
            std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// `kill -9`.
    pub async fn kill9(mut self) {
        self.inner.start_kill().expect("SIGKILL");
        let _ = self.inner.wait().await;
    }

    /// SIGTERM, then waits (bounded) for a clean exit; returns its success.
    pub async fn terminate(mut self) -> bool {
        let pid = self.inner.id().expect("running child has a pid");
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        match tokio::time::timeout(Duration::from_secs(40), self.inner.wait()).await {
            Ok(Ok(status)) => status.success(),
            _ => false,
        }
    }
}
