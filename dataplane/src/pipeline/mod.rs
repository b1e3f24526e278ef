//! The packet pipeline: the path every received packet takes, as pure functions over
//! a frame's bytes and the current [`Snapshot`]. The worker runs [`process_burst`] over
//! each received burst, stage by stage, then groups the results by action;
//! `ferrulectl trace` runs the same code on one synthetic packet ([`process`]) with a
//! recording [`Tracer`].
//!
//! Each stage is a module and a function over the burst's context ([`Burst`]), in this
//! order: [`l2`] (parse, destination MAC, [`port_security`] on pod ports: the pod's
//! MAC and addresses as source; ARP) → [`ct`] lookup (the connection: owner worker,
//! lookup, replies translated back) → [`ttl`] (local: ARP, ND, echo for
//! Ferrule's own addresses; then ttl) → [`acl`] ingress (the input port's table) →
//! [`dns`] (queries of ports under DNS policy to the DNS proxy) →
//! [`route`] (per-network LPM) → [`acl`] egress (the output port's table, then the
//! global table on uplinks) → [`mtu`] → [`ct`] commit (new connections, masquerade) →
//! [`neighbor`] (neighbour and rewrite) → [`ct`] close (connections the changed ACLs
//! deny). The ct stages run when the caller passes its
//! [`Conntrack`](crate::conntrack::Conntrack) and there is something to track. When
//! there is nothing but routing to apply, [`fast`] takes the plain IPv4 packets from
//! parse to rewrite in two passes of its own, in place of l2, and leaves the rest to
//! the stages; when there is also conntrack (a node that masquerades its pods),
//! [`established`] does the same for the burst's leading packets of established
//! connections, lookup, tracking and translation included.

pub mod acl;
pub mod burst;
pub mod ct;
pub mod dns;
pub mod established;
pub mod fast;
pub mod icmp_error;
pub mod l2;
pub mod local;
pub mod mtu;
pub mod neighbor;
pub mod parse;
pub mod port_security;
pub mod route;
pub mod switch;
pub mod synth;
pub mod ttl;

use crate::conntrack::Conntrack;
use crate::counters::DropReason;
use crate::snapshot::Snapshot;
use std::fmt;
use std::net::IpAddr;

pub use acl::AclHit;
pub use burst::{Burst, Scratch};
pub use neighbor::rewrite;
pub use parse::{parse, Parsed};

/// Why a packet goes to the control thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Punt {
    /// An ARP reply or neighbour advertisement to learn from.
    Learn,
    /// The next hop `ip` on `port` has no resolved MAC yet: hold the packet while the
    /// control thread resolves it, then send it.
    Resolve { network: u16, ip: IpAddr, port: u16 },
    /// DNS (a UDP query or a TCP segment) from a port under DNS policy to a DNS
    /// service address: for the DNS proxy ([`dns`]).
    Dns,
}

/// Which ICMP error to send back to a packet's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpErrorKind {
    /// TTL or hop limit exhausted (ICMP type 11 / ICMPv6 type 3).
    TimeExceeded,
    /// IPv4 with DF set, larger than the output MTU (type 3 code 4).
    FragNeeded { mtu: u16 },
    /// IPv6 larger than the output MTU (ICMPv6 type 2).
    PacketTooBig { mtu: u16 },
    /// No route to the destination (ICMP type 3 code 0 / ICMPv6 type 1 code 0).
    NoRoute,
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rewritten in place; send out of this port (configuration index).
    Forward { port: u16 },
    /// Rewritten in place into a reply; send back out of the input port.
    Reply,
    /// Drop it for `reason` and send this ICMP error to its source.
    IcmpError {
        kind: IcmpErrorKind,
        reason: DropReason,
    },
    /// Hand it to the control thread.
    Punt(Punt),
    /// Hand it to the worker that owns its connection, to run the pipeline there.
    Handoff { worker: u16 },
    /// Drop it.
    Drop(DropReason),
    /// Switched on a layer-2 segment ([`switch`]): sent unchanged out of `port`, but
    /// for its 802.1Q tag: removed first when `untag` (it arrived tagged), then one
    /// with VLAN `vlan` added unless it is [`NO_VLAN`](crate::switching::NO_VLAN).
    Switch { port: u16, vlan: u16, untag: bool },
    /// Flooded ([`switch`]): a copy to every member of `segment` but the one it came
    /// from (the input port with VLAN `in_vlan`), each tagged as its member wants;
    /// its tag removed first when `untag`; when `acl`, a copy only where the target
    /// port's egress table permits it ([`switch::flood_permits`]).
    Flood {
        segment: u16,
        in_vlan: u16,
        untag: bool,
        acl: bool,
    },
}

/// A pipeline stage, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Parse,
    L2,
    PortSecurity,
    Conntrack,
    Local,
    Ttl,
    Acl,
    Dns,
    Route,
    Nat,
    Mtu,
    Neighbor,
    Rewrite,
    Switch,
}

impl Stage {
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Parse => "parse",
            Stage::L2 => "l2",
            Stage::PortSecurity => "port-security",
            Stage::Conntrack => "ct",
            Stage::Local => "local",
            Stage::Ttl => "ttl",
            Stage::Acl => "acl",
            Stage::Dns => "dns",
            Stage::Route => "route",
            Stage::Nat => "nat",
            Stage::Mtu => "mtu",
            Stage::Neighbor => "neighbor",
            Stage::Rewrite => "rewrite",
            Stage::Switch => "switch",
        }
    }
}

/// Receives each stage's decision. The fast path uses [`NoTrace`], which compiles to
/// nothing; traces use [`Recorder`].
pub trait Tracer {
    const ENABLED: bool;
    fn stage(&mut self, stage: Stage, detail: fmt::Arguments<'_>);
}

/// The fast path's tracer: records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTrace;

impl Tracer for NoTrace {
    const ENABLED: bool = false;
    #[inline(always)]
    fn stage(&mut self, _: Stage, _: fmt::Arguments<'_>) {}
}

/// Records every stage's decision as text (control thread only: it allocates).
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    pub stages: Vec<(Stage, String)>,
}

impl Tracer for Recorder {
    const ENABLED: bool = true;
    fn stage(&mut self, stage: Stage, detail: fmt::Arguments<'_>) {
        self.stages.push((stage, detail.to_string()));
    }
}

/// Records a stage's decision when tracing; costs nothing otherwise.
macro_rules! trace {
    ($t:expr, $stage:expr, $($arg:tt)*) => {
        if T::ENABLED {
            $t.stage($stage, format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;

/// Most packets one call of [`process_burst`] handles.
pub const MAX_BURST: usize = 256;

/// A burst of frames the pipeline can read and rewrite in place: the worker's mbuf
/// burst, or plain buffers in tests, benchmarks and traces.
pub trait Frames {
    fn count(&self) -> usize;
    fn frame(&self, i: usize) -> &[u8];
    fn frame_mut(&mut self, i: usize) -> &mut [u8];
    /// Hints that frame `i` will be read soon (no-op by default and out of range).
    #[inline(always)]
    fn prefetch(&self, _i: usize) {}
}

impl Frames for [Vec<u8>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i]
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self[i]
    }
}

/// One frame as a burst of one (traces).
impl Frames for &mut [u8] {
    fn count(&self) -> usize {
        1
    }
    fn frame(&self, _: usize) -> &[u8] {
        self
    }
    fn frame_mut(&mut self, _: usize) -> &mut [u8] {
        self
    }
}

/// Runs one received frame through the pipeline (a burst of one). `frame` is rewritten
/// in place for `Forward` and `Reply`; for every other action it is left as received
/// (so a punted or traced packet is still the original).
pub fn process<T: Tracer>(snap: &Snapshot, in_port: u16, frame: &mut [u8], t: &mut T) -> Action {
    process_ct(snap, in_port, frame, None, t)
}

/// [`process`] with connection tracking.
pub fn process_ct<T: Tracer>(
    snap: &Snapshot,
    in_port: u16,
    frame: &mut [u8],
    ct: Option<&mut Conntrack>,
    t: &mut T,
) -> Action {
    let mut scratch = Scratch::default();
    let mut actions = [Action::Drop(DropReason::Malformed)];
    let mut one: &mut [u8] = frame;
    process_burst(snap, in_port, &mut one, &mut actions, &mut scratch, ct, t);
    actions[0]
}

/// Runs a burst received on `in_port` through the pipeline, stage by stage, each over
/// the whole burst (see the module's documentation for the order). `actions[i]`
/// receives the verdict of frame `i`.
pub fn process_burst<F: Frames + ?Sized, T: Tracer>(
    snap: &Snapshot,
    in_port: u16,
    frames: &mut F,
    actions: &mut [Action],
    s: &mut Scratch,
    ct: Option<&mut Conntrack>,
    t: &mut T,
) {
    let Some(mut b) = Burst::new(snap, in_port, frames, actions, s, ct, t) else {
        return;
    };
    if fast::applies(&b) {
        fast::stage(&mut b);
    } else if established::applies(&b) {
        established::stage(&mut b);
    } else {
        l2::stage(&mut b);
    }
    ct::lookup(&mut b);
    ttl::stage(&mut b);
    acl::ingress(&mut b);
    dns::stage(&mut b);
    route::stage(&mut b);
    acl::egress(&mut b);
    mtu::stage(&mut b);
    ct::commit(&mut b);
    neighbor::stage(&mut b);
    ct::close_denied(&mut b);
}

/// The name of network `network`, for traces.
fn net_name(snap: &Snapshot, network: u16) -> &str {
    snap.networks
        .get(usize::from(network))
        .map(|n| n.name.as_str())
        .unwrap_or("?")
}
