//! The MAC tables (FDB) of the layer-2 segments: the control thread's master copy.
//!
//! The workers switch frames by the table published in the snapshot
//! ([`Snapshot::switching`], built by [`Fdb::switching`]) and report what they see and
//! the table does not have: a source MAC unknown in its segment, or known behind
//! another member ([`LearnEvent`], queued in `worker::Shared`, drained with
//! [`Shared::pop_fdb_learn`](ferrule_dataplane::worker::Shared::pop_fdb_learn)). This
//! table learns them ([`Fdb::learn`]), keeps the pods' own MACs as static entries
//! (seeded from `pod_mac` by [`Fdb::set_segments`]), and ages learned entries out
//! ([`Fdb::age`]) when nothing was seen from them for the ageing time (300 s by
//! default, like a Linux bridge). "Seen" is the later of when it was learned and the
//! stamp the workers refresh in the shared [`FdbAges`] (one slot per learned entry; the
//! clock there is this table's, in seconds since it was created).
//!
//! Time is passed in (`now: Instant`) by every call that needs it, so tests run the
//! clock forward without sleeping.
//!
//! The daemon's part (see the module's hooks in `docs/pipeline.md`, "Layer-2 segments"):
//! build the segments from its networks and call [`Fdb::set_segments`] when ports or
//! networks change; at every tick, [`Fdb::learn_all`] with the drained events and
//! [`Fdb::age`]; when either returns true, publish a snapshot whose `switching` is
//! [`Fdb::switching`]; answer `fdb show` with [`Fdb::dump`].

use ferrule_dataplane::snapshot::{PortRole, PortState, Snapshot};
use ferrule_dataplane::switching::{
    FdbAges, FdbHit, LearnEvent, Member, Segment, Switching, NO_SLOT, NO_VLAN,
};
use ferrule_dataplane::wire::EthernetAddress;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a learned entry lives without a frame from it (Linux bridges' default).
pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);

/// Learned entries the node keeps at most (static entries do not count).
pub const DEFAULT_CAPACITY: usize = 16_384;

/// Where an entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A pod's own MAC (`pod_mac`): never aged, never moved by learning.
    Static,
    /// Learned from a frame's source.
    Learned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    member: Member,
    kind: EntryKind,
    /// The stamp slot of a learned entry (`NO_SLOT` for a static one).
    slot: u32,
    /// When it was learned or last moved, in the table's seconds.
    since: u32,
}

/// One row of `fdb show`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FdbRow {
    /// The segment's network.
    pub network: String,
    pub mac: String,
    /// The port the MAC is behind.
    pub port: String,
    /// The VLAN it is on there (`None`: untagged).
    pub vlan: Option<u16>,
    /// Seconds since a frame from it was last seen (`None` for a static entry).
    pub age: Option<u64>,
    pub kind: EntryKind,
}

/// The FDB of every segment.
#[derive(Debug)]
pub struct Fdb {
    origin: Instant,
    ageing: Duration,
    segments: Vec<Segment>,
    /// (segment, MAC) → entry.
    entries: BTreeMap<(u16, [u8; 6]), Entry>,
    ages: Arc<FdbAges>,
    /// Stamp slots free for learned entries.
    free: Vec<u32>,
    /// The second of the last ageing scan.
    last_scan: Option<u32>,
    /// Learn events refused because the table was full.
    pub refused: u64,
}

impl Fdb {
    /// An empty table (no segment) whose clock starts at `now`, room for `capacity`
    /// learned entries, aged after `ageing`.
    pub fn new(ageing: Duration, capacity: usize, now: Instant) -> Fdb {
        Fdb {
            origin: now,
            ageing,
            segments: Vec::new(),
            entries: BTreeMap::new(),
            ages: Arc::new(FdbAges::new(capacity)),
            free: (0..capacity as u32).rev().collect(),
            last_scan: None,
            refused: 0,
        }
    }

    pub fn ageing(&self) -> Duration {
        self.ageing
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Entries (static and learned).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table's clock at `now`, in seconds (also what the workers stamp).
    fn secs(&self, now: Instant) -> u32 {
        u32::try_from(now.saturating_duration_since(self.origin).as_secs()).unwrap_or(u32::MAX)
    }

    /// Replaces the segments (after networks or ports changed; `ports` is the snapshot's
    /// port table, indexed like the members). Entries of a segment that is gone, or
    /// behind a member its segment no longer has, are removed (segments are matched by
    /// name, so renumbering keeps them); every pod port member's `pod_mac` becomes a
    /// static entry (replacing a learned one). Returns whether the table changed.
    pub fn set_segments(&mut self, segments: Vec<Segment>, ports: &[PortState]) -> bool {
        let renumber: Vec<Option<u16>> = self
            .segments
            .iter()
            .map(|old| {
                segments
                    .iter()
                    .position(|s| s.name == old.name)
                    .map(|i| i as u16)
            })
            .collect();
        let old = std::mem::take(&mut self.entries);
        let before = old.clone();
        let mut changed = segments != self.segments;
        self.segments = segments;
        for ((seg, mac), e) in old {
            let new_seg = renumber.get(usize::from(seg)).copied().flatten();
            let keep = new_seg.filter(|&s| {
                e.kind == EntryKind::Learned
                    && self.segments[usize::from(s)].members.contains(&e.member)
            });
            match keep {
                Some(s) => {
                    self.entries.insert((s, mac), e);
                }
                None => self.release(e),
            }
        }
        for (s, seg) in self.segments.iter().enumerate() {
            for &member in &seg.members {
                let Some(port) = ports.get(usize::from(member.port)) else {
                    continue;
                };
                let Some(mac) = port.pod_mac.filter(|_| port.role == PortRole::Pod) else {
                    continue;
                };
                let entry = Entry {
                    member,
                    kind: EntryKind::Static,
                    slot: NO_SLOT,
                    since: 0,
                };
                if let Some(old) = self.entries.insert((s as u16, mac.0), entry) {
                    if old.slot != NO_SLOT {
                        self.free.push(old.slot);
                    }
                }
            }
        }
        changed |= self.entries != before;
        changed
    }

    fn release(&mut self, e: Entry) {
        if e.slot != NO_SLOT {
            self.free.push(e.slot);
        }
    }

    /// Learns what a worker reported at `now`: a new entry, or a learned one moved to
    /// the event's member. Ignored: an unknown segment, a member not in it, a static
    /// entry's MAC (a pod's MAC is where its port is), a multicast MAC; refused (and
    /// counted in `refused`) when the table is full. Returns whether the table changed.
    pub fn learn(&mut self, ev: LearnEvent, now: Instant) -> bool {
        let secs = self.secs(now);
        self.ages.set_now(secs);
        let Some(seg) = self.segments.get(usize::from(ev.segment)) else {
            return false;
        };
        if !seg.members.contains(&ev.member) || ev.mac.is_multicast() {
            return false;
        }
        match self.entries.get_mut(&(ev.segment, ev.mac.0)) {
            Some(e) if e.kind == EntryKind::Static => false,
            Some(e) if e.member == ev.member => {
                // Reported before the snapshot with it reached the worker.
                self.ages.set_stamp(e.slot, secs);
                false
            }
            Some(e) => {
                e.member = ev.member;
                e.since = secs;
                self.ages.set_stamp(e.slot, secs);
                true
            }
            None => {
                let Some(slot) = self.free.pop() else {
                    self.refused += 1;
                    return false;
                };
                self.ages.set_stamp(slot, secs);
                self.entries.insert(
                    (ev.segment, ev.mac.0),
                    Entry {
                        member: ev.member,
                        kind: EntryKind::Learned,
                        slot,
                        since: secs,
                    },
                );
                true
            }
        }
    }

    /// [`Fdb::learn`] of every event (the daemon's tick drains the workers' queue into
    /// it: `fdb.learn_all(std::iter::from_fn(|| shared.pop_fdb_learn()), now)`).
    pub fn learn_all(
        &mut self,
        events: impl IntoIterator<Item = LearnEvent>,
        now: Instant,
    ) -> bool {
        let mut changed = false;
        for ev in events {
            changed |= self.learn(ev, now);
        }
        changed
    }

    /// Advances the workers' clock to `now` and, once per second, removes the learned
    /// entries nothing was seen from for longer than the ageing time. Returns whether
    /// the table changed.
    pub fn age(&mut self, now: Instant) -> bool {
        let secs = self.secs(now);
        self.ages.set_now(secs);
        if self.last_scan == Some(secs) {
            return false;
        }
        self.last_scan = Some(secs);
        let limit = self.ageing.as_secs();
        let ages = Arc::clone(&self.ages);
        let mut gone = Vec::new();
        self.entries.retain(|_, e| {
            if e.kind == EntryKind::Static {
                return true;
            }
            let seen = e.since.max(ages.stamp(e.slot));
            let keep = u64::from(secs.saturating_sub(seen)) <= limit;
            if !keep {
                gone.push(e.slot);
            }
            keep
        });
        let changed = !gone.is_empty();
        self.free.extend(gone);
        changed
    }

    /// Removes every entry behind port `port` (a port going away; `set_segments` does it
    /// too). Returns whether the table changed.
    pub fn remove_port(&mut self, port: u16) -> bool {
        let before = self.entries.len();
        let mut gone = Vec::new();
        self.entries.retain(|_, e| {
            let keep = e.member.port != port;
            if !keep {
                gone.push(*e);
            }
            keep
        });
        for e in gone {
            self.release(e);
        }
        self.entries.len() != before
    }

    /// Removes the learned entries (of segment `segment`, or all): `fdb flush`.
    /// Returns how many.
    pub fn flush(&mut self, segment: Option<u16>) -> usize {
        let mut gone = Vec::new();
        self.entries.retain(|&(s, _), e| {
            let keep = e.kind == EntryKind::Static || segment.is_some_and(|x| x != s);
            if !keep {
                gone.push(*e);
            }
            keep
        });
        let n = gone.len();
        for e in gone {
            self.release(e);
        }
        n
    }

    /// The segments and their table as the workers read them: the value of the next
    /// snapshot's `switching`.
    pub fn switching(&self) -> Switching {
        let mut sw = Switching::new(self.segments.clone(), Arc::clone(&self.ages));
        for (&(seg, mac), e) in &self.entries {
            sw.insert(
                seg,
                EthernetAddress(mac),
                FdbHit {
                    member: e.member,
                    slot: e.slot,
                },
            );
        }
        sw
    }

    /// Every entry at `now`, by segment and MAC, with the names `snap` gives the
    /// networks and ports: `fdb show`.
    pub fn dump(&self, snap: &Snapshot, now: Instant) -> Vec<FdbRow> {
        let secs = self.secs(now);
        self.entries
            .iter()
            .map(|(&(seg, mac), e)| {
                let network = self
                    .segments
                    .get(usize::from(seg))
                    .and_then(|s| snap.networks.get(usize::from(s.network)))
                    .map_or_else(|| format!("segment {seg}"), |n| n.name.clone());
                let port = snap
                    .ports
                    .get(usize::from(e.member.port))
                    .map_or_else(|| e.member.port.to_string(), |p| p.name.clone());
                let age = (e.kind == EntryKind::Learned)
                    .then(|| u64::from(secs.saturating_sub(e.since.max(self.ages.stamp(e.slot)))));
                FdbRow {
                    network,
                    mac: EthernetAddress(mac).to_string(),
                    port,
                    vlan: (e.member.vlan != NO_VLAN).then_some(e.member.vlan),
                    age,
                    kind: e.kind,
                }
            })
            .collect()
    }
}

/// The segment of a switched network `network` (index in the snapshot) named `name`:
/// every pod port of the network (untagged), and for a Localnet network its uplink,
/// tagged with `vlan` (`None`: untagged).
pub fn network_segment(
    name: &str,
    network: u16,
    ports: &[PortState],
    uplink: Option<(u16, Option<u16>)>,
) -> Segment {
    let mut members: Vec<Member> = ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.role == PortRole::Pod && p.network == network && p.xconnect.is_none())
        .map(|(i, _)| Member::untagged(i as u16))
        .collect();
    if let Some((port, vlan)) = uplink {
        members.push(Member {
            port,
            vlan: vlan.unwrap_or(NO_VLAN),
        });
    }
    Segment {
        name: name.to_string(),
        network,
        members,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_dataplane::snapshot::PodSources;

    const VLAN: u16 = 100;
    const HOST: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0x77, 1]);

    fn ports() -> Vec<PortState> {
        let port = |name: &str, role, network, pod_mac: Option<[u8; 6]>| PortState {
            name: name.into(),
            dpdk_id: 0,
            role,
            network,
            mac: EthernetAddress([2, 0xfe, 0, 0, 0, 1]),
            mtu: 1500,
            pod_mac: pod_mac.map(EthernetAddress),
            local_v4: Vec::new(),
            local_v6: Vec::new(),
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: PodSources::default(),
            locked: false,
        };
        vec![
            port("a", PortRole::Pod, 1, Some([2, 0, 0, 0, 5, 2])),
            port("b", PortRole::Pod, 1, Some([2, 0, 0, 0, 5, 3])),
            port("uplink", PortRole::Uplink, 0, None),
            port("other", PortRole::Pod, 0, Some([2, 0, 0, 0, 1, 2])),
        ]
    }

    fn snap() -> Snapshot {
        let mut s = Snapshot::empty();
        s.ports = ports();
        s.networks.push(ferrule_dataplane::snapshot::Network {
            name: "blue".into(),
            ..s.networks[0].clone()
        });
        s
    }

    fn fdb(now: Instant) -> Fdb {
        let mut f = Fdb::new(DEFAULT_AGEING, 4, now);
        let seg = network_segment("blue", 1, &ports(), Some((2, Some(VLAN))));
        assert!(f.set_segments(vec![seg], &ports()));
        f
    }

    fn host_event() -> LearnEvent {
        LearnEvent {
            segment: 0,
            mac: HOST,
            member: Member {
                port: 2,
                vlan: VLAN,
            },
        }
    }

    #[test]
    fn the_segment_of_a_network_and_its_static_entries() {
        let t0 = Instant::now();
        let f = fdb(t0);
        assert_eq!(
            f.segments()[0].members,
            [
                Member::untagged(0),
                Member::untagged(1),
                Member {
                    port: 2,
                    vlan: VLAN
                }
            ]
        );
        let rows = f.dump(&snap(), t0);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            FdbRow {
                network: "blue".into(),
                mac: "02:00:00:00:05:02".into(),
                port: "a".into(),
                vlan: None,
                age: None,
                kind: EntryKind::Static,
            }
        );
        let sw = f.switching();
        let hit = sw
            .lookup(
                0,
                ferrule_dataplane::switching::mac_number(&[2, 0, 0, 0, 5, 3]),
            )
            .expect("b's MAC");
        assert_eq!(hit.member, Member::untagged(1));
        assert!(hit.is_static());
    }

    #[test]
    fn learns_moves_and_keeps_static_entries_in_place() {
        let t0 = Instant::now();
        let mut f = fdb(t0);
        assert!(f.learn(host_event(), t0));
        assert!(!f.learn(host_event(), t0), "the same again changes nothing");
        let sw = f.switching();
        let hit = sw
            .lookup(0, ferrule_dataplane::switching::mac_number(&HOST.0))
            .expect("learned");
        assert_eq!(
            hit.member,
            Member {
                port: 2,
                vlan: VLAN
            }
        );
        // Moved behind pod port b (say a VM behind it with allowed MACs).
        let moved = LearnEvent {
            member: Member::untagged(1),
            ..host_event()
        };
        assert!(f.learn(moved, t0));
        let row = f
            .dump(&snap(), t0)
            .into_iter()
            .find(|r| r.mac == HOST.to_string());
        assert_eq!(
            row.map(|r| (r.port, r.kind)),
            Some(("b".into(), EntryKind::Learned))
        );
        // A pod's MAC claimed from the uplink: the static entry stays.
        let spoof = LearnEvent {
            mac: EthernetAddress([2, 0, 0, 0, 5, 2]),
            ..host_event()
        };
        assert!(!f.learn(spoof, t0));
        // A member of no segment, or an unknown segment: ignored.
        let stray = LearnEvent {
            member: Member::untagged(3),
            ..host_event()
        };
        assert!(!f.learn(stray, t0));
        assert!(!f.learn(
            LearnEvent {
                segment: 7,
                ..host_event()
            },
            t0
        ));
    }

    #[test]
    fn ages_learned_entries_out_after_the_ageing_time() {
        let t0 = Instant::now();
        let mut f = fdb(t0);
        assert!(f.learn(host_event(), t0));
        assert!(!f.age(t0 + Duration::from_secs(299)));
        let row = f.dump(&snap(), t0 + Duration::from_secs(299));
        assert_eq!(
            row.iter()
                .find(|r| r.kind == EntryKind::Learned)
                .and_then(|r| r.age),
            Some(299)
        );
        assert!(f.age(t0 + Duration::from_secs(301)), "aged out");
        assert_eq!(f.len(), 2, "the static entries stay");
        assert!(f
            .switching()
            .lookup(0, ferrule_dataplane::switching::mac_number(&HOST.0))
            .is_none());
    }

    #[test]
    fn a_frame_seen_by_a_worker_keeps_the_entry() {
        let t0 = Instant::now();
        let mut f = fdb(t0);
        assert!(f.learn(host_event(), t0));
        // At 200 s a worker switches a frame from it: it copies the table's clock into
        // the entry's stamp (what `switch::learn` does through `FdbAges::touch`).
        f.age(t0 + Duration::from_secs(200));
        let sw = f.switching();
        let hit = *sw
            .lookup(0, ferrule_dataplane::switching::mac_number(&HOST.0))
            .expect("learned");
        sw.ages().touch(hit.slot);
        assert!(!f.age(t0 + Duration::from_secs(450)), "seen 250 s ago");
        assert!(f.age(t0 + Duration::from_secs(501)), "seen 301 s ago");
    }

    #[test]
    fn a_full_table_refuses_and_frees_slots_when_entries_go() {
        let t0 = Instant::now();
        let mut f = fdb(t0);
        for k in 0..6u8 {
            let ev = LearnEvent {
                mac: EthernetAddress([2, 0, 0, 0, 0x66, k]),
                ..host_event()
            };
            f.learn(ev, t0);
        }
        assert_eq!((f.len(), f.refused), (2 + 4, 2));
        assert_eq!(f.flush(None), 4);
        assert!(f.learn(host_event(), t0));
    }

    #[test]
    fn segment_changes_drop_the_entries_of_members_that_left() {
        let t0 = Instant::now();
        let mut f = fdb(t0);
        assert!(f.learn(host_event(), t0));
        // The uplink leaves the segment (Localnet became Layer2), renumbered after a
        // new segment in front.
        let other = network_segment("default", 0, &ports(), None);
        let blue = network_segment("blue", 1, &ports(), None);
        assert!(f.set_segments(vec![other, blue], &ports()));
        let rows = f.dump(&snap(), t0);
        assert!(rows.iter().all(|r| r.kind == EntryKind::Static));
        assert_eq!(rows.len(), 3, "a, b and other's pod MACs");
        assert!(f.remove_port(0));
        assert_eq!(f.len(), 2);
    }
}
