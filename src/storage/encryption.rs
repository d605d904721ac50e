//! Encrypted payloads in the database: the job types every litejobs enqueuer encrypts (the
//! `encrypted_types` table), the keys that waiting jobs' envelopes need (so a worker can
//! refuse to start without them), and the rows `keys rotate` re-encrypts, each column
//! replaced only if it still holds what was read (so a worker's write in between wins).
//! [`EncryptionStore`] is the interface; the envelopes themselves are made and opened above
//! this layer, in `crate::encryption`.

use crate::encryption::{Column, EncryptedType};
use crate::error::Result;

/// The text that marks an envelope, as an SQL literal: a cheap filter on stored text before
/// any JSON is read.
pub(crate) const MARKER_LITERAL: &str = "'\"litejobs_envelope\"'";

/// A job row whose payload, result or progress may need (re-)encrypting: what binds its
/// envelopes (type and queue), its status, and each column's text (`None` for NULL or a
/// value that is not text, which is left alone).
#[derive(Debug, Clone)]
pub(crate) struct SealableRow {
    pub(crate) id: i64,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) status: String,
    pub(crate) payload: Option<String>,
    pub(crate) result: Option<String>,
    pub(crate) progress: Option<String>,
}

impl SealableRow {
    /// The row's text in `column`.
    pub(crate) fn text(&self, column: Column) -> Option<&str> {
        match column {
            Column::Payload => self.payload.as_deref(),
            Column::Result => self.result.as_deref(),
            Column::Progress => self.progress.as_deref(),
        }
    }
}

/// Encrypted job types and envelopes, each in the caller's transaction.
pub(crate) trait EncryptionStore {
    /// The job types marked encrypted, by name.
    fn encrypted_types(&self) -> Result<Vec<EncryptedType>>;

    /// True when `job_type` is marked encrypted.
    fn is_type_encrypted(&self, job_type: &str) -> Result<bool>;

    /// Marks `job_type` encrypted (or not, with `encrypted` false). True when that changed
    /// anything.
    fn set_type_encrypted(&self, job_type: &str, encrypted: bool, now: i64) -> Result<bool>;

    /// The job types and payloads of up to `limit` waiting (queued or failed) jobs of
    /// `queue`, those its claim takes first (priority, run time, id), as stored (`None` for
    /// a payload that is not text). Read through the due-jobs index, so it costs the same
    /// with any backlog.
    fn waiting_payloads(&self, queue: &str, limit: usize) -> Result<Vec<(String, Option<String>)>>;

    /// Up to `limit` rows with an id above `after_id`, in id order, whose payload, result or
    /// progress holds the envelope marker, or whose job type is marked encrypted.
    fn sealable_rows(&self, after_id: i64, limit: usize) -> Result<Vec<SealableRow>>;

    /// Sets `column` of job `id` to `new` if it still holds `old`. False when it no longer
    /// does (a worker wrote it meanwhile, or the job is gone): nothing changed.
    fn replace_sealed(&self, id: i64, column: Column, old: &str, new: &str) -> Result<bool>;
}
