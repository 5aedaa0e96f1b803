//! A route's upstream rate limit (docs/guide/traffic-control.md, "Traffic control"): a token bucket that fills at
//! `upstream_rate` up to `upstream_burst` tokens, one token per upstream
//! call. In any second the upstream sees at most the rate plus the burst.
//!
//! The bucket is this instance's: a fleet of N gateways calls the upstream
//! at most N times the rate (docs/reference/configuration.md says how to size it).

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use crate::config::RateSettings;

pub struct TokenBucket {
    settings: RateSettings,
    state: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(settings: RateSettings) -> Self {
        Self {
            settings,
            state: Mutex::new(Bucket {
                tokens: f64::from(settings.burst),
                refilled: Instant::now(),
            }),
        }
    }

    pub fn settings(&self) -> RateSettings {
        self.settings
    }

    fn with_bucket<T>(&self, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let mut bucket = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        let earned = now.duration_since(bucket.refilled).as_secs_f64() * self.settings.per_second;
        bucket.tokens = (bucket.tokens + earned).min(f64::from(self.settings.burst));
        bucket.refilled = now;
        f(&mut bucket)
    }

    /// Take one token, or say how long until one is there.
    pub fn try_take(&self) -> Result<(), Duration> {
        self.with_bucket(|bucket| {
            if bucket.tokens >= 1.0 {
                bucket.tokens -= 1.0;
                Ok(())
            } else {
                let missing = 1.0 - bucket.tokens;
                Err(Duration::from_secs_f64(missing / self.settings.per_second))
            }
        })
    }

    /// Take as many tokens as there are, up to `wanted`.
    pub fn take_up_to(&self, wanted: usize) -> usize {
        self.with_bucket(|bucket| {
            let taken = (bucket.tokens.floor() as usize).min(wanted);
            bucket.tokens -= taken as f64;
            taken
        })
    }

    /// Give back tokens taken for calls that were not made.
    pub fn refund(&self, tokens: usize) {
        if tokens > 0 {
            self.with_bucket(|bucket| {
                bucket.tokens = (bucket.tokens + tokens as f64).min(f64::from(self.settings.burst));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_allows_the_burst_then_the_rate() {
        let bucket = TokenBucket::new(RateSettings {
            per_second: 100.0,
            burst: 5,
        });
        assert_eq!(bucket.take_up_to(10), 5);
        let wait = bucket.try_take().unwrap_err();
        assert!(wait <= Duration::from_millis(10), "{wait:?}");
        tokio::time::advance(Duration::from_millis(25)).await;
        assert_eq!(
            bucket.take_up_to(10),
            2,
            "refilled at the rate: 2.5 tokens in 25 ms"
        );
        bucket.refund(100);
        assert_eq!(bucket.take_up_to(100), 5, "never above the burst");
    }
}
