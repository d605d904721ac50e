//! What litejobs meets outside its own code, each read in one place: the time ([`Clock`],
//! which tests move by hand), this machine's name (worker ids, database connection names),
//! and a database server that cannot be reached (how long to wait, what to log).

pub(crate) mod clock;
pub(crate) mod host;
pub(crate) mod outage;

pub use clock::{Clock, ManualClock, SystemClock};
