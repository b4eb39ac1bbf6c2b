//! The drain scenarios of `make chaos-pg`: a backlog drained by the order
//! service while the primary (or the standby) is killed, frozen or cut
//! off; the old primary back as the standby, then the primary killed
//! again; and the formation stopped and started after a failover.

use super::pg::{came_back_with_every_row, HaSale, PgOutcome};
use super::pg_faults::{NodeProxies, PgFault, Watch};
use super::Kind;
use crate::pg_ha;
use std::time::Duration;

/// Which node a scenario strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    Primary,
    Standby,
}

/// A backlog of `stock` orders (the order service stopped), then the
/// order service started and the `victim` struck by `fault` once it has
/// written its first rows; while the formation fails over, a sixth more
/// buyers order through the edge (it sells on: the orders wait in Kafka).
/// The node is brought back afterwards (started, or thawed) and must hold
/// every row.
pub async fn drain_through(name: &'static str, stock: i64, victim: Victim, fault: PgFault) -> PgOutcome {
    let during_kill = stock / 6;
    let proxies = if fault == PgFault::Cut { Some(NodeProxies::start().await) } else { None };
    let mut ha = HaSale::start_via(stock + during_kill, 3_600, proxies.as_ref()).await;
    ha.pipeline.pause(Kind::Order).await;
    let mut accepted = ha.buy(stock as u64, 0).await;
    let primary = pg_ha::primary().expect("a primary");
    let node = if victim == Victim::Primary { primary.clone() } else { pg_ha::other(&primary).to_owned() };
    ha.pipeline.resume(Kind::Order);
    ha.first_rows(0).await;
    let strike = || fault.strike(&node, proxies.as_ref()).timed();
    let (struck, watch) = Watch::around(&ha.test.db, ha.created_sql(), strike).await;
    let (since, before) = (struck.at, watch.before);
    let sold = ha.buy(during_kill as u64, stock as u64).await;
    let sold_in = since.elapsed();
    accepted.extend(sold.iter().cloned());
    ha.wait_rows(&["CREATED"], accepted.len() as i64).await;
    let drained = since.elapsed();
    assert!(before < stock, "{name}: the drain ended before the kill; the scenario showed nothing");
    assert_eq!(sold.len() as i64, during_kill, "{name}: the edge sells on through the failover");
    let sync = if victim == Victim::Standby { asynchronous_while_alone(&ha, &node).await } else { String::new() };
    let (first_write, first_event) = watch.seen().await;
    let outcome = PgOutcome {
        first_write,
        first_event,
        notes: format!(
            "{node} {} ({victim:?}) with {before} of {stock} rows written; {during_kill} more sold through the edge \
             meanwhile (all 202, within {:.1} s of the fault); drained {:.1} s after it{sync}",
            fault.verb(),
            sold_in.as_secs_f64(),
            drained.as_secs_f64()
        ),
        ..ha.books(name, &accepted).await
    };
    struck.end();
    pg_ha::wait_healthy(Duration::from_secs(180)).await;
    let on_node = came_back_with_every_row(&ha, &node).await;
    let outcome = PgOutcome { notes: format!("{}; {on_node}", outcome.notes), ..outcome };
    ha.finish().await;
    outcome
}

/// With its standby down, the primary commits without a synchronous one
/// (pg_auto_failover's wait_primary): what its setting says.
async fn asynchronous_while_alone(ha: &HaSale, standby: &str) -> String {
    let primary = pg_ha::other(standby);
    let names = pg_ha::setting(primary, &ha.test.database_name, "synchronous_standby_names").await;
    format!("; while the standby was down the primary's synchronous_standby_names was {names:?}")
}

/// The old primary back as the new standby, then the primary killed again
/// while a second backlog drains: the failover lands on the node that came
/// back, which must have had everything (synchronous replication) and take
/// the writes on.
pub async fn fail_back(name: &'static str, stock: i64) -> PgOutcome {
    let mut ha = HaSale::start(stock, 3_600).await;
    let mut accepted = Vec::new();
    let (mut first_write, mut first_event) = (None, None);
    let mut notes = Vec::new();
    for wave in 0..2u64 {
        ha.pipeline.pause(Kind::Order).await;
        let bought = ha.buy(stock as u64 / 2, wave * stock as u64).await;
        let before = accepted.len() as i64;
        accepted.extend(bought);
        let primary = pg_ha::primary().expect("a primary");
        let group = pg_ha::NodeGroup::of(&primary);
        ha.pipeline.resume(Kind::Order);
        ha.first_rows(before).await;
        let ((), watch) = Watch::around(&ha.test.db, ha.created_sql(), || ((), group.kill())).await;
        ha.wait_rows(&["CREATED"], accepted.len() as i64).await;
        (first_write, first_event) = watch.seen().await;
        pg_ha::start(&primary);
        pg_ha::wait_healthy(Duration::from_secs(180)).await;
        notes.push(format!("wave {}: {primary} killed, {}", wave + 1, came_back_with_every_row(&ha, &primary).await));
    }
    let outcome = PgOutcome {
        first_write,
        first_event,
        notes: format!("{} (first write and event: after the second kill)", notes.join("; ")),
        ..ha.books(name, &accepted).await
    };
    ha.finish().await;
    outcome
}

/// A failover, then the whole formation stopped (`infra/local/down.sh
/// --postgres-ha`) and started again (`up.sh --postgres-ha`) with the old
/// primary — the first node — a standby that can catch up only from the
/// other: a primary and a synchronous standby again, every row on both,
/// and the pipeline writing on. (Before: up.sh started the first node
/// alone and waited for it — 'pg_autoctl node1 did not answer within
/// 120s'.)
pub async fn restart_after_a_failover(name: &'static str, stock: i64) -> PgOutcome {
    let ha = HaSale::start(stock, 3_600).await;
    if pg_ha::primary().as_deref() != Some(pg_ha::NODES[0]) {
        // The failing order: the first node primary, then failed over.
        pg_ha::kill(pg_ha::NODES[1]);
        ha.wait_writable().await;
        pg_ha::start(pg_ha::NODES[1]);
        pg_ha::wait_healthy(Duration::from_secs(180)).await;
    }
    let mut accepted = ha.buy(stock as u64 / 2, 0).await;
    ha.wait_rows(&["CREATED"], accepted.len() as i64).await;
    pg_ha::kill(pg_ha::NODES[0]);
    ha.wait_writable().await;
    let failed_over = pg_ha::primary();
    let script = |what: &str| {
        let out = std::process::Command::new(crate::repo_root().join(format!("infra/local/{what}.sh")))
            .arg("--postgres-ha")
            .output()
            .expect("the infra script");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default().to_owned())
    };
    let down = script("down");
    assert!(down.0, "{name}: down.sh --postgres-ha: {}", down.1);
    let started = std::time::Instant::now();
    let up = script("up");
    assert!(up.0, "{name}: up.sh --postgres-ha after a failover: {}", up.1);
    pg_ha::wait_healthy(Duration::from_secs(180)).await;
    let whole_in = started.elapsed();
    ha.wait_writable().await;
    accepted.extend(ha.buy(stock as u64 / 2, stock as u64 / 2).await);
    ha.wait_rows(&["CREATED"], accepted.len() as i64).await;
    let mut notes = vec![format!(
        "{} killed, {failed_over:?} primary, the formation stopped and started: whole again {:.1} s after up.sh began",
        pg_ha::NODES[0],
        whole_in.as_secs_f64()
    )];
    for node in pg_ha::NODES {
        notes.push(came_back_with_every_row(&ha, node).await);
    }
    let outcome = PgOutcome { notes: notes.join("; "), ..ha.books(name, &accepted).await };
    ha.finish().await;
    outcome
}
