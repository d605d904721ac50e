//! Encrypted payloads at rest: a job's payload, result and progress stored as an
//! authenticated-encryption envelope instead of clear JSON, for jobs marked encrypted
//! ([`NewJob::encrypted`](crate::NewJob::encrypted), a typed job's
//! [`JobOptions::encrypted`](crate::JobOptions::encrypted), or a job type marked with
//! [`Queue::set_type_encrypted`](crate::Queue::set_type_encrypted) /
//! `litejobs keys encrypt-type`).
//!
//! - [`Keyring`]: named 256-bit keys; the first encrypts, every one decrypts. Given to a
//!   queue with `QueueBuilder::encryption_keys` (feature `encryption`), or to the command
//!   line with [`KEYS_ENV`] or a key file ([`KEYS_FILE_ENV`], `--keys-file`).
//! - The envelope, JSON text in the same column (so the column still holds JSON):
//!   `{"litejobs_envelope":1,"alg":"A256GCMSIV","key":"k1","nonce":"…","data":"…"}`,
//!   AES-256-GCM-SIV (RFC 8452) with a random 96-bit nonce, bound to its column, job type
//!   and queue. The schema guide documents it byte for byte, for other languages.
//!
//! Every view of a [`Queue`](crate::Queue) ([`Queue::job`](crate::Queue::job),
//! [`Queue::list`](crate::Queue::list), the CLI, the dashboard) decrypts what its keys open
//! and shows the rest as `encrypted (key k1)`; a worker decrypts the payload before the
//! handler runs and encrypts the result and progress it writes back. The guide
//! (`litejobs::guide::encryption`) has the set-up, rotation, what stays in clear and the
//! threat model.
//!
//! Without the `encryption` feature (`default-features = false`), litejobs still knows an
//! envelope when it meets one: views say `encrypted (key k1)`, and a worker makes such a job
//! dead with an error that says this build has no encryption.

#[cfg(feature = "encryption")]
mod cipher;
pub(crate) mod envelope;
mod keyring;

pub use envelope::ALGORITHM;
pub(crate) use envelope::{Binding, Column};
pub(crate) use keyring::{no_key_error, OpenError};
pub use keyring::{Keyring, KEYS_ENV, KEYS_FILE_ENV, KEY_BYTES};

/// What a view shows in place of a column it cannot decrypt.
pub(crate) fn sealed_text(key: &str) -> String {
    format!("encrypted (key {key})")
}

/// A job type every litejobs enqueuer encrypts (the `encrypted_types` table), as
/// [`Queue::encrypted_types`](crate::Queue::encrypted_types) reads it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct EncryptedType {
    /// The job type.
    pub job_type: String,
    /// When it was marked (ms since the Unix epoch).
    pub created_at: i64,
}

/// A serde message about an encrypted payload with the values it quotes left out (serde
/// writes `invalid type: string "4111 1111", expected u64`): field names stay, values go,
/// so that the error, which is stored in clear, does not echo what was encrypted.
pub(crate) fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    // `invalid type: KIND VALUE, expected …` and `invalid value: KIND VALUE, expected …`:
    // the value is quoted ("…") or in backticks; `unknown variant `x``, likewise.
    for lead in ["invalid type: ", "invalid value: ", "unknown variant "] {
        if let Some(start) = rest.find(lead) {
            let after = start + lead.len();
            out.push_str(&rest[..after]);
            let tail = &rest[after..];
            let end = tail.find(", expected").unwrap_or(tail.len());
            let shown = tail[..end]
                .split([' ', '`', '"'])
                .next()
                .filter(|kind| !kind.is_empty() && lead != "unknown variant ")
                .unwrap_or("(value withheld: the payload is encrypted)");
            out.push_str(shown);
            rest = &tail[end..];
            break;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_keep_field_names_and_lose_values() {
        assert_eq!(
            without_values("invalid type: string \"4111 1111\", expected u64"),
            "invalid type: string, expected u64"
        );
        assert_eq!(
            without_values("invalid value: integer `-5`, expected u32"),
            "invalid value: integer, expected u32"
        );
        assert_eq!(
            without_values("unknown variant `gold`, expected `a` or `b`"),
            "unknown variant (value withheld: the payload is encrypted), expected `a` or `b`"
        );
        assert_eq!(
            without_values("missing field `card`"),
            "missing field `card`"
        );
    }
}
