//! The job stores of [`crate::storage::jobs`] on SQLite, one concern per file, each a trait
//! implemented on [`SqliteTx`](super::SqliteTx) where its SQL is: [`insert`] (with
//! idempotency keys), [`claim`], the claimed-row rules' SQL side ([`row_rules`]), the
//! lease-fenced writes ([`complete`]), the reaper ([`reap`]), deadlines ([`expire`]) and
//! waits between jobs ([`deps`], whose settling as jobs end is in [`settle`]).
//! Here: the multi-row statements that inserts and successes share.
//!
//! A worker's claims and outcomes run on a connection with the schema's CHECK rules off
//! (`SqliteDb::write_validated_tx`): every value they write was made or checked in code,
//! and the claim checks every row it reads ([`crate::storage::jobs::row_rules`]).

mod claim;
mod complete;
mod deps;
mod expire;
mod insert;
mod reap;
mod row_rules;
mod settle;
#[cfg(test)]
mod tests;

/// The texts of a multi-row statement for 1, 2, 4, … up to `max` rows, built once per
/// process (building one per statement cost 5 % of a batch), and how a run of rows is cut
/// into them: cutting into powers of two keeps the statements a connection ever prepares to
/// a handful.
struct RowStatements {
    max: usize,
    build: fn(usize) -> String,
    texts: std::sync::OnceLock<Vec<String>>,
}

impl RowStatements {
    const fn new(max: usize, build: fn(usize) -> String) -> RowStatements {
        RowStatements {
            max,
            build,
            texts: std::sync::OnceLock::new(),
        }
    }

    /// How many of `left` rows (at least one) the next statement takes.
    fn next_rows(&self, left: usize) -> usize {
        1 << left.min(self.max).ilog2()
    }

    /// The statement for `rows`, a count [`RowStatements::next_rows`] gave.
    fn sql(&self, rows: usize) -> &str {
        let texts = self.texts.get_or_init(|| {
            (0..=self.max.ilog2())
                .map(|power| (self.build)(1 << power))
                .collect()
        });
        &texts[rows.ilog2() as usize]
    }
}

/// `rows` parenthesised rows of `per_row` parameters numbered from `?2` (`?1` is the one
/// all rows share), each ending with `tail`.
fn value_rows(rows: usize, per_row: usize, tail: &str) -> String {
    value_rows_from(2, rows, per_row, tail)
}

/// [`value_rows`] with the rows' parameters numbered from `?{from}`.
fn value_rows_from(from: usize, rows: usize, per_row: usize, tail: &str) -> String {
    (0..rows)
        .map(|row| {
            let first = from + row * per_row;
            let params: Vec<String> = (first..first + per_row).map(|p| format!("?{p}")).collect();
            format!("({}{tail})", params.join(","))
        })
        .collect::<Vec<_>>()
        .join(",")
}
