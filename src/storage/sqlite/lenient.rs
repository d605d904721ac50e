//! Reading columns that other programs may have written. SQLite stores any type in any
//! column, and the schema's CHECK rules only cover live rows of current files: a read-only
//! look at an older file, a dead row kept as it was found, or a row written with the checks
//! switched off can hold a BLOB payload, invalid UTF-8 or TEXT in an INTEGER column.
//!
//! These readers never fail on such a value. Each gives back something usable (text made
//! valid UTF-8, 0 for a number that is not one) and records what was wrong, naming the
//! column and showing the raw value safely, so the claim can make the job dead and every
//! view can show the row instead of failing on it.

use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::storage::jobs::row_rules::RawValue;

impl<'a> From<ValueRef<'a>> for RawValue<'a> {
    fn from(value: ValueRef<'a>) -> RawValue<'a> {
        match value {
            ValueRef::Null => RawValue::Null,
            ValueRef::Integer(i) => RawValue::Integer(i),
            ValueRef::Real(f) => RawValue::Real(f),
            ValueRef::Text(bytes) => RawValue::Text(bytes),
            ValueRef::Blob(bytes) => RawValue::Blob(bytes),
        }
    }
}

/// The raw value as SQL would write it, shortened (see [`RawValue::describe`]).
pub(crate) fn describe(value: ValueRef<'_>) -> String {
    RawValue::from(value).describe()
}

/// A column's value as text: TEXT as it is (invalid UTF-8 replaced, and noted), numbers
/// written out, a BLOB as its hex literal (noted), NULL as empty (noted).
pub(crate) fn text(
    row: &Row<'_>,
    index: usize,
    column: &str,
    problems: &mut Vec<String>,
) -> rusqlite::Result<String> {
    Ok(opt_text(row, index, column, problems)?.unwrap_or_else(|| {
        problems.push(format!("column {column} holds NULL, not text"));
        String::new()
    }))
}

/// A column's value as text for a label or a group (a count's queue, type or error), with
/// whatever was wrong left unsaid: the rows themselves say it in [`JobRecord::problems`].
///
/// [`JobRecord::problems`]: crate::JobRecord::problems
pub(crate) fn label(row: &Row<'_>, index: usize) -> rusqlite::Result<String> {
    text(row, index, "", &mut Vec::new())
}

/// Like [`text`], with NULL as `None`.
pub(crate) fn opt_text(
    row: &Row<'_>,
    index: usize,
    column: &str,
    problems: &mut Vec<String>,
) -> rusqlite::Result<Option<String>> {
    Ok(RawValue::from(row.get_ref(index)?).text(column, "text", problems))
}

/// A column's value as an integer: INTEGER as it is, a REAL rounded down (older versions and
/// other languages wrote fractional times), anything else 0 (noted).
pub(crate) fn int(
    row: &Row<'_>,
    index: usize,
    column: &str,
    problems: &mut Vec<String>,
) -> rusqlite::Result<i64> {
    Ok(opt_int(row, index, column, problems)?.unwrap_or_else(|| {
        problems.push(format!("column {column} holds NULL, not an integer"));
        0
    }))
}

/// Like [`int`], with NULL as `None`.
pub(crate) fn opt_int(
    row: &Row<'_>,
    index: usize,
    column: &str,
    problems: &mut Vec<String>,
) -> rusqlite::Result<Option<i64>> {
    Ok(RawValue::from(row.get_ref(index)?).int(column, problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn read<T>(
        sql: &str,
        f: impl Fn(&Row<'_>, &mut Vec<String>) -> rusqlite::Result<T>,
    ) -> (T, Vec<String>) {
        let conn = Connection::open_in_memory().expect("in-memory database");
        let mut problems = Vec::new();
        let value = conn
            .query_row(sql, [], |row| f(row, &mut problems))
            .expect("query");
        (value, problems)
    }

    #[test]
    fn blob_text_is_shown_as_its_hex_literal_and_noted() {
        let (text, problems) = read("SELECT x'7b7d'", |row, p| text(row, 0, "payload", p));
        assert_eq!(text, "BLOB X'7B7D' (2 bytes)");
        assert_eq!(
            problems,
            ["column payload holds BLOB X'7B7D' (2 bytes), not text"]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_and_noted() {
        let (text, problems) = read("SELECT CAST(x'61ff62' AS TEXT)", |row, p| {
            text(row, 0, "payload", p)
        });
        assert_eq!(text, "a\u{fffd}b");
        assert_eq!(
            problems,
            ["column payload holds TEXT that is not valid UTF-8 (3 bytes)"]
        );
    }

    #[test]
    fn numbers_tolerate_real_and_note_text() {
        let (n, problems) = read("SELECT 1700000000123.7", |row, p| int(row, 0, "run_at", p));
        assert_eq!(n, 1_700_000_000_123);
        assert!(problems.is_empty());
        let (n, problems) = read("SELECT 'high'", |row, p| int(row, 0, "priority", p));
        assert_eq!(n, 0);
        assert_eq!(
            problems,
            ["column priority holds TEXT 'high', not an integer"]
        );
    }

    #[test]
    fn described_text_escapes_control_characters_and_is_bounded() {
        let (shown, _) = read(
            "SELECT char(27) || '[31mred' || hex(zeroblob(100))",
            |row, _| Ok(describe(row.get_ref(0)?)),
        );
        assert!(shown.starts_with("TEXT '\\u{1b}[31mred"), "{shown}");
        assert!(shown.ends_with("…'"), "{shown}");
        assert!(!shown.contains('\u{1b}'));
    }
}
