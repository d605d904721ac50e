//! The envelope: how an encrypted payload, result or progress is stored, as JSON text in its
//! own column, and what it is bound to (the associated data). The format is a contract for
//! other languages (docs/schema.md, "Encrypted payloads"); the cipher itself is in
//! `keyring.rs`.
//!
//! ```text
//! {"litejobs_envelope":1,"alg":"A256GCMSIV","key":"k1","nonce":"<base64, 12 bytes>",
//!  "data":"<base64: ciphertext followed by the 16-byte tag>"}
//! ```
//!
//! The associated data is, for each of `litejobs envelope 1`, the key name, the column
//! (`payload`, `result` or `progress`), the job type and the queue: its length in bytes as a
//! 4-byte big-endian number, then its UTF-8 bytes.

use serde_json::Value;

/// The field that marks a JSON object as an envelope; its value is the format's version.
pub(crate) const MARKER: &str = "litejobs_envelope";

/// The envelope format this build writes and reads.
#[cfg_attr(not(feature = "encryption"), allow(dead_code))]
pub(crate) const VERSION: u64 = 1;

/// The cipher name in the `alg` field: AES-256-GCM-SIV (RFC 8452).
pub const ALGORITHM: &str = "A256GCMSIV";

/// The first part of the associated data: the format and its version.
const CONTEXT: &str = "litejobs envelope 1";

/// Nonce length in bytes (96 bits).
#[cfg_attr(not(feature = "encryption"), allow(dead_code))]
pub(crate) const NONCE_BYTES: usize = 12;

/// The authentication tag at the end of `data`, in bytes.
pub(crate) const TAG_BYTES: usize = 16;

/// The column an envelope lives in: part of what it is bound to, so a payload's envelope
/// cannot be passed off as a result, or the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Payload,
    Result,
    Progress,
}

impl Column {
    /// The column's name, as in the schema and the associated data.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Column::Payload => "payload",
            Column::Result => "result",
            Column::Progress => "progress",
        }
    }
}

/// What an envelope is bound to: its column, and the job type and queue of its row.
/// Decrypting it anywhere else (another column, a row of another type or queue) fails.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding<'a> {
    pub(crate) column: Column,
    pub(crate) job_type: &'a str,
    pub(crate) queue: &'a str,
}

impl Binding<'_> {
    /// The associated data for an envelope under `key`: each part length-prefixed, so no
    /// two different bindings give the same bytes.
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn associated_data(&self, key: &str) -> Vec<u8> {
        let parts = [CONTEXT, key, self.column.name(), self.job_type, self.queue];
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
        for part in parts {
            // A part longer than 4 GiB cannot be a job type or queue litejobs stores.
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out
    }
}

/// The key name of a value that is an envelope (an object with the [`MARKER`] field), or
/// `None` for a plain value. An envelope without a usable `key` field is named `?`.
pub(crate) fn sealed_by(value: &Value) -> Option<&str> {
    let object = value.as_object()?;
    object.get(MARKER)?;
    Some(
        object
            .get("key")
            .and_then(Value::as_str)
            .filter(|key| !key.is_empty())
            .unwrap_or("?"),
    )
}

/// Refuses a payload to be stored in clear that every reader would take for an envelope (an
/// object with the [`MARKER`] field): views would call it encrypted, a worker would refuse
/// to start over it and the job would go dead unrun. Sealed, such a payload is fine.
pub(crate) fn refuse_lookalike(payload: &str) -> crate::error::Result<()> {
    if !mentions_marker(payload) {
        return Ok(());
    }
    match serde_json::from_str::<Value>(payload) {
        Ok(value) if sealed_by(&value).is_some() => Err(crate::error::Error::invalid_job(format!(
            "payload has a top-level `{MARKER}` field, which marks an encrypted envelope: \
                 stored in clear it would be read as one and never run; rename the field or \
                 enqueue the job encrypted"
        ))),
        _ => Ok(()),
    }
}

/// True when stored text may hold an envelope: a cheap test on the raw bytes, for the
/// claim's size rule, before anything is parsed.
pub(crate) fn may_be_sealed(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok_and(mentions_marker)
}

/// [`may_be_sealed`] for text already known to be UTF-8 (an enqueue's payload).
fn mentions_marker(text: &str) -> bool {
    text.contains("\"litejobs_envelope\"")
}

/// The key name written in text that holds the envelope marker but is not JSON any more (an
/// envelope cut short or altered), so that the error can still name the key.
pub(crate) fn key_in_damaged(text: &str) -> Option<&str> {
    if !mentions_marker(text) {
        return None;
    }
    let after = &text[text.find("\"key\"")? + 5..];
    let after = after
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    let key = &after[..after.find('"')?];
    (!key.is_empty()).then_some(key)
}

/// The longest envelope a plain text of `plain_bytes` can become (base64 of the text and
/// its tag, plus the fields and the longest key name), so that the claim's size rule lets
/// through the envelope of a payload the enqueue accepted.
pub(crate) fn max_sealed_len(plain_bytes: usize) -> usize {
    let data = plain_bytes.saturating_add(TAG_BYTES);
    data.div_ceil(3).saturating_mul(4).saturating_add(256)
}

/// The parts of an envelope, checked, its base64 decoded.
#[cfg(feature = "encryption")]
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) key: &'a str,
    pub(crate) nonce: [u8; NONCE_BYTES],
    pub(crate) data: Vec<u8>,
}

/// Reads an envelope's fields (`value` is one: [`sealed_by`] said so).
///
/// # Errors
/// What is wrong with it, for a message that names its key.
#[cfg(feature = "encryption")]
pub(crate) fn parse(value: &Value) -> std::result::Result<Parsed<'_>, String> {
    use base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT as B64;
    use base64::Engine;

    let field = |name: &str| value.get(name);
    match field(MARKER).and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(other) => {
            return Err(format!(
                "envelope version {other} is not one this litejobs reads (it reads {VERSION})"
            ))
        }
        None => return Err(format!("its {MARKER} field is not a version number")),
    }
    match field("alg").and_then(Value::as_str) {
        Some(ALGORITHM) => {}
        Some(other) => {
            return Err(format!(
                "algorithm {other:?} is not one this litejobs reads ({ALGORITHM})"
            ))
        }
        None => return Err("it has no alg field".to_string()),
    }
    let key = field("key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or("it has no key field")?;
    let text = |name: &str| {
        field(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("it has no {name} field"))
    };
    let nonce = B64
        .decode(text("nonce")?)
        .map_err(|e| format!("its nonce is not base64 ({e})"))?;
    let nonce: [u8; NONCE_BYTES] = nonce
        .as_slice()
        .try_into()
        .map_err(|_| format!("its nonce is {} bytes, not {NONCE_BYTES}", nonce.len()))?;
    let data = B64
        .decode(text("data")?)
        .map_err(|e| format!("its data is not base64 ({e})"))?;
    if data.len() < TAG_BYTES {
        return Err(format!(
            "its data is {} bytes, shorter than the {TAG_BYTES}-byte tag: cut short",
            data.len()
        ));
    }
    Ok(Parsed { key, nonce, data })
}

/// The envelope's JSON text, written into one buffer (enqueue is a hot path).
#[cfg(feature = "encryption")]
pub(crate) fn write(key: &str, nonce: &[u8; NONCE_BYTES], data: &[u8]) -> String {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;

    let mut out = String::with_capacity(96 + key.len() + data.len().div_ceil(3) * 4);
    // Key names are checked to need no JSON escaping (letters, digits, `.`, `_`, `-`).
    out.push_str("{\"litejobs_envelope\":1,\"alg\":\"");
    out.push_str(ALGORITHM);
    out.push_str("\",\"key\":\"");
    out.push_str(key);
    out.push_str("\",\"nonce\":\"");
    B64.encode_string(nonce, &mut out);
    out.push_str("\",\"data\":\"");
    B64.encode_string(data, &mut out);
    out.push_str("\"}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn associated_data_is_length_prefixed_parts() {
        let binding = Binding {
            column: Column::Result,
            job_type: "t",
            queue: "q",
        };
        let ad = binding.associated_data("k1");
        let mut expected = Vec::new();
        for part in ["litejobs envelope 1", "k1", "result", "t", "q"] {
            expected.extend_from_slice(&(part.len() as u32).to_be_bytes());
            expected.extend_from_slice(part.as_bytes());
        }
        assert_eq!(ad, expected);
        // Moving a byte from the type to the queue changes the bytes.
        let moved = Binding {
            job_type: "tq",
            queue: "",
            ..binding
        };
        assert_ne!(moved.associated_data("k1"), ad);
    }

    #[test]
    fn envelopes_are_told_from_plain_values() {
        assert_eq!(
            sealed_by(&json!({"litejobs_envelope": 1, "key": "k1"})),
            Some("k1")
        );
        assert_eq!(sealed_by(&json!({"litejobs_envelope": 1})), Some("?"));
        assert_eq!(sealed_by(&json!({"user": 1})), None);
        assert_eq!(sealed_by(&json!("litejobs_envelope")), None);
        assert!(may_be_sealed(br#"{"a":1, "litejobs_envelope": 1}"#));
        assert!(!may_be_sealed(b"{}"));
    }

    #[test]
    fn a_damaged_envelope_still_names_its_key() {
        let cut = r#"{"litejobs_envelope":1,"alg":"A256GCMSIV","key": "k7","nonce":"AAAA"#;
        assert_eq!(key_in_damaged(cut), Some("k7"));
        assert_eq!(key_in_damaged(r#"{"key":"k7""#), None);
        assert_eq!(key_in_damaged(r#"{"litejobs_envelope":1,"ke"#), None);
    }

    #[test]
    fn the_size_bound_covers_the_envelope_of_a_payload_at_the_limit() {
        assert!(max_sealed_len(64 * 1024) > (64 * 1024 + 16) * 4 / 3 + 100);
    }

    #[cfg(feature = "encryption")]
    #[test]
    fn parse_names_what_is_wrong() {
        let good = json!({"litejobs_envelope": 1, "alg": ALGORITHM, "key": "k1",
                          "nonce": "AAAAAAAAAAAAAAAA", "data": "AAAAAAAAAAAAAAAAAAAAAA=="});
        assert!(parse(&good).is_ok());
        let with = |field: &str, value: Value| {
            let mut v = good.clone();
            v[field] = value;
            parse(&v).err().unwrap_or_default()
        };
        assert!(with("litejobs_envelope", json!(2)).contains("version 2"));
        assert!(with("alg", json!("A128GCM")).contains("\"A128GCM\""));
        assert!(with("nonce", json!("AAAA")).contains("3 bytes, not 12"));
        assert!(with("data", json!("AAAA")).contains("cut short"));
        assert!(with("data", json!("!!")).contains("not base64"));
    }
}
