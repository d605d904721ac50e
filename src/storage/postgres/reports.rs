//! [`ReportStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::reports::*;

impl ReportStore for PgTx<'_> {
    fn insert_run(
        &self,
        kind: &str,
        params: &str,
        request_job_id: Option<i64>,
        now: i64,
    ) -> Result<i64> {
        Err(super::pending("insert_run"))
    }

    fn set_request_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        Err(super::pending("set_request_job"))
    }

    fn run_of_request(&self, request_job_id: i64) -> Result<Option<i64>> {
        Err(super::pending("run_of_request"))
    }

    fn report_run(&self, id: i64) -> Result<Option<RunRow>> {
        Err(super::pending("report_run"))
    }

    fn report_runs(&self, kind: Option<&str>, limit: i64) -> Result<Vec<RunRow>> {
        Err(super::pending("report_runs"))
    }

    fn plan_run(&self, run_id: i64, specs: &[String], now: i64) -> Result<bool> {
        Err(super::pending("plan_run"))
    }

    fn set_chunk_job(&self, run_id: i64, chunk: i64, job_id: i64) -> Result<()> {
        Err(super::pending("set_chunk_job"))
    }

    fn set_finish_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        Err(super::pending("set_finish_job"))
    }

    fn report_chunk(&self, run_id: i64, chunk: i64) -> Result<Option<ChunkRow>> {
        Err(super::pending("report_chunk"))
    }

    fn chunk_fence_holds(&self, fence: Fence) -> Result<bool> {
        Err(super::pending("chunk_fence_holds"))
    }

    fn complete_chunk(
        &self,
        run_id: i64,
        chunk: i64,
        rows: &[String],
        count: i64,
        fence: Fence,
        now: i64,
    ) -> Result<ChunkWrite> {
        Err(super::pending("complete_chunk"))
    }

    fn fail_run(&self, run_id: i64, error: &str, now: i64) -> Result<bool> {
        Err(super::pending("fail_run"))
    }

    fn finish_run(
        &self,
        run_id: i64,
        result_path: Option<&str>,
        result_rows: i64,
        fence: Fence,
        now: i64,
    ) -> Result<FinishWrite> {
        Err(super::pending("finish_run"))
    }

    fn report_rows_after(
        &self,
        run_id: i64,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<(i64, i64, String)>> {
        Err(super::pending("report_rows_after"))
    }

    fn report_rows_page(&self, run_id: i64, offset: i64, limit: i64) -> Result<Vec<String>> {
        Err(super::pending("report_rows_page"))
    }

    fn delete_run(&self, run_id: i64) -> Result<bool> {
        Err(super::pending("delete_run"))
    }
}
