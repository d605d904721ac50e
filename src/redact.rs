//! Masking of secret payload fields (R8) in every view made for people or tools: the CLI's
//! tables and JSON, the dashboard, log lines.
//!
//! A field is secret when its name, compared case-insensitively with `-`, spaces and
//! camelCase humps read as `_`, **is** one of the secret names or **ends with** `_` and one of
//! them: with the default `token`, the fields `token`, `Token`, `auth_token`, `authToken` and
//! `X-Auth-Token` are all masked, `tokenizer` is not. Objects and arrays are walked to any
//! depth; a secret field's whole value (a string, a number, an object) becomes
//! [`MASK`]. `null` stays `null`, so a view still shows that no secret was set.
//!
//! ```
//! use litejobs::redact::{mask_payload, Redactor};
//! use serde_json::json;
//! let payload = json!({"url": "https://crm.example/hook",
//!                      "headers": {"Authorization": "Bearer abc"},
//!                      "users": [{"email": "a@example.com", "password": "hunter2"}]});
//! let masked = mask_payload(&payload);
//! assert_eq!(masked["headers"]["Authorization"], "[masked]");
//! assert_eq!(masked["users"][0]["password"], "[masked]");
//! assert_eq!(masked["users"][0]["email"], "a@example.com");
//!
//! let redactor = Redactor::new().with_field("ssn");
//! assert_eq!(redactor.mask(&json!({"SSN": "078-05-1120"}))["SSN"], "[masked]");
//! ```

use serde_json::{Map, Value};

use crate::job::JobRecord;

/// The field names masked unless configured otherwise.
pub const DEFAULT_SECRET_FIELDS: &[&str] = &[
    "password",
    "token",
    "secret",
    "authorization",
    "api_key",
    "apikey",
    "access_token",
    "refresh_token",
    "cookie",
    "private_key",
];

/// What a secret value is replaced with.
pub const MASK: &str = "[masked]";

/// The environment variable with more secret field names, comma-separated (read by
/// [`Redactor::from_env`], and so by the `litejobs` command).
pub const SECRET_FIELDS_ENV: &str = "LITEJOBS_SECRET_FIELDS";

/// Masks secret fields of JSON values; see the [module docs](self) for the matching rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redactor {
    /// Normalized secret names.
    fields: Vec<String>,
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new()
    }
}

impl Redactor {
    /// A redactor for [`DEFAULT_SECRET_FIELDS`].
    pub fn new() -> Redactor {
        Redactor {
            fields: DEFAULT_SECRET_FIELDS.iter().map(|f| normalize(f)).collect(),
        }
    }

    /// [`DEFAULT_SECRET_FIELDS`] plus the names in [`SECRET_FIELDS_ENV`], if set.
    pub fn from_env() -> Redactor {
        let extra = std::env::var(SECRET_FIELDS_ENV).unwrap_or_default();
        Redactor::new().with_fields(extra.split(','))
    }

    /// Adds a secret field name (blank names are ignored).
    pub fn with_field(mut self, name: impl AsRef<str>) -> Redactor {
        let name = normalize(name.as_ref());
        if !name.is_empty() && !self.fields.contains(&name) {
            self.fields.push(name);
        }
        self
    }

    /// Adds several secret field names.
    pub fn with_fields<I>(self, names: I) -> Redactor
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        names.into_iter().fold(self, Redactor::with_field)
    }

    /// True when a field of this name is masked.
    pub fn is_secret(&self, key: &str) -> bool {
        let key = normalize(key);
        self.fields.iter().any(|secret| {
            key == *secret
                || key
                    .strip_suffix(secret.as_str())
                    .is_some_and(|head| head.ends_with('_'))
        })
    }

    /// A copy of `value` with every secret field's value replaced by [`MASK`].
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
            other => other.clone(),
        }
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

/// Lower case, with `-`, spaces and camelCase humps as `_`: `X-Api-Key`, `x api key` and
/// `xApiKey` all become `x_api_key`.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.trim().chars() {
        if c == '-' || c == ' ' || c == '_' {
            out.push('_');
            prev_lower = false;
        } else if c.is_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.extend(c.to_lowercase());
            prev_lower = false;
        } else {
            out.push(c);
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_names_match_case_insensitively_and_as_suffixes() {
        let r = Redactor::new();
        for key in [
            "password",
            "PASSWORD",
            "Password",
            "smtp_password",
            "token",
            "authToken",
            "X-Auth-Token",
            "Authorization",
            "api_key",
            "apiKey",
            "APIKEY",
            "x-api-key",
            "accessToken",
            "refresh_token",
            "Cookie",
            "private_key",
            "webhook_secret",
            "client secret",
        ] {
            assert!(r.is_secret(key), "{key} must be secret");
        }
        for key in [
            "tokenizer",
            "password_hint",
            "user",
            "url",
            "secretary_name",
            "cookies_accepted",
            "email",
        ] {
            assert!(!r.is_secret(key), "{key} must not be secret");
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
                {"user": "bob", "credentials": {"api_key": 12345, "refresh_token": {"v": 1}}},
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
                    {"user": "bob", "credentials": {"api_key": "[masked]", "refresh_token": "[masked]"}},
                    ["plain", {"Cookie": "[masked]"}]
                ],
                "secret": null
            })
        );
        assert!(!masked.to_string().contains("hunter2"));
        assert!(!masked.to_string().contains("12345"));
    }

    #[test]
    fn extra_names_are_added_not_replacing_defaults() {
        let r = Redactor::new().with_fields(["ssn", " ", "Card-Number"]);
        let masked = r.mask(&json!({"SSN": "078", "card_number": "4111", "password": "x", "n": 1}));
        assert_eq!(
            masked,
            json!({"SSN": "[masked]", "card_number": "[masked]", "password": "[masked]", "n": 1})
        );
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
