//! Layer-2 segments (OVN-Kubernetes' Layer2 and Localnet topologies): the switched
//! part of a network as the workers read it, one generation at a time
//! ([`Snapshot::switching`](crate::snapshot::Snapshot::switching)).
//!
//! A segment is a set of members, each a port and a VLAN: a network's pod ports
//! (untagged) and, for a Localnet network, an uplink on VLAN `V` (tagged with `V`, or
//! untagged when the segment has no VLAN). A frame received on a member that is not
//! addressed to Ferrule's own MAC on the port (the gateway: routed as before) is
//! switched: looked up in the segment's MAC table (its FDB), sent unchanged to the
//! member found, or flooded to every other member of the segment when its destination
//! is broadcast, multicast or unknown ([`pipeline::switch`](crate::pipeline::switch)).
//! The only change a switched frame ever gets is its 802.1Q tag: removed when it
//! arrived tagged, added when it leaves through a tagged member.
//!
//! The FDB is owned by the control thread (`ferrule-daemon`'s `fdb`): it seeds the pods'
//! MACs (static), learns the others from the events the workers report (a source MAC
//! unknown or seen on another member: [`LearnEvent`], at most
//! [`MAX_LEARN_PER_BURST`] per burst), publishes the table in every snapshot, and ages
//! learned entries out. Workers never lock or allocate for it: they refresh a learned
//! entry's last-seen stamp in [`FdbAges`] (an array of atomics shared by every
//! generation, one slot per learned entry), written only when the second changed.

use crate::wire::EthernetAddress;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The VLAN of an untagged member (VID 0 is a priority tag, never a segment's VLAN).
pub const NO_VLAN: u16 = 0;

/// Largest VLAN id a member may have (4095 is reserved).
pub const MAX_VID: u16 = 4094;

/// Length of an 802.1Q tag.
pub const TAG_LEN: usize = 4;

/// Learn events one burst reports at most (the rest are reported by later bursts:
/// a source that keeps sending is learned from one of them).
pub const MAX_LEARN_PER_BURST: usize = 4;

/// The slot of an FDB entry that has no last-seen stamp (a static entry).
pub const NO_SLOT: u32 = u32::MAX;

/// One member of a segment: a port (configuration index) and the VLAN its frames carry
/// there ([`NO_VLAN`]: untagged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    pub port: u16,
    pub vlan: u16,
}

impl Member {
    pub const fn untagged(port: u16) -> Member {
        Member {
            port,
            vlan: NO_VLAN,
        }
    }
}

/// A switched segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// For traces and the FDB dump (usually the network's name).
    pub name: String,
    /// The network (VRF) the segment belongs to: its members' gateway routes there.
    pub network: u16,
    /// Its members, each once.
    pub members: Vec<Member>,
}

/// Where a port's frames enter segments: untagged, and per VLAN id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSegments {
    /// The segment untagged frames not for Ferrule are switched in.
    pub untagged: Option<u16>,
    /// (VLAN id, segment): tagged frames with that VLAN id are switched in it.
    pub tagged: Vec<(u16, u16)>,
}

impl PortSegments {
    /// The segment frames with VLAN `vlan` ([`NO_VLAN`]: untagged) are switched in.
    #[inline]
    pub fn segment(&self, vlan: u16) -> Option<u16> {
        if vlan == NO_VLAN {
            self.untagged
        } else {
            self.tagged
                .iter()
                .find(|&&(v, _)| v == vlan)
                .map(|&(_, s)| s)
        }
    }
}

/// What the FDB knows about a MAC in a segment: the member behind which it is, and
/// the slot of its last-seen stamp ([`NO_SLOT`] for a static entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbHit {
    pub member: Member,
    pub slot: u32,
}

impl FdbHit {
    pub fn is_static(&self) -> bool {
        self.slot == NO_SLOT
    }
}

/// Last-seen stamps of learned FDB entries, shared by the control thread and every
/// worker across generations. The control thread sets the clock ([`FdbAges::set_now`],
/// seconds since its FDB started) and owns the slots; a worker that switches a frame
/// from a learned MAC on its known member copies the clock into the entry's slot.
#[derive(Debug)]
pub struct FdbAges {
    now: AtomicU32,
    stamps: Box<[AtomicU32]>,
}

impl Default for FdbAges {
    fn default() -> Self {
        FdbAges::new(0)
    }
}

impl FdbAges {
    /// Room for `capacity` learned entries.
    pub fn new(capacity: usize) -> FdbAges {
        FdbAges {
            now: AtomicU32::new(0),
            stamps: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Learned entries it has room for.
    pub fn capacity(&self) -> usize {
        self.stamps.len()
    }

    /// The control thread's clock, in seconds.
    #[inline]
    pub fn now(&self) -> u32 {
        self.now.load(Ordering::Relaxed)
    }

    /// Sets the clock (control thread).
    pub fn set_now(&self, secs: u32) {
        self.now.store(secs, Ordering::Relaxed);
    }

    /// When slot `slot` was last seen (0 out of range).
    pub fn stamp(&self, slot: u32) -> u32 {
        self.stamps
            .get(slot as usize)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// Sets slot `slot`'s stamp (control thread, when it learns an entry there).
    pub fn set_stamp(&self, slot: u32, secs: u32) {
        if let Some(s) = self.stamps.get(slot as usize) {
            s.store(secs, Ordering::Relaxed);
        }
    }

    /// Marks slot `slot` seen now (workers). Writes only when the second changed, so
    /// a busy entry's cache line is not written by every packet.
    #[inline]
    pub fn touch(&self, slot: u32) {
        if let Some(s) = self.stamps.get(slot as usize) {
            let now = self.now.load(Ordering::Relaxed);
            if s.load(Ordering::Relaxed) != now {
                s.store(now, Ordering::Relaxed);
            }
        }
    }
}

/// A source MAC a worker saw on a segment member that the FDB does not have there
/// (unknown, or known behind another member): for the control thread to learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearnEvent {
    pub segment: u16,
    pub mac: EthernetAddress,
    pub member: Member,
}

impl LearnEvent {
    /// A placeholder for scratch arrays.
    pub const EMPTY: LearnEvent = LearnEvent {
        segment: 0,
        mac: EthernetAddress([0; 6]),
        member: Member::untagged(0),
    };
}

/// The switched segments of one generation and their MAC tables.
#[derive(Debug, Clone, Default)]
pub struct Switching {
    segments: Vec<Segment>,
    /// Per port (configuration index), where its frames enter segments; empty past the
    /// last member port.
    ports: Vec<PortSegments>,
    /// (segment, MAC) → member, keyed by [`fdb_key`].
    fdb: FxHashMap<u64, FdbHit>,
    ages: Arc<FdbAges>,
}

/// The FDB's key of a MAC (as a little-endian 48-bit number, see
/// [`PodSources::mac_number`](crate::snapshot::PodSources::mac_number)) in a segment.
#[inline(always)]
pub fn fdb_key(segment: u16, mac: u64) -> u64 {
    (mac & 0xffff_ffff_ffff) | (u64::from(segment) << 48)
}

/// A MAC as the FDB's key holds it.
#[inline(always)]
pub fn mac_number(m: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&m[..6]);
    u64::from_le_bytes(b)
}

impl Switching {
    /// Segments `segments` (members' ports and VLANs each once per port) with an empty
    /// FDB whose learned entries stamp `ages`.
    pub fn new(segments: Vec<Segment>, ages: Arc<FdbAges>) -> Switching {
        let mut ports: Vec<PortSegments> = Vec::new();
        for (s, seg) in segments.iter().enumerate() {
            for m in &seg.members {
                let i = usize::from(m.port);
                if ports.len() <= i {
                    ports.resize(i + 1, PortSegments::default());
                }
                let p = &mut ports[i];
                if m.vlan == NO_VLAN {
                    p.untagged = Some(s as u16);
                } else if p.segment(m.vlan).is_none() {
                    p.tagged.push((m.vlan, s as u16));
                }
            }
        }
        Switching {
            segments,
            ports,
            fdb: FxHashMap::default(),
            ages,
        }
    }

    /// Adds (or replaces) what the FDB knows of `mac` in `segment`.
    pub fn insert(&mut self, segment: u16, mac: EthernetAddress, hit: FdbHit) {
        self.fdb.insert(fdb_key(segment, mac_number(&mac.0)), hit);
    }

    /// No segment at all (every port routed).
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn segment(&self, segment: u16) -> Option<&Segment> {
        self.segments.get(usize::from(segment))
    }

    /// The stamps of learned entries.
    pub fn ages(&self) -> &Arc<FdbAges> {
        &self.ages
    }

    /// Where port `port`'s frames enter segments; `None` for a port in none (routed
    /// only).
    #[inline(always)]
    pub fn port(&self, port: u16) -> Option<&PortSegments> {
        self.ports
            .get(usize::from(port))
            .filter(|p| p.untagged.is_some() || !p.tagged.is_empty())
    }

    /// The FDB entry of MAC `mac` (a [`mac_number`]) in `segment`.
    #[inline]
    pub fn lookup(&self, segment: u16, mac: u64) -> Option<&FdbHit> {
        self.fdb.get(&fdb_key(segment, mac))
    }

    /// Entries in the FDB.
    pub fn fdb_len(&self) -> usize {
        self.fdb.len()
    }

    /// The members a frame of `segment` received on member `from` is flooded to: every
    /// other member of the segment.
    #[inline]
    pub fn flood_targets(&self, segment: u16, from: Member) -> impl Iterator<Item = Member> + '_ {
        self.segment(segment)
            .map(|s| s.members.as_slice())
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(move |&m| m != from)
    }
}

/// Removes the 802.1Q tag of `frame` in place, but for its length: the MAC addresses are
/// moved over the tag, so the untagged frame is `frame[TAG_LEN..]` (the caller then
/// drops the first [`TAG_LEN`] bytes). `frame` must be at least 16 bytes.
#[inline]
pub fn untag_in_place(frame: &mut [u8]) {
    frame.copy_within(0..12, TAG_LEN);
}

/// Tags the untagged frame at `frame[TAG_LEN..]` with VLAN `vid` (PCP 0): the MAC
/// addresses are moved to the front and the tag written after them, so the tagged
/// frame is `frame` (the caller prepended [`TAG_LEN`] bytes). `frame` must be at
/// least 16 bytes.
#[inline]
pub fn tag_in_place(frame: &mut [u8], vid: u16) {
    frame.copy_within(TAG_LEN..TAG_LEN + 12, 0);
    frame[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
    frame[14..16].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
}

/// The tag changes of a switched frame applied to a frame in a vector (tests, traces):
/// its tag removed when `untag`, then a tag with VLAN `vlan` added unless [`NO_VLAN`].
/// The worker does the same on mbufs.
pub fn retag_vec(frame: &mut Vec<u8>, untag: bool, vlan: u16) {
    if untag && frame.len() >= 12 + TAG_LEN {
        untag_in_place(frame);
        frame.drain(..TAG_LEN);
    }
    if vlan != NO_VLAN && frame.len() >= 12 {
        frame.splice(0..0, [0u8; TAG_LEN]);
        tag_in_place(frame, vlan);
    }
}

/// What the worker sends for a switched frame received on `in_port`, as (output
/// port, frame) pairs, on frames in vectors (tests, traces): `Switch` one, `Flood` one
/// per other member of the segment, each retagged as the worker does it on mbufs;
/// nothing for any other action.
pub fn outputs_vec(
    sw: &Switching,
    in_port: u16,
    frame: &[u8],
    action: crate::pipeline::Action,
) -> Vec<(u16, Vec<u8>)> {
    use crate::pipeline::Action;
    match action {
        Action::Switch { port, vlan, untag } => {
            let mut f = frame.to_vec();
            retag_vec(&mut f, untag, vlan);
            vec![(port, f)]
        }
        Action::Flood {
            segment,
            in_vlan,
            untag,
            ..
        } => {
            let mut base = frame.to_vec();
            retag_vec(&mut base, untag, NO_VLAN);
            sw.flood_targets(
                segment,
                Member {
                    port: in_port,
                    vlan: in_vlan,
                },
            )
            .map(|m| {
                let mut f = base.clone();
                retag_vec(&mut f, false, m.vlan);
                (m.port, f)
            })
            .collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_untags() {
        let untagged: Vec<u8> = (0u8..20).collect();
        let mut f = untagged.clone();
        retag_vec(&mut f, false, 100);
        assert_eq!(f.len(), 24);
        assert_eq!(&f[..12], &untagged[..12]);
        assert_eq!(&f[12..16], &[0x81, 0, 0, 100]);
        assert_eq!(&f[16..], &untagged[12..]);
        retag_vec(&mut f, true, NO_VLAN);
        assert_eq!(f, untagged);
    }

    #[test]
    fn ports_enter_their_segments() {
        let seg = |name: &str, members: Vec<Member>| Segment {
            name: name.into(),
            network: 1,
            members,
        };
        let sw = Switching::new(
            vec![
                seg("a", vec![Member::untagged(0), Member { port: 3, vlan: 10 }]),
                seg("b", vec![Member::untagged(1), Member { port: 3, vlan: 20 }]),
            ],
            Arc::new(FdbAges::new(4)),
        );
        assert_eq!(sw.port(0).and_then(|p| p.segment(NO_VLAN)), Some(0));
        assert_eq!(sw.port(3).and_then(|p| p.segment(20)), Some(1));
        assert_eq!(sw.port(3).and_then(|p| p.segment(NO_VLAN)), None);
        assert_eq!(sw.port(2).and_then(|p| p.segment(NO_VLAN)), None);
        assert!(sw.port(9).is_none());
        let targets: Vec<Member> = sw.flood_targets(0, Member::untagged(0)).collect();
        assert_eq!(targets, [Member { port: 3, vlan: 10 }]);
    }

    #[test]
    fn stamps_are_written_when_the_second_changed() {
        let ages = FdbAges::new(2);
        ages.set_now(7);
        ages.touch(1);
        ages.touch(5);
        assert_eq!((ages.stamp(0), ages.stamp(1)), (0, 7));
    }
}
