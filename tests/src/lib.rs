//! End-to-end test helpers: start ferruled, talk to it, clean up after it.
