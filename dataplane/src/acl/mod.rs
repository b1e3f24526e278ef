//! Access control lists: the rendered 6-tuple [`Rule`], the [`FlowKey`] (the pipeline's flow key) it is
//! matched against, the [`LinearClassifier`] reference (the oracle every faster classifier is
//! tested against), the compiled classifiers ([`Compiled`], the one the data path uses:
//! RFC tables for IPv4 where they fit, decision trees otherwise and for IPv6; the older
//! aggregated bit vectors, which only the benchmarks run, live in `ferrule-perf`) and
//! the ClassBench file formats `dpdk-test-acl` reads.
//!
//! Match semantics, shared by every classifier: a rule is five independent field
//! ranges — source prefix, destination prefix, protocol (any, exact or value/mask),
//! source port range, destination port range — and a key matches when every field is
//! inside its range. Ports are compared against the key's port fields whatever the
//! protocol, exactly as `rte_acl` compares bytes. The operator-facing rule model (the
//! Contiv one: ports only with tcp, udp or sctp) is enforced by [`Rule::validate`], not
//! by matching; ClassBench rule sets, which carry port ranges with protocol any, load
//! as the same [`Rule`] type and simply skip that validation.
//!
//! A prefix of one family never matches a key of the other; a rule whose source and
//! destination are both any matches IPv4 and IPv6 keys alike.

#![forbid(unsafe_code)]

pub mod classbench;
pub mod compiled;
pub mod error;
pub mod identity;
pub mod reference;
pub mod rfc;
pub mod rule;
pub mod table;
pub mod tree;

pub use crate::flow::FlowKey;
pub use compiled::Compiled;
pub use error::ClassifierError;
pub use reference::LinearClassifier;
pub use rfc::Rfc;
pub use rule::{Action, PortRange, Prefix, Proto, Rule, RuleError, RuleField};
pub use tree::DecisionTreeClassifier;

/// The result a batch lookup writes for a key no rule matches (`4294967295`, as printed
/// by `dpdk-test-acl` users and the shared `*_expected` files).
pub const NO_MATCH: u32 = u32::MAX;

/// A built, read-only ACL classifier over one ordered rule table: first match wins.
pub trait Classifier {
    /// Classifies a burst: `out[i]` becomes the index of the first rule matching
    /// `keys[i]`, or [`NO_MATCH`].
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [u32]);

    /// Bytes of memory the built classifier holds (heap and inline), for reports.
    fn memory_bytes(&self) -> usize;
}
