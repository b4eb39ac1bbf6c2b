//! A test's PostgreSQL beyond its own database: scratch databases, and
//! the server made unreachable for the order service.

use crate::TestEnv;
use seckill_shared::config::DbSettings;
use sqlx::{Connection, PgPool};

impl TestEnv {
    /// Uses up transaction ids until the server's next one is past `xid`:
    /// one subtransaction per id, in one statement (about 200,000 a second).
    pub async fn advance_transaction_ids_past(&self, xid: u64) {
        let current: String =
            sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&self.db).await.expect("xid");
        let current: u64 = current.parse().expect("a transaction id");
        let burn = xid.saturating_sub(current) + 10;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DO $$ BEGIN
                 CREATE TEMP TABLE IF NOT EXISTS xid_burn (x int);
                 FOR i IN 1..{burn} LOOP
                     BEGIN INSERT INTO xid_burn VALUES (1); EXCEPTION WHEN others THEN NULL; END;
                 END LOOP;
             END $$"
        )))
        .execute(&self.db)
        .await
        .expect("using up transaction ids");
        let now: String =
            sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&self.db).await.expect("xid");
        assert!(now.parse::<u64>().expect("a transaction id") > xid, "transaction ids at {now}, not past {xid}");
    }

    /// An empty database beside this test's (`<its name>_<suffix>`, no
    /// migration applied), for tests that migrate step by step; dropped by
    /// [`TestEnv::drop_scratch_database`].
    pub async fn scratch_database(&self, suffix: &str) -> PgPool {
        let name = format!("{}_{suffix}", self.database_name);
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        // The harness's own hex id and a suffix of the test's.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("creating the scratch database");
        let url = self.database.url.replace(&self.database_name, &name);
        seckill_shared::db::connect_lazy(&DbSettings { url, ..self.database.clone() }).expect("database settings")
    }

    /// Drops the database [`TestEnv::scratch_database`] made.
    pub async fn drop_scratch_database(&self, suffix: &str, pool: PgPool) {
        pool.close().await;
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        let name = format!("{}_{suffix}", self.database_name);
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await
            .expect("dropping the scratch database");
    }

    /// Blocks or allows new connections to this test's database, and drops
    /// the current ones: PostgreSQL "down" for this test only.
    pub async fn set_database_reachable(&self, reachable: bool) {
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS {}",
            self.database_name, reachable
        )))
        .execute(&mut admin)
        .await
        .expect("altering the database");
        if !reachable {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&self.database_name)
            .execute(&mut admin)
            .await
            .expect("terminating connections");
        }
    }
}
