//! The pool on a URL of several hosts (`target_session_attrs=read-write`)
//! writes only to the primary: a connection made on a host that then turned
//! read-only in place — a primary demoted without a restart — is closed
//! when next asked for, not handed out to fail its writes.

use seckill_e2e::private_postgres::PrivatePostgres;
use seckill_e2e::{eventually, TestEnv};
use sqlx::Connection;
use std::time::Duration;

/// A database named like the test's on `server`, owned by the application's
/// role, with the test's table.
async fn twin(server: &PrivatePostgres, name: &str) {
    let mut admin = sqlx::PgConnection::connect(&server.admin_url()).await.expect("the private server");
    for sql in ["CREATE ROLE seckill LOGIN".to_owned(), format!("CREATE DATABASE {name} OWNER seckill")] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await.expect("a role and a database");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_on_a_host_turned_read_only_is_not_handed_out() {
    let env = TestEnv::new().await;
    let server = PrivatePostgres::start(1_000);
    twin(&server, &env.database_name).await;
    let port = server.admin_url().split(':').nth(2).and_then(|p| p.split('/').next()).expect("a port").to_owned();
    let url = format!(
        "postgres://seckill:seckill@127.0.0.1:{port},127.0.0.1:5432/{}?target_session_attrs=read-write",
        env.database_name
    );
    let create = "CREATE TABLE IF NOT EXISTS writes (host int)";
    sqlx::query(create).execute(&env.db).await.expect("the table on the shared server");
    let first = format!("postgres://seckill@127.0.0.1:{port}/{}", env.database_name);
    let first = seckill_shared::config::DbSettings { url: first, ..env.database.clone() };
    let first = seckill_shared::db::connect_lazy(&first).expect("a pool");
    sqlx::query(create).execute(&first).await.expect("the table on the private server");

    let pool = seckill_shared::db::connect_lazy(&seckill_shared::config::DbSettings { url, ..env.database.clone() })
        .expect("a pool over both");
    // Several connections made on the first host, then idle in the pool.
    let held: Vec<_> = futures::future::join_all((0..4).map(|_| pool.acquire())).await;
    for connection in held {
        let mut connection = connection.expect("a connection on the first host");
        sqlx::query("INSERT INTO writes VALUES (1)").execute(&mut *connection).await.expect("written");
    }
    // The first host turns read-only in place, as a demoted primary that
    // stays up: its sessions refuse writes from their next transaction.
    let mut admin = sqlx::PgConnection::connect(&server.admin_url()).await.expect("the private server");
    for sql in ["ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()"] {
        sqlx::query(sql).execute(&mut admin).await.expect("read-only");
    }
    eventually("a write on the second host", Duration::from_secs(30), || async {
        let _ = sqlx::query("INSERT INTO writes VALUES (2)").execute(&pool).await;
        let on_second: i64 =
            sqlx::query_scalar("SELECT count(*) FROM writes").fetch_one(&env.db).await.map_err(|e| e.to_string())?;
        if on_second > 0 {
            Ok(())
        } else {
            Err("none yet".to_owned())
        }
    })
    .await;
    for write in 0..20 {
        let written = sqlx::query("INSERT INTO writes VALUES (2)").execute(&pool).await;
        assert!(written.is_ok(), "write {write} after the move went to a read-only session: {written:?}");
    }
    pool.close().await;
    first.close().await;
}
