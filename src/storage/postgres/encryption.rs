//! [`EncryptionStore`] on PostgreSQL: the `encrypted_types` table, the waiting payloads a
//! worker checks at start, and the rows a rotation reads and rewrites.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, IntRow};
use super::PgTx;
use crate::encryption::{Column, EncryptedType};
use crate::error::Result;
use crate::storage::encryption::{EncryptionStore, SealableRow, MARKER_LITERAL};

#[derive(QueryableByName)]
struct TypeRow {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
}

#[derive(QueryableByName)]
struct WaitingRow {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    payload: String,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = Nullable<Text>)]
    result: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    progress: Option<String>,
}

impl EncryptionStore for PgTx<'_> {
    fn encrypted_types(&self) -> Result<Vec<EncryptedType>> {
        let mut rows: Vec<EncryptedType> = self
            .rows::<TypeRow>(query("SELECT job_type, created_at FROM encrypted_types"))?
            .into_iter()
            .map(|r| EncryptedType {
                job_type: r.job_type,
                created_at: r.created_at,
            })
            .collect();
        // In byte order, as SQLite sorts, whatever the database's collation.
        rows.sort_by(|a, b| a.job_type.cmp(&b.job_type));
        Ok(rows)
    }

    fn is_type_encrypted(&self, job_type: &str) -> Result<bool> {
        Ok(self
            .row::<IntRow>(
                query("SELECT 1::bigint AS v FROM encrypted_types WHERE job_type = $1")
                    .text(job_type),
            )?
            .is_some())
    }

    fn set_type_encrypted(&self, job_type: &str, encrypted: bool, now: i64) -> Result<bool> {
        let changed = if encrypted {
            self.execute(
                query(
                    "INSERT INTO encrypted_types (job_type, created_at) VALUES ($1, $2)
                     ON CONFLICT (job_type) DO NOTHING",
                )
                .text(job_type)
                .int(now),
            )?
        } else {
            self.execute(query("DELETE FROM encrypted_types WHERE job_type = $1").text(job_type))?
        };
        Ok(changed > 0)
    }

    fn waiting_payloads(&self, queue: &str, limit: usize) -> Result<Vec<(String, Option<String>)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(self
            .rows::<WaitingRow>(
                query(
                    "SELECT job_type, payload FROM jobs
                     WHERE status IN ('queued', 'failed') AND queue = $1 AND waiting_for = 0
                     ORDER BY priority DESC, run_at, id LIMIT $2",
                )
                .text(queue)
                .int(limit),
            )?
            .into_iter()
            .map(|r| (r.job_type, Some(r.payload)))
            .collect())
    }

    fn sealable_rows(&self, after_id: i64, limit: usize) -> Result<Vec<SealableRow>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(self
            .rows::<Row>(
                query(&format!(
                    "SELECT id, job_type, queue, status, payload, result, progress FROM jobs
                     WHERE id > $1
                       AND (strpos(payload, {MARKER_LITERAL}) > 0
                            OR strpos(result, {MARKER_LITERAL}) > 0
                            OR strpos(progress, {MARKER_LITERAL}) > 0
                            OR job_type IN (SELECT job_type FROM encrypted_types))
                     ORDER BY id LIMIT $2"
                ))
                .int(after_id)
                .int(limit),
            )?
            .into_iter()
            .map(|r| SealableRow {
                id: r.id,
                job_type: r.job_type,
                queue: r.queue,
                status: r.status,
                payload: Some(r.payload),
                result: r.result,
                progress: r.progress,
            })
            .collect())
    }

    fn replace_sealed(&self, id: i64, column: Column, old: &str, new: &str) -> Result<bool> {
        // The column name is one of three fixed words, never input.
        let name = column.name();
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET {name} = $1 WHERE id = $2 AND {name} = $3"
            ))
            .text(new)
            .int(id)
            .text(old),
        )?;
        Ok(n == 1)
    }
}
