//! The crate's one error type: opaque [`Error`] with a matchable [`ErrorKind`].

use std::fmt;

/// A `Result` whose error is litejobs' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, for callers that branch on it.
///
/// New kinds may be added in minor releases, so match with a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A job was refused at enqueue: empty job type, invalid JSON payload, payload over the
    /// size limit, `max_attempts` below 1, and so on. The message names the field and limit.
    InvalidJob,
    /// A builder option is out of range (e.g. a concurrency of 0). The message names it.
    InvalidConfig,
    /// No job (or other row) with the given id.
    NotFound,
    /// The job is not in a status that allows the operation (e.g. requeue of a job that is
    /// not dead).
    InvalidState,
    /// The database stayed locked by another connection or process for longer than the busy
    /// timeout. Nothing was written; the call can be retried.
    Busy,
    /// The database server cannot be reached (refused, restarting, the connection was cut)
    /// or has no connection slot for this process (its `max_connections` is reached).
    /// Nothing was written, unless the connection was cut during the commit itself; the call
    /// can be retried once the server is back.
    Unavailable,
    /// The disk or the database's page limit is full. Nothing was written.
    DiskFull,
    /// The file was written by a newer litejobs (its schema version is higher than this
    /// build knows). The file was not changed.
    NewerSchema,
    /// The file is not a SQLite database, or is corrupt. The file was not changed.
    NotADatabase,
    /// The file is a SQLite database that belongs to another program (e.g. its `jobs` table
    /// is not litejobs'). The file was not changed.
    ForeignDatabase,
    /// The file has no litejobs schema (an empty file, another program's database) or does
    /// not exist, and it was opened with [`Queue::open_read_only`](crate::Queue::open_read_only),
    /// which never creates one: run `litejobs init` or open it with
    /// [`Queue::open`](crate::Queue::open). The file was not changed.
    Uninitialized,
    /// The database cannot be written: the file, its directory or its file system is
    /// read-only, or the queue was opened with
    /// [`Queue::open_read_only`](crate::Queue::open_read_only). Nothing was written; reading
    /// still works.
    ReadOnly,
    /// Any other SQLite or connection-pool failure.
    Database,
    /// A file-system error outside SQLite.
    Io,
    /// [`Worker::shutdown`](crate::Worker::shutdown): handlers were still running after the
    /// grace period; their jobs were released for another worker.
    ShutdownTimeout,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidJob => "invalid job",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::NotFound => "not found",
            ErrorKind::InvalidState => "invalid state",
            ErrorKind::Busy => "database busy",
            ErrorKind::Unavailable => "database unavailable",
            ErrorKind::DiskFull => "database or disk is full",
            ErrorKind::NewerSchema => "newer schema",
            ErrorKind::NotADatabase => "not a database",
            ErrorKind::ForeignDatabase => "foreign database",
            ErrorKind::Uninitialized => "not a litejobs database",
            ErrorKind::ReadOnly => "read-only database",
            ErrorKind::Database => "database error",
            ErrorKind::Io => "i/o error",
            ErrorKind::ShutdownTimeout => "shutdown timeout",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A litejobs failure: a [`kind`](Error::kind) to match on and a one-line message that names
/// the thing and the value (e.g. the payload size and the limit).
///
/// Errors from SQLite or the pool are kept as [`source`](std::error::Error::source); their
/// types are not part of litejobs' API.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn invalid_job(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidJob, message)
    }

    pub(crate) fn invalid_config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidConfig, message)
    }

    pub(crate) fn not_found(what: &str, id: i64) -> Error {
        Error::new(ErrorKind::NotFound, format!("no {what} with id {id}"))
    }

    /// Adds context in front of the message, keeping kind and source.
    pub(crate) fn prefixed(mut self, context: &str) -> Error {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when the database was locked for longer than the busy timeout; retrying later
    /// may succeed.
    pub fn is_busy(&self) -> bool {
        self.kind == ErrorKind::Busy
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, err.to_string()).with_source(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn error_is_small_send_and_sync() {
        assert_send_sync::<Error>();
        assert!(std::mem::size_of::<Error>() <= 64);
    }
}
