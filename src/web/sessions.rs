//! Signed-in browsers, kept on the server: the session cookie is a random value, and only a
//! session in this table lets its browser in. Signing out removes it, so a copied cookie is
//! worthless from that moment (a signed cookie alone would stay good until it expired).
//!
//! The table holds SHA-256 digests of the cookie values, never the values: looking one up
//! takes time that says nothing about the values held, and a memory dump holds no cookie.
//! It is bounded ([`MAX_SESSIONS`]); when full, expired sessions go first, then the oldest.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::error::Result;

use super::keys::random_text;

/// How long a sign-in lasts: 12 hours.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions held at most; signing in past it ends the oldest.
pub(crate) const MAX_SESSIONS: usize = 1024;
/// Random bytes in a session cookie value.
const COOKIE_BYTES: usize = 32;

/// A session's name in the table: the SHA-256 of its cookie value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey([hidden])")
    }
}

impl SessionKey {
    fn of(cookie_value: &str) -> SessionKey {
        SessionKey(Sha256::digest(cookie_value.as_bytes()).into())
    }

    /// Text that names the session, for signing (the CSRF token of the session).
    pub(crate) fn as_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }
}

/// The table of live sessions.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Expiry of each session.
    table: Mutex<HashMap<SessionKey, Instant>>,
}

impl Sessions {
    /// A new session valid until `now` + [`SESSION_TTL`]: its cookie value and key.
    pub(crate) fn create(&self, now: Instant) -> Result<(String, SessionKey)> {
        let value = random_text(COOKIE_BYTES)?;
        let key = SessionKey::of(&value);
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, expiry| now < *expiry);
        }
        if table.len() >= MAX_SESSIONS {
            // All live: the one ending first is the oldest (every session gets the same TTL).
            if let Some(oldest) = table.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k) {
                table.remove(&oldest);
            }
        }
        table.insert(key, now + SESSION_TTL);
        Ok((value, key))
    }

    /// The live session of this cookie value; an expired one is removed.
    pub(crate) fn find(&self, cookie_value: &str, now: Instant) -> Option<SessionKey> {
        let key = SessionKey::of(cookie_value);
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        match table.get(&key) {
            Some(expiry) if now < *expiry => Some(key),
            Some(_) => {
                table.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends a session (sign-out).
    pub(crate) fn revoke(&self, key: SessionKey) {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_found_until_revoked_or_expired() -> Result<()> {
        let sessions = Sessions::default();
        let now = Instant::now();
        let (value, key) = sessions.create(now)?;
        assert_eq!(sessions.find(&value, now), Some(key));
        assert_eq!(sessions.find("forged", now), None);
        assert_eq!(sessions.find(&value, now + SESSION_TTL), None, "expired");
        assert_eq!(sessions.len(), 0, "the expired session was removed");
        let (value, key) = sessions.create(now)?;
        sessions.revoke(key);
        assert_eq!(sessions.find(&value, now), None, "revoked");
        Ok(())
    }

    #[test]
    fn the_table_is_bounded_and_drops_the_oldest() -> Result<()> {
        let sessions = Sessions::default();
        let start = Instant::now();
        let (first, _) = sessions.create(start)?;
        let mut last = String::new();
        for i in 1..=MAX_SESSIONS as u64 {
            last = sessions.create(start + Duration::from_millis(i))?.0;
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        let now = start + Duration::from_secs(1);
        assert_eq!(sessions.find(&first, now), None, "the oldest made room");
        assert!(sessions.find(&last, now).is_some());
        Ok(())
    }
}
