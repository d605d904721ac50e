//! Raw SQL through diesel, in the few shapes the stores need: a statement with `$n`
//! parameters bound in order ([`Query`]), run for its row count, or loaded into a
//! `QueryableByName` row type; and the conversion of diesel's errors into litejobs' own.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::query_dsl::RunQueryDsl;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Untyped};
use diesel::QueryableByName;

use super::PgTx;
use crate::error::{Error, ErrorKind, Result};

/// One statement and its parameters, bound in the order of `$1, $2, …` (a number may appear
/// more than once). Unlike diesel's `sql_query`, whose statements are parsed and planned
/// anew at every call (measured: 1–2 ms of planning for a claim), these are prepared once
/// per connection and kept in diesel's statement cache, keyed by their text.
pub(crate) struct Query<'a> {
    /// The text split at its placeholders.
    pieces: Vec<Piece>,
    binds: Vec<Bind>,
    _borrow: std::marker::PhantomData<&'a ()>,
}

enum Piece {
    Sql(String),
    /// `$n`: the bind at index n - 1.
    Param(usize),
}

enum Bind {
    Int(i64),
    OptInt(Option<i64>),
    Text(String),
    OptText(Option<String>),
    Bool(bool),
    Ints(Vec<i64>),
    Texts(Vec<String>),
    OptTexts(Vec<Option<String>>),
    OptInts(Vec<Option<i64>>),
}

/// Splits `text` at its `$n` placeholders (not inside string literals or quoted names).
fn pieces(text: &str) -> Vec<Piece> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut from) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += 1;
                }
                i += 1;
            }
            b'$' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let digits_end = bytes[i + 1..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .map_or(bytes.len(), |p| i + 1 + p);
                if let Ok(n) = text[i + 1..digits_end].parse::<usize>() {
                    if n > 0 {
                        out.push(Piece::Sql(text[from..i].to_string()));
                        out.push(Piece::Param(n - 1));
                        from = digits_end;
                    }
                }
                i = digits_end;
            }
            _ => i += 1,
        }
    }
    out.push(Piece::Sql(text[from..].to_string()));
    out
}

/// Starts a statement.
pub(crate) fn query(text: &str) -> Query<'static> {
    Query {
        pieces: pieces(text),
        binds: Vec::new(),
        _borrow: std::marker::PhantomData,
    }
}

impl<'a> Query<'a> {
    fn bind(mut self, b: Bind) -> Query<'a> {
        self.binds.push(b);
        self
    }

    /// Binds a `bigint`.
    pub(crate) fn int(self, v: i64) -> Query<'a> {
        self.bind(Bind::Int(v))
    }

    /// Binds a nullable `bigint`.
    pub(crate) fn opt_int(self, v: Option<i64>) -> Query<'a> {
        self.bind(Bind::OptInt(v))
    }

    /// Binds `text`.
    pub(crate) fn text(self, v: &str) -> Query<'a> {
        self.bind(Bind::Text(v.to_string()))
    }

    /// Binds nullable `text`.
    pub(crate) fn opt_text(self, v: Option<&str>) -> Query<'a> {
        self.bind(Bind::OptText(v.map(str::to_string)))
    }

    /// Binds a `boolean`.
    pub(crate) fn bool(self, v: bool) -> Query<'a> {
        self.bind(Bind::Bool(v))
    }

    /// Binds a `bigint[]` (use with `= ANY($n)` or `unnest($n)`).
    pub(crate) fn ints(self, v: &[i64]) -> Query<'a> {
        self.bind(Bind::Ints(v.to_vec()))
    }

    /// Binds a `text[]`.
    pub(crate) fn texts(self, v: &[String]) -> Query<'a> {
        self.bind(Bind::Texts(v.to_vec()))
    }

    /// Binds a `text[]` whose elements may be NULL.
    pub(crate) fn opt_texts(self, v: &[Option<String>]) -> Query<'a> {
        self.bind(Bind::OptTexts(v.to_vec()))
    }

    /// Binds a `bigint[]` whose elements may be NULL.
    pub(crate) fn opt_ints(self, v: &[Option<i64>]) -> Query<'a> {
        self.bind(Bind::OptInts(v.to_vec()))
    }
}

impl QueryFragment<Pg> for Query<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> diesel::QueryResult<()> {
        for piece in &self.pieces {
            match piece {
                Piece::Sql(sql) => out.push_sql(sql),
                Piece::Param(i) => {
                    let Some(bind) = self.binds.get(*i) else {
                        return Err(DieselError::QueryBuilderError(
                            format!("statement parameter ${} has no value bound", i + 1).into(),
                        ));
                    };
                    match bind {
                        Bind::Int(v) => out.push_bind_param::<BigInt, _>(v)?,
                        Bind::OptInt(v) => out.push_bind_param::<Nullable<BigInt>, _>(v)?,
                        Bind::Text(v) => out.push_bind_param::<Text, _>(v)?,
                        Bind::OptText(v) => out.push_bind_param::<Nullable<Text>, _>(v)?,
                        Bind::Bool(v) => out.push_bind_param::<Bool, _>(v)?,
                        Bind::Ints(v) => out.push_bind_param::<Array<BigInt>, _>(v)?,
                        Bind::Texts(v) => out.push_bind_param::<Array<Text>, _>(v)?,
                        Bind::OptTexts(v) => out.push_bind_param::<Array<Nullable<Text>>, _>(v)?,
                        Bind::OptInts(v) => out.push_bind_param::<Array<Nullable<BigInt>>, _>(v)?,
                    }
                }
            }
        }
        Ok(())
    }
}

impl QueryId for Query<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl diesel::query_builder::Query for Query<'_> {
    type SqlType = Untyped;
}

impl<Conn> RunQueryDsl<Conn> for Query<'_> {}

impl PgTx<'_> {
    /// Runs a statement; the number of rows it changed.
    pub(crate) fn execute(&self, q: Query<'_>) -> Result<usize> {
        let mut conn = self.conn.borrow_mut();
        Ok(q.execute(&mut **conn)?)
    }

    /// Runs a query; its rows.
    pub(crate) fn rows<T: QueryableByName<Pg> + 'static>(&self, q: Query<'_>) -> Result<Vec<T>> {
        let mut conn = self.conn.borrow_mut();
        Ok(q.load::<T>(&mut **conn)?)
    }

    /// Runs a query; its first row, if any.
    pub(crate) fn row<T: QueryableByName<Pg> + 'static>(&self, q: Query<'_>) -> Result<Option<T>> {
        Ok(self.rows(q)?.into_iter().next())
    }

    /// Runs a query inside a savepoint (a nested diesel transaction): when the database
    /// refuses it, only this statement is undone and the transaction goes on. The error
    /// comes back as diesel gave it, so the caller can tell a refusal it can recover from (a
    /// unique violation, a deadlock) from the rest. Inside a transaction diesel opened
    /// ([`super::PgDb`]'s `read_tx` and `write_tx`), or alone in autocommit.
    pub(crate) fn rows_in_savepoint<T: QueryableByName<Pg> + 'static>(
        &self,
        q: Query<'_>,
    ) -> std::result::Result<Vec<T>, DieselError> {
        use diesel::Connection;
        let mut conn = self.conn.borrow_mut();
        if !self.in_transaction {
            // A statement on its own is undone alone already.
            return q.load::<T>(&mut **conn);
        }
        conn.transaction(|c| q.load::<T>(c))
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
                let busy = matches!(kind, DatabaseErrorKind::SerializationFailure)
                    || message.contains("lock timeout")
                    || message.contains("deadlock detected");
                let kind = if matches!(kind, DatabaseErrorKind::ClosedConnection) {
                    ErrorKind::Unavailable
                } else if busy {
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
