//! `keys new | types | encrypt-type | clear-type | rotate`.

use clap::{Args, Subcommand};

/// `keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print a fresh random 256-bit key as NAME:BASE64, for LITEJOBS_ENCRYPTION_KEYS or a
    /// key file (put it first: the first key encrypts, every one decrypts). Nothing is
    /// stored; the key is printed this once.
    New(KeysNewArgs),
    /// The keys this command holds (names only, the encrypting one first) and the job
    /// types marked encrypted.
    Types,
    /// Mark a job type encrypted: every litejobs enqueuer (every process, the command line)
    /// stores its payloads encrypted from now on (others within a second). Jobs already
    /// stored keep their form until `keys rotate`.
    EncryptType(KeysTypeArgs),
    /// Unmark a job type: its new payloads are stored in clear again (stored envelopes stay
    /// encrypted and readable).
    ClearType(KeysTypeArgs),
    /// Re-encrypt every job's payload, result and progress (queued, running, failed, dead
    /// or finished) with the first key, and encrypt what jobs of marked types hold in
    /// clear: 100 jobs per transaction, each column written only if unchanged meanwhile, so
    /// it is safe while workers run, and running it again finishes what a stop left.
    Rotate,
}

/// `keys new`.
#[derive(Debug, Args)]
pub struct KeysNewArgs {
    /// The key's name: letters, digits, `.`, `_` and `-` (default: k-YYYYMMDD, today's
    /// date in UTC).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
}

/// `keys encrypt-type` and `keys clear-type`.
#[derive(Debug, Args)]
pub struct KeysTypeArgs {
    /// The job type.
    #[arg(value_name = "TYPE")]
    pub job_type: String,
}
