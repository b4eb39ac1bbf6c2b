//! A dead-letter run asked for on the console is `seckillctl dlq replay`
//! or `redrive` — a process of its own, not the edge that answers buyers —
//! through the same audited runs as the operator's own tool. The child
//! reads the edge's own servers and dead-letter settings from a file only
//! this user may read, removed when it ends; it goes on if the caller
//! leaves, and a run named by a submission sent before starts nothing.

use crate::http::errors::{OperatorError, RequestError};
use crate::http::state::Operators;
use seckill_shared::config::{DbSettings, Servers};
use seckill_shared::dlq::runs::{self, RunSpec};
use seckill_shared::dlq::{DlqToolSettings, Filter};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// What the console asks the tool to do.
pub struct Asked {
    /// `replay` or `redrive`.
    pub kind: &'static str,
    pub filter: Filter,
    pub to: Option<String>,
    pub note: String,
    pub operator: String,
    pub submission: String,
    pub limit: Option<u64>,
    pub dry_run: bool,
    pub force: bool,
}

impl Asked {
    /// The tool's arguments.
    fn args(&self) -> Vec<String> {
        let mut args = vec!["dlq".to_owned(), self.kind.to_owned()];
        args.extend(self.filter.args());
        args.extend(["--note".into(), self.note.clone(), "--operator".into(), self.operator.clone()]);
        args.extend(["--submission".into(), self.submission.clone()]);
        args.extend(self.to.iter().flat_map(|to| ["--to".to_owned(), to.clone()]));
        args.extend(self.limit.iter().flat_map(|limit| ["--limit".to_owned(), limit.to_string()]));
        args.extend(self.dry_run.then(|| "--dry-run".to_owned()));
        args.extend(self.force.then(|| "--force".to_owned()));
        args
    }
}

/// What the tool reads: the edge's servers (a pool of one connection) and
/// its dead-letter settings.
#[derive(serde::Serialize)]
struct ToolSettings {
    dlq: DlqToolSettings,
    #[serde(flatten)]
    servers: Servers,
}

/// Runs the tool to its end; the run's id, as the audit trail names it by
/// its submission.
pub async fn run(state: &Operators, asked: Asked) -> Result<i64, OperatorError> {
    let servers = Servers {
        database: DbSettings { max_connections: 1, ..state.settings.servers.database.clone() },
        ..state.settings.servers.clone()
    };
    let settings = ToolSettings { dlq: state.settings.dlq.clone(), servers };
    let file = settings_file(&settings).map_err(RequestError::Internal)?;
    let binary = ctl_binary(&state.settings.console.ctl_binary);
    let mut command = tokio::process::Command::new(&binary);
    command.args(asked.args()).env("SECKILL_CONFIG", &file).stdin(Stdio::null()).stdout(Stdio::null());
    // Past its deadline the wait is dropped, and the process with it.
    command.stderr(Stdio::piped()).kill_on_drop(true);
    let deadline = Duration::from_secs(state.settings.console.run_deadline_secs);
    // The file is the child's only configuration: none of the edge's own.
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("SECKILL") && name != "SECKILL_CONFIG") {
        command.env_remove(name);
    }
    let running = command.spawn();
    // Its own task: the run and the file's removal go on if the caller leaves.
    let ended = tokio::spawn(async move {
        let output = match running {
            Ok(child) => tokio::time::timeout(deadline, child.wait_with_output()).await,
            Err(error) => Ok(Err(error)),
        };
        let _ = std::fs::remove_file(&file);
        output
    });
    let Ok(output) = ended.await.map_err(|e| RequestError::Internal(e.into()))? else {
        return Err(ended_at_deadline(state, &asked, deadline).await);
    };
    let output = output.map_err(|e| RequestError::Internal(anyhow::anyhow!("running {}: {e}", binary.display())))?;
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim_start_matches("seckillctl: ");
    match output.status.code() {
        Some(0) => {}
        // The run could not do what it was asked: the operator reads why.
        Some(1) => return Err(OperatorError::invalid(said)),
        _ => return Err(OperatorError::try_again(anyhow::anyhow!("the dead-letter run ended: {said}"))),
    }
    seckill_shared::dlq::runs::by_submission(&state.console_db, &asked.submission).await?.ok_or_else(|| {
        OperatorError::from(anyhow::anyhow!("the run of submission {} is not recorded", asked.submission))
    })
}

/// The answer to a run ended at its deadline (its process killed), once
/// the audit trail records it so.
async fn ended_at_deadline(state: &Operators, asked: &Asked, deadline: Duration) -> OperatorError {
    let why = format!("ended by the console at its deadline ({} s, console.run_deadline_secs)", deadline.as_secs());
    let spec = RunSpec {
        kind: asked.kind,
        operator: Some(&asked.operator),
        note: &asked.note,
        filter: &asked.filter,
        target: asked.to.as_deref(),
        dry_run: asked.dry_run,
        submission: Some(&asked.submission),
    };
    let recorded = runs::ended_at_deadline(&state.console_db, &spec, &why);
    let cause = match tokio::time::timeout(state.settings.servers.database.call_deadline(), recorded).await {
        Ok(Ok(run)) => anyhow::anyhow!("run {run} {why}"),
        Ok(Err(error)) => anyhow::anyhow!("a run {why}, not recorded: {error}"),
        Err(_) => anyhow::anyhow!("a run {why}, not recorded: PostgreSQL did not answer"),
    };
    tracing::warn!(submission = %asked.submission, "{cause:#}");
    OperatorError::Unanswered { what: "the dead-letter run, ended at its deadline,", cause }
}

/// `configured` when it is a path; else the binary of that name beside
/// this one, else the name (looked up on `PATH`).
fn ctl_binary(configured: &str) -> PathBuf {
    if configured.contains('/') {
        return configured.into();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(configured)));
    beside.filter(|path| path.is_file()).unwrap_or_else(|| configured.into())
}

/// The tool's settings in a new file only this user may read.
fn settings_file(settings: &ToolSettings) -> anyhow::Result<PathBuf> {
    let text = toml::to_string(&toml::Value::try_from(settings)?)?;
    let name = format!("seckill-console-run-{}-{:016x}.toml", std::process::id(), rand::random::<u64>());
    let path = std::env::temp_dir().join(name);
    write_private(&path, text.as_bytes())?;
    Ok(path)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}
