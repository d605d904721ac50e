//! How SQLite's and the pool's errors become litejobs' [`Error`]: a kind to match on and a
//! one-line message; the original error is kept as the source.

use crate::error::{Error, ErrorKind};

/// True for SQLite's busy and locked errors: another connection holds what was asked for.
pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode;
        let (kind, message) = match err.sqlite_error_code() {
            _ if is_busy(&err) => (
                ErrorKind::Busy,
                "database is locked by another connection (busy timeout reached)".to_string(),
            ),
            Some(ErrorCode::DiskFull) => (
                ErrorKind::DiskFull,
                "database or disk is full; nothing was written".to_string(),
            ),
            Some(ErrorCode::NotADatabase) => (
                ErrorKind::NotADatabase,
                "file is not a SQLite database".to_string(),
            ),
            Some(ErrorCode::ReadOnly) => (
                ErrorKind::ReadOnly,
                "the database is read-only (file permissions, a read-only mount or a backup); \
                 nothing was written"
                    .to_string(),
            ),
            Some(ErrorCode::DatabaseCorrupt) => (
                ErrorKind::NotADatabase,
                "database file is corrupt".to_string(),
            ),
            _ => (ErrorKind::Database, format!("sqlite: {err}")),
        };
        Error::new(kind, message).with_source(err)
    }
}

impl From<r2d2::Error> for Error {
    fn from(err: r2d2::Error) -> Error {
        Error::new(
            ErrorKind::Database,
            format!("could not get a database connection: {err}"),
        )
        .with_source(err)
    }
}

/// True for a SQLite constraint failure (a CHECK rule, a unique index).
pub(crate) fn is_constraint_violation(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
        .and_then(rusqlite::Error::sqlite_error_code)
        == Some(rusqlite::ErrorCode::ConstraintViolation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_sqlite_error_maps_to_busy_kind() {
        let err = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        let err = Error::from(err);
        assert_eq!(err.kind(), ErrorKind::Busy);
        assert!(err.is_busy());
        assert!(std::error::Error::source(&err).is_some());
    }
}
