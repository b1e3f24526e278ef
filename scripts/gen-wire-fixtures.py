#!/usr/bin/env python3
"""Write the golden packets for dataplane/tests/wire_golden.rs.

scapy is the independent encoder: each packet is built here, serialised by scapy (which
fills in lengths and checksums), dissected again by scapy, and the field values scapy
reads back are written next to the hex. The Rust test parses the hex with
`ferrule_dataplane::wire` and must report the same values.

Usage (from the repository root):
    python3 -m venv .venv && .venv/bin/pip install scapy
    .venv/bin/python scripts/gen-wire-fixtures.py

Output: dataplane/tests/fixtures/wire/<name>.hex, one packet per file:
    # <name>: <what it is>
    # scapy: <the expression that built it>
    <key> = <value>        (one per line; integers in decimal, addresses canonical)
    hex = <the frame, Ethernet header first>
The files are committed, so the Rust tests do not need scapy.
"""

import os
import sys

from scapy.config import conf

conf.verb = 0
conf.ipv6_enabled = True

from scapy.all import (  # noqa: E402
    ARP,
    ICMP,
    IP,
    SCTP,
    TCP,
    UDP,
    Dot1AD,
    Dot1Q,
    Ether,
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    ICMPv6TimeExceeded,
    IPerror,
    IPerror6,
    IPOption_Router_Alert,
    IPOption_RR,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    Padding,
    Raw,
    SCTPChunkInit,
    TCPerror,
    UDPerror,
    raw,
)

OUT_DIR = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "dataplane", "tests", "fixtures", "wire"
)

MAC_A = "02:00:00:00:00:01"
MAC_B = "02:00:00:00:00:02"
LL_A = "fe80::ff:fe00:1"
LL_B = "fe80::ff:fe00:2"

# Each fixture: (name, description, scapy expression). The expression is eval'd so the
# exact construction is what gets recorded in the file.
FIXTURES = [
    (
        "arp_who_has",
        "ARP request: who has 10.0.0.2, tell 10.0.0.1",
        f'Ether(dst="ff:ff:ff:ff:ff:ff", src="{MAC_A}")'
        f' / ARP(op="who-has", hwsrc="{MAC_A}", psrc="10.0.0.1", pdst="10.0.0.2")',
    ),
    (
        "arp_is_at",
        "ARP reply: 10.0.0.2 is at 02:00:00:00:00:02, padded to the 60-byte minimum",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        f' / ARP(op="is-at", hwsrc="{MAC_B}", psrc="10.0.0.2", hwdst="{MAC_A}", pdst="10.0.0.1")'
        " / Padding(load=bytes(18))",
    ),
    (
        "ipv4_icmp_echo_request",
        "ICMP echo request with 56 data bytes, DF set",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="192.168.1.10", dst="192.168.1.1", ttl=64, id=0x1c46, flags="DF")'
        " / ICMP(type=8, id=0x0d2f, seq=1) / Raw(load=bytes(range(56)))",
    ),
    (
        "ipv4_icmp_echo_reply",
        "ICMP echo reply with 8 data bytes and a non-zero DSCP/ECN",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IP(src="192.168.1.1", dst="192.168.1.10", ttl=255, id=7, tos=0xb9)'
        ' / ICMP(type=0, id=0x0d2f, seq=65535) / Raw(load=b"ferrule!")',
    ),
    (
        "ipv6_icmpv6_echo_request",
        "ICMPv6 echo request with traffic class and flow label",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IPv6(src="2001:db8::10", dst="2001:db8::1", hlim=64, tc=0x28, fl=0xabcde)'
        ' / ICMPv6EchoRequest(id=0x1234, seq=7, data=b"0123456789abcdef")',
    ),
    (
        "ipv6_icmpv6_echo_reply",
        "ICMPv6 echo reply, empty data",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IPv6(src="2001:db8::1", dst="2001:db8::10", hlim=255)'
        " / ICMPv6EchoReply(id=0x1234, seq=7)",
    ),
    (
        "icmpv6_ns_sll",
        "Neighbor Solicitation for fe80::ff:fe00:2 to its solicited-node group, with a"
        " source link-layer address option",
        f'Ether(dst="33:33:ff:00:00:02", src="{MAC_A}")'
        f' / IPv6(src="{LL_A}", dst="ff02::1:ff00:2", hlim=255)'
        f' / ICMPv6ND_NS(tgt="{LL_B}") / ICMPv6NDOptSrcLLAddr(lladdr="{MAC_A}")',
    ),
    (
        "icmpv6_na_tll",
        "Solicited Neighbor Advertisement (R, S, O) with a target link-layer address option",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        f' / IPv6(src="{LL_B}", dst="{LL_A}", hlim=255)'
        f' / ICMPv6ND_NA(R=1, S=1, O=1, tgt="{LL_B}") / ICMPv6NDOptDstLLAddr(lladdr="{MAC_B}")',
    ),
    (
        "icmpv6_na_unsolicited",
        "Unsolicited Neighbor Advertisement (O only) to all-nodes, no option",
        f'Ether(dst="33:33:00:00:00:01", src="{MAC_B}")'
        f' / IPv6(src="{LL_B}", dst="ff02::1", hlim=255)'
        f' / ICMPv6ND_NA(R=0, S=0, O=1, tgt="{LL_B}")',
    ),
    (
        "icmpv6_rs_sll",
        "Router Solicitation to all-routers with a source link-layer address option",
        f'Ether(dst="33:33:00:00:00:02", src="{MAC_A}")'
        f' / IPv6(src="{LL_A}", dst="ff02::2", hlim=255)'
        f' / ICMPv6ND_RS() / ICMPv6NDOptSrcLLAddr(lladdr="{MAC_A}")',
    ),
    (
        "icmpv6_ra_options",
        "Router Advertisement with SLL, MTU and prefix information options",
        f'Ether(dst="33:33:00:00:00:01", src="{MAC_B}")'
        f' / IPv6(src="{LL_B}", dst="ff02::1", hlim=255)'
        " / ICMPv6ND_RA(chlim=64, M=1, O=0, routerlifetime=1800, reachabletime=30000,"
        " retranstimer=1000)"
        f' / ICMPv6NDOptSrcLLAddr(lladdr="{MAC_B}") / ICMPv6NDOptMTU(mtu=1500)'
        ' / ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::", prefixlen=64)',
    ),
    (
        "ipv4_tcp_syn_options",
        "TCP SYN with MSS, SACK-permitted, timestamps, NOP and window scale options",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="10.1.0.5", dst="10.2.0.9", ttl=63, id=54321, flags="DF")'
        ' / TCP(sport=51234, dport=443, seq=0x3a7e2c41, flags="S", window=64240,'
        ' options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (123456, 0)), ("NOP", None),'
        ' ("WScale", 7)])',
    ),
    (
        "ipv4_tcp_psh_ack_payload",
        "TCP PSH,ACK carrying an HTTP request line, no options",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="10.1.0.5", dst="10.2.0.9", ttl=64, id=2)'
        ' / TCP(sport=51234, dport=80, seq=1000, ack=2000, flags="PA", window=502)'
        ' / Raw(load=b"GET / HTTP/1.1\\r\\n\\r\\n")',
    ),
    (
        "ipv6_tcp_fin_ack_urg",
        "TCP over IPv6 with FIN, ACK, URG, ECE, CWR and an urgent pointer",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IPv6(src="2001:db8:a::1", dst="2001:db8:b::2", hlim=60)'
        ' / TCP(sport=22, dport=60000, seq=4294967295, ack=1, flags="FAUEC", window=0,'
        ' urgptr=3) / Raw(load=b"abc")',
    ),
    (
        "ipv6_udp_hbh_frag",
        "UDP over IPv6 behind a Hop-by-Hop header and a first-fragment Fragment header",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=64)'
        " / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(id=0xdeadbeef, m=1, offset=0)"
        ' / UDP(sport=5353, dport=5353) / Raw(load=b"fragment zero payload")',
    ),
    (
        "ipv6_frag_nonfirst",
        "A non-first IPv6 fragment (offset 1448 bytes, last): no transport header",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=64)'
        " / IPv6ExtHdrFragment(nh=17, id=0xdeadbeef, m=0, offset=181)"
        ' / Raw(load=b"tail of the datagram")',
    ),
    (
        "ipv6_routing_destopt_udp",
        "UDP over IPv6 behind a Routing header (type 0, 2 addresses) and Destination Options",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=64)'
        ' / IPv6ExtHdrRouting(addresses=["2001:db8::3", "2001:db8::4"], segleft=2)'
        ' / IPv6ExtHdrDestOpt() / UDP(sport=1000, dport=2000) / Raw(load=b"x" * 5)',
    ),
    (
        "ipv4_options_udp",
        "IPv4 with Record Route (3 slots) and Router Alert options carrying UDP",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="172.16.0.1", dst="172.16.0.2", ttl=1, id=99,'
        ' options=[IPOption_RR(routers=["0.0.0.0", "0.0.0.0", "0.0.0.0"]),'
        " IPOption_Router_Alert()])"
        ' / UDP(sport=3784, dport=3784) / Raw(load=b"bfd!")',
    ),
    (
        "ipv4_udp_padded",
        "A short UDP datagram in a frame padded to 60 bytes: padding is not payload",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, id=1)'
        ' / UDP(sport=68, dport=67) / Raw(load=b"hi") / Padding(load=bytes(16))',
    ),
    (
        "ipv4_udp_zero_checksum",
        "UDP over IPv4 with checksum 0 (not computed), which is valid for IPv4",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, id=1)'
        ' / UDP(sport=4789, dport=4789, chksum=0) / Raw(load=bytes(range(32)))',
    ),
    (
        "icmp_time_exceeded_udp",
        "ICMP time exceeded from a router, quoting the expired UDP datagram in full",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IP(src="192.0.2.1", dst="10.0.0.1", ttl=255, id=4242)'
        " / ICMP(type=11, code=0)"
        ' / IPerror(src="10.0.0.1", dst="198.51.100.7", ttl=1, id=777)'
        ' / UDPerror(sport=33434, dport=33435) / Raw(load=b"traceroute")',
    ),
    (
        "icmp_frag_needed_tcp",
        "ICMP destination unreachable, fragmentation needed (next-hop MTU 1400), quoting a"
        " TCP header",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IP(src="192.0.2.1", dst="10.0.0.1", ttl=255, id=1)'
        " / ICMP(type=3, code=4, nexthopmtu=1400)"
        ' / IPerror(src="10.0.0.1", dst="203.0.113.5", ttl=60, flags="DF")'
        ' / TCPerror(sport=40000, dport=443, seq=1, flags="A")',
    ),
    (
        "icmpv6_packet_too_big",
        "ICMPv6 packet too big (MTU 1280) quoting an IPv6/UDP packet",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IPv6(src="2001:db8::fe", dst="2001:db8::10", hlim=255)'
        " / ICMPv6PacketTooBig(mtu=1280)"
        ' / IPerror6(src="2001:db8::10", dst="2001:db8:ff::1", hlim=63)'
        ' / UDPerror(sport=5000, dport=6000) / Raw(load=bytes(40))',
    ),
    (
        "icmpv6_time_exceeded",
        "ICMPv6 hop limit exceeded quoting an IPv6/TCP packet",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IPv6(src="2001:db8::fe", dst="2001:db8::10", hlim=255)'
        " / ICMPv6TimeExceeded(code=0)"
        ' / IPerror6(src="2001:db8::10", dst="2001:db8:ff::1", hlim=1)'
        ' / TCPerror(sport=40001, dport=22, flags="S")',
    ),
    (
        "icmpv6_port_unreachable",
        "ICMPv6 destination unreachable (port) quoting an IPv6/UDP packet",
        f'Ether(dst="{MAC_A}", src="{MAC_B}")'
        ' / IPv6(src="2001:db8::2", dst="2001:db8::10", hlim=64)'
        " / ICMPv6DestUnreach(code=4)"
        ' / IPerror6(src="2001:db8::10", dst="2001:db8::2", hlim=64)'
        ' / UDPerror(sport=5001, dport=9)',
    ),
    (
        "sctp_init",
        "SCTP INIT (verification tag 0) with a valid CRC32c",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        ' / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, id=3)'
        " / SCTP(sport=5000, dport=38412, tag=0)"
        " / SCTPChunkInit(init_tag=0x11223344, a_rwnd=106496, n_out_streams=10,"
        " n_in_streams=65535, init_tsn=0x55667788)",
    ),
    (
        "dot1q_ipv4_udp",
        "802.1Q-tagged frame (VLAN 100, PCP 5, DEI 1) carrying IPv4/UDP",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        " / Dot1Q(vlan=100, prio=5, id=1)"
        ' / IP(src="10.100.0.1", dst="10.100.0.2", ttl=64, id=100)'
        ' / UDP(sport=1234, dport=53) / Raw(load=b"\\x12\\x34query")',
    ),
    (
        "qinq_ipv6_tcp",
        "QinQ frame: 802.1ad outer tag (VLAN 10, PCP 3) then 802.1Q inner tag (VLAN 20)"
        " carrying IPv6/TCP",
        f'Ether(dst="{MAC_B}", src="{MAC_A}")'
        " / Dot1AD(vlan=10, prio=3) / Dot1Q(vlan=20)"
        ' / IPv6(src="fd00::1", dst="fd00::2", hlim=64)'
        ' / TCP(sport=8080, dport=45000, seq=1, ack=1, flags="A", window=1024)',
    ),
    (
        "dot1q_arp",
        "802.1Q-tagged ARP request (VLAN 4094, PCP 7)",
        f'Ether(dst="ff:ff:ff:ff:ff:ff", src="{MAC_A}")'
        " / Dot1Q(vlan=4094, prio=7)"
        f' / ARP(op="who-has", hwsrc="{MAC_A}", psrc="10.9.0.1", pdst="10.9.0.254")',
    ),
]


def ipv6_ext_classes():
    return (IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment)


def describe(pkt):
    """The expected values, read back from scapy's own dissection of the bytes."""
    frame = raw(pkt)
    p = Ether(frame)
    out = []

    def put(key, value):
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))

    put("eth.dst", p[Ether].dst)
    put("eth.src", p[Ether].src)
    put("eth.type", p[Ether].type)

    layer = p[Ether].payload
    tags = 0
    while isinstance(layer, (Dot1Q, Dot1AD)):
        put(f"vlan.{tags}.vid", layer.vlan)
        put(f"vlan.{tags}.pcp", layer.prio)
        put(f"vlan.{tags}.dei", layer.id)
        put(f"vlan.{tags}.type", layer.type)
        tags += 1
        layer = layer.payload
    put("vlan.count", tags)
    l3_offset = len(frame) - len(raw(layer))
    put("l3.offset", l3_offset)

    if isinstance(layer, ARP):
        a = layer
        put("arp.hwtype", a.hwtype)
        put("arp.ptype", a.ptype)
        put("arp.hwlen", a.hwlen)
        put("arp.plen", a.plen)
        put("arp.op", a.op)
        put("arp.hwsrc", a.hwsrc)
        put("arp.psrc", a.psrc)
        put("arp.hwdst", a.hwdst)
        put("arp.pdst", a.pdst)
        return frame, out

    if isinstance(layer, IP):
        ip = layer
        put("ip.version", ip.version)
        put("ip.header_len", ip.ihl * 4)
        put("ip.tos", ip.tos)
        put("ip.len", ip.len)
        put("ip.id", ip.id)
        put("ip.df", bool(ip.flags.DF))
        put("ip.mf", bool(ip.flags.MF))
        put("ip.frag_offset", ip.frag * 8)
        put("ip.ttl", ip.ttl)
        put("ip.proto", ip.proto)
        put("ip.chksum", ip.chksum)
        put("ip.src", ip.src)
        put("ip.dst", ip.dst)
        put("ip.options_len", ip.ihl * 4 - 20)
        put("ip.payload_len", ip.len - ip.ihl * 4)
        l4 = ip.payload
        l4_len = ip.len - ip.ihl * 4
    elif isinstance(layer, IPv6):
        ip6 = layer
        put("ip6.version", ip6.version)
        put("ip6.tc", ip6.tc)
        put("ip6.fl", ip6.fl)
        put("ip6.plen", ip6.plen)
        put("ip6.nh", ip6.nh)
        put("ip6.hlim", ip6.hlim)
        put("ip6.src", ip6.src)
        put("ip6.dst", ip6.dst)
        # Walk the extension headers the way RFC 8200 says.
        l4 = ip6.payload
        proto = ip6.nh
        while isinstance(l4, ipv6_ext_classes()):
            if isinstance(l4, IPv6ExtHdrFragment):
                put("ip6.frag.offset", l4.offset * 8)
                put("ip6.frag.m", bool(l4.m))
                put("ip6.frag.id", l4.id)
                if l4.offset != 0:
                    proto = l4.nh
                    l4 = l4.payload
                    break
            proto = l4.nh
            l4 = l4.payload
        put("ip6.l4.proto", proto)
        l4_offset = len(raw(ip6)) - len(raw(l4))
        put("ip6.l4.offset", l4_offset)
        l4_len = 40 + ip6.plen - l4_offset
        if "ip6.frag.offset" in dict(out) and dict(out)["ip6.frag.offset"] != "0":
            put("ip6.l4.len", l4_len)
            return frame, out
    else:
        raise SystemExit(f"unexpected L3 {layer!r}")

    put("l4.len", l4_len)
    if isinstance(l4, TCP):
        t = l4
        put("tcp.sport", t.sport)
        put("tcp.dport", t.dport)
        put("tcp.seq", t.seq)
        put("tcp.ack", t.ack)
        put("tcp.header_len", t.dataofs * 4)
        put("tcp.flags", int(t.flags))
        put("tcp.window", t.window)
        put("tcp.chksum", t.chksum)
        put("tcp.urgptr", t.urgptr)
        put("tcp.options_len", t.dataofs * 4 - 20)
        put("tcp.payload_len", l4_len - t.dataofs * 4)
    elif isinstance(l4, UDP):
        u = l4
        put("udp.sport", u.sport)
        put("udp.dport", u.dport)
        put("udp.len", u.len)
        put("udp.chksum", u.chksum)
        put("udp.payload_len", u.len - 8)
    elif isinstance(l4, ICMP):
        i = l4
        put("icmp.type", i.type)
        put("icmp.code", i.code)
        put("icmp.chksum", i.chksum)
        put("icmp.data_len", l4_len - 8)
        if i.type in (0, 8):
            put("icmp.id", i.id)
            put("icmp.seq", i.seq)
        if i.type == 3 and i.code == 4:
            put("icmp.nexthopmtu", i.nexthopmtu)
        if IPerror in i:
            q = i[IPerror]
            put("icmp.quoted.ip.src", q.src)
            put("icmp.quoted.ip.dst", q.dst)
            put("icmp.quoted.ip.proto", q.proto)
            put("icmp.quoted.ip.ttl", q.ttl)
            for cls in (UDPerror, TCPerror):
                if cls in q:
                    put("icmp.quoted.l4.sport", q[cls].sport)
                    put("icmp.quoted.l4.dport", q[cls].dport)
    elif isinstance(l4, SCTP):
        s = l4
        put("sctp.sport", s.sport)
        put("sctp.dport", s.dport)
        put("sctp.tag", s.tag)
        put("sctp.chksum", s.chksum)
        chunk = s.payload
        put("sctp.chunk.0.type", chunk.type)
        put("sctp.chunk.0.len", chunk.len)
        if isinstance(chunk, SCTPChunkInit):
            put("sctp.init.init_tag", chunk.init_tag)
    elif l4.name.startswith("ICMPv6") or "ICMPv6" in type(l4).__name__:
        i = l4
        put("icmp6.type", i.type)
        put("icmp6.code", i.code)
        put("icmp6.cksum", i.cksum)
        put("icmp6.data_len", l4_len - 8)
        if isinstance(i, (ICMPv6EchoRequest, ICMPv6EchoReply)):
            put("icmp6.id", i.id)
            put("icmp6.seq", i.seq)
        if isinstance(i, ICMPv6PacketTooBig):
            put("icmp6.mtu", i.mtu)
        if isinstance(i, (ICMPv6ND_NS, ICMPv6ND_NA)):
            put("icmp6.tgt", i.tgt)
        if isinstance(i, ICMPv6ND_NA):
            put("icmp6.flag.r", bool(i.R))
            put("icmp6.flag.s", bool(i.S))
            put("icmp6.flag.o", bool(i.O))
        if isinstance(i, ICMPv6ND_RA):
            put("icmp6.ra.chlim", i.chlim)
            put("icmp6.ra.m", bool(i.M))
            put("icmp6.ra.o", bool(i.O))
            put("icmp6.ra.lifetime", i.routerlifetime)
            put("icmp6.ra.reachable", i.reachabletime)
            put("icmp6.ra.retrans", i.retranstimer)
        if isinstance(i, (ICMPv6ND_NS, ICMPv6ND_NA, ICMPv6ND_RS, ICMPv6ND_RA)):
            opt = i.payload
            n = 0
            while opt is not None and not isinstance(opt, (Raw, Padding)):
                if opt.name == "NoPayload" or not hasattr(opt, "len") or not hasattr(opt, "type"):
                    break
                put(f"icmp6.opt.{n}.type", opt.type)
                put(f"icmp6.opt.{n}.len", opt.len)
                if isinstance(opt, (ICMPv6NDOptSrcLLAddr, ICMPv6NDOptDstLLAddr)):
                    put(f"icmp6.opt.{n}.lladdr", opt.lladdr)
                if isinstance(opt, ICMPv6NDOptMTU):
                    put(f"icmp6.opt.{n}.mtu", opt.mtu)
                n += 1
                opt = opt.payload
            put("icmp6.opt.count", n)
        if IPerror6 in i:
            q = i[IPerror6]
            put("icmp6.quoted.ip6.src", q.src)
            put("icmp6.quoted.ip6.dst", q.dst)
            put("icmp6.quoted.ip6.nh", q.nh)
            put("icmp6.quoted.ip6.hlim", q.hlim)
            for cls in (UDPerror, TCPerror):
                if cls in q:
                    put("icmp6.quoted.l4.sport", q[cls].sport)
                    put("icmp6.quoted.l4.dport", q[cls].dport)
    else:
        raise SystemExit(f"unexpected L4 {l4!r}")
    return frame, out


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    names = set()
    for name, description, expr in FIXTURES:
        assert name not in names, name
        names.add(name)
        pkt = eval(expr)  # noqa: S307 - the expressions are the literals above
        frame, values = describe(pkt)
        keys = [k for k, _ in values]
        assert len(keys) == len(set(keys)), f"{name}: duplicate keys"
        lines = [f"# {name}: {description}", f"# scapy: {expr}"]
        lines += [f"{key} = {value}" for key, value in values]
        lines.append(f"hex = {frame.hex()}")
        path = os.path.join(OUT_DIR, f"{name}.hex")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{path}: {len(frame)} bytes, {len(values)} values", file=sys.stderr)


if __name__ == "__main__":
    main()
