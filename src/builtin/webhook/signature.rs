//! Standard Webhooks signatures: [`sign`] for the sender, [`verify`] for receivers.
//!
//! A request carries `webhook-id`, `webhook-timestamp` (Unix seconds) and
//! `webhook-signature`: space-separated `v1,<base64 HMAC-SHA256>` entries, each over
//! `id.timestamp.body` with one secret. Secrets are `whsec_` + base64 of the key bytes.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, ErrorKind, Result};

/// The prefix of a secret in the Standard Webhooks form.
pub const SECRET_PREFIX: &str = "whsec_";
/// How far a request's timestamp may be from the receiver's clock, either way, before
/// [`verify`] refuses it (replay protection), unless the receiver says otherwise: 5 minutes,
/// as the Standard Webhooks specification recommends.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);
/// Key bytes a secret must have to be registered (the specification's range).
pub(crate) const SECRET_BYTES: std::ops::RangeInclusive<usize> = 24..=64;
/// Random bytes in a secret made by [`generate_secret`].
const GENERATED_SECRET_BYTES: usize = 32;

/// Why [`verify`] refused a request (or [`sign`] a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureError {
    /// The secret is not `whsec_` + base64 (or is empty). The text says what is wrong.
    InvalidSecret(String),
    /// A header is empty or missing; names it.
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not an integer number of seconds.
    InvalidTimestamp(String),
    /// The timestamp is older than the tolerance: a replay, or a very late request.
    TooOld {
        /// Seconds between the timestamp and now.
        age_secs: i64,
    },
    /// The timestamp is further in the future than the tolerance.
    TooNew {
        /// Seconds between now and the timestamp.
        ahead_secs: i64,
    },
    /// No `v1` signature in the header matches the body with this secret: the body or a
    /// header was changed, or the secret is wrong.
    NoMatchingSignature,
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::InvalidSecret(why) => write!(f, "invalid webhook secret: {why}"),
            SignatureError::MissingHeader(name) => write!(f, "missing {name} header"),
            SignatureError::InvalidTimestamp(value) => {
                write!(
                    f,
                    "webhook-timestamp {value:?} is not a Unix time in seconds"
                )
            }
            SignatureError::TooOld { age_secs } => write!(
                f,
                "webhook-timestamp is {age_secs} s old, beyond the tolerance (replayed?)"
            ),
            SignatureError::TooNew { ahead_secs } => write!(
                f,
                "webhook-timestamp is {ahead_secs} s in the future, beyond the tolerance"
            ),
            SignatureError::NoMatchingSignature => {
                f.write_str("no webhook-signature matches the request")
            }
        }
    }
}

impl std::error::Error for SignatureError {}

/// The key bytes of a secret: `whsec_` + base64 (the prefix is optional here, as in the
/// reference libraries).
pub(crate) fn key_of(secret: &str) -> std::result::Result<Vec<u8>, SignatureError> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    let key = STANDARD
        .decode(encoded.trim())
        .map_err(|e| SignatureError::InvalidSecret(format!("not base64 after whsec_: {e}")))?;
    if key.is_empty() {
        return Err(SignatureError::InvalidSecret("the key is empty".into()));
    }
    Ok(key)
}

/// Checks a secret for registration: `whsec_` + base64 of 24 to 64 bytes.
pub(crate) fn check_new_secret(secret: &str) -> std::result::Result<(), String> {
    if !secret.starts_with(SECRET_PREFIX) {
        return Err("it must start with whsec_ (make one with webhook::generate_secret)".into());
    }
    let key = key_of(secret).map_err(|e| e.to_string())?;
    if !SECRET_BYTES.contains(&key.len()) {
        return Err(format!(
            "its key is {} bytes; use {} to {} random bytes",
            key.len(),
            SECRET_BYTES.start(),
            SECRET_BYTES.end()
        ));
    }
    Ok(())
}

fn mac(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so this cannot fail; the fallback is never used.
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-signature` entry (`v1,<base64>`) of a request: HMAC-SHA256 over
/// `id.timestamp.body` with `secret` (`whsec_` + base64).
///
/// ```
/// use litejobs::builtin::webhook::sign;
/// // The Standard Webhooks specification's test vector:
/// let signature = sign(
///     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
///     "msg_p5jXN8AQM9LWM0D4loKWxJek",
///     1614265330,
///     br#"{"test": 2432232314}"#,
/// )?;
/// assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
/// # Ok::<(), litejobs::builtin::webhook::SignatureError>(())
/// ```
///
/// # Errors
/// [`SignatureError::InvalidSecret`] when the secret is not base64.
pub fn sign(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> std::result::Result<String, SignatureError> {
    let key = key_of(secret)?;
    let digest = mac(&key, id, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    Ok(format!("v1,{}", STANDARD.encode(digest)))
}

/// Verifies a webhook request as a receiver: the `webhook-id`, `webhook-timestamp` and
/// `webhook-signature` header values, the raw body bytes, the receiver's clock `now`, and
/// how far the timestamp may be from it (`tolerance`, usually [`DEFAULT_TOLERANCE`]).
///
/// The request passes when its timestamp is within the tolerance and **any** `v1`
/// signature in the space-separated header matches, so a sender can sign with an old and a
/// new secret while secrets rotate. Signatures are compared in constant time.
///
/// A request replayed within the tolerance still passes: receivers that must act once
/// should also remember the `webhook-id`s they have handled (it stays the same across
/// retries).
///
/// ```
/// use litejobs::builtin::webhook::{verify, SignatureError, DEFAULT_TOLERANCE};
/// use std::time::{Duration, UNIX_EPOCH};
/// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// let (id, ts) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330");
/// let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
/// let body = br#"{"test": 2432232314}"#;
/// let now = UNIX_EPOCH + Duration::from_secs(1614265330 + 10);
/// assert_eq!(verify(secret, id, ts, sig, body, now, DEFAULT_TOLERANCE), Ok(()));
/// assert_eq!(
///     verify(secret, id, ts, sig, br#"{"test": 1}"#, now, DEFAULT_TOLERANCE),
///     Err(SignatureError::NoMatchingSignature)
/// );
/// ```
///
/// # Errors
/// A [`SignatureError`] saying why the request is refused.
pub fn verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) -> std::result::Result<(), SignatureError> {
    let key = key_of(secret)?;
    for (value, name) in [
        (id, "webhook-id"),
        (timestamp, "webhook-timestamp"),
        (signatures, "webhook-signature"),
    ] {
        if value.trim().is_empty() {
            return Err(SignatureError::MissingHeader(name));
        }
    }
    let sent: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::InvalidTimestamp(timestamp.to_string()))?;
    let now_secs = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    let age = now_secs.saturating_sub(sent);
    if age > tolerance {
        return Err(SignatureError::TooOld { age_secs: age });
    }
    if age.saturating_neg() > tolerance {
        return Err(SignatureError::TooNew {
            ahead_secs: age.saturating_neg(),
        });
    }
    let expected = mac(&key, id, timestamp.trim(), body);
    let matched = signatures
        .split_whitespace()
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
        .any(|candidate| expected.clone().verify_slice(&candidate).is_ok());
    if matched {
        Ok(())
    } else {
        Err(SignatureError::NoMatchingSignature)
    }
}

/// A new random secret in the Standard Webhooks form: `whsec_` + base64 of 32 bytes from
/// the operating system's random source.
///
/// # Errors
/// [`ErrorKind::Io`] when the operating system gives no random bytes.
pub fn generate_secret() -> Result<String> {
    let mut key = [0u8; GENERATED_SECRET_BYTES];
    getrandom::fill(&mut key).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("no random bytes for a webhook secret: {e}"),
        )
    })?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn generated_secrets_are_registrable_and_differ() {
        let a = generate_secret().expect("random secret");
        let b = generate_secret().expect("random secret");
        assert_ne!(a, b);
        assert_eq!(check_new_secret(&a), Ok(()));
    }

    #[test]
    fn registration_refuses_short_or_unprefixed_secrets() {
        assert!(check_new_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .is_err_and(|e| e.contains("whsec_")));
        assert!(check_new_secret("whsec_c2hvcnQ=").is_err_and(|e| e.contains("5 bytes")));
        assert!(check_new_secret("whsec_not base64!").is_err_and(|e| e.contains("base64")));
        assert_eq!(check_new_secret(SECRET), Ok(()));
    }

    #[test]
    fn missing_headers_and_bad_timestamps_are_named() {
        let now = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
        let err = verify(SECRET, "", "1", "v1,x", b"", now, DEFAULT_TOLERANCE);
        assert_eq!(err, Err(SignatureError::MissingHeader("webhook-id")));
        let err = verify(SECRET, "id", "soon", "v1,x", b"", now, DEFAULT_TOLERANCE)
            .expect_err("a non-numeric timestamp");
        assert!(err.to_string().contains("\"soon\""), "{err}");
    }
}
