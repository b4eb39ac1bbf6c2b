//! The relay turned by a test. A relay's turn sends only rows that no
//! running transaction can still precede, and that horizon is the whole
//! server's: another test's open transaction, in its own database, holds
//! this test's rows back for a while. A test that expects rows turns
//! until they are dealt with, and fails on more.

use seckill_order::relay::Relay;
use seckill_shared::ops::lease::LeaseTerm;
use std::time::Duration;

/// Turns `relay` until it has dealt with `rows` outbox rows (sent or
/// parked), for at most a minute; how many it dealt with. A failed turn
/// fails the test; rows beyond `rows` (one sent twice) fail it too.
pub async fn relay_rows(relay: &Relay, term: &LeaseTerm, rows: usize) -> usize {
    let dealt = std::sync::atomic::AtomicUsize::new(0);
    crate::eventually(&format!("{rows} outbox rows dealt with"), Duration::from_secs(60), || async {
        let turn = relay.relay_once(term).await.expect("a turn");
        match dealt.fetch_add(turn, std::sync::atomic::Ordering::SeqCst) + turn {
            n if n == rows => Ok(n),
            n if n < rows => Err(format!("{n} so far")),
            n => panic!("{n} rows dealt with, {rows} expected: one sent twice"),
        }
    })
    .await
}
