//! The audit trail: every replay and redrive run (dry runs too), from
//! `seckillctl dlq` or the dashboard, is a `dlq_runs` row — who, when, the
//! note, the filter, the counts — and what it did with each record a
//! `dlq_run_records` row. Counts are kept as the run goes, so an
//! interrupted run shows what it did. A run from the dashboard names its
//! submission: the same one again starts nothing ([`Started::Before`]).

use super::Filter;
use chrono::{DateTime, Utc};
use rdkafka::message::{Message, OwnedMessage};
use sqlx::PgPool;

/// What a run did with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Re-produced (a replay).
    Sent,
    /// A new order placed for its buyer (a redrive).
    Placed,
    /// Nothing to do (already redriven, the order is live).
    Skipped,
    /// Not sent, for a reason the run names (a loop, sold out, …).
    Refused,
}

/// What a run did with one record, as it happens.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordDone {
    /// `partition:offset` on the dead-letter topic.
    pub position: String,
    /// Its `dlq.reason`.
    pub reason: String,
    /// Its order (`-` when the record names none).
    pub order_id: String,
    /// What the run did.
    pub outcome: Outcome,
    /// Why, or where it went.
    pub detail: String,
    /// A redrive's new order.
    pub new_order_id: Option<String>,
}

impl RecordDone {
    /// The verb the tool prints for it.
    pub fn verb(&self, kind: &str, dry_run: bool) -> &'static str {
        match (self.outcome, kind, dry_run) {
            (Outcome::Refused, _, _) => "refused",
            (Outcome::Skipped, _, _) => "skipped",
            (_, "replay", true) => "would replay",
            (_, "replay", false) => "replayed",
            (_, _, true) => "would redrive",
            (_, _, false) => "redrove",
        }
    }
}

/// Why a run, or a read, did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A source could not be read (Kafka, PostgreSQL, Redis).
    #[error("{0:#}")]
    Unreadable(anyhow::Error),
    /// The run could not do what it was asked (a publish refused, no such
    /// topic).
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl RunError {
    /// A source that could not be read.
    pub fn unreadable(error: impl Into<anyhow::Error>) -> Self {
        Self::Unreadable(error.into())
    }

    /// What the run could not do.
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self::Failed(error.into())
    }
}

impl Outcome {
    const ALL: [Self; 4] = [Self::Sent, Self::Placed, Self::Skipped, Self::Refused];

    fn code(self) -> &'static str {
        match self {
            Self::Sent => "SENT",
            Self::Placed => "PLACED",
            Self::Skipped => "SKIPPED",
            Self::Refused => "REFUSED",
        }
    }

    fn parse(code: &str) -> Self {
        Self::ALL.into_iter().find(|o| o.code() == code).unwrap_or(Self::Refused)
    }
}

/// What a run is.
pub struct RunSpec<'a> {
    /// `replay` or `redrive`.
    pub kind: &'static str,
    /// `--operator`, when given.
    pub operator: Option<&'a str>,
    pub note: &'a str,
    pub filter: &'a Filter,
    /// The topic records go to, when not their original one.
    pub target: Option<&'a str>,
    pub dry_run: bool,
    /// The caller's name for the run (a form's one-time key).
    pub submission: Option<&'a str>,
}

/// How [`Run::start`] went.
pub enum Started {
    /// A new run, recorded.
    New(Run),
    /// A run with the same submission was started before: this one.
    Before(i64),
}

/// One run, recorded as it goes.
pub struct Run {
    db: PgPool,
    /// Its id: the `dlq.replay-id` of what it re-produces.
    pub id: i64,
}

/// Who runs the tool: `asked` (`--operator`, the dashboard's signed-in
/// name), else `SECKILL_OPERATOR`, `$USER`, `$LOGNAME`, else the name of
/// this process's user (its uid in `/etc/passwd`, as `id -un` says it),
/// else `uid <n>`; `unknown` only when not even the uid can be read.
pub fn operator(asked: Option<&str>) -> String {
    let named = |v: &str| !v.trim().is_empty();
    if let Some(asked) = asked.filter(|v| named(v)) {
        return asked.to_owned();
    }
    if let Some(set) =
        ["SECKILL_OPERATOR", "USER", "LOGNAME"].iter().find_map(|n| std::env::var(n).ok().filter(|v| named(v)))
    {
        return set;
    }
    let Some(uid) = own_uid() else { return "unknown".into() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    user_of(&passwd, uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// This process's real uid (`/proc/self/status`).
fn own_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// The name `passwd` gives `uid`.
fn user_of(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 2 && fields[2].parse() == Ok(uid)).then(|| fields[0].to_owned())
    })
}

impl Run {
    /// Records the start of a run; a submission recorded before starts
    /// nothing.
    pub async fn start(db: &PgPool, spec: &RunSpec<'_>) -> Result<Started, RunError> {
        let filter = serde_json::to_string(spec.filter).map_err(RunError::failed)?;
        let id = sqlx::query_scalar!(
            "INSERT INTO dlq_runs (kind, operator, note, filter, target, dry_run, submission)
             VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7)
             ON CONFLICT (submission) DO NOTHING RETURNING run_id",
            spec.kind,
            operator(spec.operator),
            spec.note,
            filter,
            spec.target,
            spec.dry_run,
            spec.submission
        )
        .fetch_optional(db)
        .await
        .map_err(RunError::unreadable)?;
        if let Some(id) = id {
            return Ok(Started::New(Self { db: db.clone(), id }));
        }
        let before = sqlx::query_scalar!("SELECT run_id FROM dlq_runs WHERE submission = $1", spec.submission)
            .fetch_one(db)
            .await
            .map_err(RunError::unreadable)?;
        Ok(Started::Before(before))
    }

    /// Records what was done with `message` (once per record per run).
    pub async fn record(&self, message: &OwnedMessage, done: &RecordDone) -> Result<(), RunError> {
        let order_id = (done.order_id != "-").then_some(done.order_id.as_str());
        sqlx::query!(
            "WITH r AS (
                INSERT INTO dlq_run_records
                       (run_id, dlq_topic, dlq_partition, dlq_offset, order_id, outcome, detail, new_order_id, reason)
                VALUES ($1, $8, $2, $3, $4, $5, $6, $7, $9) ON CONFLICT DO NOTHING RETURNING outcome
             )
             UPDATE dlq_runs
                SET sent = sent + (SELECT count(*) FROM r WHERE outcome IN ('SENT', 'PLACED')),
                    skipped = skipped + (SELECT count(*) FROM r WHERE outcome = 'SKIPPED'),
                    refused = refused + (SELECT count(*) FROM r WHERE outcome = 'REFUSED')
              WHERE run_id = $1",
            self.id,
            message.partition(),
            message.offset(),
            order_id,
            done.outcome.code(),
            done.detail,
            done.new_order_id,
            message.topic(),
            done.reason
        )
        .execute(&self.db)
        .await
        .map_err(RunError::unreadable)?;
        Ok(())
    }

    /// Records the end of the run (`error`: why it stopped early).
    pub async fn finish(&self, error: Option<&str>) -> Result<(), RunError> {
        sqlx::query!("UPDATE dlq_runs SET finished_at = now(), error = $2 WHERE run_id = $1", self.id, error)
            .execute(&self.db)
            .await
            .map_err(RunError::unreadable)?;
        Ok(())
    }
}

/// One run as `dlq runs` lists it.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    pub run_id: i64,
    pub kind: String,
    pub operator: String,
    pub note: String,
    pub filter: serde_json::Value,
    pub target: Option<String>,
    pub dry_run: bool,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub sent: i32,
    pub skipped: i32,
    pub refused: i32,
    pub error: Option<String>,
}

/// Ends the run of `spec.submission` at its deadline, as the console does
/// when the tool it started ran past it (the process killed): recorded
/// with `why`, whether the tool recorded its start or not; a run that had
/// finished is left as it ended. The run's id.
pub async fn ended_at_deadline(db: &PgPool, spec: &RunSpec<'_>, why: &str) -> Result<i64, RunError> {
    let id = match Run::start(db, spec).await? {
        Started::New(run) => run.id,
        Started::Before(id) => id,
    };
    sqlx::query!(
        "UPDATE dlq_runs SET finished_at = now(), error = $2 WHERE run_id = $1 AND finished_at IS NULL",
        id,
        why
    )
    .execute(db)
    .await
    .map_err(RunError::unreadable)?;
    Ok(id)
}

/// The run a submission named, when one did.
pub async fn by_submission(db: &PgPool, submission: &str) -> Result<Option<i64>, RunError> {
    sqlx::query_scalar!("SELECT run_id FROM dlq_runs WHERE submission = $1", submission)
        .fetch_optional(db)
        .await
        .map_err(RunError::unreadable)
}

/// The latest runs, newest first (`runs`, the dashboard's audit trail);
/// only run `id` when given.
pub async fn latest(db: &PgPool, limit: i64, id: Option<i64>) -> Result<Vec<RunRow>, RunError> {
    sqlx::query_as!(
        RunRow,
        r#"SELECT run_id, kind, operator, note, filter AS "filter!", target, dry_run, started_at, finished_at,
                  sent, skipped, refused, error
             FROM dlq_runs WHERE $2::bigint IS NULL OR run_id = $2 ORDER BY run_id DESC LIMIT $1"#,
        limit,
        id
    )
    .fetch_all(db)
    .await
    .map_err(RunError::unreadable)
}

/// What run `id` did with each record, in the order it did it.
pub async fn records(db: &PgPool, id: i64) -> Result<Vec<RecordDone>, RunError> {
    let rows = sqlx::query!(
        "SELECT dlq_partition, dlq_offset, order_id, outcome, detail, new_order_id,
                COALESCE(r.reason, (SELECT dl.reason FROM dead_letters dl
                  WHERE (dl.dlq_topic, dl.dlq_partition, dl.dlq_offset) = (r.dlq_topic, r.dlq_partition, r.dlq_offset)))
                  AS reason
           FROM dlq_run_records r WHERE run_id = $1 ORDER BY at, dlq_partition, dlq_offset",
        id
    )
    .fetch_all(db)
    .await
    .map_err(RunError::unreadable)?;
    Ok(rows
        .into_iter()
        .map(|r| RecordDone {
            position: format!("{}:{}", r.dlq_partition, r.dlq_offset),
            reason: r.reason.unwrap_or_default(),
            order_id: r.order_id.unwrap_or_else(|| "-".into()),
            outcome: Outcome::parse(&r.outcome),
            detail: r.detail,
            new_order_id: r.new_order_id,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_is_named_by_the_uid_when_nothing_else_names_them() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nshop:x:1000:1000::/home/shop:/bin/sh\n";
        assert_eq!(user_of(passwd, 1000).as_deref(), Some("shop"));
        assert_eq!(user_of(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_of(passwd, 7), None);
        assert_eq!(operator(Some("ana")), "ana");
        assert!(own_uid().is_some(), "this process's uid is readable");
        assert_ne!(operator(None), "unknown");
    }
}
