//! The networks and namespaces the agent was given, and what follows from them: each
//! network's id and masquerade addresses, the namespaces where it is active, the
//! primary network of every namespace, and the seed's status conditions.
//!
//! * Network names are generated as the seed says: a UDN `db` in namespace `demo` is
//!   `demo.db`, a CUDN `db` is `cluster.udn.db`.
//! * Ids: every network gets a `u16` id, 1 upwards in order of creation (0 is the
//!   cluster default network), never reused while the process lives; the daemon uses
//!   it as the network's VRF and conntrack zone.
//! * Masquerade addresses: the seed's "2 masquerade IPs per network", node-local. The
//!   masquerade subnet's first 8 addresses belong to the cluster default network
//!   (upstream uses `.1`–`.4`); a network holds slot `s` (1 upwards, the lowest free
//!   one when it is created, kept while it lives) and gets the subnet's addresses
//!   `2s + 6` and `2s + 7`: slot 1 is 169.254.169.8 and .9, slot 2 .10 and .11, … (a
//!   /24 holds 123 networks; the IPv6 subnet is laid out alike). Slots, unlike ids, are
//!   reused after a network is deleted: tying them to ids would exhaust the subnet
//!   after 123 creations. A network is refused when the subnet is full.
//! * One primary network per namespace: the first one applied (the lowest id) keeps
//!   it; a later primary network targeting the same namespace is not ready there
//!   (reason [`REASON_PRIMARY_EXISTS`]), as upstream, where its NAD is never created.
//!   A primary network is only created in a namespace that has the
//!   [`PRIMARY_NETWORK_LABEL`] (reason [`REASON_LABEL_MISSING`] otherwise).
//! * `apply` is all or nothing; specs are immutable (a CUDN's `namespaceSelector`
//!   may change, as upstream); a namespace can't gain or lose the label once a network
//!   targets it.

use crate::manifest::{Namespace, Object, Role};
use crate::plan::{node_plan, range, NodePlan, PlanError};
use crate::validate::{check_name, validate_cudn, validate_udn, NetworkConfig};
use crate::{Invalid, ListDisplay, Settings, PRIMARY_NETWORK_LABEL};
use ferrule_policy::selector::{Labels, Selector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

/// Condition type: the network exists (in every namespace it targets).
pub const CONDITION_CREATED: &str = "NetworkCreated";
/// Condition type: the network's addresses are allocated on this node.
pub const CONDITION_ALLOCATED: &str = "NetworkAllocationSucceeded";
/// Reason of a created network.
pub const REASON_CREATED: &str = "NetworkCreated";
/// Reason: another primary network was there first.
pub const REASON_PRIMARY_EXISTS: &str = "PrimaryNetworkAlreadyExist";
/// Reason: the namespace lacks [`PRIMARY_NETWORK_LABEL`] (the seed's namespace-label
/// condition 2: the network reports an error and is not created there).
pub const REASON_LABEL_MISSING: &str = "PrimaryNetworkLabelMissing";
/// Reason: a UDN's namespace is not known (no `Namespace` object was applied).
pub const REASON_NAMESPACE_NOT_FOUND: &str = "NamespaceNotFound";
/// Reason of a successful allocation.
pub const REASON_ALLOCATED: &str = "NetworkAllocationSucceeded";
/// Reason of a failed allocation (the node index is beyond a Layer3 split).
pub const REASON_ALLOCATION_FAILED: &str = "NetworkAllocationFailed";

/// The admission message of the seed's ValidatingAdmissionPolicy.
pub const LABEL_IMMUTABLE: &str =
    "The 'k8s.ovn.org/primary-user-defined-network' label cannot be added/removed after the namespace was created";

/// The kind of an object the registry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    UserDefinedNetwork,
    ClusterUserDefinedNetwork,
    Namespace,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    /// The kind's name or its short name (`udn`, `cudn`, `ns`), any case.
    fn from_str(s: &str) -> Result<Kind, String> {
        match s.to_ascii_lowercase().as_str() {
            "userdefinednetwork" | "udn" => Ok(Kind::UserDefinedNetwork),
            "clusteruserdefinednetwork" | "cudn" => Ok(Kind::ClusterUserDefinedNetwork),
            "namespace" | "ns" => Ok(Kind::Namespace),
            _ => Err(format!(
                "{s:?}: expected UserDefinedNetwork (udn), ClusterUserDefinedNetwork (cudn) or Namespace (ns)"
            )),
        }
    }
}

/// A network by name and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NetworkRef {
    /// `namespace.name` (UDN) or `cluster.udn.name` (CUDN).
    pub name: String,
    /// 1.. (0 is the cluster default network).
    pub id: u16,
}

/// A network's two node-local masquerade addresses per family: `[0]` is its gateway
/// router's side (egress traffic is SNATed to it before the SNAT to the node address),
/// `[1]` the host's side of the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Masquerade {
    pub v4: [Ipv4Addr; 2],
    pub v6: [Ipv6Addr; 2],
}

/// A network ready on this node: active in at least one namespace, with its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub name: String,
    pub id: u16,
    pub kind: Kind,
    /// `UserDefinedNetwork demo/db` or `ClusterUserDefinedNetwork db`.
    pub object: String,
    pub config: NetworkConfig,
    /// The namespaces where it is active, sorted.
    pub namespaces: Vec<String>,
    pub masquerade: Masquerade,
    pub plan: NodePlan,
}

/// A status condition shaped like Kubernetes' `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// [`CONDITION_CREATED`] or [`CONDITION_ALLOCATED`].
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"` or `"False"`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339, UTC, seconds: when `status` last changed.
    pub last_transition_time: String,
}

/// A network's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    pub name: String,
    pub id: u16,
    pub kind: Kind,
    /// `demo/db` (UDN) or `db` (CUDN).
    pub object: String,
    /// Where the network is active, sorted.
    pub active_namespaces: Vec<String>,
    pub conditions: Vec<Condition>,
}

/// What an [`Registry::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// New networks.
    pub created: Vec<NetworkRef>,
    /// Networks re-applied with the same spec (no-ops).
    pub unchanged: Vec<String>,
    /// CUDNs whose `namespaceSelector` changed.
    pub reselected: Vec<String>,
    /// Namespaces applied (new or with their labels replaced).
    pub namespaces: Vec<String>,
    /// Objects of other kinds, `Kind name`.
    pub ignored: Vec<String>,
}

/// A deletion that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {message}")]
pub struct Refused {
    pub object: String,
    pub message: String,
}

#[derive(Debug, Clone)]
struct Entry {
    id: u16,
    kind: Kind,
    /// The object's name (`demo/db` or `db`).
    object: String,
    namespace: Option<String>,
    selector: Option<(LabelSelector, Selector)>,
    config: NetworkConfig,
    slot: u32,
    masquerade: Masquerade,
}

impl Entry {
    fn object_display(&self) -> String {
        format!("{} {}", self.kind, self.object)
    }
}

#[derive(Debug, Clone, Default)]
struct State {
    namespaces: BTreeMap<String, Labels>,
    networks: BTreeMap<String, Entry>,
    /// The next id to give (1..=65535); ids are never reused.
    next_id: u32,
}

struct Failure {
    namespace: String,
    reason: &'static str,
    message: String,
}

#[derive(Default)]
struct Resolved {
    active: Vec<String>,
    failures: Vec<Failure>,
}

struct Resolution {
    per_network: BTreeMap<String, Resolved>,
    /// Namespace → its primary network.
    primary: BTreeMap<String, String>,
}

/// The clock of condition times.
pub type Clock = Box<dyn Fn() -> SystemTime + Send + Sync>;

/// The networks and namespaces, see the [module](self) documentation.
pub struct Registry {
    settings: Settings,
    state: State,
    conditions: BTreeMap<String, Vec<Condition>>,
    clock: Clock,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("settings", &self.settings)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The network name of a UDN.
pub fn udn_network_name(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The network name of a CUDN.
pub fn cudn_network_name(name: &str) -> String {
    format!("cluster.udn.{name}")
}

impl Registry {
    /// An empty registry (the system clock for condition times).
    pub fn new(settings: Settings) -> Registry {
        Registry {
            settings,
            state: State {
                next_id: 1,
                ..State::default()
            },
            conditions: BTreeMap::new(),
            clock: Box::new(SystemTime::now),
        }
    }

    /// The same with another clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Registry {
        self.clock = clock;
        self
    }

    /// The settings it validates and plans with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Applies objects in order, all or nothing: every object is validated and checked
    /// against the registry (and the objects before it) first; on the first error
    /// nothing changes.
    pub fn apply(&mut self, objects: &[Object]) -> Result<Applied, Invalid> {
        let mut next = self.state.clone();
        let mut applied = Applied::default();
        for o in objects {
            next.apply_one(o, &self.settings, &mut applied)?;
        }
        self.state = next;
        self.refresh();
        Ok(applied)
    }

    /// Deletes an object: `name` is `namespace/name` for a UserDefinedNetwork. A
    /// network is refused while `in_use(network name)` pods use it. Deleting a
    /// Namespace forgets its labels; a UDN in it stays, not ready
    /// ([`REASON_NAMESPACE_NOT_FOUND`]).
    pub fn delete(
        &mut self,
        kind: Kind,
        name: &str,
        in_use: &dyn Fn(&str) -> usize,
    ) -> Result<(), Refused> {
        let refused = |message: String| Refused {
            object: format!("{kind} {name}"),
            message,
        };
        let network = match kind {
            Kind::Namespace => {
                if self.state.namespaces.remove(name).is_none() {
                    return Err(refused("not found".into()));
                }
                self.refresh();
                return Ok(());
            }
            Kind::UserDefinedNetwork => {
                let Some((ns, n)) = name.split_once('/') else {
                    return Err(refused(
                        "a UserDefinedNetwork is named namespace/name".into(),
                    ));
                };
                udn_network_name(ns, n)
            }
            Kind::ClusterUserDefinedNetwork => cudn_network_name(name),
        };
        match self.state.networks.get(&network) {
            Some(e) if e.kind == kind => {}
            _ => return Err(refused("not found".into())),
        }
        let pods = in_use(&network);
        if pods > 0 {
            return Err(refused(format!(
                "network {network:?} cannot be deleted because it is in use by {pods} pod{}",
                if pods == 1 { "" } else { "s" }
            )));
        }
        self.state.networks.remove(&network);
        self.refresh();
        Ok(())
    }

    fn resolve(&self) -> Resolution {
        self.state.resolve()
    }

    fn plan_of(&self, e: &Entry) -> Result<NodePlan, PlanError> {
        node_plan(&e.config, self.settings.node_index)
    }

    /// Recomputes every network's conditions; `lastTransitionTime` changes only when a
    /// condition's status does.
    fn refresh(&mut self) {
        let now = rfc3339((self.clock)());
        let res = self.resolve();
        let mut out = BTreeMap::new();
        for (name, e) in self.state.networks.iter() {
            let r = &res.per_network[name];
            let created = if let Some(first) = r.failures.first() {
                let messages: Vec<&str> = r.failures.iter().map(|f| f.message.as_str()).collect();
                ("False", first.reason.to_string(), messages.join("; "))
            } else {
                let message = match e.kind {
                    Kind::UserDefinedNetwork => format!(
                        "network {name:?} has been created in namespace {:?}",
                        e.namespace.as_deref().unwrap_or_default()
                    ),
                    _ => format!(
                        "network {name:?} has been created in following namespaces: {}",
                        ListDisplay(&r.active)
                    ),
                };
                ("True", REASON_CREATED.to_string(), message)
            };
            let allocated = match self.plan_of(e) {
                Ok(plan) => (
                    "True",
                    REASON_ALLOCATED.to_string(),
                    format!(
                        "Network allocation succeeded for this node (index {}): {}",
                        plan.node_index,
                        ListDisplay(
                            &plan
                                .subnets
                                .iter()
                                .map(|s| s.node_subnet)
                                .collect::<Vec<_>>()
                        )
                    ),
                ),
                Err(err) => ("False", REASON_ALLOCATION_FAILED.to_string(), err.0),
            };
            let old = self.conditions.get(name);
            let conditions = [
                (CONDITION_CREATED, created),
                (CONDITION_ALLOCATED, allocated),
            ]
            .into_iter()
            .map(|(type_, (status, reason, message))| {
                let time = old
                    .and_then(|o| o.iter().find(|c| c.type_ == type_))
                    .filter(|c| c.status == status)
                    .map(|c| c.last_transition_time.clone())
                    .unwrap_or_else(|| now.clone());
                Condition {
                    type_: type_.into(),
                    status: status.into(),
                    reason,
                    message,
                    last_transition_time: time,
                }
            })
            .collect();
            out.insert(name.clone(), conditions);
        }
        self.conditions = out;
    }

    /// Every network's status, ordered by id.
    pub fn status(&self) -> Vec<NetworkStatus> {
        let res = self.resolve();
        let mut out: Vec<NetworkStatus> = self
            .state
            .networks
            .iter()
            .map(|(name, e)| NetworkStatus {
                name: name.clone(),
                id: e.id,
                kind: e.kind,
                object: e.object.clone(),
                active_namespaces: res.per_network[name].active.clone(),
                conditions: self.conditions.get(name).cloned().unwrap_or_default(),
            })
            .collect();
        out.sort_by_key(|s| s.id);
        out
    }

    /// The namespace's primary network for a new pod: `Ok(None)` for the cluster
    /// default network (the namespace lacks [`PRIMARY_NETWORK_LABEL`], or is unknown);
    /// `Err(reason)` when the label is set but no primary network is ready there (the
    /// seed: "pod creation must fail until the UDN/CUDN is created"), or the network
    /// can't be allocated on this node.
    pub fn primary_network(&self, namespace: &str) -> Result<Option<NetworkRef>, String> {
        let Some(labels) = self.state.namespaces.get(namespace) else {
            return Ok(None);
        };
        if !labels.contains_key(PRIMARY_NETWORK_LABEL) {
            return Ok(None);
        }
        let res = self.resolve();
        let Some(name) = res.primary.get(namespace) else {
            return Err(format!(
                "namespace {namespace:?} has the label {PRIMARY_NETWORK_LABEL:?} but no primary UserDefinedNetwork or ClusterUserDefinedNetwork exists for it: pod creation fails until one is created"
            ));
        };
        let e = &self.state.networks[name];
        match self.plan_of(e) {
            Ok(_) => Ok(Some(NetworkRef {
                name: name.clone(),
                id: e.id,
            })),
            Err(err) => Err(format!(
                "the primary network {name:?} of namespace {namespace:?} is not allocated on this node: {err}"
            )),
        }
    }

    /// The networks ready on this node (active in a namespace, allocated), by id.
    pub fn networks(&self) -> Vec<Network> {
        let res = self.resolve();
        let mut out: Vec<Network> = self
            .state
            .networks
            .iter()
            .filter_map(|(name, e)| {
                let active = &res.per_network[name].active;
                if active.is_empty() {
                    return None;
                }
                let plan = self.plan_of(e).ok()?;
                Some(Network {
                    name: name.clone(),
                    id: e.id,
                    kind: e.kind,
                    object: e.object_display(),
                    config: e.config.clone(),
                    namespaces: active.clone(),
                    masquerade: e.masquerade,
                    plan,
                })
            })
            .collect();
        out.sort_by_key(|n| n.id);
        out
    }

    /// A network's id and masquerade addresses, ready or not.
    pub fn network_ids(&self) -> Vec<(NetworkRef, Masquerade)> {
        let mut v: Vec<_> = self
            .state
            .networks
            .iter()
            .map(|(name, e)| {
                (
                    NetworkRef {
                        name: name.clone(),
                        id: e.id,
                    },
                    e.masquerade,
                )
            })
            .collect();
        v.sort_by_key(|(r, _)| r.id);
        v
    }

    /// A namespace's labels, if it is known.
    pub fn namespace(&self, name: &str) -> Option<&Labels> {
        self.state.namespaces.get(name)
    }
}

impl State {
    fn targets(&self, e: &Entry, ns: &str, labels: &Labels) -> bool {
        match (&e.namespace, &e.selector) {
            (Some(n), _) => n == ns,
            (None, Some((_, sel))) => sel.matches(labels),
            (None, None) => false,
        }
    }

    fn resolve(&self) -> Resolution {
        let mut entries: Vec<(&String, &Entry)> = self.networks.iter().collect();
        entries.sort_by_key(|(_, e)| e.id);
        let mut per_network = BTreeMap::new();
        let mut primary: BTreeMap<String, String> = BTreeMap::new();
        for (name, e) in entries {
            let mut r = Resolved::default();
            let mut targets: Vec<(&String, &Labels)> = Vec::new();
            if let Some(ns) = &e.namespace {
                match self.namespaces.get_key_value(ns) {
                    Some(t) => targets.push(t),
                    None => r.failures.push(Failure {
                        namespace: ns.clone(),
                        reason: REASON_NAMESPACE_NOT_FOUND,
                        message: format!("namespace {ns:?} does not exist"),
                    }),
                }
            } else {
                targets.extend(
                    self.namespaces
                        .iter()
                        .filter(|(ns, labels)| self.targets(e, ns, labels)),
                );
            }
            for (ns, labels) in targets {
                if e.config.role == Role::Secondary {
                    r.active.push(ns.clone());
                } else if !labels.contains_key(PRIMARY_NETWORK_LABEL) {
                    r.failures.push(Failure {
                        namespace: ns.clone(),
                        reason: REASON_LABEL_MISSING,
                        message: format!(
                            "namespace {ns:?} does not have the label {PRIMARY_NETWORK_LABEL:?} required for a primary network: the network is not created there (pods attach to the default network)"
                        ),
                    });
                } else if let Some(first) = primary.get(ns.as_str()) {
                    r.failures.push(Failure {
                        namespace: ns.clone(),
                        reason: REASON_PRIMARY_EXISTS,
                        message: format!(
                            "primary network already exist in namespace {ns:?}: {first:?}"
                        ),
                    });
                } else {
                    primary.insert(ns.clone(), name.clone());
                    r.active.push(ns.clone());
                }
            }
            r.failures.sort_by(|a, b| a.namespace.cmp(&b.namespace));
            per_network.insert(name.clone(), r);
        }
        Resolution {
            per_network,
            primary,
        }
    }

    fn apply_one(
        &mut self,
        o: &Object,
        settings: &Settings,
        applied: &mut Applied,
    ) -> Result<(), Invalid> {
        match o {
            Object::UserDefinedNetwork(u) => {
                let config = validate_udn(u, settings)?;
                let name = udn_network_name(&u.namespace, &u.name);
                if let Some(e) = self.networks.get(&name) {
                    if e.config != config {
                        return Err(Invalid::new(
                            u.object(),
                            u.spec.paths.base.clone(),
                            "Spec is immutable",
                        ));
                    }
                    applied.unchanged.push(name);
                    return Ok(());
                }
                let entry = self.new_entry(
                    Kind::UserDefinedNetwork,
                    format!("{}/{}", u.namespace, u.name),
                    Some(u.namespace.clone()),
                    None,
                    config,
                    settings,
                )?;
                applied.created.push(NetworkRef {
                    name: name.clone(),
                    id: entry.id,
                });
                self.networks.insert(name, entry);
            }
            Object::ClusterUserDefinedNetwork(c) => {
                let (selector, config) = validate_cudn(c, settings)?;
                let name = cudn_network_name(&c.name);
                if let Some(e) = self.networks.get_mut(&name) {
                    if e.config != config {
                        return Err(Invalid::new(
                            c.object(),
                            c.spec.paths.base.clone(),
                            "Spec is immutable",
                        ));
                    }
                    if e.selector.as_ref().map(|(s, _)| s) != Some(&c.namespace_selector) {
                        e.selector = Some((c.namespace_selector.clone(), selector));
                        applied.reselected.push(name);
                    } else {
                        applied.unchanged.push(name);
                    }
                    return Ok(());
                }
                let entry = self.new_entry(
                    Kind::ClusterUserDefinedNetwork,
                    c.name.clone(),
                    None,
                    Some((c.namespace_selector.clone(), selector)),
                    config,
                    settings,
                )?;
                applied.created.push(NetworkRef {
                    name: name.clone(),
                    id: entry.id,
                });
                self.networks.insert(name, entry);
            }
            Object::Namespace(n) => {
                self.apply_namespace(n)?;
                applied.namespaces.push(n.name.clone());
            }
            Object::Ignored { kind, name } => applied.ignored.push(format!("{kind} {name}")),
        }
        Ok(())
    }

    fn apply_namespace(&mut self, n: &Namespace) -> Result<(), Invalid> {
        let object = format!("Namespace {}", n.name);
        check_name(&object, "metadata.name", &n.name)?;
        if let Some(old) = self.namespaces.get(&n.name) {
            let had = old.contains_key(PRIMARY_NETWORK_LABEL);
            let has = n.labels.contains_key(PRIMARY_NETWORK_LABEL);
            if had != has {
                let selected_by = self.networks.iter().find(|(_, e)| {
                    self.targets(e, &n.name, old) || self.targets(e, &n.name, &n.labels)
                });
                if let Some((net, _)) = selected_by {
                    return Err(Invalid::new(
                        object,
                        format!("metadata.labels.{PRIMARY_NETWORK_LABEL}"),
                        format!("{LABEL_IMMUTABLE} (network {net:?} selects it)"),
                    ));
                }
            }
        }
        self.namespaces.insert(n.name.clone(), n.labels.clone());
        Ok(())
    }

    fn new_entry(
        &mut self,
        kind: Kind,
        object: String,
        namespace: Option<String>,
        selector: Option<(LabelSelector, Selector)>,
        config: NetworkConfig,
        settings: &Settings,
    ) -> Result<Entry, Invalid> {
        let display = format!("{kind} {object}");
        let Ok(id) = u16::try_from(self.next_id) else {
            return Err(Invalid::new(
                display,
                "metadata.name",
                "no network ids left: 65535 networks were created since the agent started (ids are never reused); restart it",
            ));
        };
        let mut slot = 1;
        while self.networks.values().any(|e| e.slot == slot) {
            slot += 1;
        }
        let masquerade = masquerade_pair(settings, slot)
            .map_err(|(field, message)| Invalid::new(&display, field, message))?;
        self.next_id += 1;
        Ok(Entry {
            id,
            kind,
            object,
            namespace,
            selector,
            config,
            slot,
            masquerade,
        })
    }
}

/// The masquerade addresses of slot `slot` (see the [module](self) documentation).
fn masquerade_pair(settings: &Settings, slot: u32) -> Result<Masquerade, (String, String)> {
    let offset = 2 * u128::from(slot) + 6;
    let v4 = settings.masquerade_subnet_v4.network();
    let (first, last) = range(&ferrule_dataplane::wire::IpCidr::V4(v4));
    // The last IPv4 address is the broadcast address.
    if first + offset + 1 >= last {
        return Err((
            "settings.masquerade_subnet_v4".into(),
            format!(
                "the masquerade subnet {v4} has no addresses left for another network ({} networks use it): configure a larger one",
                slot - 1
            ),
        ));
    }
    let v6 = settings.masquerade_subnet_v6.network();
    let (first6, last6) = range(&ferrule_dataplane::wire::IpCidr::V6(v6));
    let fits = matches!(first6.checked_add(offset + 1), Some(a) if a <= last6);
    if !fits {
        return Err((
            "settings.masquerade_subnet_v6".into(),
            format!(
                "the masquerade subnet {v6} has no addresses left for another network ({} networks use it): configure a larger one",
                slot - 1
            ),
        ));
    }
    let a4 = |o: u128| Ipv4Addr::from_bits((first + o) as u32);
    let a6 = |o: u128| Ipv6Addr::from_bits(first6 + o);
    Ok(Masquerade {
        v4: [a4(offset), a4(offset + 1)],
        v6: [a6(offset), a6(offset + 1)],
    })
}

/// `2025-05-13T18:01:05Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn rfc3339_dates() {
        let at = |s| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_747_159_265), "2025-05-13T18:01:05Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
