//! Ferrule benchmark helpers.
