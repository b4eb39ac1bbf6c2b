//! The edge's settings.

mod parts;

pub use parts::*;

use seckill_shared::config::{LockSettings, Secret, Servers};
use serde::{Deserialize, Serialize};

/// How the edge deducts stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeductionMode {
    /// One atomic Lua script (the default, and the fast one).
    #[default]
    Lua,
    /// The seed's approach: a per-sale distributed lock around separate
    /// commands. Kept for comparison in the benchmark.
    Lock,
}

/// The shortest admin token accepted (16 characters: `openssl rand -hex 8`).
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;
/// The shortest user JWT secret accepted (32 bytes: HS256's key size).
pub const MIN_JWT_SECRET_LEN: usize = 32;
/// The shortest payment-notification signing secret accepted (as HS256's).
pub const MIN_WEBHOOK_SECRET_LEN: usize = 32;

/// Settings of `seckill-edge`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Where the buyers' and the payment provider's routes listen (with
    /// health, metrics and the API document).
    pub http_addr: String,
    /// Where the operators' console listens: the admin API, the dashboard
    /// and the dead-letters page (with health). Loopback by default; the
    /// same address as `http_addr` serves both on one listener — only when
    /// set so. Port 0 picks a free port (for tests), so two port-0
    /// addresses are two listeners.
    pub admin_addr: String,
    /// Bearer token of the admin API; the admin API refuses everything when unset.
    pub admin_token: Option<Secret>,
    /// HS256 secret; when set, `/api/*` requires a JWT whose `sub` is the user.
    pub user_jwt_secret: Option<Secret>,
    /// The identity provider's public keys (a JWK set file, RS256 and
    /// ES256; read again every `user_jwks_refresh_secs`): `/api/*` then
    /// requires a JWT signed by one of them whose `sub` is the user.
    pub user_jwks: Option<String>,
    /// How often the JWKS is read or fetched again.
    pub user_jwks_refresh_secs: u64,
    /// PEM certificates to trust, besides Mozilla's roots, for an https
    /// JWKS (a private CA).
    pub user_jwks_ca_file: Option<String>,
    /// The `aud` a user JWT must carry, when set.
    pub user_jwt_audience: Option<String>,
    /// The `iss` a user JWT must carry, when set.
    pub user_jwt_issuer: Option<String>,
    /// Clock slack allowed when a user JWT's `exp` and `nbf` are checked.
    pub user_jwt_leeway_secs: u64,
    /// The secret the payment provider signs its notifications with
    /// (`POST /api/payments/notify`); unset, every notification is refused
    /// and no order can become PAID.
    pub payment_webhook_secret: Option<Secret>,
    /// How far a notification's signed time may be from now, either way.
    pub payment_signature_tolerance_secs: u64,
    /// Who a request acts for when no identity is configured.
    pub auth: AuthSettings,
    /// Largest accepted request body.
    pub body_limit_bytes: usize,
    /// Lua script or lock.
    pub deduction: DeductionMode,
    /// Most requests of one sale decided in one script call (adaptive: a
    /// batch forms only while a call for the sale is in flight); 1 turns
    /// batching off.
    pub deduct_batch_max: usize,
    /// Most requests of one sale waiting for a script call; beyond it a
    /// request is answered 503 at once, nothing deducted.
    pub deduct_queue_max: usize,
    /// How long a deduction whose answer was not heard is asked again (by
    /// its call id: it is never applied twice) before it is voided and its
    /// buyers answered 503, nothing kept.
    pub deduct_resolve_ms: u64,
    /// Lease and wait of the lock deduction.
    pub lock: LockSettings,
    /// Lease and wait of the warm-up lock.
    pub warmup_lock: LockSettings,
    pub rate_limit: RateLimitSettings,
    pub cors: CorsSettings,
    /// Deadlines and caps of client connections.
    pub connections: ConnectionSettings,
    /// Throttling of failed admin authentications.
    pub admin_auth: AdminAuthSettings,
    /// The operators' console: its in-flight budget, its database pool,
    /// the tool its dead-letter runs are.
    pub console: ConsoleSettings,
    /// Limits and the pool of buyers' status reads.
    pub status_reads: StatusReadSettings,
    /// The waiting rooms: the tokens' signing key, the admission passes.
    pub admission: AdmissionSettings,
    /// Warm-ups cut short, finished by the edges themselves.
    pub warmup_resume: WarmupResumeSettings,
    /// The edge is reached through TLS (a terminating proxy or ingress):
    /// the dashboard's session cookie is then `Secure`.
    pub behind_tls: bool,
    /// The dead-letter tools the dashboard runs (as `seckillctl dlq`'s).
    pub dlq: seckill_shared::dlq::DlqToolSettings,
    /// How long a sale's local sold-out flag is trusted before Redis is asked
    /// again, so restored units sell within about this long.
    pub sold_out_flag_ms: u64,
    /// Create the topics at start when missing (off: a deployment whose
    /// topics are managed elsewhere).
    pub ensure_topics: bool,
    /// How long in-flight requests, the producer flush and background tasks
    /// may take at shutdown.
    pub shutdown_timeout_ms: u64,
    /// Redis, Kafka, PostgreSQL (warm-up, status fall-back, reconciliation)
    /// and logging.
    #[serde(flatten)]
    pub servers: Servers,
}

impl Settings {
    /// Whether the operators' console shares the buyers' listener
    /// (`admin_addr` set to `http_addr`, a port other than 0).
    pub fn console_shares_address(&self) -> bool {
        self.admin_addr.trim() == self.http_addr.trim() && !self.http_addr.trim().ends_with(":0")
    }

    /// Refuses what would start an edge that is open, or closed, by
    /// accident: a secret that is set but empty.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_secrets()?;
        let identities =
            [self.user_jwt_secret.is_some(), self.user_jwks.is_some(), self.auth.gateway_user_header.is_some()];
        if identities.iter().filter(|set| **set).count() > 1 {
            anyhow::bail!(
                "user identity: set one of SECKILL_USER_JWT_SECRET, SECKILL_USER_JWKS and auth.gateway_user_header"
            );
        }
        if let Some(jwks) = self.user_jwks.as_deref() {
            if jwks.starts_with("http://") {
                anyhow::bail!("SECKILL_USER_JWKS: keys are fetched over https only, not {jwks}");
            }
            if jwks.starts_with("https://") {
                crate::jwks_fetch::Fetcher::new(jwks, self.user_jwks_ca_file.as_deref())?;
            }
        }
        if self.auth.gateway_user_header.is_some() && self.auth.trusted_proxies.is_empty() {
            anyhow::bail!("auth.gateway_user_header needs auth.trusted_proxies: the gateway's addresses");
        }
        crate::client_addr::TrustedProxies::parse(&self.auth.trusted_proxies, self.auth.client_address_header)?;
        let max_batch = seckill_shared::stock::MAX_DEDUCT_BATCH;
        if !(1..=max_batch).contains(&self.deduct_batch_max) {
            anyhow::bail!("deduct_batch_max must be 1 to {max_batch} (one script call), not {}", self.deduct_batch_max);
        }
        let connections = &self.connections;
        for (value, name) in [
            (connections.header_timeout_ms, "connections.header_timeout_ms"),
            (connections.body_timeout_ms, "connections.body_timeout_ms"),
            (connections.write_timeout_ms, "connections.write_timeout_ms"),
            (connections.max_connections as u64, "connections.max_connections"),
            (connections.max_in_flight as u64, "connections.max_in_flight"),
            (u64::from(self.status_reads.pool_connections), "status_reads.pool_connections"),
            (self.console.max_in_flight as u64, "console.max_in_flight"),
            (u64::from(self.console.pool_connections), "console.pool_connections"),
            (self.console.run_deadline_secs, "console.run_deadline_secs"),
            (self.admission.tick_ms, "admission.tick_ms"),
            (self.admission.challenge_ttl_secs, "admission.challenge_ttl_secs"),
            (self.warmup_resume.every_ms, "warmup_resume.every_ms"),
            (self.warmup_resume.lease_ms, "warmup_resume.lease_ms"),
        ] {
            if value == 0 {
                anyhow::bail!("{name} must be above 0");
            }
        }
        for origin in &self.cors.allowed_origins {
            let plausible = origin == "*"
                || ((origin.starts_with("https://") || origin.starts_with("http://"))
                    && !origin.ends_with('/')
                    && origin.bytes().all(|b| b.is_ascii_graphic()));
            if !plausible {
                anyhow::bail!(
                    "cors.allowed_origins: '{origin}' is not an origin (scheme://host[:port], no path) or '*'"
                );
            }
        }
        Ok(())
    }

    /// Each secret set is not empty and long enough.
    fn validate_secrets(&self) -> anyhow::Result<()> {
        for (value, name) in [
            (&self.admin_token, "SECKILL_ADMIN_TOKEN (admin_token)"),
            (&self.user_jwt_secret, "SECKILL_USER_JWT_SECRET (user_jwt_secret)"),
            (&self.payment_webhook_secret, "SECKILL_PAYMENT_WEBHOOK_SECRET (payment_webhook_secret)"),
            (&self.admission.signing_key, "SECKILL__ADMISSION__SIGNING_KEY (admission.signing_key)"),
        ] {
            if value.as_ref().is_some_and(|v| v.expose().trim().is_empty()) {
                anyhow::bail!("{name} is set but empty; unset it, or give it a value");
            }
        }
        for (value, name, shortest) in [
            (&self.admin_token, "SECKILL_ADMIN_TOKEN (admin_token)", MIN_ADMIN_TOKEN_LEN),
            (&self.user_jwt_secret, "SECKILL_USER_JWT_SECRET (user_jwt_secret)", MIN_JWT_SECRET_LEN),
            (
                &self.payment_webhook_secret,
                "SECKILL_PAYMENT_WEBHOOK_SECRET (payment_webhook_secret)",
                MIN_WEBHOOK_SECRET_LEN,
            ),
            (&self.admission.signing_key, "SECKILL__ADMISSION__SIGNING_KEY (admission.signing_key)", 32),
        ] {
            if let Some(length) = value.as_ref().map(|v| v.expose().trim().len()).filter(|length| *length < shortest) {
                anyhow::bail!("{name} has {length} characters; at least {shortest} are needed (openssl rand -hex 16)");
            }
        }
        Ok(())
    }
}

impl Settings {
    /// The secrets without the whitespace around them: a Kubernetes Secret
    /// made from a file keeps the file's last newline, and a token compared
    /// with it would never match.
    pub fn trim_secrets(&mut self) {
        for secret in [
            &mut self.admin_token,
            &mut self.user_jwt_secret,
            &mut self.payment_webhook_secret,
            &mut self.admission.signing_key,
        ]
        .into_iter()
        .flatten()
        {
            let trimmed = secret.expose().trim();
            if trimmed.len() != secret.expose().len() {
                *secret = Secret::new(trimmed);
            }
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            http_addr: "127.0.0.1:8080".into(),
            admin_addr: "127.0.0.1:9080".into(),
            admin_token: None,
            user_jwt_secret: None,
            payment_webhook_secret: None,
            user_jwks: None,
            user_jwks_refresh_secs: 300,
            user_jwks_ca_file: None,
            user_jwt_audience: None,
            user_jwt_issuer: None,
            user_jwt_leeway_secs: 30,
            payment_signature_tolerance_secs: 300,
            auth: AuthSettings::default(),
            body_limit_bytes: 4096,
            deduction: DeductionMode::Lua,
            deduct_batch_max: 128,
            deduct_queue_max: 2_048,
            deduct_resolve_ms: 10_000,
            lock: LockSettings::default(),
            warmup_lock: LockSettings::warmup(),
            rate_limit: RateLimitSettings::default(),
            cors: CorsSettings::default(),
            connections: ConnectionSettings::default(),
            admin_auth: AdminAuthSettings::default(),
            console: ConsoleSettings::default(),
            status_reads: StatusReadSettings::default(),
            admission: AdmissionSettings::default(),
            warmup_resume: Default::default(),
            behind_tls: false,
            dlq: Default::default(),
            sold_out_flag_ms: 1_000,
            ensure_topics: true,
            shutdown_timeout_ms: 10_000,
            servers: Servers::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill_shared::config::{load_from, UnknownKeys};

    #[test]
    fn one_user_identity_at_a_time_and_each_complete() {
        let secret = Some("a-jwt-secret-of-at-least-32-bytes-long".into());
        let two = Settings { user_jwt_secret: secret, user_jwks: Some("/keys.json".into()), ..Settings::default() };
        assert!(two.validate().unwrap_err().to_string().contains("set one of"));
        let plain = Settings { user_jwks: Some("http://id.example/jwks.json".into()), ..Settings::default() };
        assert!(plain.validate().unwrap_err().to_string().contains("https only"));
        Settings { user_jwks: Some("https://id.example/jwks.json".into()), ..Settings::default() }.validate().unwrap();
        let mut gateway = Settings::default();
        gateway.auth.gateway_user_header = Some("x-user-id".into());
        assert!(gateway.validate().unwrap_err().to_string().contains("trusted_proxies"));
        gateway.auth.trusted_proxies = vec!["10.0.0.300".into()];
        assert!(gateway.validate().unwrap_err().to_string().contains("not an IP address"));
        gateway.auth.trusted_proxies = vec!["10.0.0.3".into(), "::1".into(), "10.0.0.0/8".into()];
        gateway.validate().unwrap();
        let mut proxied = Settings::default();
        proxied.auth.trusted_proxies = vec!["10.0.0.0/8".into()];
        proxied.validate().expect("trusted proxies without a gateway header");
    }

    #[test]
    fn trusted_proxies_come_as_a_list_or_comma_separated() {
        let vars = [
            ("SECKILL__AUTH__TRUSTED_PROXIES".to_owned(), "127.0.0.1/32, 10.0.0.0/8".to_owned()),
            ("SECKILL__AUTH__CLIENT_ADDRESS_HEADER".to_owned(), "forwarded".to_owned()),
        ];
        let settings: Settings = load_from(None, &vars, UnknownKeys::Refuse).unwrap();
        assert_eq!(settings.auth.trusted_proxies, ["127.0.0.1/32", "10.0.0.0/8"]);
        assert_eq!(settings.auth.client_address_header, crate::client_addr::ForwardedHeader::Forwarded);
        settings.validate().unwrap();
        let vars = [("SECKILL__AUTH__TRUSTED_PROXIES".to_owned(), "10.0.0.0/40".to_owned())];
        let settings: Settings = load_from(None, &vars, UnknownKeys::Refuse).unwrap();
        assert!(settings.validate().unwrap_err().to_string().contains("CIDR"));
    }

    #[test]
    fn allowed_origins_come_as_a_list_or_comma_separated() {
        let vars =
            [("SECKILL__CORS__ALLOWED_ORIGINS".to_owned(), "https://shop.example, https://m.shop.example".to_owned())];
        let settings: Settings = load_from(None, &vars, UnknownKeys::Refuse).unwrap();
        assert_eq!(settings.cors.allowed_origins, ["https://shop.example", "https://m.shop.example"]);
        settings.validate().unwrap();
        for bad in ["shop.example", "https://shop.example/", "https://shop example"] {
            let settings = Settings {
                cors: CorsSettings { allowed_origins: vec![bad.into()], ..CorsSettings::default() },
                ..Settings::default()
            };
            assert!(settings.validate().is_err(), "{bad} is not an origin");
        }
    }
}
