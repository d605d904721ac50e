//! `impl Queue` for key rotation ([`Queue::rotate_keys`], `litejobs keys rotate`): every
//! envelope of every job, live or finished, re-encrypted with the queue's first key, and
//! what jobs of types marked encrypted still hold in clear encrypted, a few rows per
//! transaction.

use serde::Serialize;
use serde_json::Value;

use crate::encryption::envelope::sealed_by;
use crate::encryption::{no_key_error, Binding, Column};
use crate::error::Result;
use crate::storage::encryption::SealableRow;
use crate::Queue;

/// Rows read, and written back, per transaction: a rotation never holds the write lock for
/// long, so workers and enqueues go on while it runs.
pub(crate) const ROTATION_BATCH: usize = 100;

/// At most this many unreadable columns are named in [`RotationReport::unreadable_examples`].
const MAX_EXAMPLES: usize = 10;

/// What [`Queue::rotate_keys`] did. Counts are of columns (a job's payload, result and
/// progress count apart).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RotationReport {
    /// The key everything is encrypted with now (the queue's first).
    pub key: String,
    /// Jobs looked at: those holding an envelope, and those of types marked encrypted.
    pub jobs: u64,
    /// Envelopes of other keys, re-encrypted with [`RotationReport::key`].
    pub re_encrypted: u64,
    /// Columns in clear of jobs whose type is marked encrypted, now encrypted.
    pub encrypted: u64,
    /// Envelopes already under [`RotationReport::key`], left as they were.
    pub current: u64,
    /// Columns another writer changed between this rotation's read and its write (a
    /// worker's result or progress): left to that writer. Run the rotation again for them.
    pub changed_meanwhile: u64,
    /// Jobs of marked types running with a payload in clear: left alone, as their attempt
    /// writes its result in clear. Run the rotation again once they have finished.
    pub running_in_clear: u64,
    /// Columns this queue cannot read (an envelope under a key it does not hold, or one
    /// that does not decrypt; text in clear that is not JSON): left as they were.
    pub unreadable: u64,
    /// The first few of those, each as `job ID COLUMN why` (`job 12 payload does not
    /// decrypt with key k1: …`).
    pub unreadable_examples: Vec<String>,
}

/// One column's new text, to write if the column still holds the old one.
struct Replacement {
    id: i64,
    column: Column,
    old: String,
    new: String,
    /// A re-encryption (else an encryption of clear text).
    re_encrypted: bool,
}

impl Queue {
    /// Re-encrypts every envelope (payload, result, progress) of every job, queued,
    /// running, failed, dead or finished, with this queue's first key, and encrypts what
    /// jobs of types marked encrypted ([`Queue::set_type_encrypted`]) hold in clear.
    ///
    /// Safe while workers and enqueuers run: it reads 100 jobs at a time,
    /// encrypts outside any transaction, and writes each column back only if it still holds
    /// what was read, so a worker's write in between wins (and is counted in
    /// [`RotationReport::changed_meanwhile`]). Stopped midway, it loses nothing: running it
    /// again finishes the work (what is done already counts as
    /// [`current`](RotationReport::current)). Give every process the new key first (first in
    /// its keyring, the old keys after it): a process that still encrypts with an old key
    /// goes on writing envelopes under it.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when this queue holds no
    /// key; database errors (what was written before stays written).
    pub fn rotate_keys(&self) -> Result<RotationReport> {
        self.rotate_keys_with_progress(&mut crate::progress::ignore)
    }

    /// [`Queue::rotate_keys`], calling `on_progress` after each batch with the jobs looked
    /// at so far (the total is not known beforehand).
    ///
    /// # Errors
    /// As [`Queue::rotate_keys`].
    pub fn rotate_keys_with_progress(
        &self,
        on_progress: &mut dyn FnMut(crate::progress::Progress),
    ) -> Result<RotationReport> {
        let Some(current) = self.keyring().current().map(str::to_string) else {
            return Err(no_key_error());
        };
        let mut report = RotationReport {
            key: current.clone(),
            ..RotationReport::default()
        };
        let mut after = 0;
        loop {
            let rows = self
                .db()
                .read(|tx| tx.sealable_rows(after, ROTATION_BATCH))?;
            let Some(last) = rows.last() else {
                return Ok(report);
            };
            after = last.id;
            let marked: Vec<String> = self
                .encrypted_types()?
                .into_iter()
                .map(|t| t.job_type)
                .collect();
            let mut replacements = Vec::new();
            for row in &rows {
                report.jobs += 1;
                let of_marked_type = marked.contains(&row.job_type);
                self.plan_row(
                    row,
                    &current,
                    of_marked_type,
                    &mut report,
                    &mut replacements,
                )?;
            }
            on_progress(crate::progress::Progress::of(report.jobs, None));
            if replacements.is_empty() {
                continue;
            }
            let written = self.db().write(|tx| {
                replacements
                    .iter()
                    .map(|r| tx.replace_sealed(r.id, r.column, &r.old, &r.new))
                    .collect::<Result<Vec<bool>>>()
            })?;
            for (r, ok) in replacements.iter().zip(written) {
                match (ok, r.re_encrypted) {
                    (false, _) => report.changed_meanwhile += 1,
                    (true, true) => report.re_encrypted += 1,
                    (true, false) => report.encrypted += 1,
                }
            }
        }
    }

    /// What to write for `row`'s columns.
    fn plan_row(
        &self,
        row: &SealableRow,
        current: &str,
        of_marked_type: bool,
        report: &mut RotationReport,
        out: &mut Vec<Replacement>,
    ) -> Result<()> {
        let payload_in_clear = row
            .payload
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .is_some_and(|v| sealed_by(&v).is_none());
        if of_marked_type && payload_in_clear && row.status == "running" {
            report.running_in_clear += 1;
        }
        for column in [Column::Payload, Column::Result, Column::Progress] {
            let Some(text) = row.text(column) else {
                continue;
            };
            let binding = Binding {
                column,
                job_type: &row.job_type,
                queue: &row.queue,
            };
            let mut unreadable = |why: String| {
                report.unreadable += 1;
                if report.unreadable_examples.len() < MAX_EXAMPLES {
                    report.unreadable_examples.push(format!(
                        "job {} {} {why}",
                        row.id,
                        column.name()
                    ));
                }
            };
            let Ok(value) = serde_json::from_str::<Value>(text) else {
                if of_marked_type {
                    unreadable("is in clear, and not JSON text".to_string());
                }
                continue;
            };
            let (plain, re_encrypted) = match sealed_by(&value) {
                Some(key) if key == current => {
                    report.current += 1;
                    continue;
                }
                Some(_) => match self.keyring().open(&value, binding) {
                    Ok(plain) => (plain, true),
                    Err(e) => {
                        unreadable(e.to_string());
                        continue;
                    }
                },
                None if of_marked_type && !(row.status == "running" && payload_in_clear) => {
                    (text.to_string(), false)
                }
                None => continue,
            };
            out.push(Replacement {
                id: row.id,
                column,
                old: text.to_string(),
                new: self.keyring().seal(&plain, binding)?,
                re_encrypted,
            });
        }
        Ok(())
    }
}
