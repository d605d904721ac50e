//! Placeholder: filled by the store's port.

#[allow(unused_imports)]
use crate::support::pg::setup as _setup;
