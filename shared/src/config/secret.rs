//! Secrets in settings: the admin token, the user JWT secret, the payment
//! notifications' signing secret (and any later one). Each is a [`Secret`]:
//! `Debug`, logs and `--print-config` show it masked, and code reads it only
//! through [`Secret::expose`]. Passwords in URLs are masked for messages by
//! [`masked_url`].

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize, Serializer};

/// The settings' secrets, by key: read as text whatever they look like,
/// and masked wherever settings are shown (`--print-config`).
pub(crate) const SECRET_KEYS: [&str; 3] = ["admin_token", "user_jwt_secret", "payment_webhook_secret"];

/// A secret setting. Serialized, it is the mask: settings written out
/// (`--print-config`) never carry it.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(SecretString);

impl Secret {
    /// What a secret is shown as.
    pub const MASK: &'static str = "********";

    /// A secret of `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Self::MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(Self::MASK)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

/// `url` with its password masked, for messages.
pub fn masked_url(url: &str) -> String {
    mask_url_password(url).unwrap_or_else(|| url.to_owned())
}

/// `scheme://user:password@host/...` with the password masked; `None` when
/// the text carries no password.
pub(crate) fn mask_url_password(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once("://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}:{}@{host}{path}", Secret::MASK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_never_shown() {
        let secret = Secret::new("s3cret-value");
        assert_eq!(format!("{secret:?}"), "********");
        assert_eq!(serde_json::to_string(&secret).unwrap(), r#""********""#);
        let read: Secret = serde_json::from_str(r#""s3cret-value""#).unwrap();
        assert_eq!(read.expose(), "s3cret-value");
    }
}
