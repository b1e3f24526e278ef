//! [`ClassifierError`]: why a rule set cannot be compiled into a classifier.

/// A rule set a compiled classifier cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifierError {
    /// More rules than a `u32` result can name (the all-ones value means no match).
    #[error("{rules} rules: at most {max} can be classified")]
    TooManyRules {
        /// Rules given.
        rules: usize,
        /// The most allowed.
        max: usize,
    },
    /// The classifier's tables would be too large.
    #[error("{field}: tables would exceed {limit} bytes")]
    TooLarge {
        /// The part that would be too large: `decision tree`, or a field of another
        /// classifier's tables.
        field: &'static str,
        /// The limit: [`super::tree::MAX_BYTES`] for the decision trees.
        limit: usize,
    },
}
