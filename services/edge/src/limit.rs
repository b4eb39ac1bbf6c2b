//! Rate limits: a global GCRA limiter and a per-user one (governor). Both
//! are shared by every request handler of this process.
//!
//! The per-user limiter keeps a state per user id it has seen, so its memory
//! is bounded here: every few thousand checks its size is looked at, and
//! past `max_tracked_users` the users whose state has fully recovered (they
//! would be let through as if new) are forgotten, on a blocking thread. A
//! flood of distinct user ids therefore costs memory for the users of the
//! last few seconds only. (Every 30 s the same clean-up runs regardless.)

use crate::settings::RateLimitSettings;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use seckill_shared::domain::UserId;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How many checks pass between two looks at the per-user limiter's size.
const SIZE_CHECK_EVERY: u64 = 4096;

/// The edge's limiters.
pub struct RateLimits {
    global: DefaultDirectRateLimiter,
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
    max_tracked_users: usize,
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

impl RateLimits {
    /// Limiters from settings.
    pub fn new(settings: &RateLimitSettings) -> Self {
        Self {
            global: governor::RateLimiter::direct(quota(settings.global_per_second, settings.global_burst)),
            per_user: governor::RateLimiter::keyed(quota(settings.per_user_per_second, settings.per_user_burst)),
            clock: DefaultClock::default(),
            max_tracked_users: settings.max_tracked_users,
            checks: AtomicU64::new(0),
            shrinking: AtomicBool::new(false),
        }
    }

    /// `Err(retry after)` when the request is over the global limit.
    pub fn check_global(&self) -> Result<(), Duration> {
        self.global.check().map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// `Err(retry after)` when the request is over either limit.
    pub fn check(self: &Arc<Self>, user: UserId) -> Result<(), Duration> {
        self.check_global()?;
        let result = self.per_user.check_key(&user).map_err(|not_until| not_until.wait_time_from(self.clock.now()));
        if self.checks.fetch_add(1, Ordering::Relaxed).is_multiple_of(SIZE_CHECK_EVERY)
            && self.tracked_users() > self.max_tracked_users
        {
            self.shrink_in_background();
        }
        result
    }

    /// Users the per-user limiter holds a state for.
    pub fn tracked_users(&self) -> usize {
        self.per_user.len()
    }

    /// Drops per-user state that has fully recovered.
    pub fn shrink(&self) {
        self.per_user.retain_recent();
        self.per_user.shrink_to_fit();
    }

    fn shrink_in_background(self: &Arc<Self>) {
        if self.shrinking.swap(true, Ordering::AcqRel) {
            return;
        }
        let limits = self.clone();
        tokio::task::spawn_blocking(move || {
            limits.shrink();
            limits.shrinking.store(false, Ordering::Release);
        });
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
        while limits.tracked_users() >= 100_000 || limits.shrinking.load(Ordering::Acquire) {
            let tracked = limits.tracked_users();
            assert!(
                std::time::Instant::now() < deadline,
                "200,000 distinct users left {tracked} states (bound 10,000)"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
