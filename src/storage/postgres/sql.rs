//! Raw SQL through diesel, in the few shapes the stores need: a statement with `$n`
//! parameters bound in order ([`Query`]), run for its row count, or loaded into a
//! `QueryableByName` row type; and the conversion of diesel's errors into litejobs' own.

use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::query_dsl::RunQueryDsl;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel::QueryableByName;

use super::PgTx;
use crate::error::{Error, ErrorKind, Result};

/// One statement and its parameters, bound in the order of `$1, $2, …`.
pub(crate) struct Query<'a> {
    inner: BoxedSqlQuery<'a, Pg, SqlQuery>,
}

/// Starts a statement.
pub(crate) fn query(text: &str) -> Query<'static> {
    Query {
        inner: diesel::sql_query(text.to_string()).into_boxed(),
    }
}

impl<'a> Query<'a> {
    /// Binds a `bigint`.
    pub(crate) fn int(self, v: i64) -> Query<'a> {
        Query {
            inner: self.inner.bind::<BigInt, _>(v),
        }
    }

    /// Binds a nullable `bigint`.
    pub(crate) fn opt_int(self, v: Option<i64>) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Nullable<BigInt>, _>(v),
        }
    }

    /// Binds `text`.
    pub(crate) fn text(self, v: &str) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Text, _>(v.to_string()),
        }
    }

    /// Binds nullable `text`.
    pub(crate) fn opt_text(self, v: Option<&str>) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Nullable<Text>, _>(v.map(str::to_string)),
        }
    }

    /// Binds a `boolean`.
    pub(crate) fn bool(self, v: bool) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Bool, _>(v),
        }
    }

    /// Binds a `bigint[]` (use with `= ANY($n)` or `unnest($n)`).
    pub(crate) fn ints(self, v: &[i64]) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Array<BigInt>, _>(v.to_vec()),
        }
    }

    /// Binds a `text[]`.
    pub(crate) fn texts(self, v: &[String]) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Array<Text>, _>(v.to_vec()),
        }
    }

    /// Binds a `text[]` whose elements may be NULL.
    pub(crate) fn opt_texts(self, v: &[Option<String>]) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Array<Nullable<Text>>, _>(v.to_vec()),
        }
    }

    /// Binds a `bigint[]` whose elements may be NULL.
    pub(crate) fn opt_ints(self, v: &[Option<i64>]) -> Query<'a> {
        Query {
            inner: self.inner.bind::<Array<Nullable<BigInt>>, _>(v.to_vec()),
        }
    }
}

impl PgTx<'_> {
    /// Runs a statement; the number of rows it changed.
    pub(crate) fn execute(&self, q: Query<'_>) -> Result<usize> {
        let mut conn = self.conn.borrow_mut();
        Ok(q.inner.execute(&mut **conn)?)
    }

    /// Runs a query; its rows.
    pub(crate) fn rows<T: QueryableByName<Pg> + 'static>(&self, q: Query<'_>) -> Result<Vec<T>> {
        let mut conn = self.conn.borrow_mut();
        Ok(q.inner.load::<T>(&mut **conn)?)
    }

    /// Runs a query; its first row, if any.
    pub(crate) fn row<T: QueryableByName<Pg> + 'static>(&self, q: Query<'_>) -> Result<Option<T>> {
        Ok(self.rows(q)?.into_iter().next())
    }

    /// Runs a query inside a savepoint (a nested diesel transaction): when the database
    /// refuses it, only this statement is undone and the transaction goes on. The error
    /// comes back as diesel gave it, so the caller can tell a refusal it can recover from (a
    /// unique violation, a deadlock) from the rest. Only inside a transaction diesel opened
    /// ([`super::PgDb`]'s `read_tx` and `write_tx`).
    pub(crate) fn rows_in_savepoint<T: QueryableByName<Pg> + 'static>(
        &self,
        q: Query<'_>,
    ) -> std::result::Result<Vec<T>, DieselError> {
        use diesel::Connection;
        let mut conn = self.conn.borrow_mut();
        conn.transaction(|c| q.inner.load::<T>(c))
    }
}

/// A single `bigint` column named `v`.
#[derive(QueryableByName, Debug)]
pub(crate) struct IntRow {
    #[diesel(sql_type = BigInt)]
    pub(crate) v: i64,
}

/// A single `text` column named `v`.
#[derive(QueryableByName, Debug)]
pub(crate) struct TextRow {
    #[diesel(sql_type = Text)]
    pub(crate) v: String,
}

/// A single `boolean` column named `v`.
#[derive(QueryableByName, Debug)]
pub(crate) struct BoolRow {
    #[diesel(sql_type = Bool)]
    pub(crate) v: bool,
}

impl From<DieselError> for Error {
    fn from(e: DieselError) -> Error {
        match &e {
            DieselError::DatabaseError(kind, info) => {
                let message = info.message();
                let busy = matches!(
                    kind,
                    DatabaseErrorKind::SerializationFailure | DatabaseErrorKind::ClosedConnection
                ) || message.contains("lock timeout")
                    || message.contains("deadlock detected");
                let kind = if busy {
                    ErrorKind::Busy
                } else if message.contains("read-only transaction") {
                    ErrorKind::ReadOnly
                } else if message.contains("No space left") || message.contains("disk full") {
                    ErrorKind::DiskFull
                } else {
                    ErrorKind::Database
                };
                let mut text = format!("PostgreSQL: {message}");
                if let Some(detail) = info.details() {
                    text.push_str(&format!(" ({detail})"));
                }
                if let Some(constraint) = info.constraint_name() {
                    text.push_str(&format!(" [{constraint}]"));
                }
                Error::new(kind, text)
            }
            DieselError::NotFound => Error::new(ErrorKind::NotFound, "PostgreSQL: no such row"),
            _ => Error::new(ErrorKind::Database, format!("PostgreSQL: {e}")),
        }
    }
}
