//! [`Keyring`]: named 256-bit keys, the first of which encrypts and every one of which
//! decrypts; where keys come from (code, `LITEJOBS_ENCRYPTION_KEYS`, a key file); and the
//! cipher, AES-256-GCM-SIV from RustCrypto's `aes-gcm-siv` (feature `encryption`).

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
const MAX_NAME_CHARS: usize = 64;

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
    keys: Vec<NamedKey>,
}

#[derive(Clone)]
struct NamedKey {
    name: String,
    #[cfg(feature = "encryption")]
    cipher: aes_gcm_siv::Aes256GcmSiv,
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

#[cfg(feature = "encryption")]
mod cipher {
    //! The cipher and where keys come from: only with the `encryption` feature.

    use std::path::Path;

    use aes_gcm_siv::aead::{Aead, KeyInit, Payload};
    use aes_gcm_siv::{Aes256GcmSiv, Nonce};
    use base64::engine::general_purpose::{STANDARD, STANDARD_PAD_INDIFFERENT};
    use base64::Engine;
    use serde_json::Value;
    use zeroize::Zeroizing;

    use super::super::envelope::{self, Binding, NONCE_BYTES};
    use super::{Keyring, NamedKey, OpenError, KEYS_ENV, KEYS_FILE_ENV, KEY_BYTES, MAX_NAME_CHARS};
    use crate::error::{Error, ErrorKind, Result};

    fn config_error(message: String) -> Error {
        Error::new(ErrorKind::InvalidConfig, message)
    }

    /// A name of letters, digits, `.`, `_` and `-` (it goes into envelopes as it is).
    fn check_name(name: &str) -> std::result::Result<(), String> {
        if name.is_empty() {
            return Err("a key name must not be empty".to_string());
        }
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(format!(
                "key name {name:?} is longer than {MAX_NAME_CHARS} characters"
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "key name {name:?} holds {c:?}: use letters, digits, `.`, `_` and `-`"
            ));
        }
        Ok(())
    }

    impl NamedKey {
        pub(super) fn seal(&self, plain: &str, binding: Binding<'_>) -> Result<String> {
            let mut nonce = [0u8; NONCE_BYTES];
            getrandom::fill(&mut nonce).map_err(|e| {
                Error::new(ErrorKind::Io, format!("no random bytes for a nonce: {e}"))
            })?;
            let aad = binding.associated_data(&self.name);
            let data = self
                .cipher
                .encrypt(
                    Nonce::from_slice(&nonce),
                    Payload {
                        msg: plain.as_bytes(),
                        aad: &aad,
                    },
                )
                .map_err(|_| {
                    // Only a message past the cipher's limit (64 GiB) fails.
                    Error::invalid_job(format!(
                        "the {} cannot be encrypted (too large for the cipher)",
                        binding.column.name()
                    ))
                })?;
            Ok(envelope::write(&self.name, &nonce, &data))
        }

        pub(super) fn open(
            &self,
            value: &Value,
            binding: Binding<'_>,
        ) -> std::result::Result<String, OpenError> {
            let key = || self.name.clone();
            let parsed =
                envelope::parse(value).map_err(|why| OpenError::Malformed { key: key(), why })?;
            let aad = binding.associated_data(parsed.key);
            let plain = self
                .cipher
                .decrypt(
                    Nonce::from_slice(&parsed.nonce),
                    Payload {
                        msg: &parsed.data,
                        aad: &aad,
                    },
                )
                .map_err(|_| OpenError::Rejected { key: key() })?;
            // Its JSON is checked where it is parsed, once (the caller's).
            String::from_utf8(plain).map_err(|_| OpenError::NotJson { key: key() })
        }
    }

    impl Keyring {
        /// Adds a key after those held (so the first one added encrypts). `name`: letters,
        /// digits, `.`, `_` and `-`, at most 64; `key`: exactly 32 bytes.
        ///
        /// # Errors
        /// [`ErrorKind::InvalidConfig`] for a bad name, a name already held, or a key that
        /// is not 32 bytes (the message never shows the key).
        pub fn with_key(mut self, name: &str, key: &[u8]) -> Result<Keyring> {
            check_name(name).map_err(config_error)?;
            if self.contains(name) {
                return Err(config_error(format!("key name {name} is given twice")));
            }
            if key.len() != KEY_BYTES {
                return Err(config_error(format!(
                    "key {name} is {} bytes; an encryption key is {KEY_BYTES} bytes (256 \
                     bits): make one with `litejobs keys new`",
                    key.len()
                )));
            }
            let cipher = Aes256GcmSiv::new_from_slice(key)
                .map_err(|_| config_error(format!("key {name} is not a 256-bit key")))?;
            self.keys.push(NamedKey {
                name: name.to_string(),
                cipher,
            });
            Ok(self)
        }

        /// Reads keys written as `NAME:BASE64` entries separated by commas or lines, the
        /// encrypting key first (the form of [`KEYS_ENV`] and of key files). Blank entries
        /// and lines starting with `#` are ignored.
        ///
        /// # Errors
        /// [`ErrorKind::InvalidConfig`] naming the entry (by number and key name) and what is
        /// wrong with it; never the key itself.
        pub fn parse(text: &str) -> Result<Keyring> {
            parse_from(text, "keys")
        }

        /// Reads a key file (see [`Keyring::parse`]). On Unix, a file that other users may
        /// read is logged as a warning.
        ///
        /// # Errors
        /// [`ErrorKind::Io`] when the file cannot be read; those of [`Keyring::parse`].
        pub fn from_file(path: impl AsRef<Path>) -> Result<Keyring> {
            let path = path.as_ref();
            let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot read key file {}: {e}", path.display()),
                )
            })?);
            warn_if_others_may_read(path);
            let keys = parse_from(&text, &format!("key file {}", path.display()))?;
            if keys.is_empty() {
                return Err(config_error(format!(
                    "key file {} holds no key",
                    path.display()
                )));
            }
            Ok(keys)
        }

        /// The keys of [`KEYS_ENV`] or of the file [`KEYS_FILE_ENV`] names; an empty keyring
        /// when neither is set.
        ///
        /// # Errors
        /// [`ErrorKind::InvalidConfig`] when both are set, or for an entry that cannot be
        /// read; those of [`Keyring::from_file`].
        pub fn from_env() -> Result<Keyring> {
            Keyring::from_sources(None)
        }

        /// The keys of the file `file` (a command line's `--keys-file`) or, without it, of
        /// [`KEYS_FILE_ENV`]; or of [`KEYS_ENV`]. Giving both a file and [`KEYS_ENV`] is
        /// refused: which key encrypts would be a guess.
        ///
        /// # Errors
        /// As [`Keyring::from_env`].
        pub fn from_sources(file: Option<&Path>) -> Result<Keyring> {
            let inline = std::env::var(KEYS_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(Zeroizing::new);
            let file = file.map(Path::to_path_buf).or_else(|| {
                std::env::var_os(KEYS_FILE_ENV)
                    .filter(|v| !v.is_empty())
                    .map(Into::into)
            });
            match (inline, file) {
                (Some(_), Some(_)) => Err(config_error(format!(
                    "both {KEYS_ENV} and a key file ({KEYS_FILE_ENV} or --keys-file) are \
                     set: give the keys one way"
                ))),
                (Some(text), None) => parse_from(&text, KEYS_ENV),
                (None, Some(path)) => Keyring::from_file(path),
                (None, None) => Ok(Keyring::new()),
            }
        }

        /// A fresh random key as a `NAME:BASE64` entry, for [`KEYS_ENV`] or a key file.
        ///
        /// # Errors
        /// [`ErrorKind::InvalidConfig`] for a bad name; [`ErrorKind::Io`] when the system
        /// has no random bytes.
        pub fn generate(name: &str) -> Result<String> {
            check_name(name).map_err(config_error)?;
            let mut key = Zeroizing::new([0u8; KEY_BYTES]);
            getrandom::fill(key.as_mut()).map_err(|e| {
                Error::new(ErrorKind::Io, format!("no random bytes for a key: {e}"))
            })?;
            Ok(format!("{name}:{}", STANDARD.encode(key.as_ref())))
        }
    }

    fn parse_from(text: &str, source: &str) -> Result<Keyring> {
        let mut keys = Keyring::new();
        let entries = text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (n, entry) in entries.enumerate() {
            let at = format!("{source}: entry {}", n + 1);
            let Some((name, encoded)) = entry.split_once(':') else {
                return Err(config_error(format!(
                    "{at} is not NAME:BASE64 (a key name, a colon, the key in base64)"
                )));
            };
            let name = name.trim();
            check_name(name).map_err(|why| config_error(format!("{at}: {why}")))?;
            let key = Zeroizing::new(STANDARD_PAD_INDIFFERENT.decode(encoded.trim()).map_err(
                |_| config_error(format!("{at} (key {name}): the key is not valid base64")),
            )?);
            keys = keys.with_key(name, &key).map_err(|e| e.prefixed(&at))?;
        }
        Ok(keys)
    }

    #[cfg(unix)]
    fn warn_if_others_may_read(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                log::warn!(
                    "litejobs: key file {} may be read by other users; chmod 600 it",
                    path.display()
                );
            }
        }
    }

    #[cfg(not(unix))]
    fn warn_if_others_may_read(_path: &Path) {}

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::encryption::envelope::Column;
        use serde_json::json;

        const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

        fn binding(column: Column) -> Binding<'static> {
            Binding {
                column,
                job_type: "t",
                queue: "q",
            }
        }

        #[test]
        fn a_sealed_text_opens_only_where_it_was_bound() {
            let keys = Keyring::parse(K1).expect("one key");
            let text = keys
                .seal(r#"{"card":"4111"}"#, binding(Column::Payload))
                .expect("sealed");
            assert!(!text.contains("4111"));
            let value: Value = serde_json::from_str(&text).expect("JSON text");
            assert_eq!(
                keys.open(&value, binding(Column::Payload)).as_deref(),
                Ok(r#"{"card":"4111"}"#)
            );
            let elsewhere = [
                binding(Column::Result),
                Binding {
                    job_type: "u",
                    ..binding(Column::Payload)
                },
                Binding {
                    queue: "other",
                    ..binding(Column::Payload)
                },
            ];
            for b in elsewhere {
                assert_eq!(
                    keys.open(&value, b),
                    Err(OpenError::Rejected { key: "k1".into() })
                );
            }
            let other = Keyring::parse(&Keyring::generate("k1").expect("key")).expect("key");
            assert_eq!(
                other.open(&value, binding(Column::Payload)),
                Err(OpenError::Rejected { key: "k1".into() })
            );
            let none = Keyring::new();
            let err = none.open(&value, binding(Column::Payload)).unwrap_err();
            assert!(err.to_string().contains("holds no encryption key"), "{err}");
        }

        #[test]
        fn two_seals_of_one_text_differ() {
            let keys = Keyring::parse(K1).expect("one key");
            let a = keys.seal("{}", binding(Column::Payload)).expect("sealed");
            let b = keys.seal("{}", binding(Column::Payload)).expect("sealed");
            assert_ne!(a, b, "random nonces");
        }

        #[test]
        fn bad_entries_are_named_without_the_key() {
            let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA==";
            for (text, expected) in [
                (format!("k1{secret}"), "entry 1 is not NAME:BASE64"),
                (format!("{K1},k1:{secret}"), "entry 2"),
                (format!("k 1:{secret}"), "holds ' '"),
                (format!("k2:{secret}"), "is 19 bytes"),
                ("k2:%%%".to_string(), "not valid base64"),
            ] {
                let err = Keyring::parse(&text).unwrap_err().to_string();
                assert!(err.contains(expected), "{err}");
                assert!(!err.contains(secret), "{err}");
            }
            let keys = Keyring::parse("# rotated in May\nk2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n\nk1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")
                .expect("padding is optional, comments and blank lines are skipped");
            assert_eq!(keys.names(), ["k2", "k1"]);
            assert!(!format!("{keys:?}").contains("AAEC"));
        }

        #[test]
        fn an_altered_envelope_is_rejected_or_malformed() {
            let keys = Keyring::parse(K1).expect("one key");
            let text = keys
                .seal(r#"{"a":1}"#, binding(Column::Payload))
                .expect("sealed");
            let mut value: Value = serde_json::from_str(&text).expect("JSON");
            let data = value["data"].as_str().unwrap_or_default().to_string();
            value["data"] = json!(format!("A{}", &data[1..]));
            assert!(matches!(
                keys.open(&value, binding(Column::Payload)),
                Err(OpenError::Rejected { .. })
            ));
            value["data"] = json!(&data[..8]);
            assert!(matches!(
                keys.open(&value, binding(Column::Payload)),
                Err(OpenError::Malformed { .. })
            ));
        }
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
