//! Masking of secret payload fields (R8) in every view made for people or tools: the CLI's
//! tables and JSON, the dashboard, log lines.
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
//!   `apikey`). Whole words only, so `author` is not `auth`, `tokenizer` is not `token` and
//!   `secretary` is not `secret`; or
//! - one of its words **ends with** one of [`SECRET_WORD_ENDINGS`], for names written without
//!   separators: `adminpassword`, `SMTPPASSWORD`, `authtoken`, `clientsecret`;
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
//! secret was set. A string that holds a JSON object or array (a webhook `body` written as
//! JSON text, as other languages do) is parsed, masked the same way and written back as
//! compact JSON text inside the string; a string that is not JSON, or that has nothing to
//! mask, is shown as it is.
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
//! let redactor = Redactor::new().with_field("ssn");
//! assert_eq!(redactor.mask(&json!({"SSN": "078-05-1120"}))["SSN"], "[masked]");
//! assert!(redactor.is_secret("customer.ssn"));
//! ```
//!
//! URLs in error messages and logs (the SMTP URL's) have their password hidden by
//! [`mask_url_password`].

use serde_json::{Map, Value};

use crate::job::JobRecord;

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
/// separators (`adminpassword`, `SMTPPASSWORD`, `authtoken`, `clientsecret`, `xapikey`).
pub const SECRET_WORD_ENDINGS: &[&str] = &["password", "passwd", "secret", "token", "apikey"];

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
                Some(n)
            } else if n > 1 && *first == name.joined {
                Some(1)
            } else {
                None
            }
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
            Value::Object(map) => Value::Object(
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
            Value::Array(items) => Value::Array(items.iter().map(|v| self.mask(v)).collect()),
            Value::String(text) => match self.mask_json_text(text) {
                Some(masked) => Value::String(masked),
                None => value.clone(),
            },
            other => other.clone(),
        }
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

    /// A copy of the job with its payload, result and progress masked.
    pub fn mask_job(&self, job: &JobRecord) -> JobRecord {
        let mut job = job.clone();
        job.payload = self.mask(&job.payload);
        job.result = job.result.as_ref().map(|v| self.mask(v));
        job.progress = job.progress.as_ref().map(|v| self.mask(v));
        job
    }
}

/// `value` with the [`DEFAULT_SECRET_FIELDS`] masked.
pub fn mask_payload(value: &Value) -> Value {
    Redactor::new().mask(value)
}

/// `text`, a URL, with the password of its userinfo replaced by `***`, for error messages
/// and logs (the SMTP URL's errors use it):
/// `smtp://user:pa@ss@host?tls=none` shows as `smtp://user:***@host?tls=none`.
///
/// The host is taken to start after the **last** `@` of the text, wherever it is, and the
/// user to end at the first `:` before it. That hides the password also in text that is not
/// a valid URL, such as a password with an unencoded `/` or `?` (`smtp://u:pa/ss@host`
/// shows as `smtp://u:***@host`), at the cost of hiding more than needed when an `@` follows
/// the host. Text without `@` is returned as it is.
///
/// ```
/// use litejobs::redact::mask_url_password;
/// assert_eq!(mask_url_password("smtp://user:pa@ss@host:587"), "smtp://user:***@host:587");
/// assert_eq!(mask_url_password("smtp://user:pa/s?s@host?tls=tls"), "smtp://user:***@host?tls=tls");
/// assert_eq!(mask_url_password("smtp://host:25"), "smtp://host:25");
/// ```
pub fn mask_url_password(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}{user}:***@{host}"),
            None => format!("{scheme}{userinfo}@{host}"),
        },
        None => text.to_string(),
    }
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
mod tests {
    use super::*;
    use serde_json::json;

    /// Issue 12, section 4: names that must be masked, each with why.
    const MUST_MASK: &[&str] = &[
        // the names the old suffix rule missed
        "secret_key",
        "aws_secret_access_key",
        "smtp.password",
        "SMTPPassword",
        "passwd",
        "credentials",
        // whole words in any case and any separator
        "password",
        "PASSWORD",
        "Password",
        "smtp_password",
        "db-password",
        "user password",
        "password2",
        "token",
        "authToken",
        "X-Auth-Token",
        "oauth2_token",
        "csrfToken",
        "Authorization",
        "Proxy-Authorization",
        "auth",
        "basic_auth",
        "api_key",
        "apiKey",
        "APIKey",
        "APIKEY",
        "x-api-key",
        "api_keys",
        "accessToken",
        "refresh_token",
        "Cookie",
        "Set-Cookie",
        "cookies",
        "private_key",
        "privateKey",
        "access_key",
        "AWS_ACCESS_KEY_ID",
        "signing_key",
        "encryption_key",
        "webhook_secret",
        "client secret",
        "signingSecret",
        "secrets",
        "credential",
        "pwd",
        "passphrase",
        "session",
        "session_id",
        "sessionToken",
        "signature",
        "X-Hub-Signature-256",
        "jwt",
        "bearer",
        "otp",
        // words run together: the secret word endings
        "adminpassword",
        "SMTPPASSWORD",
        "authtoken",
        "clientsecret",
        "xapikey",
        // a descriptive word that is not last does not save the field
        "password_hint_token",
        "token_type_secret",
    ];

    /// Names that must be shown: secret names inside other words, `key` alone, and
    /// descriptive words after a secret name.
    const MUST_SHOW: &[&str] = &[
        "author",
        "authored_by",
        "authenticated",
        "keyboard",
        "monkey",
        "key",
        "idempotency_key",
        "group_key",
        "sort-key",
        "primaryKey",
        "token_count",
        "tokenCount",
        "max_tokens",
        "total_tokens",
        "tokenizer",
        "password_hint",
        "password_min_length",
        "token_type",
        "auth_token_type",
        "token_expires_at",
        "secret_name",
        "cookie_name",
        "secretary_name",
        "passport_number",
        "bypass",
        "user",
        "url",
        "email",
        "description",
        "signed_at",
        "",
        "_",
    ];

    #[test]
    fn default_names_match_whole_words_of_the_key() {
        let r = Redactor::new();
        let wrong: Vec<&str> = MUST_MASK
            .iter()
            .copied()
            .filter(|key| !r.is_secret(key))
            .collect();
        assert!(wrong.is_empty(), "not masked but must be: {wrong:?}");
        let wrong: Vec<&str> = MUST_SHOW
            .iter()
            .copied()
            .filter(|key| r.is_secret(key))
            .collect();
        assert!(wrong.is_empty(), "masked but must be shown: {wrong:?}");
    }

    #[test]
    fn keys_split_into_words_at_separators_humps_and_digits() {
        for (key, expected) in [
            (
                "aws_secret_access_key",
                &["aws", "secret", "access", "key"][..],
            ),
            ("SMTPPassword", &["smtp", "password"]),
            ("apiKey", &["api", "key"]),
            ("APIKey", &["api", "key"]),
            ("smtp.password", &["smtp", "password"]),
            ("X-Hub-Signature-256", &["x", "hub", "signature", "256"]),
            ("  user  password ", &["user", "password"]),
            ("password2", &["password", "2"]),
            ("oauth2Token", &["oauth", "2", "token"]),
            ("SMTPPASSWORD", &["smtppassword"]),
            ("Ünïcode_Schlüssel", &["ünïcode", "schlüssel"]),
            ("", &[]),
            ("-._ ", &[]),
        ] {
            assert_eq!(words(key), expected, "{key:?}");
        }
    }

    #[test]
    fn masks_recursively_through_objects_and_arrays() {
        let payload = json!({
            "url": "https://crm.example/hook",
            "token": "t0k3n",
            "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
            "batch": [
                {"user": "ada", "password": "hunter2"},
                {"user": "bob", "profile": {"api_key": 12345, "refresh_token": {"v": 1}}},
                ["plain", {"Cookie": "session=1"}]
            ],
            "secret": null
        });
        let masked = mask_payload(&payload);
        assert_eq!(
            masked,
            json!({
                "url": "https://crm.example/hook",
                "token": "[masked]",
                "headers": {"Authorization": "[masked]", "Accept": "application/json"},
                "batch": [
                    {"user": "ada", "password": "[masked]"},
                    {"user": "bob", "profile": {"api_key": "[masked]", "refresh_token": "[masked]"}},
                    ["plain", {"Cookie": "[masked]"}]
                ],
                "secret": null
            })
        );
        assert!(!masked.to_string().contains("hunter2"));
        assert!(!masked.to_string().contains("12345"));
    }

    #[test]
    fn json_text_inside_a_string_is_masked_and_rewritten() {
        // A webhook body written as JSON text (README, "From any language"), nested twice.
        let inner = json!({"data": {"password": "hunter2", "order": 7}}).to_string();
        let payload = json!({
            "endpoint_id": 1,
            "event_id": "evt_1",
            "body": json!({"user": {"SMTPPassword": "p4ss"}, "note": inner}).to_string(),
            "list": "[{\"token\": \"t0k3n\"}, 2]",
        });
        let masked = mask_payload(&payload);
        let body: Value = serde_json::from_str(masked["body"].as_str().unwrap_or_default())
            .expect("the body is still JSON text");
        assert_eq!(body["user"]["SMTPPassword"], json!(MASK));
        let note: Value = serde_json::from_str(body["note"].as_str().unwrap_or_default())
            .expect("the inner body is still JSON text");
        assert_eq!(note, json!({"data": {"password": MASK, "order": 7}}));
        assert_eq!(masked["list"], json!("[{\"token\":\"[masked]\"},2]"));
        for secret in ["hunter2", "p4ss", "t0k3n"] {
            assert!(!masked.to_string().contains(secret), "{secret}: {masked}");
        }
    }

    #[test]
    fn strings_with_nothing_to_mask_are_shown_as_written() {
        let payload = json!({
            "body": "{ \"order\": 7,\n  \"items\": [1, 2] }",
            "text": "{not json, password: x",
            "number_text": "42",
            "quoted": "\"password\"",
            "deep": format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        });
        assert_eq!(mask_payload(&payload), payload);
    }

    #[test]
    fn extra_names_are_added_not_replacing_defaults_and_match_by_words() {
        let r = Redactor::new().with_fields(["ssn", " ", "Card-Number", "--"]);
        let masked = r.mask(&json!({
            "SSN": "078", "customer.ssn": "079", "card_number": "4111", "CardNumber": "4112",
            "cardnumber": "4113", "password": "x", "ssnake": "shown", "n": 1
        }));
        assert_eq!(
            masked,
            json!({
                "SSN": MASK, "customer.ssn": MASK, "card_number": MASK, "CardNumber": MASK,
                "cardnumber": MASK, "password": MASK, "ssnake": "shown", "n": 1
            })
        );
        assert_eq!(r, r.clone().with_field("card number"), "no duplicates");
    }

    #[test]
    fn url_passwords_are_hidden_up_to_the_last_at() {
        for (url, shown) in [
            ("smtp://user:pa@ss@host", "smtp://user:***@host"),
            (
                "smtp://user:pa/ss@host?tls=none",
                "smtp://user:***@host?tls=none",
            ),
            ("smtp://user:pa?ss@host:25", "smtp://user:***@host:25"),
            ("smtp://user:pa#ss@host", "smtp://user:***@host"),
            ("smtp://user:a://b@host", "smtp://user:***@host"),
            (
                "smtp://me@example.com:pw@host",
                "smtp://me@example.com:***@host",
            ),
            ("smtps://user:@host", "smtps://user:***@host"),
            ("smtp://user@host", "smtp://user@host"),
            ("smtp://host:25?tls=none", "smtp://host:25?tls=none"),
            ("user:secret@host", "user:***@host"),
            ("", ""),
        ] {
            assert_eq!(mask_url_password(url), shown, "{url}");
        }
    }

    #[test]
    fn the_readme_quotes_the_default_names() {
        let readme = include_str!("../README.md");
        let from = readme
            .find("**Secrets are masked**")
            .unwrap_or(readme.len());
        let quote: Vec<&str> = readme[from..]
            .lines()
            .skip_while(|line| !line.starts_with("> "))
            .take_while(|line| line.starts_with("> "))
            .map(|line| &line[2..])
            .collect();
        let listed: Vec<String> = quote
            .join(" ")
            .split(',')
            .map(|item| {
                let item = item.trim();
                let item = item.strip_prefix("and the two-word names ").unwrap_or(item);
                item.strip_prefix("and ").unwrap_or(item).to_string()
            })
            .collect();
        let defaults: Vec<String> = DEFAULT_SECRET_FIELDS
            .iter()
            .map(|name| name.replace('_', " "))
            .collect();
        let mut sorted = (listed.clone(), defaults.clone());
        sorted.0.sort();
        sorted.1.sort();
        assert_eq!(sorted.0, sorted.1, "README: {listed:?}");
    }

    #[test]
    fn mask_job_covers_payload_result_and_progress() {
        let job = JobRecord {
            id: 1,
            queue: "default".into(),
            job_type: "t".into(),
            payload: json!({"password": "p"}),
            status: crate::JobStatus::Queued,
            priority: 0,
            attempts: 0,
            max_attempts: 6,
            run_at: 0,
            created_at: 0,
            updated_at: 0,
            started_at: None,
            finished_at: None,
            locked_by: None,
            locked_until: None,
            last_error: None,
            last_status_code: None,
            idempotency_key: None,
            group_key: None,
            timeout_ms: None,
            result: Some(json!({"access_token": "a"})),
            progress: Some(json!([{"secret": "s"}])),
            requeued_by: None,
            requeued_at: None,
            requeue_reason: None,
            requeued_as: None,
            problems: Vec::new(),
        };
        let masked = Redactor::new().mask_job(&job);
        assert_eq!(masked.payload, json!({"password": "[masked]"}));
        assert_eq!(masked.result, Some(json!({"access_token": "[masked]"})));
        assert_eq!(masked.progress, Some(json!([{"secret": "[masked]"}])));
        assert_eq!(
            job.payload,
            json!({"password": "p"}),
            "the original is untouched"
        );
    }
}
