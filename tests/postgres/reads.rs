//! Placeholder: filled by the store's port.
