//! Rate limits: a global GCRA limiter, a per-user one and, when set, a
//! per-client one (governor), shared by every request handler of this
//! process; and [`KeyedLimiter`], the one way this edge keeps a state per
//! key (user, client address, admin guesser) with bounded memory.
//!
//! A keyed limiter keeps a state per key it has seen, so its memory is
//! bounded here: every few thousand checks its size is looked at, and past
//! its `max_tracked` the keys whose state has fully recovered (they would
//! be let through as if new) are forgotten, on a blocking thread. A flood
//! of distinct keys therefore costs memory for the keys of the last few
//! seconds only. (Every 30 s the same clean-up runs regardless.)

use crate::settings::RateLimitSettings;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use seckill_shared::domain::UserId;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How many checks pass between two looks at a keyed limiter's size.
const SIZE_CHECK_EVERY: u64 = 4096;

/// The edge's limiters.
pub struct RateLimits {
    global: DefaultDirectRateLimiter,
    per_user: Arc<KeyedLimiter<UserId>>,
    /// Orders per client address; `None`: off (`rate_limit.per_client_per_second` 0).
    per_client: Option<Arc<KeyedLimiter<IpAddr>>>,
    clock: DefaultClock,
}

/// A GCRA limiter per key whose memory stays bounded (see the module doc).
pub struct KeyedLimiter<K: Hash + Eq + Clone + Send + Sync + 'static> {
    limiter: DefaultKeyedRateLimiter<K>,
    clock: DefaultClock,
    max_tracked: usize,
    checks: AtomicU64,
    /// Set while a clean-up runs, so only one does.
    shrinking: AtomicBool,
}

/// `per_second` with `burst` (each at least 1), as governor takes them.
pub(crate) fn quota(per_second: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(per_second.max(1)).expect("max(1) is non-zero");
    per_period(Quota::per_second(rate), burst)
}

/// `per_minute` with `burst` (each at least 1).
pub(crate) fn quota_per_minute(per_minute: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(per_minute.max(1)).expect("max(1) is non-zero");
    per_period(Quota::per_minute(rate), burst)
}

fn per_period(quota: Quota, burst: u32) -> Quota {
    quota.allow_burst(NonZeroU32::new(burst.max(1)).expect("max(1) is non-zero"))
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedLimiter<K> {
    /// A limiter of `quota` per key, forgetting recovered keys past `max_tracked`.
    pub fn new(quota: Quota, max_tracked: usize) -> Arc<Self> {
        Arc::new(Self {
            limiter: governor::RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            max_tracked,
            checks: AtomicU64::new(0),
            shrinking: AtomicBool::new(false),
        })
    }

    /// `Err(retry after)` when `key` is over its limit (the check counts).
    pub fn check(self: &Arc<Self>, key: &K) -> Result<(), Duration> {
        let result = self.limiter.check_key(key).map_err(|not_until| not_until.wait_time_from(self.clock.now()));
        if self.checks.fetch_add(1, Ordering::Relaxed).is_multiple_of(SIZE_CHECK_EVERY)
            && self.tracked() > self.max_tracked
        {
            self.shrink_in_background();
        }
        result
    }

    /// Keys the limiter holds a state for.
    pub fn tracked(&self) -> usize {
        self.limiter.len()
    }

    /// Drops the state of keys that have fully recovered.
    pub fn shrink(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    fn shrink_in_background(self: &Arc<Self>) {
        if self.shrinking.swap(true, Ordering::AcqRel) {
            return;
        }
        let limiter = self.clone();
        tokio::task::spawn_blocking(move || {
            limiter.shrink();
            limiter.shrinking.store(false, Ordering::Release);
        });
    }

    /// Whether a clean-up is running (for the tests that wait for one).
    #[cfg(test)]
    fn shrinking(&self) -> bool {
        self.shrinking.load(Ordering::Acquire)
    }
}

impl RateLimits {
    /// Limiters from settings.
    pub fn new(settings: &RateLimitSettings) -> Self {
        // A burst left at 0 is one second's worth.
        let per_client = (settings.per_client_per_second > 0).then(|| {
            let burst = Some(settings.per_client_burst).filter(|b| *b > 0).unwrap_or(settings.per_client_per_second);
            KeyedLimiter::new(quota(settings.per_client_per_second, burst), settings.max_tracked_users)
        });
        Self {
            global: governor::RateLimiter::direct(quota(settings.global_per_second, settings.global_burst)),
            per_user: KeyedLimiter::new(
                quota(settings.per_user_per_second, settings.per_user_burst),
                settings.max_tracked_users,
            ),
            per_client,
            clock: DefaultClock::default(),
        }
    }

    /// `Err(retry after)` when the request is over the global limit.
    pub fn check_global(&self) -> Result<(), Duration> {
        self.global.check().map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// `Err(retry after)` when the request is over the global or the user's limit.
    pub fn check(&self, user: UserId) -> Result<(), Duration> {
        self.check_global()?;
        self.per_user.check(&user)
    }

    /// `Err(retry after)` when an order of `client` is over the per-client
    /// limit (none when it is off).
    pub fn check_client(&self, client: IpAddr) -> Result<(), Duration> {
        self.per_client.as_ref().map_or(Ok(()), |limiter| limiter.check(&client))
    }

    /// Users the per-user limiter holds a state for.
    pub fn tracked_users(&self) -> usize {
        self.per_user.tracked()
    }

    /// Drops per-user and per-client state that has fully recovered.
    pub fn shrink(&self) {
        self.per_user.shrink();
        if let Some(per_client) = &self.per_client {
            per_client.shrink();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_user_per_second: u32, per_user_burst: u32, max_tracked_users: usize) -> Arc<RateLimits> {
        Arc::new(RateLimits::new(&RateLimitSettings {
            global_per_second: 1_000_000,
            global_burst: 1_000_000,
            per_user_per_second,
            per_user_burst,
            max_tracked_users,
            ..RateLimitSettings::default()
        }))
    }

    #[test]
    fn per_user_burst_is_enforced_per_user() {
        let limits = limits(1, 2, 1_000);
        let (a, b) = (UserId::new(1).unwrap(), UserId::new(2).unwrap());
        assert!(limits.check(a).is_ok());
        assert!(limits.check(a).is_ok());
        let retry = limits.check(a).expect_err("third request of a burst of 2 is limited");
        assert!(retry > Duration::ZERO);
        assert!(limits.check(b).is_ok(), "another user is not limited by the first");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_distinct_users_stays_bounded() {
        // A burst of 1 at a high rate: each user's state recovers within a
        // millisecond, so past the bound the limiter forgets them.
        let limits = limits(1_000, 1, 10_000);
        for user in 1..=200_000 {
            let _ = limits.check(UserId::new(user).unwrap());
        }
        // The last clean-up runs on a blocking thread: wait for it (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while limits.tracked_users() >= 100_000 || limits.per_user.shrinking() {
            let tracked = limits.tracked_users();
            assert!(
                std::time::Instant::now() < deadline,
                "200,000 distinct users left {tracked} states (bound 10,000)"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[cfg(test)]
mod per_client_tests {
    use super::*;

    #[test]
    fn per_client_limits_are_off_unless_set_and_then_per_address() {
        let off = RateLimits::new(&RateLimitSettings::default());
        let client: IpAddr = "127.0.0.9".parse().unwrap();
        assert!((0..1_000).all(|_| off.check_client(client).is_ok()), "off by default");
        let settings =
            RateLimitSettings { per_client_per_second: 1, per_client_burst: 3, ..RateLimitSettings::default() };
        let on = RateLimits::new(&settings);
        assert!((0..3).all(|_| on.check_client(client).is_ok()), "the burst");
        assert!(on.check_client(client).is_err(), "past the burst");
        assert!(on.check_client("127.0.0.10".parse().unwrap()).is_ok(), "another address has its own");
    }
}
