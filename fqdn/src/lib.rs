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
//! - [`state`]: `FqdnState`, the façade: `apply_policy_selectors`, `on_dns_answer`
//!   (`on_dns_answer_for` an endpoint, `endpoint_removed`), `gc`,
//!   `checkpoint`/`restore`/`finish_restore`, `lookup`, and the views behind
//!   `ferrulectl fqdn cache|identities|selectors`. Each call returns `Changes`.
//!
//! The design and how an answer flows through these pieces: `docs/fqdn.md`.
//!
//! ```
//! use ferrule_fqdn::{FqdnConfig, FqdnSelector, FqdnState, Identity, Selector};
//!
//! let mut state = FqdnState::new(FqdnConfig::default());
//! let s3 = Selector::Fqdn(FqdnSelector::match_pattern("*.amazonaws.com").unwrap());
//! // The policies' selectors: the rules get the selector's identity set.
//! let changes = state.apply_policy_selectors([s3.clone()]);
//! let id = *changes.selectors[&s3].iter().next().unwrap();
//!
//! // A DNS answer the proxy parsed (`dns::parse_response`), at `now` = 1000 s.
//! let ip = "192.0.2.7".parse().unwrap();
//! let changes = state.on_dns_answer("s3.amazonaws.com.", &[(ip, 5)], 1000);
//! assert!(!changes.touches_rules()); // only the IP → identity map changes
//! assert_eq!(changes.upserts.values().copied().collect::<Vec<_>>(), vec![id]);
//! assert_eq!(state.lookup(ip), id);
//!
//! // Expired (TTL raised to the minimum) and no connection uses it: forgotten.
//! let changes = state.gc(1000 + 3600, &|_| false);
//! assert_eq!(changes.deletes.len(), 1);
//! assert_eq!(state.lookup(ip), Identity::WORLD);
//! ```

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
