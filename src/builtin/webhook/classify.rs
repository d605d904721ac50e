//! What a webhook response means for the delivery: [`classify_status`] and
//! [`parse_retry_after`]. Pure functions, so the table in the README is tested here.

use std::time::{Duration, SystemTime};

/// What a delivery does after a response with a given status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusClass {
    /// 2xx: delivered.
    Success,
    /// 408, 425, 429, 5xx, and redirects other than 301/308: try again later (honouring
    /// `Retry-After`).
    Retry,
    /// Other 4xx, and 301/308 (the URL moved for good: update the endpoint): dead at once.
    Permanent,
    /// 410 Gone: dead at once, and the endpoint is disabled.
    Gone,
}

/// Classifies a response status code (see [`StatusClass`]).
///
/// ```
/// use litejobs::builtin::webhook::{classify_status, StatusClass};
/// assert_eq!(classify_status(204), StatusClass::Success);
/// assert_eq!(classify_status(503), StatusClass::Retry);
/// assert_eq!(classify_status(429), StatusClass::Retry);
/// assert_eq!(classify_status(400), StatusClass::Permanent);
/// assert_eq!(classify_status(410), StatusClass::Gone);
/// ```
pub fn classify_status(code: u16) -> StatusClass {
    match code {
        200..=299 => StatusClass::Success,
        410 => StatusClass::Gone,
        408 | 425 | 429 => StatusClass::Retry,
        301 | 308 => StatusClass::Permanent,
        400..=499 => StatusClass::Permanent,
        // 5xx, other redirects (not followed), and codes outside the standard ranges.
        _ => StatusClass::Retry,
    }
}

/// True when a response says the endpoint itself is failing (408 and 5xx): it counts
/// against the endpoint's circuit breaker. Any other response shows a live endpoint.
pub(crate) fn endpoint_failing(code: u16) -> bool {
    code == 408 || (500..=599).contains(&code)
}

/// Reads a `Retry-After` value: delay seconds (`120`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`, read against `now`). A date in the past gives zero; a
/// delay beyond `max` gives `max`, so a receiver cannot park a delivery for a year.
/// Anything else gives `None` (the retry policy decides).
///
/// ```
/// use litejobs::builtin::webhook::parse_retry_after;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// let max = Duration::from_secs(3600);
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400); // 2015-10-21 07:26:40 GMT
/// assert_eq!(parse_retry_after("120", now, max), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now, max),
///     Some(Duration::from_secs(80))
/// );
/// assert_eq!(parse_retry_after("86400", now, max), Some(max));
/// assert_eq!(parse_retry_after("soon", now, max), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime, max: Duration) -> Option<Duration> {
    let value = value.trim();
    let delay = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only; too many to fit is still "a long time".
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(delay.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn every_status_range_has_its_class() {
        for (code, class) in [
            (200, StatusClass::Success),
            (201, StatusClass::Success),
            (299, StatusClass::Success),
            (302, StatusClass::Retry),
            (307, StatusClass::Retry),
            (301, StatusClass::Permanent),
            (308, StatusClass::Permanent),
            (400, StatusClass::Permanent),
            (401, StatusClass::Permanent),
            (404, StatusClass::Permanent),
            (408, StatusClass::Retry),
            (410, StatusClass::Gone),
            (413, StatusClass::Permanent),
            (425, StatusClass::Retry),
            (429, StatusClass::Retry),
            (500, StatusClass::Retry),
            (502, StatusClass::Retry),
            (503, StatusClass::Retry),
            (599, StatusClass::Retry),
        ] {
            assert_eq!(classify_status(code), class, "status {code}");
        }
        assert!(endpoint_failing(500) && endpoint_failing(408));
        assert!(!endpoint_failing(429) && !endpoint_failing(404) && !endpoint_failing(200));
    }

    #[test]
    fn retry_after_is_bounded_and_past_dates_are_now() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400);
        let max = Duration::from_secs(600);
        assert_eq!(parse_retry_after(" 0 ", now, max), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now, max),
            Some(max)
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now, max),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-5", now, max), None);
        assert_eq!(parse_retry_after("", now, max), None);
        assert_eq!(parse_retry_after("1.5", now, max), None);
    }
}
