//! [`WorkerStore`] on SQLite: the `workers` table.

use rusqlite::params;

use super::{lenient, SqliteTx};
use crate::error::Result;
use crate::storage::workers::{RegisteredRow, WorkerRow, WorkerStore, GONE_KEPT_MS};

impl WorkerStore for SqliteTx<'_> {
    fn worker_beat(&self, row: &WorkerRow, now: i64, alive_until: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO workers (id, host, pid, version, queues, job_types, started_at,
                                      heartbeat_at, alive_until, stopped_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL)
                 ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                     version = excluded.version, queues = excluded.queues,
                     job_types = excluded.job_types, started_at = excluded.started_at,
                     heartbeat_at = excluded.heartbeat_at, alive_until = excluded.alive_until,
                     stopped_at = NULL",
            )?
            .execute(params![
                row.id,
                row.host,
                row.pid,
                row.version,
                row.queues,
                row.job_types,
                row.started_at,
                now,
                alive_until
            ])?;
        self.conn
            .prepare_cached("DELETE FROM workers WHERE alive_until < ?1")?
            .execute([now - GONE_KEPT_MS])?;
        Ok(())
    }

    fn worker_stopped(&self, row: &WorkerRow, now: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE workers SET stopped_at = ?3, alive_until = MIN(alive_until, ?3)
                 WHERE id = ?1 AND started_at = ?2",
            )?
            .execute(params![row.id, row.started_at, now])?;
        Ok(())
    }

    fn worker_stopping(&self, row: &WorkerRow, alive_until: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE workers SET alive_until = MAX(alive_until, ?3)
                 WHERE id = ?1 AND started_at = ?2",
            )?
            .execute(params![row.id, row.started_at, alive_until])?;
        Ok(())
    }

    fn workers(&self) -> Result<Vec<RegisteredRow>> {
        // A file from before the registry, opened read-only, has no table: no worker.
        let exists: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'workers'",
            [],
            |r| r.get(0),
        )?;
        if exists == 0 {
            return Ok(Vec::new());
        }
        // Running jobs counted once for all workers, from the running jobs' index.
        let mut stmt = self.conn.prepare_cached(
            "SELECT w.id, w.host, w.pid, w.version, w.queues, w.job_types, w.started_at,
                    w.heartbeat_at, w.alive_until, w.stopped_at, COALESCE(r.n, 0)
             FROM workers w
             LEFT JOIN (SELECT locked_by, COUNT(*) AS n FROM jobs
                        WHERE status = 'running' GROUP BY locked_by) r ON r.locked_by = w.id
             ORDER BY w.started_at DESC, w.id",
        )?;
        let rows = stmt.query_map([], |r| {
            let mut ignored = Vec::new();
            Ok(RegisteredRow {
                row: WorkerRow {
                    id: lenient::label(r, 0)?,
                    host: lenient::label(r, 1)?,
                    pid: lenient::int(r, 2, "pid", &mut ignored)?,
                    version: lenient::label(r, 3)?,
                    queues: lenient::label(r, 4)?,
                    job_types: lenient::label(r, 5)?,
                    started_at: lenient::int(r, 6, "started_at", &mut ignored)?,
                },
                heartbeat_at: lenient::int(r, 7, "heartbeat_at", &mut ignored)?,
                alive_until: lenient::int(r, 8, "alive_until", &mut ignored)?,
                stopped_at: r.get(9).ok().flatten(),
                running: r.get(10)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
