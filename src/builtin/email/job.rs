//! The payload of a `send_email` job: [`EmailJob`], its builder, JSON form and enqueue.

use std::fmt;

use rusqlite::Connection;
use serde_json::{json, Value};

use super::JOB_TYPE;
use crate::error::Result;
use crate::job::NewJob;
use crate::Queue;

/// The payload of a `send_email` job, and a builder for it.
///
/// The JSON form, for programs in other languages (`to` may also be a list; every field but
/// `to`, `subject` and `text` is optional):
/// ```json
/// {"to": "ada@example.com", "from": "app@example.com", "reply_to": "help@example.com",
///  "subject": "Welcome", "text": "Hello", "html": "<p>Hello</p>",
///  "template": "welcome", "template_version": "3", "user_id": 42, "event": "signup"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an EmailJob does nothing until it is enqueued"]
pub struct EmailJob {
    pub(super) to: Vec<String>,
    pub(super) from: Option<String>,
    pub(super) reply_to: Option<String>,
    pub(super) subject: String,
    pub(super) text: String,
    pub(super) html: Option<String>,
    pub(super) template: Option<String>,
    pub(super) template_version: Option<String>,
    pub(super) user: Option<String>,
    pub(super) event: Option<String>,
}

impl EmailJob {
    /// An email to `to` with a subject and a plain-text body, from the worker's default
    /// sender unless [`from`](EmailJob::from) says otherwise.
    pub fn new(
        to: impl Into<String>,
        subject: impl Into<String>,
        text: impl Into<String>,
    ) -> EmailJob {
        EmailJob {
            to: vec![to.into()],
            from: None,
            reply_to: None,
            subject: subject.into(),
            text: text.into(),
            html: None,
            template: None,
            template_version: None,
            user: None,
            event: None,
        }
    }

    /// Adds a recipient.
    pub fn also_to(mut self, to: impl Into<String>) -> EmailJob {
        self.to.push(to.into());
        self
    }

    /// The sender. Defaults to the handler's default sender.
    pub fn from(mut self, from: impl Into<String>) -> EmailJob {
        self.from = Some(from.into());
        self
    }

    /// Where replies go.
    pub fn reply_to(mut self, reply_to: impl Into<String>) -> EmailJob {
        self.reply_to = Some(reply_to.into());
        self
    }

    /// An HTML alternative of the body.
    pub fn html(mut self, html: impl Into<String>) -> EmailJob {
        self.html = Some(html.into());
        self
    }

    /// The template the email was rendered from, and its version; kept in the job's result.
    pub fn template(mut self, name: impl Into<String>, version: impl Into<String>) -> EmailJob {
        self.template = Some(name.into());
        self.template_version = Some(version.into());
        self
    }

    /// The user and the event the email is about: with a template, they make the dedupe key
    /// `email:<user>:<template>:<event>`, so the same email is sent once.
    pub fn dedupe(mut self, user: impl fmt::Display, event: impl Into<String>) -> EmailJob {
        self.user = Some(user.to_string());
        self.event = Some(event.into());
        self
    }

    /// The dedupe key, when the job has a user, a template and an event.
    pub fn dedupe_key(&self) -> Option<String> {
        match (&self.user, &self.template, &self.event) {
            (Some(user), Some(template), Some(event)) => {
                Some(format!("email:{user}:{template}:{event}"))
            }
            _ => None,
        }
    }

    /// The payload as JSON.
    pub fn payload(&self) -> Value {
        let mut payload = json!({
            "to": if self.to.len() == 1 { json!(self.to[0]) } else { json!(self.to) },
            "subject": self.subject,
            "text": self.text,
        });
        let optional = [
            ("from", &self.from),
            ("reply_to", &self.reply_to),
            ("html", &self.html),
            ("template", &self.template),
            ("template_version", &self.template_version),
            ("user_id", &self.user),
            ("event", &self.event),
        ];
        if let Some(map) = payload.as_object_mut() {
            for (name, value) in optional {
                if let Some(value) = value {
                    map.insert(name.to_string(), json!(value));
                }
            }
        }
        payload
    }

    /// The job: type [`JOB_TYPE`], this payload, and the dedupe key as idempotency key. Set
    /// more options (queue, delay, ...) on the returned [`NewJob`].
    pub fn into_job(self) -> NewJob {
        let job = NewJob::new(JOB_TYPE, self.payload());
        match self.dedupe_key() {
            Some(key) => job.idempotency_key(key),
            None => job,
        }
    }

    /// Enqueues the job; returns its id, or the id of the job already holding its dedupe
    /// key (the email is then not sent again).
    ///
    /// # Errors
    /// As [`Queue::enqueue`].
    pub fn enqueue(self, queue: &Queue) -> Result<i64> {
        queue.enqueue(self.into_job())
    }

    /// Enqueues the job inside the caller's own rusqlite transaction (e.g. with the new
    /// user's row): a SQLite-specific entry point, like [`Queue::enqueue_in`].
    ///
    /// # Errors
    /// As [`Queue::enqueue_in`].
    pub fn enqueue_in(self, queue: &Queue, conn: &Connection) -> Result<i64> {
        queue.enqueue_in(conn, self.into_job())
    }

    /// Reads a payload; the error names the field.
    pub fn from_payload(payload: &Value) -> std::result::Result<EmailJob, String> {
        let text_field = |name: &str| -> std::result::Result<Option<String>, String> {
            match payload.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) if name == "template_version" || name == "user_id" => {
                    Ok(Some(n.to_string()))
                }
                Some(other) => Err(format!("payload field {name} must be text, got {other}")),
            }
        };
        let required = |name: &str| -> std::result::Result<String, String> {
            text_field(name)?.ok_or_else(|| format!("payload field {name} is missing"))
        };
        let to = match payload.get("to") {
            None | Some(Value::Null) => return Err("payload field to is missing".to_string()),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!("payload field to must hold addresses as text, got {v}")
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(format!(
                    "payload field to must be an address or a list of addresses, got {other}"
                ))
            }
        };
        if to.is_empty() {
            return Err("payload field to is an empty list".to_string());
        }
        Ok(EmailJob {
            to,
            from: text_field("from")?,
            reply_to: text_field("reply_to")?,
            subject: required("subject")?,
            text: required("text")?,
            html: text_field("html")?,
            template: text_field("template")?,
            template_version: text_field("template_version")?,
            user: text_field("user_id")?,
            event: text_field("event")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_key_needs_user_template_and_event() {
        let job = EmailJob::new("a@example.com", "s", "t");
        assert_eq!(job.dedupe_key(), None);
        let job = job.template("welcome", "2").dedupe(42, "signup");
        assert_eq!(job.dedupe_key().as_deref(), Some("email:42:welcome:signup"));
        let round = EmailJob::from_payload(&job.payload()).expect("its own payload parses");
        assert_eq!(round, job);
    }

    #[test]
    fn payload_errors_name_the_field() {
        let err = EmailJob::from_payload(&json!({"subject": "s", "text": "t"})).err();
        assert_eq!(err.as_deref(), Some("payload field to is missing"));
        let err = EmailJob::from_payload(&json!({"to": 5, "subject": "s", "text": "t"})).err();
        assert!(err.unwrap_or_default().contains("payload field to must be"));
        let err = EmailJob::from_payload(&json!({"to": "a@b.c", "text": "t"})).err();
        assert_eq!(err.as_deref(), Some("payload field subject is missing"));
    }
}
