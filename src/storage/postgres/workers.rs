//! [`WorkerStore`] on PostgreSQL: the `workers` table.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::sql::query;
use super::PgTx;
use crate::error::Result;
use crate::storage::workers::{RegisteredRow, WorkerRow, WorkerStore, GONE_KEPT_MS};

#[derive(QueryableByName)]
struct Registered {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    host: String,
    #[diesel(sql_type = BigInt)]
    pid: i64,
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = Text)]
    queues: String,
    #[diesel(sql_type = Text)]
    job_types: String,
    #[diesel(sql_type = BigInt)]
    started_at: i64,
    #[diesel(sql_type = BigInt)]
    heartbeat_at: i64,
    #[diesel(sql_type = BigInt)]
    alive_until: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    stopped_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    running: i64,
}

impl WorkerStore for PgTx<'_> {
    fn worker_beat(&self, row: &WorkerRow, now: i64, alive_until: i64) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO workers (id, host, pid, version, queues, job_types, started_at,
                                      heartbeat_at, alive_until, stopped_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)
                 ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                     version = excluded.version, queues = excluded.queues,
                     job_types = excluded.job_types, started_at = excluded.started_at,
                     heartbeat_at = excluded.heartbeat_at, alive_until = excluded.alive_until,
                     stopped_at = NULL",
            )
            .text(&row.id)
            .text(&row.host)
            .int(row.pid)
            .text(&row.version)
            .text(&row.queues)
            .text(&row.job_types)
            .int(row.started_at)
            .int(now)
            .int(alive_until),
        )?;
        self.execute(query("DELETE FROM workers WHERE alive_until < $1").int(now - GONE_KEPT_MS))?;
        Ok(())
    }

    fn worker_stopped(&self, row: &WorkerRow, now: i64) -> Result<()> {
        self.execute(
            query(
                "UPDATE workers SET stopped_at = $3, alive_until = LEAST(alive_until, $3)
                 WHERE id = $1 AND started_at = $2",
            )
            .text(&row.id)
            .int(row.started_at)
            .int(now),
        )?;
        Ok(())
    }

    fn worker_stopping(&self, row: &WorkerRow, alive_until: i64) -> Result<()> {
        self.execute(
            query(
                "UPDATE workers SET alive_until = GREATEST(alive_until, $3)
                 WHERE id = $1 AND started_at = $2",
            )
            .text(&row.id)
            .int(row.started_at)
            .int(alive_until),
        )?;
        Ok(())
    }

    fn workers(&self) -> Result<Vec<RegisteredRow>> {
        let rows = self.rows::<Registered>(query(
            "SELECT w.id, w.host, w.pid, w.version, w.queues, w.job_types, w.started_at,
                    w.heartbeat_at, w.alive_until, w.stopped_at, COALESCE(r.n, 0) AS running
             FROM workers w
             LEFT JOIN (SELECT locked_by, COUNT(*) AS n FROM jobs
                        WHERE status = 'running' GROUP BY locked_by) r ON r.locked_by = w.id
             ORDER BY w.started_at DESC, w.id",
        ))?;
        Ok(rows
            .into_iter()
            .map(|r| RegisteredRow {
                row: WorkerRow {
                    id: r.id,
                    host: r.host,
                    pid: r.pid,
                    version: r.version,
                    queues: r.queues,
                    job_types: r.job_types,
                    started_at: r.started_at,
                },
                heartbeat_at: r.heartbeat_at,
                alive_until: r.alive_until,
                stopped_at: r.stopped_at,
                running: r.running,
            })
            .collect())
    }
}
