//! [`Keyring`]: named 256-bit keys, the first of which encrypts and every one of which
//! decrypts, and why an envelope could not be opened ([`OpenError`]). The cipher and the
//! keyring's constructors are in `cipher.rs` (feature `encryption`).

use std::fmt;

use serde_json::Value;

use super::envelope::{sealed_by, Binding};
use crate::error::{Error, ErrorKind, Result};

/// The environment variable with the keys, `NAME:BASE64` entries separated by commas, the
/// encrypting key first: `LITEJOBS_ENCRYPTION_KEYS=k2:BASE64,k1:BASE64`.
pub const KEYS_ENV: &str = "LITEJOBS_ENCRYPTION_KEYS";

/// The environment variable naming a key file: one `NAME:BASE64` per line, the encrypting
/// key first; empty lines and lines starting with `#` are ignored.
pub const KEYS_FILE_ENV: &str = "LITEJOBS_ENCRYPTION_KEYS_FILE";

/// A key's length in bytes: 256 bits.
pub const KEY_BYTES: usize = 32;

/// The longest key name, in characters.
#[cfg_attr(not(feature = "encryption"), allow(dead_code))]
pub(super) const MAX_NAME_CHARS: usize = 64;

/// Named 256-bit keys for encrypted payloads: the first encrypts, every one decrypts, so a
/// new key goes first and the old ones stay until `litejobs keys rotate` has re-encrypted
/// what they sealed. Its `Debug` shows the names only; the keys are wiped from memory when
/// it is dropped.
///
/// ```
/// # #[cfg(feature = "encryption")]
/// # fn main() -> litejobs::Result<()> {
/// use litejobs::encryption::Keyring;
/// let new = Keyring::generate("k2")?; // "k2:" and 44 characters of base64
/// let keys = Keyring::parse(&format!("{new},k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="))?;
/// assert_eq!(keys.names(), ["k2", "k1"]);
/// assert_eq!(keys.current(), Some("k2"));
/// assert_eq!(format!("{keys:?}"), r#"Keyring { keys: ["k2", "k1"] }"#);
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "encryption"))]
/// # fn main() {}
/// ```
#[derive(Clone, Default)]
pub struct Keyring {
    pub(super) keys: Vec<NamedKey>,
}

/// One key: its name, and (with the `encryption` feature) its cipher, whose expanded key is
/// wiped when dropped.
#[derive(Clone)]
pub(super) struct NamedKey {
    pub(super) name: String,
    #[cfg(feature = "encryption")]
    pub(super) cipher: aes_gcm_siv::Aes256GcmSiv,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("keys", &self.names())
            .finish()
    }
}

/// Why an envelope could not be opened. Each names the key the envelope says it was sealed
/// with, and never shows a key or what it encrypts. Displayed as what follows a column's
/// name: "payload does not decrypt with key k1: …".
#[cfg_attr(not(feature = "encryption"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// The keyring holds no key of that name.
    MissingKey { key: String, held: Vec<String> },
    /// This build has no cipher (the `encryption` feature is off).
    Unsupported { key: String },
    /// Not a well-formed envelope.
    Malformed { key: String, why: String },
    /// Authentication failed: another key's bytes under that name, or an envelope that was
    /// altered, cut short or moved from another job's column, type or queue.
    Rejected { key: String },
    /// It decrypted, but to something that is not UTF-8 JSON text.
    NotJson { key: String },
}

impl OpenError {
    /// The key the envelope names.
    pub(crate) fn key(&self) -> &str {
        match self {
            OpenError::MissingKey { key, .. }
            | OpenError::Unsupported { key }
            | OpenError::Malformed { key, .. }
            | OpenError::Rejected { key }
            | OpenError::NotJson { key } => key,
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::MissingKey { key, held } if held.is_empty() => write!(
                f,
                "encrypted with key {key}, and this process holds no encryption key \
                 (set {KEYS_ENV} or {KEYS_FILE_ENV})"
            ),
            OpenError::MissingKey { key, held } => write!(
                f,
                "encrypted with key {key}, which this process does not hold (it holds {})",
                held.join(", ")
            ),
            OpenError::Unsupported { key } => write!(
                f,
                "encrypted with key {key}, but this litejobs was built without the \
                 `encryption` feature"
            ),
            OpenError::Malformed { key, why } => {
                write!(f, "is in a malformed envelope (key {key}): {why}")
            }
            OpenError::Rejected { key } => write!(
                f,
                "does not decrypt with key {key}: the key held under that name is not the \
                 one it was sealed with, or its envelope was altered, cut short, or moved \
                 from another job's column, type or queue"
            ),
            OpenError::NotJson { key } => write!(
                f,
                "decrypts with key {key} to something that is not UTF-8 JSON text"
            ),
        }
    }
}

impl Keyring {
    /// A keyring without keys: nothing can be encrypted or decrypted.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// The key names, the encrypting one first.
    pub fn names(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.name.as_str()).collect()
    }

    /// The name of the key that encrypts (the first), if any.
    pub fn current(&self) -> Option<&str> {
        self.keys.first().map(|k| k.name.as_str())
    }

    /// True when a key of this name is held.
    pub fn contains(&self, name: &str) -> bool {
        self.keys.iter().any(|k| k.name == name)
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn held(&self) -> Vec<String> {
        self.names().into_iter().map(str::to_string).collect()
    }

    /// Encrypts `plain` (JSON text) with the first key into an envelope bound to `binding`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] when no key is held (or the build has no cipher);
    /// [`ErrorKind::Io`] when the system has no random bytes for the nonce.
    pub(crate) fn seal(&self, plain: &str, binding: Binding<'_>) -> Result<String> {
        let Some(key) = self.keys.first() else {
            return Err(no_key_error());
        };
        key.seal(plain, binding)
    }

    /// Decrypts `envelope` (a value [`sealed_by`] recognises) bound to `binding`, to the
    /// text it holds: UTF-8, JSON unless someone sealed something else (the caller parses
    /// it, and reports [`OpenError::NotJson`] when it is not).
    pub(crate) fn open(
        &self,
        envelope: &Value,
        binding: Binding<'_>,
    ) -> std::result::Result<String, OpenError> {
        let key = sealed_by(envelope).unwrap_or("?").to_string();
        let Some(named) = self.keys.iter().find(|k| k.name == key) else {
            if !cfg!(feature = "encryption") {
                return Err(OpenError::Unsupported { key });
            }
            return Err(OpenError::MissingKey {
                key,
                held: self.held(),
            });
        };
        named.open(envelope, binding)
    }
}

/// The error of an encryption asked of a keyring without keys.
pub(crate) fn no_key_error() -> Error {
    if cfg!(feature = "encryption") {
        Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "no encryption key: give the queue keys (QueueBuilder::encryption_keys; for \
                 the command line {KEYS_ENV} or {KEYS_FILE_ENV}); `litejobs keys new` makes one"
            ),
        )
    } else {
        Error::new(
            ErrorKind::InvalidConfig,
            "this litejobs was built without the `encryption` feature: it cannot encrypt",
        )
    }
}

#[cfg(not(feature = "encryption"))]
impl NamedKey {
    fn seal(&self, _plain: &str, _binding: Binding<'_>) -> Result<String> {
        Err(no_key_error())
    }

    fn open(
        &self,
        _value: &Value,
        _binding: Binding<'_>,
    ) -> std::result::Result<String, OpenError> {
        Err(OpenError::Unsupported {
            key: self.name.clone(),
        })
    }
}
