//! Rate limits: a global GCRA limiter and a per-user one (governor). Both
//! are shared by every request handler of this process.

use crate::settings::RateLimitSettings;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use seckill_shared::domain::UserId;
use std::num::NonZeroU32;
use std::time::Duration;

/// The edge's limiters.
pub struct RateLimits {
    global: DefaultDirectRateLimiter,
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
}

fn quota(per_second: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(per_second.max(1)).expect("max(1) is non-zero");
    let burst = NonZeroU32::new(burst.max(1)).expect("max(1) is non-zero");
    Quota::per_second(rate).allow_burst(burst)
}

impl RateLimits {
    /// Limiters from settings.
    pub fn new(settings: &RateLimitSettings) -> Self {
        Self {
            global: governor::RateLimiter::direct(quota(settings.global_per_second, settings.global_burst)),
            per_user: governor::RateLimiter::keyed(quota(settings.per_user_per_second, settings.per_user_burst)),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(retry after)` when the request is over either limit.
    pub fn check(&self, user: UserId) -> Result<(), Duration> {
        self.global.check().map_err(|not_until| not_until.wait_time_from(self.clock.now()))?;
        self.per_user.check_key(&user).map_err(|not_until| not_until.wait_time_from(self.clock.now()))?;
        Ok(())
    }

    /// Drops per-user state that has fully recovered (call periodically).
    pub fn shrink(&self) {
        self.per_user.retain_recent();
        self.per_user.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_burst_is_enforced_per_user() {
        let limits = RateLimits::new(&RateLimitSettings {
            global_per_second: 1000,
            global_burst: 1000,
            per_user_per_second: 1,
            per_user_burst: 2,
        });
        let (a, b) = (UserId::new(1).unwrap(), UserId::new(2).unwrap());
        assert!(limits.check(a).is_ok());
        assert!(limits.check(a).is_ok());
        let retry = limits.check(a).expect_err("third request of a burst of 2 is limited");
        assert!(retry > Duration::ZERO);
        assert!(limits.check(b).is_ok(), "another user is not limited by the first");
    }
}
