//! Worker and port counters: one writer (the owning worker), many readers (the control
//! thread). Updates are plain relaxed load/store pairs — no locked instructions on the
//! fast path — and each worker's block sits on its own cache lines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Most ports one daemon drives (DPDK's `RTE_MAX_ETHPORTS` in Debian's build).
pub const MAX_PORTS: usize = 32;

/// Declares the drop reasons once: each variant with its counter slot (declaration
/// order), its name in counters, logs, traces and the control API, and the short
/// description `ferrulectl stats` prints.
macro_rules! drop_reasons {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal, $description:literal;)*) => {
        /// Why a packet was dropped. Every drop in the dataplane has one; each is a counter
        /// per worker and is shown by `ferrulectl stats`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl DropReason {
            /// Number of reasons (the length of the per-worker drop array).
            pub const COUNT: usize = [$($name,)*].len();

            /// All reasons, in counter order.
            pub const ALL: [DropReason; Self::COUNT] = [$(DropReason::$variant,)*];

            /// The name used in counters, logs, traces and the control API.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $name,)*
                }
            }

            /// What the reason means, in a few words (`ferrulectl stats`).
            pub const fn description(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $description,)*
                }
            }
        }
    };
}

drop_reasons! {
    /// Headers that do not parse: truncated, bad lengths, bad IPv4 header checksum.
    Malformed => "malformed", "frame could not be parsed";
    /// A unicast frame for a MAC that is not the input port's.
    DstMacMismatch => "dst-mac-mismatch", "destination MAC is not the port's";
    /// An 802.1Q/QinQ-tagged frame (ports are untagged).
    VlanTagged => "vlan-tagged", "frame has a VLAN tag";
    /// Neither IPv4, IPv6 nor ARP.
    NotIp => "not-ip", "neither IPv4, IPv6 nor ARP";
    /// ARP or neighbour solicitation not for one of Ferrule's addresses.
    ArpIgnored => "arp-ignored", "ARP/ND not for an own address";
    /// TTL or hop limit exhausted (an ICMP time exceeded went back).
    TtlExceeded => "ttl-exceeded", "TTL or hop limit ran out";
    /// No route to the destination in the input port's network (an ICMP destination
    /// unreachable went back when allowed).
    NoRoute => "no-route", "no route to the destination";
    /// The destination matched a blackhole route.
    Blackhole => "blackhole", "blackhole route";
    /// The next hop's MAC could not be resolved.
    NoNeighbour => "no-neighbour", "next hop's MAC unknown";
    /// Larger than the output port's MTU (an ICMP error went back when allowed).
    MtuExceeded => "mtu-exceeded", "larger than the output port's MTU";
    /// The output port's link is down.
    PortDown => "port-down", "output port's link is down";
    /// The output port's transmit queue was full.
    TxFull => "tx-full", "transmit queue full";
    /// For one of Ferrule's addresses, but not something it answers (only ARP, ND and
    /// echo are).
    LocalUnhandled => "local-unhandled", "to an own address, not answered";
    /// The queue to the control thread was full.
    PuntFull => "punt-full", "control-thread queue full";
    /// Denied by an ACL rule, or matched no rule of an attached ACL table.
    AclDeny => "acl-deny", "denied by an ACL";
    /// Not valid in its connection's state (e.g. a TCP RST outside the window).
    CtInvalid => "ct-invalid", "invalid in its connection's state";
    /// A new connection found the connection table (or its zone's share) full.
    CtTableFull => "ct-table-full", "connection table full";
    /// No SNAT port was free for a new masqueraded connection.
    SnatPortsExhausted => "snat-ports-exhausted", "no free SNAT port";
    /// The queue to the worker that owns the packet's connection was full.
    HandoffFull => "handoff-full", "queue to the owning worker full";
    /// Received on a pod port from a source MAC that is not the pod's (`pod_mac`).
    SpoofedSrcMac => "spoofed-src-mac", "source MAC is not the pod's";
    /// Received on a pod port from a source IP that is not one of the pod's addresses
    /// (its pod IPs, `allowed_addresses`, link-local for on-link IPv6).
    SpoofedSrcIp => "spoofed-src-ip", "source IP is not the pod's";
    /// ARP from a pod whose sender MAC or IP is not the pod's.
    SpoofedArp => "spoofed-arp", "ARP sender is not the pod";
    /// A neighbour solicitation or advertisement from a pod whose link-layer address
    /// option or advertised target is not the pod's.
    SpoofedNd => "spoofed-nd", "ND for an address or MAC not the pod's";
    /// Routed by an `Isolated` next hop: the destination is in another network (a
    /// user-defined network's route to the default network's cluster, service or join
    /// subnets).
    NetworkIsolation => "network-isolation", "destination is in another network";
    /// Routed to a port of another network than the packet's, other than a user-defined
    /// network's masqueraded egress through an uplink of the default network.
    NetworkCrossing => "network-crossing", "route would cross into another network";
    /// From or to a locked port (the default-network interface of a pod whose primary
    /// network is user-defined) and neither a probe from a host port nor to or from
    /// the `locked_allow` addresses (the Kubernetes API and DNS).
    DefaultNetworkLocked => "default-network-locked", "a primary-UDN pod's default-network interface: only probes and KAPI/DNS";
    /// A switched frame with nowhere to go: its destination MAC is behind the port it
    /// came from, or its segment has no other member to flood it to.
    SwitchNoOutput => "switch-no-output", "switched frame has no other port";
}

impl DropReason {
    /// The reason named `name` (as [`DropReason::name`] spells it).
    pub fn from_name(name: &str) -> Option<DropReason> {
        DropReason::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker may call this (single writer), which is why a
    /// load/store pair is enough and no atomic read-modify-write is needed.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }

    /// Current value, for readers.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Resets to zero (only the owner, or while the owner is stopped).
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Per-port counters kept by one worker.
#[derive(Debug, Default)]
pub struct PortCounters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
    /// Packets received on this port and dropped (any reason).
    pub drops: Counter,
}

/// A plain copy of [`PortCounters`], summed over workers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortTotals {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub drops: u64,
}

impl PortTotals {
    /// These counts minus `base` (what a reused port slot had counted before).
    pub fn since(&self, base: &PortTotals) -> PortTotals {
        PortTotals {
            rx_packets: self.rx_packets.wrapping_sub(base.rx_packets),
            rx_bytes: self.rx_bytes.wrapping_sub(base.rx_bytes),
            tx_packets: self.tx_packets.wrapping_sub(base.tx_packets),
            tx_bytes: self.tx_bytes.wrapping_sub(base.tx_bytes),
            drops: self.drops.wrapping_sub(base.drops),
        }
    }

    /// Adds one worker's counters.
    pub fn accumulate(&mut self, c: &PortCounters) {
        self.rx_packets += c.rx_packets.get();
        self.rx_bytes += c.rx_bytes.get();
        self.tx_packets += c.tx_packets.get();
        self.tx_bytes += c.tx_bytes.get();
        self.drops += c.drops.get();
    }
}

/// Everything one worker counts. Allocate one per worker (`Box`/`Arc`); the alignment
/// keeps two workers' blocks off each other's cache lines.
#[derive(Debug)]
#[repr(align(128))]
pub struct WorkerCounters {
    /// Poll-loop iterations.
    pub polls: Counter,
    /// Iterations that received at least one packet.
    pub busy_polls: Counter,
    pub rx_packets: Counter,
    pub tx_packets: Counter,
    /// Replies Ferrule answered itself (ARP, neighbour advertisements, echo).
    pub local_replies: Counter,
    /// ICMP errors sent (time exceeded, fragmentation needed, packet too big).
    pub icmp_errors: Counter,
    /// Packets handed to the control thread (to learn from, or held for resolution).
    pub punts: Counter,
    /// Packets handed to the worker that owns their connection.
    pub handoffs: Counter,
    /// Frames switched on a layer-2 segment to one port (known destination MAC).
    pub switched: Counter,
    /// Frames flooded on a layer-2 segment (broadcast, multicast, unknown unicast).
    pub flooded: Counter,
    /// The frames staged for them: one per other member of the segment (the original
    /// for the last, copies for the others).
    pub flood_copies: Counter,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [Counter; DropReason::COUNT],
    /// Per-port counters, indexed by the port's index in the configuration.
    pub ports: [PortCounters; MAX_PORTS],
    /// ACL rule hits, by counter slot.
    pub acl: RuleCounters,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            polls: Counter::default(),
            busy_polls: Counter::default(),
            rx_packets: Counter::default(),
            tx_packets: Counter::default(),
            local_replies: Counter::default(),
            icmp_errors: Counter::default(),
            punts: Counter::default(),
            handoffs: Counter::default(),
            switched: Counter::default(),
            flooded: Counter::default(),
            flood_copies: Counter::default(),
            drops: Default::default(),
            ports: std::array::from_fn(|_| PortCounters::default()),
            acl: RuleCounters::default(),
        }
    }
}

impl WorkerCounters {
    /// Counts `n` packets dropped for `reason` that were received on port `rx_port`.
    #[inline(always)]
    pub fn drop_packets(&self, reason: DropReason, rx_port: usize, n: u64) {
        self.drops[reason as usize].add(n);
        self.ports[rx_port].drops.add(n);
    }

    /// Total drops over all reasons.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }

    /// Non-zero drop counters, by reason.
    pub fn drop_reasons(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .into_iter()
            .map(|r| (r, self.drops[r as usize].get()))
            .filter(|&(_, n)| n > 0)
    }
}

/// Counter slots per chunk of [`RuleCounters`].
pub const RULE_CHUNK: usize = 1024;
/// Chunks of [`RuleCounters`]: at most `RULE_CHUNK * RULE_CHUNKS` slots (rules plus one
/// no-match slot per table) exist at once.
pub const RULE_CHUNKS: usize = 1024;

/// Packets and bytes that hit one ACL rule.
#[derive(Debug, Default)]
pub struct RuleCounter {
    pub packets: Counter,
    pub bytes: Counter,
}

/// One worker's ACL hit counters, by slot. The control thread gives every rule a slot
/// and makes sure its chunk exists ([`RuleCounters::reserve`]) before publishing a
/// generation that uses it; workers then only count into existing chunks. Slots are
/// never zeroed: readers subtract a baseline, so a worker is never written to by
/// anyone else.
#[derive(Debug)]
pub struct RuleCounters {
    chunks: Box<[OnceLock<Box<[RuleCounter]>>]>,
}

impl Default for RuleCounters {
    fn default() -> Self {
        RuleCounters {
            chunks: (0..RULE_CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl RuleCounters {
    /// Most slots.
    pub const CAPACITY: usize = RULE_CHUNK * RULE_CHUNKS;

    /// Allocates the chunk holding `slot` (control thread). False when out of range.
    pub fn reserve(&self, slot: u32) -> bool {
        let Some(chunk) = self.chunks.get(slot as usize / RULE_CHUNK) else {
            return false;
        };
        chunk.get_or_init(|| (0..RULE_CHUNK).map(|_| RuleCounter::default()).collect());
        true
    }

    /// Counts one packet of `bytes` bytes on `slot` (the owning worker only).
    #[inline(always)]
    pub fn hit(&self, slot: u32, bytes: u64) {
        let slot = slot as usize;
        if let Some(c) = self
            .chunks
            .get(slot / RULE_CHUNK)
            .and_then(OnceLock::get)
            .and_then(|chunk| chunk.get(slot % RULE_CHUNK))
        {
            c.packets.add(1);
            c.bytes.add(bytes);
        }
    }

    /// Packets and bytes counted on `slot` since the worker started.
    pub fn get(&self, slot: u32) -> (u64, u64) {
        let slot = slot as usize;
        self.chunks
            .get(slot / RULE_CHUNK)
            .and_then(OnceLock::get)
            .and_then(|chunk| chunk.get(slot % RULE_CHUNK))
            .map_or((0, 0), |c| (c.packets.get(), c.bytes.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_indexed_in_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let names: std::collections::HashSet<_> =
            DropReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    #[test]
    fn counts_and_sums() {
        let w = WorkerCounters::default();
        w.drop_packets(DropReason::TxFull, 3, 5);
        w.drop_packets(DropReason::PortDown, 3, 2);
        w.ports[3].rx_packets.add(10);
        assert_eq!(w.total_drops(), 7);
        assert_eq!(
            w.drop_reasons().collect::<Vec<_>>(),
            vec![(DropReason::PortDown, 2), (DropReason::TxFull, 5)]
        );
        let mut t = PortTotals::default();
        t.accumulate(&w.ports[3]);
        t.accumulate(&w.ports[3]);
        assert_eq!(t.rx_packets, 20);
        assert_eq!(t.drops, 14);
        assert_eq!(std::mem::align_of::<WorkerCounters>(), 128);
    }

    #[test]
    fn rule_hits_count_only_in_reserved_chunks() {
        let r = RuleCounters::default();
        r.hit(5, 100);
        assert_eq!(r.get(5), (0, 0), "no chunk yet: nothing to count into");
        assert!(r.reserve(5));
        r.hit(5, 100);
        r.hit(5, 60);
        assert_eq!(r.get(5), (2, 160));
        assert_eq!(r.get(6), (0, 0));
        let last = (RuleCounters::CAPACITY - 1) as u32;
        assert!(r.reserve(last) && !r.reserve(last + 1));
        r.hit(last, 1);
        r.hit(last + 1, 1);
        assert_eq!(r.get(last), (1, 1));
    }
}
