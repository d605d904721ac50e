//! [`EncryptionStore`] on SQLite: the `encrypted_types` table, the waiting payloads a worker
//! checks at start, and the rows a rotation reads and rewrites.

use rusqlite::types::ValueRef;
use rusqlite::{params, OptionalExtension};

use super::SqliteTx;
use crate::encryption::{Column, EncryptedType};
use crate::error::Result;
use crate::storage::encryption::{EncryptionStore, SealableRow, MARKER_LITERAL};

/// A column's text, or `None` for NULL or a value of another type (a BLOB another program
/// wrote into a finished row), which rotation leaves alone.
fn text_of(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok().map(str::to_string),
        _ => None,
    }
}

/// The waiting jobs a claim of `queue` takes first, read in claim order along the due index
/// (held jobs, waiting for others, are left out: the index puts them after, and sorting a
/// big backlog to reach them cost a worker's start 0.1 s per million jobs).
pub(super) const WAITING_PAYLOADS_SQL: &str = "SELECT job_type, payload FROM jobs
     WHERE status IN ('queued', 'failed') AND queue = ?1 AND waiting_for = 0
     ORDER BY priority DESC, run_at, id LIMIT ?2";

impl EncryptionStore for SqliteTx<'_> {
    fn encrypted_types(&self) -> Result<Vec<EncryptedType>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT job_type, created_at FROM encrypted_types ORDER BY job_type")?;
        let rows = stmt
            .query_map([], |row| {
                Ok(EncryptedType {
                    job_type: row.get(0)?,
                    created_at: row.get(1)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn is_type_encrypted(&self, job_type: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM encrypted_types WHERE job_type = ?1")?
            .query_row([job_type], |_| Ok(()))
            .optional()?
            .is_some())
    }

    fn set_type_encrypted(&self, job_type: &str, encrypted: bool, now: i64) -> Result<bool> {
        let changed = if encrypted {
            self.conn
                .prepare_cached(
                    "INSERT INTO encrypted_types (job_type, created_at) VALUES (?1, ?2)
                     ON CONFLICT (job_type) DO NOTHING",
                )?
                .execute(params![job_type, now])?
        } else {
            self.conn
                .prepare_cached("DELETE FROM encrypted_types WHERE job_type = ?1")?
                .execute([job_type])?
        };
        Ok(changed > 0)
    }

    fn waiting_payloads(&self, queue: &str, limit: usize) -> Result<Vec<(String, Option<String>)>> {
        let mut stmt = self.conn.prepare_cached(WAITING_PAYLOADS_SQL)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![queue, limit], |row| {
                Ok((
                    text_of(row.get_ref(0)?).unwrap_or_default(),
                    text_of(row.get_ref(1)?),
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn sealable_rows(&self, after_id: i64, limit: usize) -> Result<Vec<SealableRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id, job_type, queue, status, payload, result, progress FROM jobs
             WHERE id > ?1
               AND (instr(payload, {MARKER_LITERAL}) > 0 OR instr(result, {MARKER_LITERAL}) > 0
                    OR instr(progress, {MARKER_LITERAL}) > 0
                    OR job_type IN (SELECT job_type FROM encrypted_types))
             ORDER BY id LIMIT ?2"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![after_id, limit], |row| {
                Ok(SealableRow {
                    id: row.get(0)?,
                    job_type: text_of(row.get_ref(1)?).unwrap_or_default(),
                    queue: text_of(row.get_ref(2)?).unwrap_or_default(),
                    status: text_of(row.get_ref(3)?).unwrap_or_default(),
                    payload: text_of(row.get_ref(4)?),
                    result: text_of(row.get_ref(5)?),
                    progress: text_of(row.get_ref(6)?),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn replace_sealed(&self, id: i64, column: Column, old: &str, new: &str) -> Result<bool> {
        // The column name is one of three fixed words, never input.
        let name = column.name();
        // SQLite leaves a rewritten row's old bytes in the page's free space (and a freed
        // overflow page as it was) unless secure_delete is on: the clear text or the
        // old-key envelope this replaces would stay in the file. On for this write only,
        // since zeroing costs every other delete I/O.
        let was: i64 = self
            .conn
            .query_row("PRAGMA secure_delete", [], |row| row.get(0))?;
        self.conn
            .query_row("PRAGMA secure_delete = ON", [], |_| Ok(()))?;
        let n = self
            .conn
            .prepare_cached(&format!(
                "UPDATE jobs SET {name} = ?1 WHERE id = ?2 AND {name} = ?3"
            ))
            .and_then(|mut stmt| stmt.execute(params![new, id, old]));
        self.conn.query_row(
            &format!(
                "PRAGMA secure_delete = {}",
                if was == 1 { "ON" } else { "OFF" }
            ),
            [],
            |_| Ok(()),
        )?;
        Ok(n? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, Transaction, TransactionBehavior};

    /// A database in memory with litejobs' schema.
    fn migrated() -> Result<Connection> {
        let conn = Connection::open_in_memory()?;
        crate::storage::sqlite::migrate::check_and_migrate(
            &conn,
            false,
            std::time::Duration::from_secs(5),
            true,
        )?;
        Ok(conn)
    }

    /// A rotation's write lands only over the text it read: a worker's write in between
    /// wins, and a row that is gone is no error.
    #[test]
    fn a_replacement_lands_only_over_the_text_it_read() -> Result<()> {
        let conn = migrated()?;
        conn.execute_batch(
            "INSERT INTO jobs (id, job_type, payload, result) VALUES (1, 't', '{\"old\":1}', '{\"r\":1}')",
        )?;
        let tx = Transaction::new_unchecked(&conn, TransactionBehavior::Immediate)?;
        let store = SqliteTx::new(&tx);
        let first = store.replace_sealed(1, Column::Result, "{\"r\":1}", "{\"r\":2}")?;
        let stale = store.replace_sealed(1, Column::Result, "{\"r\":1}", "{\"r\":3}")?;
        let gone = store.replace_sealed(9, Column::Payload, "{}", "{\"x\":1}")?;
        drop(store);
        tx.commit()?;
        assert_eq!((first, stale, gone), (true, false, false));
        let (payload, result): (String, String) =
            conn.query_row("SELECT payload, result FROM jobs WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        assert_eq!(
            (payload.as_str(), result.as_str()),
            ("{\"old\":1}", "{\"r\":2}")
        );
        Ok(())
    }

    /// A worker's start reads the waiting payloads along the due index, in its order: no
    /// sort of the queue's whole backlog, however big.
    #[test]
    fn the_waiting_payloads_are_read_in_the_due_index_order() -> Result<()> {
        let conn = migrated()?;
        let plan = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {WAITING_PAYLOADS_SQL}"))?
            .query_map(params!["default", 10], |r| r.get::<_, String>(3))?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .join("; ");
        assert!(
            plan.contains("jobs_due_idx (queue=? AND waiting_for=?)"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        Ok(())
    }
}
