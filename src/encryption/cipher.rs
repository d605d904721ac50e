//! The cipher (AES-256-GCM-SIV, RustCrypto's `aes-gcm-siv`) of each [`Keyring`] key, and
//! where keys come from: code, a `NAME:BASE64` list, a key file, the environment, a fresh
//! random key. Only with the `encryption` feature.

use std::path::Path;

use aes_gcm_siv::aead::{Aead, KeyInit, Payload};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use base64::engine::general_purpose::{STANDARD, STANDARD_PAD_INDIFFERENT};
use base64::Engine;
use serde_json::Value;
use zeroize::Zeroizing;

use super::envelope::{self, Binding, NONCE_BYTES};
use super::keyring::{
    Keyring, NamedKey, OpenError, KEYS_ENV, KEYS_FILE_ENV, KEY_BYTES, MAX_NAME_CHARS,
};
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
        getrandom::fill(&mut nonce)
            .map_err(|e| Error::new(ErrorKind::Io, format!("no random bytes for a nonce: {e}")))?;
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

    pub(crate) fn open(
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
        getrandom::fill(key.as_mut())
            .map_err(|e| Error::new(ErrorKind::Io, format!("no random bytes for a key: {e}")))?;
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
        // Another first character (the ciphertext is random: it may start with "A").
        let other = if data.starts_with('A') { 'B' } else { 'A' };
        value["data"] = json!(format!("{other}{}", &data[1..]));
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
