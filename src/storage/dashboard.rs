//! Reads behind the dashboard's charts: finished work per time bucket.
//!
//! Each figure is counted from the rows in the file, so pruning succeeded jobs lowers past
//! buckets; the dashboard only shows windows shorter than the usual retention.

use rusqlite::{params, Connection};

use crate::error::Result;

/// Counts per bucket index (0 = the bucket starting at `since`), for one figure.
type BucketCounts = Vec<(i64, i64)>;

/// Finished work since `since` in buckets of `bucket_ms`: `(succeeded, failed attempts,
/// dead)`, each as `(bucket index, count)` pairs for the buckets that have any.
pub(crate) fn activity(
    conn: &Connection,
    since: i64,
    bucket_ms: i64,
) -> Result<(BucketCounts, BucketCounts, BucketCounts)> {
    // For a succeeded job `updated_at` is its finish time (the completer writes both at
    // once), and (status, updated_at) is indexed: this is a covering index range scan.
    let succeeded = grouped(
        conn,
        "SELECT (CAST(updated_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM jobs
         WHERE status = 'succeeded' AND updated_at >= ?1
         GROUP BY 1",
        since,
        bucket_ms,
    )?;
    // The same outcomes the health figures count as failures.
    let failed = grouped(
        conn,
        "SELECT (CAST(finished_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM job_attempts
         WHERE finished_at >= ?1 AND outcome IN ('failed', 'timed_out', 'lost')
         GROUP BY 1",
        since,
        bucket_ms,
    )?;
    // Requeued dead jobs stay dead (with `requeued_as`), so they still count when they died.
    let dead = grouped(
        conn,
        "SELECT (CAST(finished_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM jobs
         WHERE status = 'dead' AND finished_at >= ?1
         GROUP BY 1",
        since,
        bucket_ms,
    )?;
    Ok((succeeded, failed, dead))
}

fn grouped(conn: &Connection, sql: &str, since: i64, bucket_ms: i64) -> Result<BucketCounts> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params![since, bucket_ms], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
