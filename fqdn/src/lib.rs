//! The control-plane core of FQDN egress policy with label-based identities: what a DNS
//! answer does to the node's "IP → identity" map and to the identities each policy
//! selector selects. No I/O besides checkpoint files, no threads, no clock (the caller
//! passes `now`); the DNS proxy, the agent and the dataplane call it.
//!
//! - [`labels`]: `Label` (`source:key`) and `LabelSet` (sorted, stable text form).
//! - [`selector`]: `FqdnSelector` (`matchName`/`matchPattern`, validation, matching),
//!   `CidrSelector`, and `Selector::selects(&LabelSet)`.
//! - [`names`]: `NameCache`, the name manager's name → addresses with expiries, its
//!   per-name limit and its garbage collection.
//! - [`ipcache`]: `IpCache`, prefix → owner → labels, and `resolve` (down-propagation).
//! - [`identity`]: `Identity`, `Allocator` (one local identity per label set,
//!   reference counted, checkpointed).
//! - [`selectorcache`]: `SelectorCache`, selector → identities, incremental.
//! - [`limits`]: the circuit breaker's `Limits`, `Counters` and `Refusal`s.
//! - [`checkpoint`]: the checkpoint file (atomic JSON).
//! - [`dns`]: `parse_response`, `parse_query`, `refused_response` (hickory-proto).
//! - [`state`]: `FqdnState`, the façade: `apply_policy_selectors`, `on_dns_answer`,
//!   `gc`, `checkpoint`/`restore`/`finish_restore`, `lookup`, and the views behind
//!   `ferrulectl fqdn cache|identities|selectors`. Each call returns `Changes`.
//!
//! The design and how an answer flows through these pieces: `docs/fqdn.md`.

pub mod checkpoint;
pub mod dns;
pub mod identity;
pub mod ipcache;
pub mod labels;
pub mod limits;
pub mod names;
pub mod selector;
pub mod selectorcache;
pub mod state;

pub use identity::Identity;
pub use labels::{Label, LabelSet};
pub use limits::{Counters, Limits, Refusal};
pub use selector::{CidrSelector, FqdnSelector, Selector};
pub use state::{Changes, FqdnConfig, FqdnState};
