//! The rules a claimed row must meet before a handler gets it, written once for every
//! backend.
//!
//! Other programs insert jobs by plain SQL, and a row can hold what no handler can use: a
//! run time in seconds, attempts below zero, a BLOB payload. The schemas' CHECK rules refuse
//! such rows at the door, but a row written with the rules switched off (SQLite's
//! `ignore_check_constraints`, which litejobs' own claiming connection uses; a PostgreSQL
//! schema whose rules someone dropped), or before the rules existed, still gets in. Each
//! backend reads the claimed row's values as the database holds them ([`ClaimedValues`]),
//! and [`check_claimed`] judges them: the same row gets the same verdict, with the same
//! message, on either backend. A row that fails goes dead without running, naming the job,
//! the column and what it held; the claim itself never fails on it.

use super::claim::ClaimedRow;
use crate::encryption::envelope::{max_sealed_len, may_be_sealed};
use crate::job::MAX_RUN_AT_MS;

/// The longest raw value shown in a problem, in characters.
const SHOWN_CHARS: usize = 64;

/// A column's value as the database returned it: one of SQLite's storage classes, which
/// also hold every value of a typed server column (a `bigint` is an `Integer`, `text` is
/// `Text`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RawValue<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

impl<'a> RawValue<'a> {
    /// A value of a nullable text column.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn opt_text(text: Option<&'a str>) -> RawValue<'a> {
        text.map_or(RawValue::Null, |t| RawValue::Text(t.as_bytes()))
    }

    /// A value of a nullable integer column.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn opt_int(value: Option<i64>) -> RawValue<'a> {
        value.map_or(RawValue::Null, RawValue::Integer)
    }

    /// The raw value as SQL would write it, shortened: `BLOB X'7B7D'`, `TEXT 'high'`,
    /// `REAL 1.5`, `NULL`. Safe to print: control characters and invalid UTF-8 are escaped.
    pub(crate) fn describe(self) -> String {
        match self {
            RawValue::Null => "NULL".to_string(),
            RawValue::Integer(i) => format!("INTEGER {i}"),
            RawValue::Real(f) => format!("REAL {f}"),
            RawValue::Text(bytes) => format!("TEXT '{}'", shorten(&printable(bytes))),
            RawValue::Blob(bytes) => {
                let hex: String = bytes
                    .iter()
                    .take(SHOWN_CHARS / 2)
                    .map(|b| format!("{b:02X}"))
                    .collect();
                let more = if bytes.len() > SHOWN_CHARS / 2 {
                    "…"
                } else {
                    ""
                };
                format!("BLOB X'{hex}{more}' ({} bytes)", bytes.len())
            }
        }
    }

    /// The value as text, NULL as `None`: TEXT as it is (invalid UTF-8 replaced, and noted),
    /// numbers written out, a BLOB as its hex literal (noted as "not `what`").
    pub(crate) fn text(
        self,
        column: &str,
        what: &str,
        problems: &mut Vec<String>,
    ) -> Option<String> {
        match self {
            RawValue::Null => None,
            RawValue::Text(bytes) => Some(match std::str::from_utf8(bytes) {
                Ok(text) => text.to_string(),
                Err(_) => {
                    problems.push(format!(
                        "column {column} holds TEXT that is not valid UTF-8 ({} bytes)",
                        bytes.len()
                    ));
                    String::from_utf8_lossy(bytes).into_owned()
                }
            }),
            RawValue::Integer(i) => Some(i.to_string()),
            RawValue::Real(f) => Some(f.to_string()),
            RawValue::Blob(_) => {
                problems.push(format!(
                    "column {column} holds {}, not {what}",
                    self.describe()
                ));
                Some(self.describe())
            }
        }
    }
    /// The value as an integer, NULL as `None`: INTEGER as it is, a REAL rounded down (older
    /// versions and other languages wrote fractional times), anything else 0 (noted).
    pub(crate) fn int(self, column: &str, problems: &mut Vec<String>) -> Option<i64> {
        match self {
            RawValue::Null => None,
            RawValue::Integer(i) => Some(i),
            // `as` saturates and maps NaN to 0.
            RawValue::Real(f) => Some(f as i64),
            RawValue::Text(_) | RawValue::Blob(_) => {
                problems.push(format!(
                    "column {column} holds {}, not an integer",
                    self.describe()
                ));
                Some(0)
            }
        }
    }
}

/// Text with invalid UTF-8 replaced (U+FFFD) and control characters escaped.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<char>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// What a claim read of one job, as the database holds it, before any check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimedValues<'a> {
    pub(crate) id: i64,
    pub(crate) queue: RawValue<'a>,
    pub(crate) job_type: RawValue<'a>,
    pub(crate) payload: RawValue<'a>,
    pub(crate) priority: RawValue<'a>,
    pub(crate) run_at: RawValue<'a>,
    /// The attempts the row held before this claim counted one more.
    pub(crate) attempts: RawValue<'a>,
    pub(crate) max_attempts: RawValue<'a>,
    pub(crate) timeout_ms: RawValue<'a>,
    /// The lease this claim gives the job.
    pub(crate) locked_until: RawValue<'a>,
    pub(crate) idempotency_key: RawValue<'a>,
    pub(crate) group_key: RawValue<'a>,
    pub(crate) created_at: RawValue<'a>,
    pub(crate) expires_at: RawValue<'a>,
}

/// The claimed row a handler gets, with a [`ClaimedRow::defect`] naming every rule the
/// values break (the schemas' CHECK rules, in code, bar `updated_at`'s, which the claim
/// writes anew; and the worker's payload limit): text where text belongs (not empty for
/// the queue and type), whole numbers where numbers belong, a run time in milliseconds
/// (not seconds, not past the year 5000), attempts of at least 0 with one more still
/// countable, at least one attempt in all, a timeout of at least 1 ms, a deadline that is
/// NULL or in milliseconds as the run time, a payload of at most `max_payload_bytes` (an
/// envelope: at most what that of such a payload takes). A value that breaks a rule is
/// replaced by one a handler can be given (the job goes dead without running anyway). Each
/// value is read once: this runs per job.
pub(crate) fn check_claimed(v: &ClaimedValues<'_>, max_payload_bytes: usize) -> ClaimedRow {
    let mut problems = Vec::new();
    let p = &mut problems;
    // Text the rules let in (a number too; empty text only where `empty_ok`), else the
    // problem noted and the value described.
    let text = |value: RawValue<'_>,
                column: &str,
                what: &str,
                empty_ok: bool,
                p: &mut Vec<String>|
     -> Option<String> {
        if value == RawValue::Text(b"") && !empty_ok {
            p.push(format!("column {column} holds TEXT '', not {what}"));
            return Some(String::new());
        }
        value.text(column, what, p)
    };
    let queue = text(v.queue, "queue", "a queue name", false, p).unwrap_or_default();
    let job_type = text(v.job_type, "job_type", "a job type", false, p).unwrap_or_default();
    let payload = text(v.payload, "payload", "JSON text", true, p).unwrap_or_default();
    let priority = strict_int(v.priority, "priority", i64::MIN, p).unwrap_or(0);
    let created_at = strict_int(v.created_at, "created_at", i64::MIN, p);
    if let Some(run_at) = strict_int(v.run_at, "run_at", i64::MIN, p) {
        if created_at.is_some_and(|created| run_at < created / 100) {
            p.push(format!(
                "column run_at holds {run_at}, which looks like seconds, not milliseconds since 1970"
            ));
        } else if run_at > MAX_RUN_AT_MS {
            p.push(format!(
                "column run_at holds {run_at}, past the year 5000: microseconds or \
                 nanoseconds, not milliseconds"
            ));
        }
    }
    let attempts = strict_int(v.attempts, "attempts", 0, p).unwrap_or(0);
    if attempts == i64::MAX {
        p.push(format!(
            "column attempts holds {attempts}, no further attempt can be counted"
        ));
    }
    let max_attempts = strict_int(v.max_attempts, "max_attempts", 1, p).unwrap_or(1);
    let timeout_ms = match v.timeout_ms {
        RawValue::Null => None,
        RawValue::Integer(ms) if ms >= 1 => Some(ms),
        value => {
            p.push(format!(
                "column timeout_ms holds {}, not NULL or a positive integer",
                value.describe()
            ));
            None
        }
    };
    let locked_until = lenient_int(v.locked_until, "locked_until", p);
    let idempotency_key = text(
        v.idempotency_key,
        "idempotency_key",
        "NULL or text",
        true,
        p,
    );
    let group_key = text(v.group_key, "group_key", "NULL or text", true, p);
    let expires_at = match v.expires_at {
        RawValue::Null => None,
        RawValue::Integer(at) => {
            if created_at.is_some_and(|created| at < created / 100) {
                p.push(format!(
                    "column expires_at holds {at}, which looks like seconds, not milliseconds \
                     since 1970"
                ));
            } else if at > MAX_RUN_AT_MS {
                p.push(format!(
                    "column expires_at holds {at}, past the year 5000: microseconds or \
                     nanoseconds, not milliseconds"
                ));
            }
            Some(at)
        }
        value => {
            p.push(format!(
                "column expires_at holds {}, not NULL or integer milliseconds since 1970",
                value.describe()
            ));
            None
        }
    };
    let size = match v.payload {
        RawValue::Text(bytes) | RawValue::Blob(bytes) => bytes.len(),
        _ => 0,
    };
    // An envelope is longer than the payload it holds (which the worker checks against the
    // limit once decrypted): it may be as long as that of a payload at the limit. Looked
    // for only past the limit: this runs on the dispatcher's thread, for every job.
    let limit = match v.payload {
        RawValue::Text(bytes) if size > max_payload_bytes && may_be_sealed(bytes) => {
            max_sealed_len(max_payload_bytes)
        }
        _ => max_payload_bytes,
    };
    if size > limit {
        p.push(format!(
            "column payload is {size} bytes, over this worker's limit of {limit} bytes"
        ));
    }
    ClaimedRow {
        id: v.id,
        queue,
        job_type,
        payload,
        priority,
        attempt: attempts.saturating_add(1),
        max_attempts,
        timeout_ms,
        locked_until,
        idempotency_key,
        group_key,
        expires_at,
        defect: (!problems.is_empty()).then(|| problems.join("; ")),
    }
}

/// An integer of at least `least`, or `None` with the problem noted. The schemas' rules
/// store a whole number as an integer whatever type it was bound as, so any other value got
/// in with the rules off.
fn strict_int(
    value: RawValue<'_>,
    column: &str,
    least: i64,
    problems: &mut Vec<String>,
) -> Option<i64> {
    match value {
        RawValue::Integer(i) if i >= least => Some(i),
        _ => {
            let what = match least {
                i64::MIN => "an integer".to_string(),
                least => format!("an integer of at least {least}"),
            };
            problems.push(format!(
                "column {column} holds {}, not {what}",
                value.describe()
            ));
            None
        }
    }
}

/// A time the claim computed from the row's values, read as [`RawValue::int`] reads it,
/// with NULL as 0 (noted).
fn lenient_int(value: RawValue<'_>, column: &str, problems: &mut Vec<String>) -> i64 {
    value.int(column, problems).unwrap_or_else(|| {
        problems.push(format!("column {column} holds NULL, not an integer"));
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    /// A row every rule accepts, to change one value of.
    fn good<'a>() -> ClaimedValues<'a> {
        ClaimedValues {
            id: 7,
            queue: RawValue::Text(b"default"),
            job_type: RawValue::Text(b"t"),
            payload: RawValue::Text(b"{}"),
            priority: RawValue::Integer(0),
            run_at: RawValue::Integer(T0),
            attempts: RawValue::Integer(0),
            max_attempts: RawValue::Integer(6),
            timeout_ms: RawValue::Null,
            locked_until: RawValue::Integer(T0 + 1_000),
            idempotency_key: RawValue::Null,
            group_key: RawValue::Null,
            created_at: RawValue::Integer(T0),
            expires_at: RawValue::Null,
        }
    }

    fn defect(v: ClaimedValues<'_>) -> Option<String> {
        check_claimed(&v, 16).defect
    }

    #[test]
    fn a_good_row_is_handed_over_with_its_next_attempt() {
        let row = check_claimed(
            &ClaimedValues {
                attempts: RawValue::Integer(2),
                timeout_ms: RawValue::Integer(1),
                group_key: RawValue::Text(b"g"),
                ..good()
            },
            16,
        );
        assert_eq!(row.defect, None);
        assert_eq!((row.attempt, row.max_attempts), (3, 6));
        assert_eq!((row.timeout_ms, row.locked_until), (Some(1), T0 + 1_000));
        assert_eq!(row.group_key.as_deref(), Some("g"));
    }

    /// Each rule, at its edge, names the column and what it held.
    #[test]
    fn each_rule_names_the_column_and_the_value() {
        let cases: Vec<(ClaimedValues<'_>, &str)> = vec![
            (
                ClaimedValues {
                    run_at: RawValue::Integer(T0 / 1000),
                    ..good()
                },
                "column run_at holds 1700000000, which looks like seconds, not milliseconds since 1970",
            ),
            (
                ClaimedValues {
                    run_at: RawValue::Integer(MAX_RUN_AT_MS + 1),
                    ..good()
                },
                "column run_at holds 100000000000000, past the year 5000: microseconds or \
                 nanoseconds, not milliseconds",
            ),
            (
                ClaimedValues {
                    attempts: RawValue::Integer(-1),
                    ..good()
                },
                "column attempts holds INTEGER -1, not an integer of at least 0",
            ),
            (
                ClaimedValues {
                    attempts: RawValue::Integer(i64::MAX),
                    ..good()
                },
                "column attempts holds 9223372036854775807, no further attempt can be counted",
            ),
            (
                ClaimedValues {
                    max_attempts: RawValue::Integer(0),
                    ..good()
                },
                "column max_attempts holds INTEGER 0, not an integer of at least 1",
            ),
            (
                ClaimedValues {
                    timeout_ms: RawValue::Integer(0),
                    ..good()
                },
                "column timeout_ms holds INTEGER 0, not NULL or a positive integer",
            ),
            (
                ClaimedValues {
                    queue: RawValue::Text(b""),
                    ..good()
                },
                "column queue holds TEXT '', not a queue name",
            ),
            (
                ClaimedValues {
                    expires_at: RawValue::Text(b"tomorrow"),
                    ..good()
                },
                "column expires_at holds TEXT 'tomorrow', not NULL or integer milliseconds \
                 since 1970",
            ),
            (
                ClaimedValues {
                    expires_at: RawValue::Integer(T0 / 1000),
                    ..good()
                },
                "column expires_at holds 1700000000, which looks like seconds, not \
                 milliseconds since 1970",
            ),
            (
                ClaimedValues {
                    expires_at: RawValue::Integer(MAX_RUN_AT_MS + 1),
                    ..good()
                },
                "column expires_at holds 100000000000000, past the year 5000: microseconds or \
                 nanoseconds, not milliseconds",
            ),
            (
                ClaimedValues {
                    priority: RawValue::Text(b"high"),
                    ..good()
                },
                "column priority holds TEXT 'high', not an integer",
            ),
            (
                ClaimedValues {
                    payload: RawValue::Blob(b"{}"),
                    ..good()
                },
                "column payload holds BLOB X'7B7D' (2 bytes), not JSON text",
            ),
            (
                ClaimedValues {
                    payload: RawValue::Text(b"{\"a\":\"\xff\"}"),
                    ..good()
                },
                "column payload holds TEXT that is not valid UTF-8 (9 bytes)",
            ),
            (
                ClaimedValues {
                    payload: RawValue::Text(b"{\"s\":\"0123456789\"}"),
                    ..good()
                },
                "column payload is 18 bytes, over this worker's limit of 16 bytes",
            ),
        ];
        for (values, expected) in cases {
            assert_eq!(defect(values).as_deref(), Some(expected), "{values:?}");
        }
        // The edges that pass: a run time of exactly created_at / 100, the last millisecond
        // of the year 5000, a payload exactly at the limit.
        for values in [
            ClaimedValues {
                run_at: RawValue::Integer(T0 / 100),
                ..good()
            },
            ClaimedValues {
                run_at: RawValue::Integer(MAX_RUN_AT_MS),
                ..good()
            },
            ClaimedValues {
                payload: RawValue::Text(b"{\"s\":\"01234567\"}"),
                attempts: RawValue::Integer(i64::MAX - 1),
                ..good()
            },
        ] {
            assert_eq!(defect(values), None, "{values:?}");
        }
    }

    /// Every problem of a row is named, in the order of its columns.
    #[test]
    fn several_problems_are_joined_in_column_order() {
        let row = check_claimed(
            &ClaimedValues {
                job_type: RawValue::Text(b""),
                max_attempts: RawValue::Real(2.5),
                locked_until: RawValue::Text(b"never"),
                ..good()
            },
            16,
        );
        assert_eq!(
            row.defect.as_deref(),
            Some(
                "column job_type holds TEXT '', not a job type; column max_attempts holds REAL \
                 2.5, not an integer of at least 1; column locked_until holds TEXT 'never', not \
                 an integer"
            )
        );
        assert_eq!((row.max_attempts, row.locked_until), (1, 0));
    }

    #[test]
    fn described_text_escapes_control_characters_and_is_bounded() {
        let text = format!("\u{1b}[31mred{}", "0".repeat(200));
        let shown = RawValue::Text(text.as_bytes()).describe();
        assert!(shown.starts_with("TEXT '\\u{1b}[31mred"), "{shown}");
        assert!(shown.ends_with("…'"), "{shown}");
        assert!(!shown.contains('\u{1b}'));
        let blob = RawValue::Blob(&[0xab; 40]).describe();
        assert!(blob.ends_with("…' (40 bytes)"), "{blob}");
    }
}
