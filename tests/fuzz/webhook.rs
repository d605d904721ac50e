//! The webhook targets of the fuzz tests (Cargo feature `webhook`): signature verification
//! of requests from anywhere, `Retry-After` values and status codes of any response.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejobs::builtin::webhook::{
    classify_status, parse_retry_after, sign, verify, SignatureError, StatusClass,
};
use proptest::prelude::*;

use super::config;

// ---------------------------------------------------------------------------------------
// Webhook signatures
// ---------------------------------------------------------------------------------------

/// A secret: usually valid (`whsec_` + base64 of 1–64 bytes), sometimes anything.
fn secret() -> impl Strategy<Value = String> {
    use base64::Engine;
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 1..64).prop_map(|key| format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        )),
        1 => any::<String>(),
        1 => "whsec_[A-Za-z0-9+/=]{0,60}",
    ]
}

/// A receiver's clock: around the Unix epoch, before it, or far in the future.
fn receiver_now() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        3 => (0u64..4_000_000_000).prop_map(|s| UNIX_EPOCH + Duration::from_secs(s)),
        1 => (0u64..4_000_000_000).prop_map(|s| UNIX_EPOCH - Duration::from_secs(s)),
        1 => (0u64..1_000).prop_map(|s| UNIX_EPOCH - Duration::from_secs(s)),
        1 => (0u64..(1u64 << 40)).prop_map(|s| UNIX_EPOCH + Duration::from_secs(s)),
    ]
}

fn timestamp_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<i64>().prop_map(|t| t.to_string()),
        1 => (0i64..4_000_000_000).prop_map(|t| t.to_string()),
        1 => Just(i64::MAX.to_string()),
        1 => Just(i64::MIN.to_string()),
        1 => any::<String>(),
        1 => "[ ]{0,2}-?[0-9]{1,25}[ ]{0,2}",
    ]
}

fn tolerance() -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => (0u64..3600).prop_map(Duration::from_secs),
        1 => any::<u64>().prop_map(Duration::from_secs),
    ]
}

/// `verify` on anything: never a panic; `Ok` only for a matching `v1` signature of these
/// exact bytes within the tolerance.
fn check_verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) {
    let result = verify(secret, id, timestamp, signatures, body, now, tolerance);
    if result.is_ok() {
        let sent: i64 = timestamp
            .trim()
            .parse()
            .expect("an accepted timestamp is a number");
        let expected = sign(secret, id, sent, body).expect("an accepted secret signs");
        assert!(
            signatures.split_whitespace().any(|s| s == expected),
            "verify accepted signatures {signatures:?} without the right one {expected:?}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn verify_never_panics_on_any_request(
        secret in secret(),
        id in ".{0,40}",
        timestamp in timestamp_text(),
        signatures in prop_oneof![any::<String>(), "(v[0-9],[A-Za-z0-9+/=]{0,50} ?){0,4}"],
        body in prop::collection::vec(any::<u8>(), 0..256),
        now in receiver_now(),
        tolerance in tolerance(),
    ) {
        check_verify(&secret, &id, &timestamp, &signatures, &body, now, tolerance);
    }

    #[test]
    fn a_signed_request_verifies_and_any_change_is_refused(
        secret in secret(),
        id in "[ -~]{1,40}",
        sent in 0i64..4_000_000_000,
        skew in -300i64..=300,
        body in prop::collection::vec(any::<u8>(), 0..256),
        flip in any::<prop::sample::Index>(),
        other in secret(),
    ) {
        prop_assume!(!id.trim().is_empty());
        let signature = match sign(&secret, &id, sent, &body) {
            Ok(s) => s,
            Err(e) => {
                // Only a secret that is not base64 is refused, by sign and verify alike.
                prop_assert!(matches!(e, SignatureError::InvalidSecret(_)));
                return Ok(());
            }
        };
        let now = UNIX_EPOCH + Duration::from_secs((sent + skew).max(0) as u64);
        let ts = sent.to_string();
        let tolerance = Duration::from_secs(300);
        // With an older secret beside it, as during a rotation.
        let header = format!("v1,AAAA {signature}");
        prop_assert_eq!(verify(&secret, &id, &ts, &header, &body, now, tolerance), Ok(()));
        if !body.is_empty() {
            let mut tampered = body.clone();
            let i = flip.index(tampered.len());
            tampered[i] ^= 0x01;
            prop_assert_eq!(
                verify(&secret, &id, &ts, &signature, &tampered, now, tolerance),
                Err(SignatureError::NoMatchingSignature)
            );
        }
        let tampered_id = format!("{id}x");
        prop_assert_eq!(
            verify(&secret, &tampered_id, &ts, &signature, &body, now, tolerance),
            Err(SignatureError::NoMatchingSignature)
        );
        let late = UNIX_EPOCH + Duration::from_secs(sent as u64 + 301);
        let too_old = matches!(
            verify(&secret, &id, &ts, &signature, &body, late, tolerance),
            Err(SignatureError::TooOld { .. })
        );
        prop_assert!(too_old, "a replay after the tolerance is refused as too old");
        if let Ok(sig) = sign(&other, &id, sent, &body) {
            if sig != signature {
                prop_assert_eq!(
                    verify(&secret, &id, &ts, &sig, &body, now, tolerance),
                    Err(SignatureError::NoMatchingSignature)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Retry-After and status codes
// ---------------------------------------------------------------------------------------

fn retry_after_text() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => any::<String>(),
        2 => "[ ]{0,2}[0-9]{1,30}[ ]{0,2}",
        1 => "-?[0-9]{0,5}(\\.[0-9]{0,3})?",
        2 => (0u64..8_000_000_000).prop_map(|s| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s))),
        1 => "(Mon|Tue|Wed|Thu|Fri|Sat|Sun|[A-Z][a-z]{2}), [0-9]{1,3} [A-Z][a-z]{2} [0-9]{1,6} [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3} (GMT|UTC|[A-Z]{3})",
    ]
}

/// `parse_retry_after` on anything: never a panic, never above `max`; digits are seconds and
/// an HTTP date is the time until it (zero when past).
fn check_retry_after(value: &str, now: SystemTime, max: Duration) {
    let parsed = parse_retry_after(value, now, max);
    if let Some(delay) = parsed {
        assert!(
            delay <= max,
            "{value:?} gave {delay:?} over the maximum {max:?}"
        );
    }
    let trimmed = value.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let secs = trimmed.parse::<u64>().unwrap_or(u64::MAX);
        assert_eq!(
            parsed,
            Some(Duration::from_secs(secs).min(max)),
            "{value:?}"
        );
    } else if let Ok(at) = httpdate::parse_http_date(trimmed) {
        let expected = at.duration_since(now).unwrap_or(Duration::ZERO).min(max);
        assert_eq!(parsed, Some(expected), "{value:?}");
    } else {
        assert_eq!(
            parsed, None,
            "{value:?} is neither seconds nor an HTTP date"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn retry_after_never_panics_and_is_bounded(
        value in retry_after_text(),
        now in receiver_now(),
        max in prop_oneof![(0u64..100_000).prop_map(Duration::from_secs), any::<u64>().prop_map(Duration::from_secs)],
    ) {
        check_retry_after(&value, now, max);
    }
}

#[test]
fn every_status_code_has_a_class() {
    for code in 0..=u16::MAX {
        let class = classify_status(code);
        let expected = match code {
            200..=299 => StatusClass::Success,
            410 => StatusClass::Gone,
            408 | 425 | 429 => StatusClass::Retry,
            400..=499 | 301 | 308 => StatusClass::Permanent,
            _ => StatusClass::Retry,
        };
        assert_eq!(class, expected, "status {code}");
    }
}

// ---------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------

/// One hand-picked input of `tests/fuzz_corpus.txt` for one of the webhook targets
/// (`WEBHOOK_TARGETS` in tests/fuzz.rs), checked as a receiver at `now` would see it.
pub(super) fn check_corpus_input(target: &str, input: &str, now: SystemTime) {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let tolerance = Duration::from_secs(300);
    match target {
        "retry-after" => {
            check_retry_after(input, now, Duration::from_secs(3600));
            check_retry_after(input, UNIX_EPOCH, Duration::MAX);
        }
        "timestamp" => {
            for now in [now, UNIX_EPOCH, UNIX_EPOCH - Duration::from_secs(5)] {
                for tolerance in [tolerance, Duration::MAX] {
                    check_verify(secret, "msg", input, "v1,AAAA", b"{}", now, tolerance);
                }
            }
        }
        "signature" => check_verify(secret, "msg", "1700000000", input, b"{}", now, tolerance),
        "secret" => check_verify(input, "msg", "1700000000", "v1,AAAA", b"{}", now, tolerance),
        other => panic!("{other:?} is not a webhook corpus target"),
    }
}
