//! The Internet checksum (RFC 1071): ones-complement sums, pseudo-headers, and RFC 1624
//! incremental updates for rewriting a field without touching the rest of the packet.
//!
//! Vocabulary: a *sum* is an unfolded accumulator (`u32`); `fold` turns it into a 16-bit
//! ones-complement value; the *checksum* written into a header is the complement of the
//! folded sum of everything it covers (with the checksum field itself taken as zero), so a
//! packet verifies when the folded sum over it, checksum included, is `0xFFFF`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::IpProtocol;

/// Ones-complement accumulation of `data` as big-endian 16-bit words; an odd trailing byte
/// is padded with a zero byte. The result is partially folded so that adding a handful of
/// sums together cannot overflow; pass it (or a sum of them) to [`fold`]. Inlined: over
/// data of a length known where it is called (an option-less IPv4 header) the loop
/// unrolls.
#[inline(always)]
pub fn sum(data: &[u8]) -> u32 {
    // 32-bit big-endian words are congruent to the sum of their two 16-bit halves modulo
    // 0xFFFF (2^16 ≡ 1), so accumulate four bytes at a time in 64 bits.
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        acc += u64::from(u32::from_be_bytes([word[0], word[1], word[2], word[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc += u64::from(u32::from_be_bytes(tail));
    // 2^32 ≡ 1 (mod 0xFFFF) as well: fold 64 → 32 → 17 bits with end-around carries.
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    let acc = acc as u32;
    (acc & 0xFFFF) + (acc >> 16)
}

/// Folds an accumulator into 16 bits with end-around carries (not complemented).
#[inline(always)]
pub const fn fold(acc: u32) -> u16 {
    // Two rounds always suffice for 32 bits (the first leaves at most 0x1FFFE, the
    // second at most 0xFFFF), and a round changes nothing once the value fits.
    let acc = (acc & 0xFFFF) + (acc >> 16);
    ((acc & 0xFFFF) + (acc >> 16)) as u16
}

/// The folded ones-complement sum of `data` (not complemented).
pub fn data(data: &[u8]) -> u16 {
    fold(sum(data))
}

/// Ones-complement sum of already-folded values (not complemented).
pub fn combine(values: &[u16]) -> u16 {
    let mut acc: u32 = 0;
    for &value in values {
        acc += u32::from(value);
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    fold(acc)
}

/// Folded sum of the IPv4 pseudo-header (RFC 793 §3.1, RFC 768): source, destination,
/// zero + protocol, and the L4 length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: IpProtocol, length: u32) -> u16 {
    let mut acc = sum(&src.octets()) + sum(&dst.octets());
    acc += u32::from(proto.0);
    acc += (length >> 16) + (length & 0xFFFF);
    fold(acc)
}

/// Folded sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, destination, the
/// 32-bit upper-layer length, three zero bytes and the next header.
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: IpProtocol, length: u32) -> u16 {
    let mut acc = sum(&src.octets()) + sum(&dst.octets());
    acc += u32::from(proto.0);
    acc += (length >> 16) + (length & 0xFFFF);
    fold(acc)
}

/// The pseudo-header for either family. Mixed families (a caller bug) are summed as
/// IPv6 with the IPv4 address mapped (`::ffff:a.b.c.d`), so this never panics.
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, proto: IpProtocol, length: u32) -> u16 {
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => pseudo_header_v4(*src, *dst, proto, length),
        _ => pseudo_header_v6(to_v6(src), to_v6(dst), proto, length),
    }
}

fn to_v6(addr: &IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => *v6,
    }
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word of the covered data changed from
/// `old` to `new`: `HC' = ~(~HC + ~m + m')`.
///
/// It agrees with a full recomputation except in RFC 1624's degenerate case, when every
/// covered word is now zero: the full computation yields `0xFFFF`, this `0x0000`. No real
/// header is all zeros (IPv4 has its version, TCP/UDP/ICMPv6 a pseudo-header with the
/// protocol). Do not apply it to a UDP-over-IPv4 checksum of 0 ("no checksum").
pub const fn update16(csum: u16, old: u16, new: u16) -> u16 {
    let acc = (!csum) as u32 + (!old) as u32 + new as u32;
    !fold(acc)
}

/// [`update16`] for a 32-bit field (two words at once).
pub const fn update32(csum: u16, old: u32, new: u32) -> u16 {
    apply(csum, delta32(old, new))
}

/// What rewriting 32-bit field `old` to `new` adds to the complemented sum of every
/// checksum covering it (at most `0x3FFFC`): for NAT, the IPv4 header checksum and the
/// TCP/UDP checksum share it. [`apply`] turns it into the new checksum; a port's
/// `!old as u32 + new as u32` can be added first (address and port in one fold).
#[inline(always)]
pub const fn delta32(old: u32, new: u32) -> u32 {
    (!(old >> 16) & 0xFFFF) + (!old & 0xFFFF) + (new >> 16) + (new & 0xFFFF)
}

/// The checksum `csum` after the changes summed in `delta` (from [`delta32`], plus
/// 16-bit `!old + new` terms; at most `0xFFFF_0000 - 0xFFFF` in all).
#[inline(always)]
pub const fn apply(csum: u16, delta: u32) -> u16 {
    !fold((!csum) as u32 + delta)
}

/// [`update16`] for an IPv4 address rewrite (NAT): use it on the IPv4 header checksum and
/// on TCP/UDP checksums, which cover the address through the pseudo-header.
#[inline(always)]
pub fn update_addr_v4(csum: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update32(csum, u32::from(old), u32::from(new))
}

/// [`update16`] for an IPv6 address rewrite (eight words at once).
pub fn update_addr_v6(csum: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    let mut acc = u32::from(!csum);
    for (old, new) in old.segments().iter().zip(new.segments().iter()) {
        acc += u32::from(!*old) + u32::from(*new);
    }
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old fold, a loop: the two-round one must agree everywhere.
    fn fold_loop(mut acc: u32) -> u16 {
        while acc > 0xFFFF {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn fold_in_two_rounds_equals_the_loop() {
        for hi in (0..=0xFFFFu32).step_by(7).chain([0xFFFE, 0xFFFF]) {
            for lo in [0, 1, 2, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF] {
                let acc = hi << 16 | lo;
                assert_eq!(fold(acc), fold_loop(acc), "{acc:#x}");
            }
        }
        let mut x = 0x2545_F491u32;
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            assert_eq!(fold(x), fold_loop(x), "{x:#x}");
        }
    }

    #[test]
    fn address_and_port_in_one_fold() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edge = [0u16, 1, 0xFFFE, 0xFFFF];
        for round in 0..1_000_000 {
            let r = rnd();
            let pick = |v: u16, k: u32| {
                if round % 3 == 0 {
                    edge[((r >> k) & 3) as usize]
                } else {
                    v
                }
            };
            let csum = pick(r as u16, 0);
            let (op, np) = (pick((r >> 16) as u16, 2), pick((r >> 32) as u16, 4));
            let q = rnd();
            let old = Ipv4Addr::from(if round % 5 == 0 { 0 } else { q as u32 });
            let new = Ipv4Addr::from(if round % 7 == 0 {
                u32::MAX
            } else {
                (q >> 32) as u32
            });
            // Both are the value in `1..=0xFFFF` (or 0 only when everything summed is
            // 0) congruent to the same sum modulo 0xFFFF.
            let ports = u32::from(!op) + u32::from(np);
            assert_eq!(
                apply(csum, delta32(u32::from(old), u32::from(new)) + ports),
                update16(update_addr_v4(csum, old, new), op, np),
                "{csum:#x} {old} {new} {op} {np}"
            );
        }
    }

    /// The textbook reference: sum 16-bit words one at a time with end-around carry.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        let mut i = 0;
        while i < data.len() {
            let hi = u32::from(data[i]) << 8;
            let lo = data.get(i + 1).map_or(0, |b| u32::from(*b));
            acc += hi | lo;
            acc = (acc & 0xFFFF) + (acc >> 16);
            i += 2;
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(data(&bytes), 0xddf2);
        assert_eq!(data(&bytes[..7]), reference_sum(&bytes[..7]));
    }

    #[test]
    fn ipv4_header_checksum() {
        // A real header (wikipedia's IPv4 checksum example), checksum 0xb861.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(!data(&header), 0xb861);
    }

    #[test]
    fn odd_and_empty_lengths() {
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xab]), 0xab00);
        assert_eq!(data(&[0xab, 0xcd, 0xef]), 0x9ace); // 0xabcd + 0xef00 = 0x1_9acd
    }

    #[test]
    fn sum_of_large_buffer_does_not_overflow() {
        let big = vec![0xFFu8; 1 << 20];
        assert_eq!(data(&big), 0xFFFF);
        assert_eq!(data(&big), reference_sum(&big));
    }

    #[test]
    fn combine_and_pseudo_headers() {
        assert_eq!(combine(&[0xFFFF, 0x0001]), 0x0001);
        assert_eq!(combine(&[0x8000, 0x8000]), 0x0001);
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let manual = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 20];
        assert_eq!(
            pseudo_header_v4(src, dst, IpProtocol::TCP, 20),
            data(&manual)
        );
        let src6: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst6: Ipv6Addr = "ff02::1:ff00:2".parse().unwrap();
        let mut manual6 = Vec::new();
        manual6.extend_from_slice(&src6.octets());
        manual6.extend_from_slice(&dst6.octets());
        manual6.extend_from_slice(&[0, 1, 0, 32, 0, 0, 0, 58]);
        assert_eq!(
            pseudo_header_v6(src6, dst6, IpProtocol::ICMPV6, 0x10020),
            data(&manual6)
        );
        assert_eq!(
            pseudo_header(&src.into(), &dst.into(), IpProtocol::TCP, 20),
            pseudo_header_v4(src, dst, IpProtocol::TCP, 20)
        );
        assert_eq!(
            pseudo_header(&src.into(), &dst6.into(), IpProtocol::TCP, 20),
            pseudo_header_v6(src.to_ipv6_mapped(), dst6, IpProtocol::TCP, 20)
        );
    }

    #[test]
    fn rfc1624_corner_case() {
        // RFC 1624 §3: a header whose sum is 0xCD7A with a word 0x5555 changed to 0x3285.
        // Eqn. 3 must give 0x0000, not the 0xFFFF that eqn. 2 (RFC 1141) gives.
        assert_eq!(update16(0xDD2F, 0x5555, 0x3285), 0x0000);
    }

    mod prop {
        use super::super::*;
        use super::reference_sum;
        use proptest::prelude::*;

        /// Words biased towards the ones-complement corner values.
        fn word() -> impl Strategy<Value = u16> {
            prop_oneof![
                Just(0x0000u16),
                Just(0xFFFFu16),
                Just(0x0001u16),
                Just(0xFFFEu16),
                any::<u16>()
            ]
        }

        fn words() -> impl Strategy<Value = Vec<u16>> {
            prop::collection::vec(word(), 1..40)
        }

        fn bytes_of(words: &[u16]) -> Vec<u8> {
            words.iter().flat_map(|w| w.to_be_bytes()).collect()
        }

        /// A full recomputation of the checksum over `words`.
        fn full(words: &[u16]) -> u16 {
            !data(&bytes_of(words))
        }

        proptest! {
            #[test]
            fn sum_matches_reference(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                prop_assert_eq!(data(&bytes), reference_sum(&bytes));
                let (a, b) = bytes.split_at((bytes.len() / 2) & !1);
                prop_assert_eq!(fold(sum(a) + sum(b)), reference_sum(&bytes));
                prop_assert_eq!(combine(&[data(a), data(b)]), reference_sum(&bytes));
            }

            #[test]
            fn update16_matches_recompute(
                mut ws in words(),
                idx in any::<prop::sample::Index>(),
                new in word(),
            ) {
                let csum = full(&ws);
                let i = idx.index(ws.len());
                let old = ws[i];
                ws[i] = new;
                let updated = update16(csum, old, new);
                if ws.iter().all(|w| *w == 0) {
                    // The one documented disagreement: ±0 when everything is zero.
                    prop_assert_eq!(updated, 0x0000);
                    prop_assert_eq!(full(&ws), 0xFFFF);
                } else {
                    prop_assert_eq!(updated, full(&ws));
                    // The data plus the updated checksum verifies.
                    let mut with_csum = bytes_of(&ws);
                    with_csum.extend_from_slice(&updated.to_be_bytes());
                    prop_assert_eq!(data(&with_csum), 0xFFFF);
                }
            }

            #[test]
            fn update16_with_checksum_in_data(
                mut ws in prop::collection::vec(word(), 2..40),
                idx in any::<prop::sample::Index>(),
                new in word(),
            ) {
                // The checksum lives at word 0 as in a real header.
                ws[0] = 0;
                let csum = full(&ws);
                ws[0] = csum;
                let i = 1 + idx.index(ws.len() - 1);
                let old = ws[i];
                ws[i] = new;
                ws[0] = update16(csum, old, new);
                // (Unless every covered word is zero: the degenerate case above.)
                prop_assume!(ws[1..].iter().any(|w| *w != 0));
                prop_assert_eq!(data(&bytes_of(&ws)), 0xFFFF);
            }

            #[test]
            fn update32_matches_recompute(
                mut ws in prop::collection::vec(word(), 2..40),
                idx in any::<prop::sample::Index>(),
                hi in word(),
                lo in word(),
            ) {
                let csum = full(&ws);
                let i = idx.index(ws.len() - 1);
                let old = (u32::from(ws[i]) << 16) | u32::from(ws[i + 1]);
                let new = (u32::from(hi) << 16) | u32::from(lo);
                ws[i] = hi;
                ws[i + 1] = lo;
                let updated = update32(csum, old, new);
                if ws.iter().any(|w| *w != 0) {
                    prop_assert_eq!(updated, full(&ws));
                }
                // Two 16-bit updates in a row give the same result.
                let twice = update16(update16(csum, (old >> 16) as u16, hi), old as u16, lo);
                prop_assert_eq!(updated, twice);
            }

            #[test]
            fn update_addr_matches_recompute(
                prefix in words(),
                old4 in any::<u32>(),
                new4 in any::<u32>(),
                old6 in any::<u128>(),
                new6 in any::<u128>(),
            ) {
                let (old4, new4) = (Ipv4Addr::from(old4), Ipv4Addr::from(new4));
                let (old6, new6) = (Ipv6Addr::from(old6), Ipv6Addr::from(new6));
                // prefix words followed by the address, like a header.
                let mut with4 = bytes_of(&prefix);
                with4.extend_from_slice(&old4.octets());
                let mut after4 = bytes_of(&prefix);
                after4.extend_from_slice(&new4.octets());
                let updated = update_addr_v4(!data(&with4), old4, new4);
                if after4.iter().any(|b| *b != 0) {
                    prop_assert_eq!(updated, !data(&after4));
                }
                let mut with6 = bytes_of(&prefix);
                with6.extend_from_slice(&old6.octets());
                let mut after6 = bytes_of(&prefix);
                after6.extend_from_slice(&new6.octets());
                let updated = update_addr_v6(!data(&with6), old6, new6);
                if after6.iter().any(|b| *b != 0) {
                    prop_assert_eq!(updated, !data(&after6));
                }
            }
        }
    }
}
