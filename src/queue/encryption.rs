//! `impl Queue` for encrypted payloads: the keyring a queue holds, the job types marked
//! encrypted in the database (cached, read again at most once a second, so an enqueue of a
//! plain type costs a lookup in memory), sealing a new job's payload, sealing what a worker
//! writes back, and opening envelopes for the worker and for every view.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::RwLock;

use serde_json::Value;

use crate::encryption::envelope::sealed_by;
use crate::encryption::{sealed_text, Binding, Column, EncryptedType, Keyring, OpenError};
use crate::error::{Error, ErrorKind, Result};
use crate::job::{JobRecord, NewJob};
use crate::storage::jobs::ClaimedRow;
use crate::storage::Tx;
use crate::Queue;

/// Waiting jobs of each queue a worker's start looks at for keys it lacks: those its claim
/// takes first.
pub(crate) const KEYS_CHECKED_JOBS: usize = 1000;

/// How long a queue trusts its copy of the encrypted types (ms, by the queue's clock): a
/// type marked in another process is encrypted by this one's enqueues within this time.
pub(crate) const TYPES_REFRESH_MS: i64 = 1000;

/// `read_at_ms` before the first read, and after this queue changed a mark.
const NEVER_READ: i64 = i64::MIN;

/// A queue's keys and its copy of the encrypted types. An enqueue of a type that is not
/// marked costs an atomic load and a shared lock, and no clock read of its own: it goes by
/// the time the enqueue read anyway (a monotonic clock read per enqueue measured 1.5 % of a
/// single enqueue on a virtual machine whose clock reads are system calls).
pub(crate) struct Encryption {
    keys: Keyring,
    types: RwLock<HashSet<String>>,
    read_at_ms: AtomicI64,
}

impl Encryption {
    pub(crate) fn new(keys: Keyring) -> Encryption {
        Encryption {
            keys,
            types: RwLock::new(HashSet::new()),
            read_at_ms: AtomicI64::new(NEVER_READ),
        }
    }
}

impl Queue {
    /// The names of the keys this queue holds (never the keys), the encrypting one first.
    pub fn keyring(&self) -> &Keyring {
        &self.inner.encryption.keys
    }

    /// The job types marked encrypted in the database: every litejobs enqueuer (this and
    /// other processes, the command line) encrypts their payloads.
    pub fn encrypted_types(&self) -> Result<Vec<EncryptedType>> {
        self.db().read(|tx| tx.encrypted_types())
    }

    /// Marks `job_type` encrypted in the database (or not, with `encrypted` false), as
    /// `litejobs keys encrypt-type` does. Enqueues through this queue follow at once; other
    /// queues and processes within a second (they read the marks again at most once a
    /// second). Jobs already stored keep their form: `litejobs keys rotate` encrypts the
    /// payloads of marked types that are still in clear. True when that changed anything.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`] for an empty job type; database errors.
    pub fn set_type_encrypted(&self, job_type: &str, encrypted: bool) -> Result<bool> {
        if job_type.trim().is_empty() {
            return Err(Error::invalid_job("job_type must not be empty"));
        }
        let now = self.now_ms();
        let changed = self
            .db()
            .write(|tx| tx.set_type_encrypted(job_type, encrypted, now))?;
        (self.inner.encryption.read_at_ms).store(NEVER_READ, Ordering::Release);
        Ok(changed)
    }

    /// True when enqueues encrypt `job_type` without being told: it is marked in the
    /// database. The marks are read again when the copy is older than [`TYPES_REFRESH_MS`]
    /// at `now_ms` (or the clock went back), through `tx` when the enqueue runs inside one (a
    /// pool connection could be the one that transaction holds).
    fn type_is_encrypted(&self, tx: Option<&dyn Tx>, job_type: &str, now_ms: i64) -> Result<bool> {
        let enc = &self.inner.encryption;
        let read_at = enc.read_at_ms.load(Ordering::Acquire);
        let fresh = read_at != NEVER_READ
            && now_ms >= read_at
            && now_ms.saturating_sub(read_at) < TYPES_REFRESH_MS;
        if !fresh {
            let read = match tx {
                Some(tx) => tx.encrypted_types()?,
                None => self.db().read(|tx| tx.encrypted_types())?,
            };
            let types: HashSet<String> = read.into_iter().map(|t| t.job_type).collect();
            *enc.types.write().unwrap_or_else(|p| p.into_inner()) = types;
            enc.read_at_ms.store(now_ms, Ordering::Release);
        }
        let types = enc.types.read().unwrap_or_else(|p| p.into_inner());
        Ok(!types.is_empty() && types.contains(job_type))
    }

    /// The text to store as `job`'s payload: `payload` itself, or its envelope when the job
    /// or its type is marked encrypted.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] when it must be encrypted and this queue holds no key;
    /// nothing is written then.
    pub(crate) fn stored_payload(
        &self,
        tx: Option<&dyn Tx>,
        job: &NewJob,
        payload: String,
        now_ms: i64,
    ) -> Result<String> {
        if !job.encrypted && !self.type_is_encrypted(tx, &job.job_type, now_ms)? {
            crate::encryption::envelope::refuse_lookalike(&payload)?;
            return Ok(payload);
        }
        let binding = Binding {
            column: Column::Payload,
            job_type: &job.job_type,
            queue: &job.queue,
        };
        self.keyring().seal(&payload, binding).map_err(|e| {
            let why = if job.encrypted {
                "is marked encrypted"
            } else {
                "is of a type marked encrypted"
            };
            Error::new(
                e.kind(),
                format!(
                    "job of type {} {why}, but {e}; nothing was written",
                    job.job_type
                ),
            )
        })
    }

    /// A worker's claimed payload, opened: its JSON text, and whether it was an envelope (the
    /// result and progress are then sealed too).
    ///
    /// # Errors
    /// What keeps it from being opened, as the end of "job N: payload …" (the job goes dead
    /// without running).
    pub(crate) fn open_claimed(
        &self,
        row: &ClaimedRow,
        value: Value,
    ) -> std::result::Result<(Value, bool), String> {
        if sealed_by(&value).is_none() {
            return Ok((value, false));
        }
        let binding = Binding {
            column: Column::Payload,
            job_type: &row.job_type,
            queue: &row.queue,
        };
        let plain = self
            .keyring()
            .open(&value, binding)
            .map_err(|e| format!("payload {e}"))?;
        let limit = self.max_payload_bytes();
        if plain.len() > limit {
            return Err(format!(
                "payload is {} bytes decrypted, over this worker's limit of {limit} bytes",
                plain.len()
            ));
        }
        serde_json::from_str(&plain)
            .map(|v| (v, true))
            .map_err(|e| {
                let key = sealed_by(&value).unwrap_or("?").to_string();
                format!("payload {} ({e})", OpenError::NotJson { key })
            })
    }

    /// The text a worker writes into `column` of `row`'s job, sealed.
    ///
    /// # Errors
    /// When it cannot be sealed (no key, no random bytes).
    pub(crate) fn seal_output(
        &self,
        row: &ClaimedRow,
        column: Column,
        text: &str,
    ) -> Result<String> {
        let binding = Binding {
            column,
            job_type: &row.job_type,
            queue: &row.queue,
        };
        self.keyring().seal(text, binding)
    }

    /// `job` as views show it: each envelope in its payload, result and progress opened
    /// with this queue's keys, or replaced by `encrypted (key NAME)` where it cannot be,
    /// and [`JobRecord::encryption_key`] set.
    pub(crate) fn reveal(&self, mut job: JobRecord) -> JobRecord {
        let (job_type, queue) = (job.job_type.clone(), job.queue.clone());
        let mut key = None;
        let mut open = |column: Column, value: &mut Value| {
            let Some(name) = sealed_by(value) else {
                return;
            };
            key.get_or_insert_with(|| name.to_string());
            let binding = Binding {
                column,
                job_type: &job_type,
                queue: &queue,
            };
            let opened = self.keyring().open(value, binding).and_then(|text| {
                serde_json::from_str(&text).map_err(|_| OpenError::NotJson {
                    key: name.to_string(),
                })
            });
            *value = match opened {
                Ok(opened) => opened,
                Err(e) => Value::String(shown_sealed(&e)),
            };
        };
        open(Column::Payload, &mut job.payload);
        if let Some(result) = job.result.as_mut() {
            open(Column::Result, result);
        }
        if let Some(progress) = job.progress.as_mut() {
            open(Column::Progress, progress);
        }
        job.encryption_key = key;
        job
    }

    /// A stored result's text as its value: an envelope opened with this queue's keys (bound
    /// to the job's type and queue), clear JSON as it is, other text as a JSON string.
    ///
    /// # Errors
    /// An envelope this queue cannot open (no key, a wrong one, altered), naming its key.
    pub(crate) fn open_result(&self, text: &str, job_type: &str, queue: &str) -> Result<Value> {
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            return Ok(Value::String(text.to_string()));
        };
        let Some(name) = sealed_by(&value) else {
            return Ok(value);
        };
        let binding = Binding {
            column: Column::Result,
            job_type,
            queue,
        };
        let opened = self
            .keyring()
            .open(&value, binding)
            .map_err(|e| Error::new(ErrorKind::InvalidConfig, format!("result {e}")))?;
        serde_json::from_str(&opened).map_err(|_| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "result {}",
                    OpenError::NotJson {
                        key: name.to_string()
                    }
                ),
            )
        })
    }

    /// [`Queue::reveal`] for each job.
    pub(crate) fn reveal_all(&self, jobs: Vec<JobRecord>) -> Vec<JobRecord> {
        jobs.into_iter().map(|job| self.reveal(job)).collect()
    }

    /// Refuses a worker that would serve `job_types` from `queues` when some types are
    /// marked encrypted and it holds no key, or when waiting jobs of theirs are sealed with
    /// keys it does not hold: it would only make them dead. It reads the
    /// [`KEYS_CHECKED_JOBS`] waiting jobs of each queue that its claim takes first, so a
    /// start costs the same whatever the backlog. A database error here is logged, not
    /// fatal: each such job still goes dead on its own, with an error naming its key.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] naming the job types (and keys).
    pub(crate) fn check_keys_for(&self, job_types: &[String], queues: &[&str]) -> Result<()> {
        let found = self.db().read(|tx| {
            let marked = tx.encrypted_types()?;
            let mut sealed = std::collections::BTreeSet::new();
            for queue in queues {
                for (job_type, payload) in tx.waiting_payloads(queue, KEYS_CHECKED_JOBS)? {
                    if !job_types.contains(&job_type) {
                        continue;
                    }
                    let value = payload.and_then(|p| serde_json::from_str::<Value>(&p).ok());
                    if let Some(key) = value.as_ref().and_then(sealed_by) {
                        sealed.insert((job_type, key.to_string()));
                    }
                }
            }
            Ok((marked, sealed))
        });
        let (marked, sealed) = match found {
            Ok(found) => found,
            Err(e) => {
                log::warn!("litejobs: cannot check the keys of waiting encrypted jobs: {e}");
                return Ok(());
            }
        };
        let keys = self.keyring();
        let mut problems = Vec::new();
        if keys.is_empty() {
            let served: Vec<&str> = marked
                .iter()
                .map(|t| t.job_type.as_str())
                .filter(|t| job_types.iter().any(|j| j == t))
                .collect();
            match served.as_slice() {
                [] => {}
                [one] => problems.push(format!("job type {one} is marked encrypted")),
                many => problems.push(format!(
                    "job types {} are marked encrypted",
                    many.join(", ")
                )),
            }
        }
        let missing: Vec<String> = sealed
            .iter()
            .filter(|(_, key)| !keys.contains(key))
            .map(|(job_type, key)| format!("{job_type} (key {key})"))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "waiting jobs of {} are encrypted with keys it does not hold",
                missing.join(", ")
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        let held = match keys.names() {
            names if names.is_empty() => "no encryption key".to_string(),
            names => format!("keys {}", names.join(", ")),
        };
        let advice = if cfg!(feature = "encryption") {
            "give its queue the keys (QueueBuilder::encryption_keys, or for `litejobs work` \
             LITEJOBS_ENCRYPTION_KEYS or --keys-file)"
        } else {
            "this litejobs was built without the `encryption` feature"
        };
        Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "this worker holds {held}, but {}: {advice}",
                problems.join("; and ")
            ),
        ))
    }
}

/// What a view shows for an envelope it cannot open: the key, and why when a key of that
/// name is held but does not open it.
fn shown_sealed(e: &OpenError) -> String {
    match e {
        OpenError::MissingKey { key, .. } | OpenError::Unsupported { key } => sealed_text(key),
        other => format!("{}: {other}", sealed_text(other.key())),
    }
}
