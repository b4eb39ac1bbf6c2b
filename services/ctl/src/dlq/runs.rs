//! The audit trail: every `dlq replay` and `dlq redrive` run (dry runs
//! too) is a `dlq_runs` row — who, when, the note, the filter, the counts —
//! and what it did with each record a `dlq_run_records` row. Counts are
//! kept as the run goes, so an interrupted run shows what it did.
//! `seckillctl dlq runs` lists them.

use super::Filter;
use crate::Failure;
use chrono::{DateTime, Utc};
use rdkafka::message::{Message, OwnedMessage};
use sqlx::PgPool;

/// What a run did with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Outcome {
    fn code(self) -> &'static str {
        match self {
            Self::Sent => "SENT",
            Self::Placed => "PLACED",
            Self::Skipped => "SKIPPED",
            Self::Refused => "REFUSED",
        }
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
}

/// One run, recorded as it goes.
pub struct Run {
    db: PgPool,
    /// Its id: the `dlq.replay-id` of what it re-produces.
    pub id: i64,
}

/// Who runs the tool: `asked` (`--operator`), else `SECKILL_OPERATOR`,
/// `$USER`, `$LOGNAME`, else the name of this process's user (its uid in
/// `/etc/passwd`, as `id -un` says it), else `uid <n>`; `unknown` only when
/// not even the uid can be read.
fn operator(asked: Option<&str>) -> String {
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
    /// Records the start of a run.
    pub async fn start(db: &PgPool, spec: &RunSpec<'_>) -> Result<Self, Failure> {
        let filter = serde_json::to_string(spec.filter).map_err(Failure::failed)?;
        let id = sqlx::query_scalar!(
            "INSERT INTO dlq_runs (kind, operator, note, filter, target, dry_run)
             VALUES ($1, $2, $3, $4::text::jsonb, $5, $6) RETURNING run_id",
            spec.kind,
            operator(spec.operator),
            spec.note,
            filter,
            spec.target,
            spec.dry_run
        )
        .fetch_one(db)
        .await
        .map_err(Failure::unreadable)?;
        Ok(Self { db: db.clone(), id })
    }

    /// Records what was done with `message` (once per record per run).
    pub async fn record(
        &self,
        message: &OwnedMessage,
        order_id: Option<&str>,
        outcome: Outcome,
        detail: &str,
        new_order_id: Option<&str>,
    ) -> Result<(), Failure> {
        sqlx::query!(
            "WITH r AS (
                INSERT INTO dlq_run_records
                       (run_id, dlq_topic, dlq_partition, dlq_offset, order_id, outcome, detail, new_order_id)
                VALUES ($1, $8, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING outcome
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
            outcome.code(),
            detail,
            new_order_id,
            message.topic()
        )
        .execute(&self.db)
        .await
        .map_err(Failure::unreadable)?;
        Ok(())
    }

    /// Records the end of the run (`error`: why it stopped early).
    pub async fn finish(&self, error: Option<&str>) -> Result<(), Failure> {
        sqlx::query!("UPDATE dlq_runs SET finished_at = now(), error = $2 WHERE run_id = $1", self.id, error)
            .execute(&self.db)
            .await
            .map_err(Failure::unreadable)?;
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

/// `dlq runs`: the latest runs first.
pub async fn list(db: &PgPool, limit: i64, json: bool) -> Result<(), Failure> {
    let rows = sqlx::query_as!(
        RunRow,
        r#"SELECT run_id, kind, operator, note, filter AS "filter!", target, dry_run, started_at, finished_at,
                  sent, skipped, refused, error
             FROM dlq_runs ORDER BY run_id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(db)
    .await
    .map_err(Failure::unreadable)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(Failure::failed)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<13} {:<12} {:<26} {:>6} {:>7} {:>7}  note / filter",
        "run", "kind", "operator", "started", "sent", "skipped", "refused"
    );
    for r in &rows {
        let kind = if r.dry_run { format!("{} (dry)", r.kind) } else { r.kind.clone() };
        let state = match (&r.finished_at, &r.error) {
            (_, Some(error)) => format!(" [stopped: {error}]"),
            (None, None) => " [unfinished]".into(),
            (Some(_), None) => String::new(),
        };
        println!(
            "{:<6} {:<13} {:<12} {:<26} {:>6} {:>7} {:>7}  {} {}{state}",
            r.run_id,
            kind,
            r.operator,
            r.started_at.format("%Y-%m-%d %H:%M:%S%.3fZ"),
            r.sent,
            r.skipped,
            r.refused,
            r.note,
            r.filter
        );
    }
    println!("{} run(s)", rows.len());
    Ok(())
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
