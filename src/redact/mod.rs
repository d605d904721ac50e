//! Masking of secrets in every view made for people or tools: the CLI's tables and JSON, the
//! dashboard, log lines.
//!
//! # Which fields are secret
//!
//! A field's name is read as **words**: it is split at `.`, `_`, `-`, spaces and every other
//! character that is not a letter or a digit, at camel-case humps (`apiKey` → api, key;
//! `SMTPPassword` → smtp, password) and between letters and digits (`password2` → password,
//! 2). Words compare case-insensitively. A field is secret when:
//!
//! - its words contain a secret name of [`DEFAULT_SECRET_FIELDS`] (or one added with
//!   [`Redactor::with_field`]), whole: a name of several words (`api_key`) matches those
//!   words in a row (`x-api-key`, `apiKey`) or run together as one word (`APIKEY`,
//!   `apikey`), and up to three words in a row match a name run together (`passWord`,
//!   `PASS_WORD`, `pass_phrase` are password and passphrase). Whole words only, so `author`
//!   is not `auth`, `tokenizer` is not `token` and `secretary` is not `secret`; or
//! - one of its words **ends with** one of [`SECRET_WORD_ENDINGS`], for names written without
//!   separators: `adminpassword`, `SMTPPASSWORD`, `authtoken`, `clientsecret`, `secretkey`;
//!
//! unless every word after the last secret name is one of [`DESCRIPTIVE_WORDS`], which
//! describe a secret without holding it: `password_hint`, `token_count`, `secret_name`,
//! `password_min_length`, `auth_token_type` are shown.
//!
//! `key` alone is not a secret name (`key`, `idempotency_key`, `sort_key`, `monkey` are
//! shown); the secret kinds of key are listed as two words (`api key`, `private key`, `access
//! key`, `signing key`, `encryption key`, and `secret_key` through `secret`). Plurals are
//! listed where they hold secrets (`credentials`, `secrets`, `cookies`): `tokens` is not one,
//! so that `max_tokens` and `total_tokens` stay visible.
//!
//! # What is masked
//!
//! Objects and arrays are walked to any depth; a secret field's whole value (a string, a
//! number, an object) becomes [`MASK`]. `null` stays `null`, so a view still shows that no
//! secret was set. Secrets held without a field name of their own are masked too:
//!
//! - the value of a name/value pair, as a two-item array (`["Authorization", "Bearer …"]`) or
//!   an object with `name` (or `key`, `header`) and `value` fields whose name is secret
//!   (`{"name": "DB_PASSWORD", "value": "…"}`);
//! - a string that holds a JSON object or array (a webhook `body` written as JSON text, as
//!   other languages do) is parsed, masked the same way and written back as compact JSON text
//!   inside the string;
//! - any other string is scanned by [`Redactor::mask_text`]: URL passwords
//!   (`postgres://app:***@db/x`), secret-named parameters (`?access_token=[masked]`,
//!   `PASSWORD=[masked]`), header lines (`Authorization: [masked]`) and bearer tokens;
//! - a job's last error is scanned the same way.
//!
//! A string with nothing to mask is shown as it is.
//!
//! ```
//! use litejobs::redact::{mask_payload, Redactor};
//! use serde_json::json;
//! let payload = json!({"url": "https://crm.example/hook",
//!                      "headers": {"Authorization": "Bearer abc"},
//!                      "users": [{"email": "a@example.com", "password": "hunter2"}],
//!                      "body": "{\"smtp\":{\"password\":\"s3cret\"}}"});
//! let masked = mask_payload(&payload);
//! assert_eq!(masked["headers"]["Authorization"], "[masked]");
//! assert_eq!(masked["users"][0]["password"], "[masked]");
//! assert_eq!(masked["users"][0]["email"], "a@example.com");
//! assert_eq!(masked["body"], "{\"smtp\":{\"password\":\"[masked]\"}}");
//!
//! let masked = mask_payload(&json!({"dsn": "postgres://app:pw@db/x",
//!                                   "headers": [["Authorization", "Bearer abc"]]}));
//! assert_eq!(masked["dsn"], "postgres://app:***@db/x");
//! assert_eq!(masked["headers"][0][1], "[masked]");
//!
//! let redactor = Redactor::new().with_field("ssn");
//! assert_eq!(redactor.mask(&json!({"SSN": "078-05-1120"}))["SSN"], "[masked]");
//! assert!(redactor.is_secret("customer.ssn"));
//! ```
//!
//! URLs in error messages and logs (the SMTP URL's) have their password hidden by
//! [`mask_url_password`].

mod text;

use serde_json::{Map, Value};

use crate::job::{AttemptLogRecord, AttemptRecord, JobRecord};

pub use text::mask_url_password;

/// The secret names masked unless configured otherwise, each read as words (see the
/// [module docs](self)): a field whose name contains one of them, as whole words, is masked.
pub const DEFAULT_SECRET_FIELDS: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "authorization",
    "auth",
    "bearer",
    "jwt",
    "otp",
    "credential",
    "credentials",
    "api_key",
    "api_keys",
    "private_key",
    "access_key",
    "signing_key",
    "encryption_key",
    "session",
    "cookie",
    "cookies",
    "signature",
];

/// Word endings that make a word secret by themselves, for names written without
/// separators (`adminpassword`, `SMTPPASSWORD`, `authtoken`, `clientsecret`, `xapikey`,
/// `awssecretkey`).
pub const SECRET_WORD_ENDINGS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secretkey",
    "privatekey",
    "token",
    "apikey",
];

/// Words that describe a secret without holding it: when every word after the last secret
/// name is one of these (`password_hint`, `token_count`, `secret_name`, `password_min_length`,
/// `token_expires_at`), the field is shown.
pub const DESCRIPTIVE_WORDS: &[&str] = &[
    "count",
    "hint",
    "length",
    "len",
    "min",
    "max",
    "type",
    "kind",
    "name",
    "expires",
    "expiry",
    "expiration",
    "at",
    "ttl",
    "enabled",
    "required",
    "policy",
    "file",
    "path",
    "timeout",
    "attrs",
    "attributes",
];

/// What a secret value is replaced with.
pub const MASK: &str = "[masked]";

/// The environment variable with more secret field names, comma-separated (read by
/// [`Redactor::from_env`], and so by the `litejobs` command).
pub const SECRET_FIELDS_ENV: &str = "LITEJOBS_SECRET_FIELDS";

/// Masks secret fields of JSON values; see the [module docs](self) for the matching rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redactor {
    names: Vec<SecretName>,
}

/// A secret name as its lower-case words (never none), and those words run together.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SecretName {
    words: Vec<String>,
    joined: String,
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new()
    }
}

impl Redactor {
    /// A redactor for [`DEFAULT_SECRET_FIELDS`].
    pub fn new() -> Redactor {
        Redactor { names: Vec::new() }.with_fields(DEFAULT_SECRET_FIELDS)
    }

    /// [`DEFAULT_SECRET_FIELDS`] plus the names in [`SECRET_FIELDS_ENV`], if set.
    pub fn from_env() -> Redactor {
        let extra = std::env::var(SECRET_FIELDS_ENV).unwrap_or_default();
        Redactor::new().with_fields(extra.split(','))
    }

    /// Adds a secret name, matched by words like the defaults: `ssn` masks `SSN` and
    /// `customer.ssn`; `card number` (or `card_number`, `cardNumber`) masks `card_number`,
    /// `CardNumber` and `cardnumber`. Names without a letter or digit are ignored.
    pub fn with_field(mut self, name: impl AsRef<str>) -> Redactor {
        let words = words(name.as_ref());
        if !words.is_empty() && !self.names.iter().any(|n| n.words == words) {
            let joined = words.concat();
            self.names.push(SecretName { words, joined });
        }
        self
    }

    /// Adds several secret names.
    pub fn with_fields<I>(self, names: I) -> Redactor
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        names.into_iter().fold(self, Redactor::with_field)
    }

    /// True when a field of this name is masked.
    pub fn is_secret(&self, key: &str) -> bool {
        let words = words(key);
        // Where the last secret name ends: only the words after it can make it descriptive.
        let end = (0..words.len())
            .filter_map(|start| Some(start + self.match_len(&words[start..])?))
            .max();
        end.is_some_and(|end| !only_descriptive(&words[end..]))
    }

    /// How many of `words` a secret name (or a secret word ending) covers from the first.
    fn match_len(&self, words: &[String]) -> Option<usize> {
        let first = words.first()?;
        let named = self.names.iter().find_map(|name| {
            let n = name.words.len();
            if words.len() >= n && words[..n] == name.words[..] {
                return Some(n);
            }
            // A name split otherwise or run together: `passWord`, `PASS_WORD`, `APIKEY`.
            let mut joined = String::new();
            for (k, word) in words.iter().take(3).enumerate() {
                joined.push_str(word);
                if joined == name.joined {
                    return Some(k + 1);
                }
                if !name.joined.starts_with(joined.as_str()) {
                    return None;
                }
            }
            None
        });
        named.or_else(|| {
            SECRET_WORD_ENDINGS
                .iter()
                .any(|ending| first.ends_with(ending))
                .then_some(1)
        })
    }

    /// A copy of `value` with every secret field's value replaced by [`MASK`], also inside
    /// strings that hold JSON objects or arrays.
    pub fn mask(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => self.mask_named_value(
                map,
                map.iter()
                    .map(|(key, v)| {
                        let v = if self.is_secret(key) && !v.is_null() {
                            Value::String(MASK.to_string())
                        } else {
                            self.mask(v)
                        };
                        (key.clone(), v)
                    })
                    .collect::<Map<String, Value>>(),
            ),
            Value::Array(items) => match items.as_slice() {
                [Value::String(name), v] if self.is_secret(name) && !v.is_null() => {
                    Value::Array(vec![items[0].clone(), Value::String(MASK.to_string())])
                }
                _ => Value::Array(items.iter().map(|v| self.mask(v)).collect()),
            },
            Value::String(text) => match self.mask_json_text(text) {
                Some(masked) => Value::String(masked),
                None => Value::String(self.mask_text(text).into_owned()),
            },
            other => other.clone(),
        }
    }

    /// An object of the name/value form (`{"name": "DB_PASSWORD", "value": "…"}`, as
    /// environment lists and header lists write them) with its value masked when the name is
    /// secret.
    fn mask_named_value(
        &self,
        original: &Map<String, Value>,
        mut masked: Map<String, Value>,
    ) -> Value {
        let named_secret = original.iter().any(|(field, v)| {
            ["name", "key", "header"].contains(&field.to_ascii_lowercase().as_str())
                && v.as_str().is_some_and(|name| self.is_secret(name))
        });
        if named_secret {
            for (field, v) in masked.iter_mut() {
                if field.eq_ignore_ascii_case("value") && !v.is_null() {
                    *v = Value::String(MASK.to_string());
                }
            }
        }
        Value::Object(masked)
    }

    /// `text` re-written with its secrets masked when it is a JSON object or array that has
    /// some; `None` when it is not JSON or has nothing to mask (it is then shown as written).
    fn mask_json_text(&self, text: &str) -> Option<String> {
        if !text.trim_start().starts_with(['{', '[']) {
            return None;
        }
        // serde_json's parser stops at 128 levels of nesting, so this recursion is bounded
        // however the text is built (JSON text inside JSON text gets shorter at each level).
        let parsed: Value = serde_json::from_str(text).ok()?;
        let masked = self.mask(&parsed);
        if masked == parsed {
            return None;
        }
        serde_json::to_string(&masked).ok()
    }

    /// A copy of the attempts with the secrets in their errors masked
    /// ([`mask_text`](Redactor::mask_text)).
    pub fn mask_attempts(&self, attempts: &[AttemptRecord]) -> Vec<AttemptRecord> {
        attempts
            .iter()
            .map(|a| {
                let mut a = a.clone();
                a.error = a.error.as_deref().map(|e| self.mask_text(e).into_owned());
                a
            })
            .collect()
    }

    /// A copy of the attempts' logs with the secrets in them masked
    /// ([`mask_text`](Redactor::mask_text)).
    pub fn mask_logs(&self, logs: &[AttemptLogRecord]) -> Vec<AttemptLogRecord> {
        logs.iter()
            .map(|l| {
                let mut l = l.clone();
                l.text = self.mask_text(&l.text).into_owned();
                l
            })
            .collect()
    }

    /// A copy of the job with its payload, result and progress masked, and the secrets in
    /// its last error ([`mask_text`](Redactor::mask_text)).
    pub fn mask_job(&self, job: &JobRecord) -> JobRecord {
        let mut job = job.clone();
        job.payload = self.mask(&job.payload);
        job.result = job.result.as_ref().map(|v| self.mask(v));
        job.progress = job.progress.as_ref().map(|v| self.mask(v));
        job.last_error = job
            .last_error
            .as_deref()
            .map(|e| self.mask_text(e).into_owned());
        job
    }
}

/// `value` with the [`DEFAULT_SECRET_FIELDS`] masked.
pub fn mask_payload(value: &Value) -> Value {
    Redactor::new().mask(value)
}

/// True when `words` is not empty and each is one of [`DESCRIPTIVE_WORDS`].
fn only_descriptive(words: &[String]) -> bool {
    !words.is_empty()
        && words
            .iter()
            .all(|word| DESCRIPTIVE_WORDS.contains(&word.as_str()))
}

/// The lower-case words of a field name: split at every character that is not a letter or
/// digit, at camel-case humps (`apiKey`, and `SMTPPassword` before the `P` that starts
/// `Password`), and between letters and digits.
fn words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut prev: Option<char> = None;
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
            prev = None;
            continue;
        }
        if let Some(prev) = prev {
            let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let hump = (prev.is_lowercase() || prev.is_numeric()) && c.is_uppercase();
            let acronym_end = prev.is_uppercase() && c.is_uppercase() && next_is_lower;
            let letter_digit = prev.is_alphabetic() != c.is_alphabetic();
            if hump || acronym_end || letter_digit {
                words.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
        prev = Some(c);
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

#[cfg(test)]
mod tests;
