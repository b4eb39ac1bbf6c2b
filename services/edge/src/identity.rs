//! Who a buyer's request is for, as the shop's identity provider says:
//!
//! - **HS256** with `SECKILL_USER_JWT_SECRET` (a shared secret);
//! - **a JWKS** (`SECKILL_USER_JWKS`: the provider's public keys, an
//!   https URL ([`crate::jwks_fetch`]) or a file, fetched or read again
//!   every `user_jwks_refresh_secs`, so keys rotate without a restart;
//!   until a URL's first fetch every token is refused), RS256 and ES256.
//!   The algorithm is the key's — its `alg`, else its type — never the
//!   token's: a token whose header names another (an HS256 token "signed"
//!   with the public key) is refused;
//! - **a gateway**: the user id from a header the shop's API gateway sets
//!   (`auth.gateway_user_header`), believed only when the TCP peer is one of
//!   `auth.trusted_proxies`: from anyone else the header is removed before
//!   any handler sees it ([`Identity::drop_untrusted_header`]).
//!
//! For the JWTs, `exp` and `sub` are required, `nbf` honoured, and `aud`
//! and `iss` required and checked when `SECKILL_USER_JWT_AUDIENCE` /
//! `SECKILL_USER_JWT_ISSUER` are set; times are compared with
//! `user_jwt_leeway_secs` of slack. A refusal says only "invalid token";
//! the library's reason goes to the log.

use crate::client_addr::TrustedProxies;
use crate::settings::Settings;
use axum::http::HeaderMap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::RwLock;
use seckill_shared::domain::UserId;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How requests name their user.
pub enum Identity {
    /// HS256 tokens with the shared secret.
    Secret(Arc<DecodingKey>),
    /// Tokens signed by a key of the provider's set.
    Keys(Arc<KeySet>),
    /// The gateway's header, from trusted proxies only.
    Gateway { header: String, trusted: TrustedProxies },
}

/// Why a request names no user (the client hears only the first words).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("missing bearer token")]
    Missing,
    #[error("invalid token")]
    Invalid,
    #[error("token subject is not a user id")]
    Subject,
}

/// Where the keys come from.
enum Source {
    File(String),
    Url(crate::jwks_fetch::Fetcher),
}

/// One key of the provider's set, ready to verify with (decoded once, when
/// the set is loaded, not per request).
struct Verifier {
    kid: Option<String>,
    key: Arc<DecodingKey>,
    algorithm: Algorithm,
}

/// The provider's keys, as last read or fetched.
pub struct KeySet {
    source: Source,
    keys: RwLock<Vec<Verifier>>,
}

/// How soon a URL whose first fetch failed is asked again.
const FIRST_FETCH_RETRY: Duration = Duration::from_secs(2);

impl KeySet {
    /// A file is read now (a set that does not parse is an error at start);
    /// a URL is fetched by [`KeySet::refresh_every`], and until then no
    /// token is accepted.
    pub fn load(source: &str, ca_file: Option<&str>) -> anyhow::Result<Self> {
        if source.starts_with("https://") {
            let fetcher = crate::jwks_fetch::Fetcher::new(source, ca_file)?;
            return Ok(Self { source: Source::Url(fetcher), keys: RwLock::new(Vec::new()) });
        }
        Ok(Self { keys: RwLock::new(parse(source, &read_file(source)?)?), source: Source::File(source.to_owned()) })
    }

    /// Whether any key is loaded (`/readyz`: an edge that would refuse
    /// every buyer is not ready).
    pub fn loaded(&self) -> bool {
        !self.keys.read().is_empty()
    }

    /// Reads or fetches the keys again; a source that fails or no longer
    /// parses keeps the keys it had (and says so). Whether it loaded.
    pub async fn refresh(&self) -> bool {
        let fresh = match &self.source {
            Source::File(path) => read_file(path).and_then(|text| parse(path, &text)),
            Source::Url(fetcher) => match fetcher.fetch().await {
                Ok(body) => parse(&fetcher.url(), &String::from_utf8_lossy(&body)),
                Err(error) => Err(anyhow::anyhow!("fetching SECKILL_USER_JWKS {}: {error:#}", fetcher.url())),
            },
        };
        match fresh {
            Ok(keys) => {
                *self.keys.write() = keys;
                true
            }
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "the JWKS could not be loaded again; keeping the keys it had");
                false
            }
        }
    }

    /// Loads the keys again every `every` until shutdown (a URL not fetched
    /// yet: at once, then every two seconds until it is).
    pub async fn refresh_every(
        self: Arc<Self>,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), std::convert::Infallible> {
        let mut unloaded = matches!(self.source, Source::Url(_));
        loop {
            if unloaded {
                unloaded = !self.refresh().await;
            }
            let wait = if unloaded { FIRST_FETCH_RETRY.min(every) } else { every };
            if !seckill_shared::ops::shutdown::pause(&shutdown, wait).await {
                return Ok(());
            }
            if !unloaded {
                self.refresh().await;
            }
        }
    }

    /// The key a token's header points at, and the algorithm it verifies:
    /// its `kid`, or the only key when the set has one.
    fn key_for(&self, kid: Option<&str>) -> Option<(Arc<DecodingKey>, Algorithm)> {
        let keys = self.keys.read();
        let verifier = match kid {
            Some(kid) => keys.iter().find(|v| v.kid.as_deref() == Some(kid))?,
            None if keys.len() == 1 => &keys[0],
            None => return None,
        };
        Some((verifier.key.clone(), verifier.algorithm))
    }
}

fn read_file(path: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading SECKILL_USER_JWKS {path}: {e}"))
}

/// The set's RS256 and ES256 keys, decoded; the others verify nothing.
fn parse(source: &str, text: &str) -> anyhow::Result<Vec<Verifier>> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("SECKILL_USER_JWKS {source} is not a JWK set: {e}"))?;
    let verifiers: Vec<Verifier> = set
        .keys
        .iter()
        .filter_map(|jwk| {
            let algorithm = algorithm_of(jwk)?;
            let key = DecodingKey::from_jwk(jwk).ok()?;
            Some(Verifier { kid: jwk.common.key_id.clone(), key: Arc::new(key), algorithm })
        })
        .collect();
    if verifiers.is_empty() {
        anyhow::bail!("SECKILL_USER_JWKS {source} holds no RS256 or ES256 key");
    }
    Ok(verifiers)
}

/// The algorithm a key verifies: its own `alg` when it names RS256 or
/// ES256, else what its type implies (RSA: RS256; EC P-256: ES256); other
/// keys verify nothing.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
        _ => return None,
    };
    match jwk.common.key_algorithm {
        None => Some(implied),
        Some(KeyAlgorithm::RS256) if implied == Algorithm::RS256 => Some(implied),
        Some(KeyAlgorithm::ES256) if implied == Algorithm::ES256 => Some(implied),
        Some(_) => None,
    }
}

impl Identity {
    /// The identity the settings configure, if any (validated: at most one).
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Option<Self>> {
        if let Some(secret) = settings.user_jwt_secret.as_ref().map(seckill_shared::config::Secret::expose) {
            let key = DecodingKey::from_secret(secret.as_bytes())
                .map_err(|e| anyhow::anyhow!("SECKILL_USER_JWT_SECRET is not a usable HS256 key: {e}"))?;
            return Ok(Some(Self::Secret(Arc::new(key))));
        }
        if let Some(path) = settings.user_jwks.as_deref() {
            return Ok(Some(Self::Keys(Arc::new(KeySet::load(path, settings.user_jwks_ca_file.as_deref())?))));
        }
        if let Some(header) = settings.auth.gateway_user_header.as_deref() {
            let trusted = TrustedProxies::parse(&settings.auth.trusted_proxies, settings.auth.client_address_header)?;
            return Ok(Some(Self::Gateway { header: header.to_ascii_lowercase(), trusted }));
        }
        Ok(None)
    }

    /// In gateway mode, removes the gateway's header from a request whose
    /// TCP peer is not a trusted proxy: a client cannot name its user.
    pub fn drop_untrusted_header(&self, headers: &mut HeaderMap, peer: Option<IpAddr>) {
        if let Self::Gateway { header, trusted } = self {
            if !peer.is_some_and(|p| trusted.trusts(p)) && headers.remove(header.as_str()).is_some() {
                tracing::warn!(?peer, "a gateway user header from an untrusted address was ignored");
            }
        }
    }

    /// The user the request is for (the gateway's header has been through
    /// [`Identity::drop_untrusted_header`]).
    pub fn user(&self, settings: &Settings, headers: &HeaderMap) -> Result<UserId, Refused> {
        let (key, algorithm) = match self {
            Self::Gateway { header, .. } => {
                let value = headers.get(header.as_str()).ok_or(Refused::Missing)?;
                return value.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or(Refused::Subject);
            }
            Self::Secret(key) => (Arc::clone(key), Algorithm::HS256),
            Self::Keys(keys) => {
                let token = bearer(headers).ok_or(Refused::Missing)?;
                let header = jsonwebtoken::decode_header(token).map_err(|_| Refused::Invalid)?;
                let (key, algorithm) = keys.key_for(header.kid.as_deref()).ok_or(Refused::Invalid)?;
                if header.alg != algorithm {
                    tracing::info!(token_alg = ?header.alg, key_alg = ?algorithm, "user token refused: not the key's algorithm");
                    return Err(Refused::Invalid);
                }
                (key, algorithm)
            }
        };
        let token = bearer(headers).ok_or(Refused::Missing)?;
        let validation = validation(settings, algorithm);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|error| {
            tracing::info!(%error, "user token refused");
            Refused::Invalid
        })?;
        let subject = match &data.claims.sub {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(Refused::Subject),
        };
        subject.parse().map_err(|_| Refused::Subject)
    }
}

/// What a token must carry and satisfy: `exp` and `sub` always, `aud` and
/// `iss` whenever they are configured (jsonwebtoken checks a claim's value
/// only when the claim is present: without naming them required, a token
/// issued for another application, with no `aud`, would pass), `nbf`
/// honoured, each time compared with `user_jwt_leeway_secs` of slack.
fn validation(settings: &Settings, algorithm: Algorithm) -> Validation {
    let mut validation = Validation::new(algorithm);
    validation.validate_nbf = true;
    validation.leeway = settings.user_jwt_leeway_secs;
    let mut required = vec!["exp", "sub"];
    match settings.user_jwt_audience.as_deref() {
        Some(audience) => {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    if let Some(issuer) = settings.user_jwt_issuer.as_deref() {
        validation.set_issuer(&[issuer]);
        required.push("iss");
    }
    validation.set_required_spec_claims(&required);
    validation
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: serde_json::Value,
}

/// The `Authorization: Bearer` token.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}
