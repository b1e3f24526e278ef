//! TCP connection tracking: netfilter's state machine (`tcp_conntracks`, by packet type
//! and direction) and its window tracking (`td_end`/`td_maxend`/`td_maxwin` per
//! direction), used to reject RSTs outside the receiver's window.

use super::{tcp_flags as f, Dir, L4Info};

/// Netfilter's TCP conntrack states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TcpState {
    SynSent = 0,
    SynRecv = 1,
    Established = 2,
    FinWait = 3,
    CloseWait = 4,
    LastAck = 5,
    TimeWait = 6,
    Close = 7,
    /// Simultaneous open: a SYN was seen in both directions.
    SynSent2 = 8,
}

impl TcpState {
    pub(super) const ALL: [TcpState; 9] = [
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::SynSent2,
    ];

    /// Netfilter's name (`SYN_SENT`, …).
    pub const fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::SynSent2 => "SYN_SENT2",
        }
    }

    #[inline]
    pub(super) fn from_code(code: u8) -> Option<TcpState> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

impl std::fmt::Display for TcpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The window-scale shift of a SYN's options (kind 3), capped at 14 like the kernel;
/// `None` when absent or when the options are malformed.
pub fn tcp_wscale(options: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1)?);
                if len < 2 || i + len > options.len() {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return Some(options[i + 2].min(14));
                }
                i += len;
            }
        }
    }
    None
}

/// Window tracking of one direction, for dumps and tests (netfilter's `ip_ct_tcp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpWindow {
    /// Highest sequence number sent, plus the segment length (`td_end`).
    pub end: u32,
    /// Highest right edge of the peer's receive window seen: ack + window (`td_maxend`).
    pub maxend: u32,
    /// Largest window this direction advertised, scaled (`td_maxwin`); 0 until the
    /// direction sent its first packet.
    pub maxwin: u32,
    /// Window-scale shift, when the option was seen.
    pub scale: Option<u8>,
}

/// A scale nibble meaning "no window-scale option seen".
pub(super) const NO_SCALE: u8 = 0xF;
/// Both directions without a scale option.
pub(super) const NO_SCALES: u8 = 0xFF;

/// Window tracking of both directions, as stored in an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(super) struct Window {
    pub end: [u32; 2],
    pub maxend: [u32; 2],
    pub maxwin: [u32; 2],
}

impl Window {
    pub(super) const ZERO: Window = Window {
        end: [0; 2],
        maxend: [0; 2],
        maxwin: [0; 2],
    };

    pub(super) fn view(&self, scales: u8, d: usize) -> TcpWindow {
        let s = scale_nibble(scales, d);
        TcpWindow {
            end: self.end[d],
            maxend: self.maxend[d],
            maxwin: self.maxwin[d],
            scale: (s != NO_SCALE).then_some(s),
        }
    }
}

#[inline]
fn scale_nibble(scales: u8, d: usize) -> u8 {
    (scales >> (4 * d)) & 0xF
}

#[inline]
fn set_scale(scales: &mut u8, d: usize, s: u8) {
    *scales = (*scales & !(0xF << (4 * d))) | ((s & 0xF) << (4 * d));
}

/// The shift to apply to a direction's windows (0 without the option).
#[inline]
fn shift(scales: u8, d: usize) -> u32 {
    let s = scale_nibble(scales, d);
    if s == NO_SCALE {
        0
    } else {
        u32::from(s)
    }
}

#[inline]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// Netfilter's `tcp_valid_flags`: the flag combinations a TCP packet may carry,
/// ignoring PSH, ECE and CWR.
#[inline]
pub(super) fn flags_valid(flags: u8) -> bool {
    const VALID: u64 = 1 << f::SYN
        | 1 << (f::SYN | f::URG)
        | 1 << (f::SYN | f::ACK)
        | 1 << f::RST
        | 1 << (f::RST | f::ACK)
        | 1 << (f::FIN | f::ACK)
        | 1 << (f::FIN | f::ACK | f::URG)
        | 1 << f::ACK
        | 1 << (f::ACK | f::URG);
    let v = flags & !(f::PSH | f::ECE | f::CWR);
    VALID >> v & 1 != 0
}

/// Packet types, the rows of the transition table.
const SYN: usize = 0;
const SYNACK: usize = 1;
const FIN: usize = 2;
const ACK: usize = 3;
const RST: usize = 4;
const NONE: usize = 5;

#[inline]
fn packet_type(flags: u8) -> usize {
    if flags & f::RST != 0 {
        RST
    } else if flags & f::SYN != 0 {
        if flags & f::ACK != 0 {
            SYNACK
        } else {
            SYN
        }
    } else if flags & f::FIN != 0 {
        FIN
    } else if flags & f::ACK != 0 {
        ACK
    } else {
        NONE
    }
}

const SS: u8 = TcpState::SynSent as u8;
const SR: u8 = TcpState::SynRecv as u8;
const ES: u8 = TcpState::Established as u8;
const FW: u8 = TcpState::FinWait as u8;
const CW: u8 = TcpState::CloseWait as u8;
const LA: u8 = TcpState::LastAck as u8;
const TW: u8 = TcpState::TimeWait as u8;
const CL: u8 = TcpState::Close as u8;
const S2: u8 = TcpState::SynSent2 as u8;
/// Invalid transition.
const IV: u8 = 0xE;
/// Accepted without a state change (netfilter's `sIG`).
const IG: u8 = 0xD;

/// Netfilter's `tcp_conntracks` without the `sNO` column (a tracked connection always
/// has a state; first packets are handled by [`first`]): `[dir][packet type][state]`,
/// states in [`TcpState`] order (SS, SR, ES, FW, CW, LA, TW, CL, S2).
#[rustfmt::skip]
const TRANSITIONS: [[[u8; 9]; 6]; 2] = [
    [
        // ORIGINAL  sSS sSR sES sFW sCW sLA sTW sCL sS2
        /* syn    */ [SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /* synack */ [IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /* fin    */ [IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /* rst    */ [CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    [
        // REPLY     sSS sSR sES sFW sCW sLA sTW sCL sS2
        /* syn    */ [S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /* synack */ [SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /* fin    */ [IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /* rst    */ [CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

/// Sequence space a segment occupies past `seq`.
#[inline]
fn seg_end(l4: &L4Info) -> u32 {
    l4.seq
        .wrapping_add(l4.payload_len)
        .wrapping_add(u32::from(l4.tcp_flags & f::SYN != 0))
        .wrapping_add(u32::from(l4.tcp_flags & f::FIN != 0))
}

/// The state of a connection opened by `l4` (the first packet, original direction),
/// with window tracking initialised like netfilter's `tcp_new`; the flag is true for a
/// connection picked up mid-stream (window checks are then liberal). `None`: the
/// packet cannot open a connection.
pub(super) fn first(l4: &L4Info, w: &mut Window, scales: &mut u8) -> Option<(TcpState, bool)> {
    if !flags_valid(l4.tcp_flags) {
        return None;
    }
    let end = seg_end(l4);
    let win = u32::from(l4.window).max(1);
    *w = Window::ZERO;
    *scales = NO_SCALES;
    match packet_type(l4.tcp_flags) {
        SYN => {
            w.end[0] = end;
            w.maxend[0] = end;
            w.maxwin[0] = win;
            if let Some(s) = l4.wscale {
                set_scale(scales, 0, s.min(14));
            }
            Some((TcpState::SynSent, false))
        }
        ACK => {
            w.end[0] = end;
            w.maxwin[0] = win;
            w.maxend[0] = end.wrapping_add(win);
            Some((TcpState::Established, true))
        }
        _ => None,
    }
}

/// What one packet does to a tracked TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Drop it; nothing changed.
    Invalid,
    /// Accept it; state and timeout unchanged.
    Ignore,
    /// A SYN on a closing connection: start over.
    Reopen,
    /// Accept it; the connection is now in this state.
    To(TcpState),
}

/// Advances a connection in `state` with a packet in direction `dir`. Only RSTs are
/// held to the window (an RST outside the receiver's window is [`Step::Invalid`]);
/// other packets out of window are accepted but do not move the window tracking.
pub(super) fn step(
    state: TcpState,
    dir: Dir,
    l4: &L4Info,
    w: &mut Window,
    scales: &mut u8,
    liberal: bool,
) -> Step {
    if !flags_valid(l4.tcp_flags) {
        return Step::Invalid;
    }
    let new = TRANSITIONS[dir as usize][packet_type(l4.tcp_flags)][state as usize];
    match new {
        IV => return Step::Invalid,
        IG => return Step::Ignore,
        SS if matches!(state, TcpState::TimeWait | TcpState::Close) => return Step::Reopen,
        _ => {}
    }
    let in_window = in_window(state, dir, l4, w, scales) || liberal;
    if l4.tcp_flags & f::RST != 0 && !in_window {
        return Step::Invalid;
    }
    match TcpState::from_code(new) {
        Some(s) => Step::To(s),
        None => Step::Invalid,
    }
}

/// Whether `flags` make a pure ACK: ACK, perhaps with PSH, ECE or CWR (the flags
/// neither the state machine nor the window tracking looks at).
#[inline(always)]
pub(super) fn pure_ack(flags: u8) -> bool {
    flags & !(f::PSH | f::ECE | f::CWR) == f::ACK
}

/// [`step`] of a [`pure_ack`] on an ESTABLISHED connection, the common case: such a
/// packet is always valid and leaves the state ESTABLISHED in either direction, so
/// only the window tracking moves (an ACK out of window is accepted and moves nothing,
/// as in [`step`]). `l4.tcp_flags` must be a pure ACK.
#[inline(always)]
pub(super) fn established_ack(dir: Dir, l4: &L4Info, w: &mut Window, scales: &mut u8) {
    debug_assert!(pure_ack(l4.tcp_flags));
    // PSH, ECE and CWR play no part in the window tracking: with them cleared the
    // compiler folds every flag test of `in_window` away.
    let ack = L4Info {
        tcp_flags: f::ACK,
        ..*l4
    };
    in_window(TcpState::Established, dir, &ack, w, scales);
}

/// Initialises a direction's tracking from its SYN or SYN-ACK (netfilter's
/// `tcp_init_sender`).
fn init_sender(w: &mut Window, scales: &mut u8, s: usize, l4: &L4Info, end: u32) {
    let r = 1 - s;
    w.end[s] = end;
    w.maxend[s] = end;
    w.maxwin[s] = u32::from(l4.window).max(1);
    set_scale(scales, s, l4.wscale.map_or(NO_SCALE, |x| x.min(14)));
    // RFC 7323: scaling applies only when both SYNs carried the option.
    if scale_nibble(*scales, s) == NO_SCALE || scale_nibble(*scales, r) == NO_SCALE {
        *scales = NO_SCALES;
    }
}

/// Netfilter's `tcp_in_window` without SACK and retransmission counting: whether the
/// segment lies in the window, updating the tracking when it does.
#[inline(always)]
fn in_window(state: TcpState, dir: Dir, l4: &L4Info, w: &mut Window, scales: &mut u8) -> bool {
    const MAXACKWINCONST: u32 = 66_000;
    let (s, r) = (dir as usize, 1 - dir as usize);
    let flags = l4.tcp_flags;
    let (syn, ack_set, rst) = (
        flags & f::SYN != 0,
        flags & f::ACK != 0,
        flags & f::RST != 0,
    );
    let mut seq = l4.seq;
    let mut ack = l4.ack;
    let mut win = u32::from(l4.window);
    let mut end = seg_end(l4);

    if w.maxwin[s] == 0 {
        // The first packet of this direction.
        if syn {
            // SYN-ACK answering the SYN, or a SYN of a simultaneous open.
            init_sender(w, scales, s, l4, end);
            if !ack_set {
                return true;
            }
        } else {
            // Picked up mid-stream: trust the packet.
            w.end[s] = end;
            let swin = (win << shift(*scales, s)).max(1);
            w.maxwin[s] = swin;
            w.maxend[s] = end.wrapping_add(swin);
            if w.maxwin[r] == 0 {
                w.end[r] = ack;
                w.maxend[r] = ack;
            } else if ack == w.end[r].wrapping_add(1) {
                // Likely the answer to a keepalive.
                w.end[r] = w.end[r].wrapping_add(1);
            }
        }
    } else if syn
        && after(end, w.end[s])
        && ((state == TcpState::SynSent && dir == Dir::Original)
            || (state == TcpState::SynRecv && dir == Dir::Reply))
    {
        // A SYN (or SYN-ACK) sent again with a new initial sequence number.
        init_sender(w, scales, s, l4, end);
        if dir == Dir::Reply && !ack_set {
            return true;
        }
    }

    if !ack_set || (rst && ack == 0) {
        // No ACK (or a broken stack's RST with ACK 0): take it as acking everything.
        ack = w.end[r];
    }
    if rst && seq == 0 && state == TcpState::SynSent {
        // RST answering a SYN.
        seq = w.end[s];
        end = w.end[s];
    }

    let maxack = w.maxwin[s].max(MAXACKWINCONST);
    let in_recv_win =
        w.maxwin[r] == 0 || after(end, w.end[s].wrapping_sub(w.maxwin[r]).wrapping_sub(1));
    let ok = before(seq, w.maxend[s].wrapping_add(1))
        && in_recv_win
        && before(ack, w.end[r].wrapping_add(1))
        && after(ack, w.end[r].wrapping_sub(maxack).wrapping_sub(1));
    if ok {
        if !syn {
            win <<= shift(*scales, s);
        }
        if w.maxwin[s] < win {
            w.maxwin[s] = win;
        }
        if after(end, w.end[s]) {
            w.end[s] = end;
        }
        if w.maxwin[r] != 0 && after(end, w.maxend[s]) {
            w.maxwin[r] = w.maxwin[r].wrapping_add(end.wrapping_sub(w.maxend[s]));
        }
        let edge = ack.wrapping_add(win);
        if after(edge, w.maxend[r].wrapping_sub(1)) {
            w.maxend[r] = if win == 0 { edge.wrapping_add(1) } else { edge };
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wscale_option_parsing() {
        // MSS, NOP, window scale 7, SACK permitted, timestamps.
        let opts = [
            2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0,
        ];
        assert_eq!(tcp_wscale(&opts), Some(7));
        assert_eq!(tcp_wscale(&[1, 1, 3, 3, 20]), Some(14));
        assert_eq!(tcp_wscale(&[2, 4, 5, 0xb4]), None);
        assert_eq!(tcp_wscale(&[2, 9, 5]), None, "length past the end");
        assert_eq!(tcp_wscale(&[2, 0, 3, 3, 7]), None, "zero length");
        assert_eq!(tcp_wscale(&[0, 3, 3, 7]), None, "after end of options");
        assert_eq!(tcp_wscale(&[]), None);
    }

    #[test]
    fn valid_flag_combinations() {
        assert!(flags_valid(f::SYN));
        assert!(flags_valid(f::SYN | f::ACK | f::ECE | f::CWR));
        assert!(flags_valid(f::ACK | f::PSH));
        assert!(flags_valid(f::FIN | f::ACK));
        assert!(flags_valid(f::RST));
        assert!(!flags_valid(f::SYN | f::FIN));
        assert!(!flags_valid(f::SYN | f::RST));
        assert!(!flags_valid(f::FIN));
        assert!(!flags_valid(0));
    }

    #[test]
    fn names_and_codes() {
        for (i, s) in TcpState::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(TcpState::from_code(i as u8), Some(*s));
        }
        assert_eq!(TcpState::TimeWait.name(), "TIME_WAIT");
        assert_eq!(TcpState::from_code(9), None);
        // The state filter's list holds every name a dump shows, and nothing else.
        use super::super::{ConnState, STATE_NAMES};
        let mut shown: Vec<&str> = TcpState::ALL
            .iter()
            .map(|&t| ConnState::Tcp(t))
            .chain([
                ConnState::UdpUnreplied,
                ConnState::UdpAssured,
                ConnState::IcmpEcho,
                ConnState::Other,
            ])
            .map(ConnState::name)
            .collect();
        let mut listed = STATE_NAMES.to_vec();
        shown.sort_unstable();
        listed.sort_unstable();
        assert_eq!(shown, listed);
    }
}
