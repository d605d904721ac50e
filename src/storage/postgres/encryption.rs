//! [`EncryptionStore`] on PostgreSQL: the `encrypted_types` table, and envelopes found by
//! pattern (a payload is `text` there, and casting one that is not JSON would fail the
//! statement).

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
struct KeyRow {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    key: String,
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

    fn waiting_envelope_keys(&self, job_types: &[String]) -> Result<Vec<(String, String)>> {
        // An object whose first field is the marker, as every envelope writer puts it, or
        // that has it at the top level after other fields; its key field's text.
        let mut pairs: Vec<(String, String)> = self
            .rows::<KeyRow>(
                query(&format!(
                    "SELECT DISTINCT job_type,
                            coalesce(substring(payload from '\"key\"\\s*:\\s*\"([^\"\\\\]*)\"'), '?')
                                AS key
                     FROM jobs
                     WHERE status IN ('queued', 'running', 'failed') AND job_type = ANY($1)
                       AND strpos(payload, {MARKER_LITERAL}) > 0
                       AND payload ~ '^\\s*\\{{.*\"litejobs_envelope\"\\s*:'"
                ))
                .texts(job_types),
            )?
            .into_iter()
            .map(|r| (r.job_type, r.key))
            .collect();
        pairs.sort();
        Ok(pairs)
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
