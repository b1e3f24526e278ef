//! Ferrule dataplane.
