#!/usr/bin/env python3
"""Write the NAT rewrite fixtures for dataplane/tests/nat_rewrite.rs.

scapy is the independent implementation: for each case it builds the packet as it
arrives and, separately, the packet as it must leave after translation, each
serialised by scapy with every length and checksum computed from scratch. The Rust
test applies Ferrule's incremental rewrite to the first and must produce the second
byte for byte.

Usage (from the repository root):
    python3 -m venv .venv && .venv/bin/pip install scapy
    .venv/bin/python scripts/gen-nat-fixtures.py

Output: dataplane/tests/fixtures/nat/<name>.txt, one case per file:
    # <name>: <what it is>
    op = rewrite | icmp-error
    which = src | dst                      (rewrite: the endpoint changed)
    addr = <IPv4> / port = <n>             (rewrite: its new address and port)
    outer = src|dst <IPv4>                 (icmp-error: the error's own endpoint)
    inner = src|dst <IPv4> <port>          (icmp-error: the quoted packet's endpoint)
    quoted = <proto> <src> <sport> <dst> <dport>   (icmp-error: the quoted flow, before)
    in = <hex>
    out = <hex>
"""

import os

from scapy.config import conf

conf.verb = 0

from scapy.all import ICMP, IP, TCP, UDP, Ether, Raw  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "dataplane", "tests", "fixtures", "nat")

POD, NODE, REMOTE = "10.1.0.2", "192.0.2.10", "8.8.8.8"
ETH = Ether(src="02:00:00:0a:01:02", dst="02:fe:00:00:00:0a")


def hexof(p):
    return bytes(p).hex()


def write(name, what, fields, before, after):
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write(f"# {name}: {what}\n")
        for k, v in fields:
            f.write(f"{k} = {v}\n")
        f.write(f"in = {hexof(before)}\n")
        f.write(f"out = {hexof(after)}\n")


def rewrite(name, what, which, addr, port, before, after):
    write(name, what, [("op", "rewrite"), ("which", which), ("addr", addr), ("port", port)], before, after)


def icmp_error(name, what, outer, inner, quoted, before, after):
    write(
        name,
        what,
        [("op", "icmp-error"), ("outer", outer), ("inner", inner), ("quoted", quoted)],
        before,
        after,
    )


def main():
    os.makedirs(OUT, exist_ok=True)
    data = Raw(b"ferrule-nat-payload")
    # Outbound, source rewritten to the node IP and a SNAT port.
    rewrite(
        "tcp_syn_snat", "a pod's TCP SYN masqueraded", "src", NODE, 61000,
        ETH / IP(src=POD, dst=REMOTE, ttl=63, id=7) / TCP(sport=40000, dport=443, flags="S", seq=1000, options=[("MSS", 1460)]),
        ETH / IP(src=NODE, dst=REMOTE, ttl=63, id=7) / TCP(sport=61000, dport=443, flags="S", seq=1000, options=[("MSS", 1460)]),
    )
    rewrite(
        "udp_snat", "a pod's UDP datagram masqueraded", "src", NODE, 1024,
        ETH / IP(src=POD, dst=REMOTE, id=8) / UDP(sport=5353, dport=53) / data,
        ETH / IP(src=NODE, dst=REMOTE, id=8) / UDP(sport=1024, dport=53) / data,
    )
    nochk_in = ETH / IP(src=POD, dst=REMOTE, id=9) / UDP(sport=5353, dport=53, chksum=0) / data
    nochk_out = ETH / IP(src=NODE, dst=REMOTE, id=9) / UDP(sport=1025, dport=53, chksum=0) / data
    rewrite("udp_no_checksum_snat", "UDP without a checksum stays without one", "src", NODE, 1025, nochk_in, nochk_out)
    rewrite(
        "icmp_echo_snat", "a pod's ping: address and echo identifier masqueraded", "src", NODE, 65535,
        ETH / IP(src=POD, dst=REMOTE, id=10) / ICMP(type=8, id=0x1234, seq=3) / data,
        ETH / IP(src=NODE, dst=REMOTE, id=10) / ICMP(type=8, id=65535, seq=3) / data,
    )
    # Inbound replies, destination translated back to the pod.
    rewrite(
        "tcp_synack_unsnat", "the SYN-ACK translated back to the pod", "dst", POD, 40000,
        ETH / IP(src=REMOTE, dst=NODE, id=11) / TCP(sport=443, dport=61000, flags="SA", seq=5, ack=1001),
        ETH / IP(src=REMOTE, dst=POD, id=11) / TCP(sport=443, dport=40000, flags="SA", seq=5, ack=1001),
    )
    rewrite(
        "icmp_echo_reply_unsnat", "the echo reply translated back: address and identifier", "dst", POD, 0x1234,
        ETH / IP(src=REMOTE, dst=NODE, id=12) / ICMP(type=0, id=65535, seq=3) / data,
        ETH / IP(src=REMOTE, dst=POD, id=12) / ICMP(type=0, id=0x1234, seq=3) / data,
    )
    rewrite(
        "udp_checksum_becomes_ffff", "a UDP checksum that would be 0 is sent as 0xffff",
        "src", NODE, 0,
        *zero_sum_udp(),
    )

    # ICMP errors about a masqueraded connection, from the remote side: the error goes
    # to the node IP and quotes the packet as it left (node IP, SNAT port).
    quoted_out = IP(src=NODE, dst=REMOTE, ttl=1, id=20) / UDP(sport=61000, dport=53) / data
    quoted_back = IP(src=POD, dst=REMOTE, ttl=1, id=20) / UDP(sport=40000, dport=53) / data
    icmp_error(
        "port_unreachable_udp", "port unreachable quoting a masqueraded UDP datagram",
        f"dst {POD}", f"src {POD} 40000", f"17 {NODE} 61000 {REMOTE} 53",
        ETH / IP(src=REMOTE, dst=NODE, id=21) / ICMP(type=3, code=3) / quoted_out,
        ETH / IP(src=REMOTE, dst=POD, id=21) / ICMP(type=3, code=3) / quoted_back,
    )
    tcp_out = IP(src=NODE, dst=REMOTE, id=22) / TCP(sport=61000, dport=443, flags="S", seq=99)
    tcp_back = IP(src=POD, dst=REMOTE, id=22) / TCP(sport=40000, dport=443, flags="S", seq=99)
    icmp_error(
        "time_exceeded_tcp", "time exceeded from a router quoting a masqueraded SYN",
        f"dst {POD}", f"src {POD} 40000", f"6 {NODE} 61000 {REMOTE} 443",
        ETH / IP(src="203.0.113.1", dst=NODE, id=23) / ICMP(type=11, code=0) / tcp_out,
        ETH / IP(src="203.0.113.1", dst=POD, id=23) / ICMP(type=11, code=0) / tcp_back,
    )
    # RFC 792 quotes only 8 bytes of the transport header: the TCP checksum is not in
    # the quote and stays as it was; the ports are.
    short_out = bytes(tcp_out)[:28]
    short_back = bytes(tcp_back)[:20] + bytes(tcp_back)[20:28]
    icmp_error(
        "time_exceeded_short_quote", "a quote of 8 transport bytes: ports translated, no checksum to fix",
        f"dst {POD}", f"src {POD} 40000", f"6 {NODE} 61000 {REMOTE} 443",
        ETH / IP(src="203.0.113.1", dst=NODE, id=24) / ICMP(type=11, code=0) / Raw(short_out),
        ETH / IP(src="203.0.113.1", dst=POD, id=24) / ICMP(type=11, code=0) / Raw(short_back),
    )
    ping_out = IP(src=NODE, dst=REMOTE, ttl=1, id=25) / ICMP(type=8, id=65535, seq=1) / data
    ping_back = IP(src=POD, dst=REMOTE, ttl=1, id=25) / ICMP(type=8, id=0x1234, seq=1) / data
    icmp_error(
        "time_exceeded_echo", "time exceeded quoting a masqueraded ping: identifier translated back",
        f"dst {POD}", f"src {POD} {0x1234}", f"1 {NODE} 65535 {REMOTE} 65535",
        ETH / IP(src="203.0.113.1", dst=NODE, id=26) / ICMP(type=11, code=0) / ping_out,
        ETH / IP(src="203.0.113.1", dst=POD, id=26) / ICMP(type=11, code=0) / ping_back,
    )
    # From the pod's side: the pod reports an error about a packet that reached it
    # translated (remote -> pod); leaving, it quotes remote -> node IP:SNAT port.
    inbound_at_pod = IP(src=REMOTE, dst=POD, id=27) / UDP(sport=53, dport=40000) / data
    inbound_as_sent = IP(src=REMOTE, dst=NODE, id=27) / UDP(sport=53, dport=61000) / data
    icmp_error(
        "port_unreachable_from_pod", "a pod's port unreachable about a translated reply, masqueraded",
        f"src {NODE}", f"dst {NODE} 61000", f"17 {REMOTE} 53 {POD} 40000",
        ETH / IP(src=POD, dst=REMOTE, id=28) / ICMP(type=3, code=3) / inbound_at_pod,
        ETH / IP(src=NODE, dst=REMOTE, id=28) / ICMP(type=3, code=3) / inbound_as_sent,
    )


def zero_sum_udp():
    """A datagram whose checksum after the rewrite computes to 0 (sent as 0xffff):
    search the payload for one."""
    for n in range(65536):
        payload = Raw(n.to_bytes(2, "big") + b"nat")
        after = IP(src=NODE, dst=REMOTE, id=13) / UDP(sport=0, dport=53) / payload
        raw = bytes(after)
        # scapy writes 0xffff when the computed sum is 0.
        if raw[26:28] == b"\xff\xff":
            before = IP(src=POD, dst=REMOTE, id=13) / UDP(sport=40001, dport=53) / payload
            return ETH / before, ETH / after
    raise SystemExit("no zero-sum payload found")


if __name__ == "__main__":
    main()
