//! Browser sessions for the dashboard: the admin token, posted once to
//! `/admin/login` with the operator's name, buys a random session id kept
//! in an HttpOnly, SameSite=Strict cookie scoped to `/admin` — the token
//! itself never sits in the browser or in a URL. The name is who the audit
//! trail says acted. Sessions live in this edge's memory (a restart or
//! another edge asks to sign in again), expire, and are few.

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The cookie's name.
pub const COOKIE_NAME: &str = "seckill_admin";
/// How long a session lasts.
const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept; the oldest goes when a new one would exceed it.
const MAX_SESSIONS: usize = 256;

/// An operator's name as the audit trail keeps it, whoever gives it (the
/// page's sign-in, a script with the admin token): trimmed, without
/// control characters (a terminal's escapes, a forged log line), at most
/// 64 characters; `None` when nothing is left.
pub fn operator_name(given: &str) -> Option<String> {
    let name: String = given.trim().chars().filter(|c| !c.is_control()).take(64).collect();
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// One signed-in browser: until when, and who.
struct Session {
    expires: Instant,
    operator: String,
}

/// The sessions of this edge.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, Session>>,
    /// The cookie is `Secure` (the edge is reached through TLS).
    secure: bool,
}

impl Sessions {
    /// No session yet; cookies `Secure` when `secure`.
    pub fn new(secure: bool) -> Self {
        Self { live: Mutex::default(), secure }
    }

    /// Opens a session for `operator`; returns the `Set-Cookie` value that
    /// carries it.
    pub fn open(&self, operator: &str) -> HeaderValue {
        let id = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
        let mut live = self.live.lock();
        let now = Instant::now();
        live.retain(|_, session| session.expires > now);
        if live.len() >= MAX_SESSIONS {
            if let Some(oldest) = live.iter().min_by_key(|(_, session)| session.expires).map(|(id, _)| id.clone()) {
                live.remove(&oldest);
            }
        }
        live.insert(id.clone(), Session { expires: now + LIFETIME, operator: operator.to_owned() });
        self.cookie(&id, LIFETIME.as_secs())
    }

    /// Whether the request carries a live session.
    pub fn is_signed_in(&self, headers: &HeaderMap) -> bool {
        self.operator(headers).is_some()
    }

    /// Who signed in the request's live session.
    pub fn operator(&self, headers: &HeaderMap) -> Option<String> {
        let id = session_id(headers)?;
        self.live.lock().get(id).filter(|session| session.expires > Instant::now()).map(|s| s.operator.clone())
    }

    /// Ends the request's session; returns the `Set-Cookie` value that
    /// clears the cookie.
    pub fn close(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(id) = session_id(headers) {
            self.live.lock().remove(id);
        }
        self.cookie("", 0)
    }

    fn cookie(&self, id: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{COOKIE_NAME}={id}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        ))
        .expect("a cookie of hex digits")
    }
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_opens_is_recognised_and_closes() {
        let sessions = Sessions::default();
        let set = sessions.open("ana");
        let set = set.to_str().unwrap();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/admin"), "{set}");
        let id = set.split(';').next().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, HeaderValue::from_str(&format!("other=1; {id}")).unwrap());
        assert!(sessions.is_signed_in(&headers));
        assert_eq!(sessions.operator(&headers).as_deref(), Some("ana"), "who signed in");
        let mut forged = HeaderMap::new();
        forged.insert(COOKIE, HeaderValue::from_static("seckill_admin=00"));
        assert!(!sessions.is_signed_in(&forged));
        assert!(sessions.close(&headers).to_str().unwrap().contains("Max-Age=0"));
        assert!(!sessions.is_signed_in(&headers));
    }
}
