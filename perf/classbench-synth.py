#!/usr/bin/env python3
"""Generates ClassBench-format rule sets and traces unlike the shared acl1 sets, to check
the classifier beyond them (benchmark input, not test fixtures).

  perf/classbench-synth.py OUT_DIR [--seed N]

Writes, per kind and size, OUT_DIR/<kind>_<size> (rules, `dpdk-test-acl` format) and
OUT_DIR/<kind>_<size>_trace (keys: two thirds drawn inside a random rule, one third
uniformly random). Kinds:
  fw   firewall-like: 45 % of addresses any, 15 % /1-/16, the rest /17-/32; half the
       port ranges any, the rest 1024-65535, 0-1023, well-known ports or random spans;
       tcp, udp or any.
  ipc  mixed: addresses /8-/32 with 20 % any, destination ports mostly exact, source
       ports mostly any, tcp/udp/icmp/any.
"""
import argparse
import os
import random

WELL_KNOWN = [21, 22, 23, 25, 53, 80, 110, 123, 143, 161, 389, 443, 445, 993, 3306, 5432, 6379, 8080]


def prefix(rng, any_share, short_share):
    r = rng.random()
    if r < any_share:
        return 0, 0
    if r < any_share + short_share:
        length = rng.randint(1, 16)
    else:
        length = rng.choice([17, 20, 22, 24, 24, 24, 26, 28, 30, 32, 32, 32])
    addr = rng.getrandbits(32) & (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
    return addr, length


def port_range(rng, any_share, exact_share):
    r = rng.random()
    if r < any_share:
        return 0, 65535
    if r < any_share + exact_share:
        p = rng.choice(WELL_KNOWN) if rng.random() < 0.7 else rng.randint(1, 65535)
        return p, p
    kind = rng.random()
    if kind < 0.4:
        return 1024, 65535
    if kind < 0.6:
        return 0, 1023
    lo = rng.randint(0, 65000)
    return lo, min(65535, lo + rng.randint(1, 2000))


def rule(rng, kind):
    if kind == "fw":
        src = prefix(rng, 0.45, 0.15)
        dst = prefix(rng, 0.30, 0.15)
        sp = port_range(rng, 0.75, 0.05)
        dp = port_range(rng, 0.40, 0.35)
        proto = rng.choice([(6, 0xFF), (6, 0xFF), (17, 0xFF), (0, 0)])
    else:
        src = prefix(rng, 0.20, 0.10)
        dst = prefix(rng, 0.20, 0.10)
        sp = port_range(rng, 0.85, 0.10)
        dp = port_range(rng, 0.25, 0.60)
        proto = rng.choice([(6, 0xFF), (6, 0xFF), (17, 0xFF), (1, 0xFF), (0, 0)])
    return src, dst, sp, dp, proto


def dotted(addr):
    return ".".join(str((addr >> s) & 0xFF) for s in (24, 16, 8, 0))


def inside(rng, rule):
    (sa, sl), (da, dl), sp, dp, (proto, mask) = rule
    host = lambda a, l: a | (rng.getrandbits(32) & ((1 << (32 - l)) - 1))
    p = proto if mask else rng.choice([6, 17, 1])
    return host(sa, sl), host(da, dl), rng.randint(*sp), rng.randint(*dp), p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--trace", type=int, default=10, help="trace lines per rule")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for kind in ("fw", "ipc"):
        for size in map(int, args.sizes.split(",")):
            rng = random.Random(args.seed * 7919 + size + (0 if kind == "fw" else 1))
            rules = [rule(rng, kind) for _ in range(size)]
            name = f"{kind}_{size // 1000}k"
            with open(os.path.join(args.out, name), "w") as f:
                for (sa, sl), (da, dl), sp, dp, (proto, mask) in rules:
                    f.write(f"@{dotted(sa)}/{sl}\t{dotted(da)}/{dl}\t{sp[0]} : {sp[1]}\t"
                            f"{dp[0]} : {dp[1]}\t0x{proto:02X}/0x{mask:02X}\t\n")
            with open(os.path.join(args.out, name + "_trace"), "w") as f:
                for _ in range(size * args.trace):
                    if rng.random() < 2 / 3:
                        s, d, a, b, p = inside(rng, rng.choice(rules))
                    else:
                        s, d = rng.getrandbits(32), rng.getrandbits(32)
                        a, b, p = rng.randint(0, 65535), rng.randint(0, 65535), rng.choice([6, 17, 1])
                    f.write(f"{s}\t{d}\t{a}\t{b}\t{p}\t0\t0\n")


if __name__ == "__main__":
    main()
