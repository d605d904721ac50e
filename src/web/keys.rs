//! The dashboard process's secret: random at start, never stored, so a restart signs every
//! browser out and invalidates every form. Session cookies, CSRF tokens and flash messages
//! are HMAC-SHA256 signatures under it, each with its own domain string so one can never
//! stand in for another.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};

/// Random bytes as URL-safe base64 (no padding): cookie values and nonces.
pub(crate) fn random_text(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("no random bytes for the dashboard: {e}"),
        )
    })?;
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

/// True when `a` and `b` are equal, in time that depends on neither their content nor their
/// lengths (both are hashed to 32 bytes first, then every byte is compared).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The per-process signing key.
pub(crate) struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([hidden])")
    }
}

impl Secret {
    /// A fresh key from the operating system's random source.
    pub(crate) fn random() -> Result<Secret> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("no random bytes for the dashboard's key: {e}"),
            )
        })?;
        Ok(Secret(key))
    }

    /// HMAC-SHA256 of `data` under the key, for `domain`, as URL-safe base64.
    pub(crate) fn sign(&self, domain: &str, data: &str) -> String {
        // A 32-byte key is always accepted; the fallback only satisfies the type.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0)
            .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
        mac.update(domain.as_bytes());
        mac.update(&[0]);
        mac.update(data.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// True when `signature` is [`sign`](Secret::sign)`(domain, data)`, compared in constant
    /// time.
    pub(crate) fn verify(&self, domain: &str, data: &str, signature: &str) -> bool {
        constant_time_eq(self.sign(domain, data).as_bytes(), signature.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_depend_on_key_domain_and_data() -> Result<()> {
        let (a, b) = (Secret::random()?, Secret::random()?);
        let sig = a.sign("csrf", "cookie");
        assert!(a.verify("csrf", "cookie", &sig));
        assert!(!b.verify("csrf", "cookie", &sig));
        assert!(!a.verify("session", "cookie", &sig));
        assert!(!a.verify("csrf", "cookie2", &sig));
        assert!(!a.verify("csrf", "cookie", ""));
        Ok(())
    }

    #[test]
    fn equality_is_exact() {
        assert!(constant_time_eq(b"token", b"token"));
        assert!(!constant_time_eq(b"token", b"token "));
        assert!(!constant_time_eq(b"", b"x"));
        assert_ne!(random_text(16).ok(), random_text(16).ok());
    }
}
