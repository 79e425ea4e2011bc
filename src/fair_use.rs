//! Fair use between tenants and users: one tenant's flood must not starve another.
//!
//! Two checks run after authentication and before a handler takes a database connection:
//! - a cap on each tenant's requests in flight (`MNEMO_TENANT_MAX_CONCURRENT`, default three
//!   quarters of the pool), so one tenant can never hold the whole pool; a request past it waits
//!   up to `MNEMO_TENANT_QUEUE_MS` for a slot, then is 429;
//! - optional token buckets per tenant and per user (`MNEMO_RATE_LIMIT_*`, off by default), with
//!   the IETF `RateLimit-Policy` / `RateLimit` headers on every answer and `Retry-After` on 429.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use clap::Args;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::{DefaultKeyedRateLimiter, Quota};
use tokio::sync::Semaphore;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;

/// Settings of fair use.
#[derive(Debug, Clone, Args)]
pub struct FairUseConfig {
    /// Requests of one tenant in flight at once; more wait, then are 429. Unset: three quarters
    /// of the database pool.
    #[arg(long = "tenant-max-concurrent", env = "MNEMO_TENANT_MAX_CONCURRENT")]
    pub tenant_max_concurrent: Option<u32>,
    /// Milliseconds a request over its tenant's cap waits for a slot before it is 429.
    #[arg(
        long = "tenant-queue-ms",
        env = "MNEMO_TENANT_QUEUE_MS",
        default_value_t = 2000
    )]
    pub tenant_queue_ms: u64,
    /// Requests per second one tenant may make (token bucket); 0 or unset: no limit.
    #[arg(
        long = "rate-limit-tenant-per-sec",
        env = "MNEMO_RATE_LIMIT_TENANT_PER_SEC"
    )]
    pub tenant_per_sec: Option<u32>,
    /// Requests a tenant may make at once above its rate (the bucket's size); default the rate.
    #[arg(
        long = "rate-limit-tenant-burst",
        env = "MNEMO_RATE_LIMIT_TENANT_BURST"
    )]
    pub tenant_burst: Option<u32>,
    /// Requests per second one user may make; 0 or unset: no limit.
    #[arg(
        long = "rate-limit-user-per-sec",
        env = "MNEMO_RATE_LIMIT_USER_PER_SEC"
    )]
    pub user_per_sec: Option<u32>,
    /// Requests a user may make at once above its rate; default the rate.
    #[arg(long = "rate-limit-user-burst", env = "MNEMO_RATE_LIMIT_USER_BURST")]
    pub user_burst: Option<u32>,
}

impl Default for FairUseConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl FairUseConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.tenant_max_concurrent == Some(0) {
            return Err("MNEMO_TENANT_MAX_CONCURRENT must be at least 1".into());
        }
        for (name, burst, rate) in [
            (
                "MNEMO_RATE_LIMIT_TENANT_BURST",
                self.tenant_burst,
                self.tenant_per_sec,
            ),
            (
                "MNEMO_RATE_LIMIT_USER_BURST",
                self.user_burst,
                self.user_per_sec,
            ),
        ] {
            if burst == Some(0) {
                return Err(format!("{name} must be at least 1"));
            }
            if burst.is_some() && rate.unwrap_or(0) == 0 {
                return Err(format!("{name} needs the matching _PER_SEC rate"));
            }
        }
        Ok(())
    }
}

type Limiter = DefaultKeyedRateLimiter<String, StateInformationMiddleware>;

/// One token bucket per key, with what its headers say.
struct Bucket {
    limiter: Limiter,
    /// The policy name in the headers (`tenant`, `user`).
    name: &'static str,
    per_sec: u32,
}

impl Bucket {
    fn new(name: &'static str, per_sec: Option<u32>, burst: Option<u32>) -> Option<Bucket> {
        let rate = NonZeroU32::new(per_sec?)?;
        let burst = burst.and_then(NonZeroU32::new).unwrap_or(rate);
        Some(Bucket {
            limiter: governor::RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
                .with_middleware::<StateInformationMiddleware>(),
            name,
            per_sec: rate.get(),
        })
    }

    fn policy(&self) -> String {
        format!("\"{}\";q={};w=1", self.name, self.per_sec)
    }
}

/// What a request was told by the buckets it passed.
struct Passed {
    policies: Vec<String>,
    remaining: Vec<String>,
}

/// The shared state of fair use.
pub struct FairUse {
    tenant_cap: usize,
    queue: Duration,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    buckets: Vec<(Bucket, bool)>,
}

impl FairUse {
    pub fn new(config: &FairUseConfig, pool_size: u32) -> FairUse {
        let cap = config
            .tenant_max_concurrent
            .unwrap_or((pool_size * 3 / 4).max(1));
        let mut buckets = Vec::new();
        if let Some(b) = Bucket::new("tenant", config.tenant_per_sec, config.tenant_burst) {
            buckets.push((b, false));
        }
        if let Some(b) = Bucket::new("user", config.user_per_sec, config.user_burst) {
            buckets.push((b, true));
        }
        FairUse {
            tenant_cap: usize::try_from(cap).unwrap_or(usize::MAX),
            queue: Duration::from_millis(config.tenant_queue_ms),
            slots: Mutex::new(HashMap::new()),
            buckets,
        }
    }

    /// The semaphore of `tenant`'s requests in flight.
    fn slot(&self, tenant: &str) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() > 10_000 {
            // Forget tenants with nothing in flight (their semaphore is only held here).
            slots.retain(|_, s| Arc::strong_count(s) > 1);
        }
        slots
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.tenant_cap)))
            .clone()
    }

    /// Takes a token from each bucket; the first empty one answers with its wait.
    fn take(&self, principal: &Principal) -> Result<Passed, (Duration, String, String)> {
        let mut passed = Passed {
            policies: Vec::new(),
            remaining: Vec::new(),
        };
        for (bucket, per_user) in &self.buckets {
            let key = if *per_user {
                format!("{}\u{1f}{}", principal.tenant_id, principal.user_id)
            } else {
                principal.tenant_id.clone()
            };
            match bucket.limiter.check_key(&key) {
                Ok(snapshot) => {
                    passed.policies.push(bucket.policy());
                    passed.remaining.push(format!(
                        "\"{}\";r={};t=0",
                        bucket.name,
                        snapshot.remaining_burst_capacity()
                    ));
                }
                Err(not_until) => {
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                    return Err((
                        wait,
                        bucket.policy(),
                        format!("\"{}\";r=0;t={}", bucket.name, secs.max(1)),
                    ));
                }
            }
        }
        Ok(passed)
    }
}

fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// The middleware: rate limits, then the tenant's concurrency cap, then the handler.
pub async fn enforce(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return next.run(req).await;
    };
    let fair = &state.fair_use;
    let passed = match fair.take(&principal) {
        Ok(passed) => passed,
        Err((wait, policy, remaining)) => {
            let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            let mut response = ApiError::status(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate limit reached; retry in {secs} s"),
            )
            .with("retry_after_secs", secs)
            .into_response();
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            if let Some(v) = header_value(&policy) {
                headers.insert("ratelimit-policy", v);
            }
            if let Some(v) = header_value(&remaining) {
                headers.insert("ratelimit", v);
            }
            return response;
        }
    };
    let slot = fair.slot(&principal.tenant_id);
    let permit = match slot.clone().try_acquire_owned() {
        Ok(permit) => Ok(permit),
        Err(_) if fair.queue.is_zero() => Err(()),
        Err(_) => match tokio::time::timeout(fair.queue, slot.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(()),
        },
    };
    let Ok(permit) = permit else {
        let mut response = ApiError::status(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "this tenant already has {} requests in flight; retry shortly",
                fair.tenant_cap
            ),
        )
        .with("max_concurrent", fair.tenant_cap)
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1u32));
        return response;
    };
    let mut response = next.run(req).await;
    drop(permit);
    if !passed.policies.is_empty() {
        let headers = response.headers_mut();
        if let Some(v) = header_value(&passed.policies.join(", ")) {
            headers.insert("ratelimit-policy", v);
        }
        if let Some(v) = header_value(&passed.remaining.join(", ")) {
            headers.insert("ratelimit", v);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(tenant: &str, user: &str) -> Principal {
        Principal {
            tenant_id: tenant.into(),
            user_id: user.into(),
            scopes: vec![],
        }
    }

    #[test]
    fn buckets_refuse_past_the_burst_and_keep_keys_apart() {
        let config = FairUseConfig {
            user_per_sec: Some(1),
            user_burst: Some(2),
            ..Default::default()
        };
        let fair = FairUse::new(&config, 32);
        let alice = principal("t", "alice");
        assert!(fair.take(&alice).is_ok());
        assert!(fair.take(&alice).is_ok());
        let (wait, policy, remaining) = fair.take(&alice).err().unwrap();
        assert!(wait <= Duration::from_secs(1));
        assert_eq!(policy, "\"user\";q=1;w=1");
        assert!(remaining.starts_with("\"user\";r=0;t="), "{remaining}");
        // Another user, and the same name in another tenant, have their own buckets.
        assert!(fair.take(&principal("t", "bob")).is_ok());
        assert!(fair.take(&principal("u", "alice")).is_ok());
    }

    #[test]
    fn settings_are_checked() {
        assert!(FairUseConfig::default().validate().is_ok());
        let zero = FairUseConfig {
            tenant_max_concurrent: Some(0),
            ..Default::default()
        };
        assert!(zero.validate().is_err());
        let burst_alone = FairUseConfig {
            user_burst: Some(3),
            ..Default::default()
        };
        assert!(burst_alone.validate().is_err());
        assert_eq!(FairUse::new(&FairUseConfig::default(), 32).tenant_cap, 24);
    }
}
