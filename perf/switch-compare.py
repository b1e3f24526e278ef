#!/usr/bin/python3
"""Benchmark (not a test): the same ferrule-pktgen traffic through ferruled, OVS-DPDK
and dpdk-testpmd io (the I/O ceiling), on identical vhost-user ports and pinning, in
alternating rounds. Prints a table of medians and writes plots and the raw reports.

Run by perf/switch-compare.sh (which builds and checks the machine first); see
`perf/switch-compare.sh --help` for the options and docs/pktgen.md for the generator.

Topology, for every switch: three vhost-user ports — pod A (the generator transmits),
pod B and an uplink (the generator receives on one of them) — and two busy pollers on
the two CPUs: the generator on CPU 0, the switch's forwarding thread on CPU 1. The
switch's other threads (ferruled's control thread, OVS's main and handler threads)
share CPU 0 with the generator; they sleep while traffic runs.

Cases:
  plain  pod A -> pod B, routed: MACs rewritten, TTL decremented (OVS: mod_dl_src,
         mod_dl_dst, dec_ttl, output — the same work as ferruled's router).
  snat   pod A -> an address outside the VPC through the uplink, masqueraded to the node
         IP (ferruled: `vpc set`; OVS: ct(commit,zone=1,nat(src=node IP))), MACs and TTL
         as above.
  snat-acl  snat behind a 1,000-rule ingress ACL on pod A's port: 999 deny rules the
         traffic does not match, then a permit (OVS: the same rules as OpenFlow flows
         of descending priority in front of the SNAT flow).
testpmd io forwards pod A's port to the receiving port untouched in both cases.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
REL = os.path.join(ROOT, "target", "release")
OVS_VSWITCHD = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
OVS_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"

POD_A_IP, POD_B_IP = "10.1.0.4", "10.1.0.5"
POD_A_MAC, POD_B_MAC, UP_PEER_MAC = "02:00:00:0a:01:04", "02:00:00:0a:01:05", "02:00:00:c0:00:01"
GATEWAY_MAC, UPLINK_MAC = "02:fe:00:00:00:0a", "02:fe:00:00:00:0c"
NODE_IP, NEXT_HOP, REMOTE = "192.0.2.10", "192.0.2.1", "198.51.100.1"
# 4096 source ports x 256 destination ports: up to 1,048,576 flows, at most 4,096 per
# remote address and port (a NAT needs a port per flow and remote endpoint).
SRC_PORTS, DST_PORTS = "1024-5119", "5001-5256"
QUEUE = os.environ.get("FSC_QUEUE", ",queue_size=1024")


def acl_rules(n=1000, seed=23):
    """n-1 deny rules the generated traffic never matches (sources in 10.2.0.0-10.201.255.255,
    other protocols' ports, prefixes /16 to /32), then a permit: (proto, src, dst, dport)
    tuples, dport None for any."""
    import random
    rnd = random.Random(seed)
    rules = []
    for _ in range(n - 1):
        src_len, dst_len = rnd.choice((16, 24, 28, 32)), rnd.choice((0, 8, 16, 24, 32))
        src = (10 << 24) | (rnd.randint(2, 201) << 16) | rnd.getrandbits(16)
        dst = rnd.getrandbits(32)
        mask = lambda length: (0xffffffff << (32 - length)) & 0xffffffff if length else 0
        src &= mask(src_len)
        dst &= mask(dst_len)
        ip = lambda a: ".".join(str((a >> s) & 255) for s in (24, 16, 8, 0))
        rules.append((rnd.choice(("tcp", "udp")), f"{ip(src)}/{src_len}", f"{ip(dst)}/{dst_len}",
                      rnd.randint(1, 65535)))
    return rules


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# Every process started and not yet stopped: whatever fails half-way (a switch that does
# not come up, a command that errors), main() stops them all on the way out.
RUNNING = []


class Proc:
    """A process we started, stopped (SIGINT, then SIGKILL) by its PID only."""

    def __init__(self, argv, logpath, **kw):
        self.log = open(logpath, "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, **kw)
        RUNNING.append(self)

    def alive(self):
        return self.p.poll() is None

    def stop(self, sig=signal.SIGINT, wait=10):
        if self in RUNNING:
            RUNNING.remove(self)
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(wait)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def wait_path(path, secs=30, proc=None):
    end = time.time() + secs
    while not os.path.exists(path):
        if proc is not None and not proc.alive():
            raise RuntimeError(f"process exited before {path} appeared (see {proc.log.name})")
        if time.time() > end:
            raise RuntimeError(f"{path} did not appear within {secs} s")
        time.sleep(0.1)


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


class Switch:
    """What every switch has: its own directory, EAL file prefix and vhost-user sockets
    (`a`, `b`, `up`), and the destination MAC the generator sends to."""
    generator_is_server = False

    def __init__(self, work, kind, tag):
        self.dir = os.path.join(work, f"{kind}-{tag}")
        os.makedirs(self.dir)
        self.prefix = f"fsc-{kind}-{os.getpid()}-{tag}"
        self.gateway_mac = GATEWAY_MAC

    def sock(self, port):
        return os.path.join(self.dir, f"{port}.sock")


class Ferruled(Switch):
    name = "ferruled"

    def __init__(self, work, case, tag):
        super().__init__(work, "fr", tag)
        sock = os.path.join(self.dir, "ctl.sock")
        cfg = os.path.join(self.dir, "ferrule.toml")
        with open(cfg, "w") as f:
            f.write(f"""[eal]
lcores = [0, 1]
memory_mb = 1024
hugepages = true
in_memory = true
file_prefix = "{self.prefix}"
log_level = "error"

[dataplane]
mbufs = 32767

[ct]
max-entries = 2097152

[control]
vhost_dirs = ["{self.dir}"]

[metrics]
listen = ""

[log]
level = "warn"

[[port]]
name = "uplink0"
devargs = "net_vhost0,iface={self.dir}/up.sock,queues=1"
role = "uplink"
mac = "{UPLINK_MAC}"
addresses = ["{NODE_IP}/24"]

[[route]]
prefix = "0.0.0.0/0"
port = "uplink0"
via = "{NEXT_HOP}"

[[neighbor]]
ip = "{NEXT_HOP}"
mac = "{UP_PEER_MAC}"
port = "uplink0"
""")
        self.proc = Proc([os.path.join(REL, "ferruled"), "--config", cfg, "--socket", sock],
                         os.path.join(self.dir, "ferruled.log"))
        self.ctl = [os.path.join(REL, "ferrulectl"), "--socket", sock]
        end = time.time() + 60
        while subprocess.run(self.ctl + ["version"], capture_output=True).returncode != 0:
            if not self.proc.alive() or time.time() > end:
                raise RuntimeError(f"ferruled did not start: see {self.proc.log.name}")
            time.sleep(0.2)
        for name, ip, mac in (("pod-a", POD_A_IP, POD_A_MAC), ("pod-b", POD_B_IP, POD_B_MAC)):
            run(self.ctl + ["port", "add", name, "--vhost-user", self.sock(name[-1]),
                            "--ip", ip, "--mac", mac])
        ports = json.loads(run(self.ctl + ["--json", "ports"]))["ports"]
        self.gateway_mac = next(p["gateway_mac"] for p in ports if p["name"] == "pod-a")
        if case in ("snat", "snat-acl"):
            run(self.ctl + ["vpc", "set", "--node-ip", NODE_IP, "--vpc-cidr", "10.1.0.0/16",
                            "--vpc-cidr", "192.0.2.0/24"])
        if case == "snat-acl":
            rules = [dict(action="deny", proto=p, src=src, dst=dst, dst_port=port)
                     for p, src, dst, port in acl_rules()] + [dict(action="permit")]
            path = os.path.join(self.dir, "acl.json")
            with open(path, "w") as f:
                json.dump(dict(tables=[dict(name="pod-a-ingress", rules=rules)],
                               attach=[dict(port="pod-a", direction="ingress",
                                            table="pod-a-ingress")]), f)
            run(self.ctl + ["acl", "apply", "-f", path])

    def stop(self):
        self.proc.stop()


class Ovs(Switch):
    name = "ovs-dpdk"
    generator_is_server = True  # dpdkvhostuserclient ports: the generator's virtio_user serves

    def __init__(self, work, case, tag):
        super().__init__(work, "ovs", tag)
        d = self.dir
        env = dict(os.environ, OVS_RUNDIR=d, OVS_LOGDIR=d, OVS_DBDIR=d, OVS_SYSCONFDIR=d)
        self.env = env
        run(["ovsdb-tool", "create", f"{d}/conf.db", OVS_SCHEMA], env=env)
        self.db = Proc(["ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock",
                        f"--pidfile={d}/ovsdb-server.pid", f"--unixctl={d}/ovsdb-server.ctl"],
                       f"{d}/ovsdb-server.log", env=env)
        wait_path(f"{d}/db.sock", proc=self.db)
        self.vsctl = ["ovs-vsctl", f"--db=unix:{d}/db.sock", "--timeout=30"]
        run(self.vsctl + ["--no-wait", "init"], env=env)
        run(self.vsctl + ["--no-wait", "set", "Open_vSwitch", ".",
                          "other_config:dpdk-init=true",
                          f'other_config:dpdk-extra="--no-pci --in-memory --single-file-segments '
                          f'--file-prefix={self.prefix}"',
                          "other_config:dpdk-socket-mem=1024",
                          "other_config:pmd-cpu-mask=0x2"], env=env)
        # The main thread and the handlers on CPU 0; the PMD thread pins itself to CPU 1.
        self.sw = Proc(["taskset", "-c", "0", OVS_VSWITCHD, f"unix:{d}/db.sock",
                        f"--pidfile={d}/ovs-vswitchd.pid", f"--unixctl={d}/ovs-vswitchd.ctl"],
                       f"{d}/ovs-vswitchd.log", env=env)
        wait_path(f"{d}/ovs-vswitchd.ctl", 60, proc=self.sw)
        run(self.vsctl + ["add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"],
            env=env)
        for n, (port, ofport) in enumerate((("a", 1), ("b", 2), ("up", 3))):
            run(self.vsctl + ["add-port", "br0", port, "--", "set", "Interface", port,
                              "type=dpdkvhostuserclient",
                              f"options:vhost-server-path={self.sock(port)}",
                              f"ofport_request={ofport}"], env=env)
        self.ofctl = ["ovs-ofctl", "-O", "OpenFlow13"]
        mgmt = f"unix:{d}/br0.mgmt"
        wait_path(f"{d}/br0.mgmt", proc=self.sw)
        run(self.ofctl + ["del-flows", mgmt], env=env)
        if case == "plain":
            flow = (f"table=0,in_port=1,ip,nw_dst={POD_B_IP},actions=mod_dl_src:{GATEWAY_MAC},"
                    f"mod_dl_dst:{POD_B_MAC},dec_ttl,output:2")
        else:
            flow = (f"table=0,priority=1,in_port=1,ip,actions=ct(commit,zone=1,nat(src={NODE_IP})),"
                    f"mod_dl_src:{UPLINK_MAC},mod_dl_dst:{UP_PEER_MAC},dec_ttl,output:3")
        run(self.ofctl + ["add-flow", mgmt, flow], env=env)
        if case == "snat-acl":
            path = os.path.join(d, "acl.flows")
            with open(path, "w") as f:
                for i, (p, src, dst, port) in enumerate(acl_rules()):
                    f.write(f"table=0,priority={2000 - i},in_port=1,{p},nw_src={src},"
                            f"nw_dst={dst},tp_dst={port},actions=drop\n")
            run(self.ofctl + ["add-flows", mgmt, path], env=env)
        run(self.ofctl + ["add-flow", mgmt, "table=0,priority=0,actions=drop"], env=env)

    def stop(self):
        self.sw.stop(signal.SIGTERM, 20)
        self.db.stop(signal.SIGTERM)


class Testpmd(Switch):
    name = "testpmd-io"

    def __init__(self, work, case, tag):
        super().__init__(work, "tp", tag)
        out = "b" if case == "plain" else "up"
        self.proc = Proc(["dpdk-testpmd", "-l", "0,1", "--main-lcore", "0", "--no-pci",
                          "--in-memory", "-m", "1024", "--file-prefix", self.prefix,
                          "--log-level", "error",
                          f"--vdev=net_vhost0,iface={self.sock('a')},queues=1",
                          f"--vdev=net_vhost1,iface={self.sock(out)},queues=1",
                          "--", "--forward-mode=io", "--nb-cores=1", "--auto-start",
                          "--stats-period=60", "--rxd=1024", "--txd=1024"],
                         os.path.join(self.dir, "testpmd.log"))
        wait_path(self.sock(out), proc=self.proc)

    def stop(self):
        self.proc.stop()


SWITCHES = {"ferruled": Ferruled, "ovs": Ovs, "testpmd": Testpmd}


def pktgen(sw, case, flows, size, args, work, tag, extra=()):
    rx = "b" if case == "plain" else "up"
    rx_mac = POD_B_MAC if case == "plain" else UP_PEER_MAC
    server = ",server=1" if sw.generator_is_server else ""
    prefix = f"fsc-pg-{os.getpid()}-{tag}"
    argv = [os.path.join(REL, "ferrule-pktgen"), "--lcore", "0", "--memory", "512",
            "--file-prefix", prefix, "--json",
            "--tx-port", f"virtio_user0,path={sw.sock('a')},mac={POD_A_MAC}{server}{QUEUE}",
            "--rx-port", f"virtio_user1,path={sw.sock(rx)},mac={rx_mac}{server}{QUEUE}",
            "--dst-mac", sw.gateway_mac, "--src-ip", POD_A_IP,
            "--dst-ip", POD_B_IP if case == "plain" else REMOTE,
            "--src-port", SRC_PORTS, "--dst-port", DST_PORTS, "--flows", str(flows),
            "--size", size, "--warmup", str(args.warmup), "--duration", str(args.seconds),
            "--link-timeout", "30", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    with open(os.path.join(work, f"pktgen-{tag}.json"), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        raise RuntimeError(f"ferrule-pktgen ({sw.name} {case} {flows} flows {size}): "
                           f"{r.stderr.strip()}")
    return json.loads(r.stdout)


def leftovers(prefix_start):
    for d in ("/dev/hugepages", "/run/dpdk"):
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for n in names:
            if n.startswith(prefix_start):
                p = os.path.join(d, n)
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(
        prog="perf/switch-compare.sh",
        description="Same ferrule-pktgen traffic through ferruled, OVS-DPDK and testpmd io; "
                    "alternating rounds; medians, plots, raw reports.",
        epilog="Needs root, ~3 GiB of free 2 MiB hugepages, `scripts/setup.sh --bench` "
               "(OVS-DPDK, matplotlib) and a release build (the .sh wrapper builds).")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; the switch order rotates")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per run")
    ap.add_argument("--switches", default="ferruled,ovs,testpmd")
    ap.add_argument("--cases", default="plain,snat,snat-acl")
    ap.add_argument("--flows", default="1,1000,100000,1000000")
    ap.add_argument("--sizes", default="64,imix")
    ap.add_argument("--mode", choices=("throughput", "ndr", "pdr"), default="throughput",
                    help="per run: one trial as fast as the switch takes packets (what the "
                         "generator received), or an NDR/PDR search (the rate found; "
                         "--seconds per search trial, 2%% resolution, 8 trials at most)")
    ap.add_argument("--loss", type=float, default=0.1,
                    help="loss allowed by --mode pdr, percent")
    ap.add_argument("--latency-rate", default="1M",
                    help="rate of the latency run (1,000 flows, 64 B, every packet timed)")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "switch-compare"),
                    help="directory for the table, the plots and results.json")
    args = ap.parse_args()
    switches = args.switches.split(",")
    for s in switches:
        if s not in SWITCHES:
            ap.error(f"unknown switch {s!r}: ferruled, ovs, testpmd")
    cases = args.cases.split(",")
    for c in cases:
        if c not in ("plain", "snat", "snat-acl"):
            ap.error(f"unknown case {c!r}: plain, snat, snat-acl")
    flows = [int(x) for x in args.flows.split(",")]
    sizes = args.sizes.split(",")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ferrule-switch-compare.")
    results = []  # dicts: switch case flows size round rx_pps lost ...
    latency = {}  # (switch, case) -> [cdf points]
    n = 0
    try:
        for rnd in range(args.rounds):
            order = switches[rnd % len(switches):] + switches[:rnd % len(switches)]
            for case in cases:
                for name in order:
                    n += 1
                    tag = f"{name}-{case}-{rnd}"
                    sw = SWITCHES[name](work, case, tag)
                    try:
                        for fl in flows:
                            for size in sizes:
                                n += 1
                                search = () if args.mode == "throughput" else (
                                    "--search", args.mode, "--loss", str(args.loss),
                                    "--resolution", "2", "--max-trials", "8")
                                r = pktgen(sw, case, fl, size, args, work, f"{tag}-{fl}-{size}",
                                           search)
                                if args.mode == "throughput":
                                    t, rate = r["trials"][0], r["trials"][0]["rx_pps"]
                                else:
                                    t = r["search"]["at_rate"] or r["trials"][-1]
                                    rate = r["search"]["rate_pps"]
                                results.append(dict(switch=sw.name, case=case, flows=fl,
                                                    size=size, round=rnd,
                                                    rx_pps=rate, tx_pps=t["tx_pps"],
                                                    lost=t["lost"], foreign=t["foreign"],
                                                    late=t["late"],
                                                    reordered=t["reordered"],
                                                    rx_gbps=t["rx_gbps"]))
                                log(f"round {rnd + 1} {sw.name:10} {case:5} {fl:>8} flows "
                                    f"{size:>4}: {rate / 1e6:6.2f} Mpps ({args.mode}), "
                                    f"{t['tx_pps'] / 1e6:6.2f} sent, lost {t['lost']}")
                        if rnd == 0 and 1000 in flows:
                            r = pktgen(sw, case, 1000, "64", args, work, f"{tag}-latency",
                                       ("--rate", args.latency_rate, "--latency-sample", "1",
                                        "--cdf"))
                            t = r["trials"][0]
                            latency[(sw.name, case)] = t
                            lat = t.get("latency") or {}
                            log(f"latency {sw.name:10} {case:5} at {args.latency_rate}: p50 "
                                f"{lat.get('p50_ns', 0) / 1e3:.1f} us, p99 "
                                f"{lat.get('p99_ns', 0) / 1e3:.1f} us, lost {t['lost']}")
                    finally:
                        sw.stop()
                        leftovers(getattr(sw, "prefix", "fsc-none"))
    finally:
        for proc in reversed(RUNNING[:]):
            proc.stop(signal.SIGTERM)
        for kind in ("pg", "fr", "ovs", "tp"):
            leftovers(f"fsc-{kind}-{os.getpid()}-")
        shutil.rmtree(work, ignore_errors=True)

    names = [SWITCHES[s].name for s in switches]
    table = ["| case | flows | size | " + " | ".join(f"{n} Mpps" for n in names)
             + (" | ferruled / ovs-dpdk |" if {"ferruled", "ovs-dpdk"} <= set(names) else " |"),
             "|---|---:|---|" + "---:|" * len(names)
             + ("---:|" if {"ferruled", "ovs-dpdk"} <= set(names) else "")]
    summary = []
    for case in cases:
        for fl in flows:
            for size in sizes:
                med = {}
                for nm in names:
                    xs = [r["rx_pps"] for r in results
                          if (r["switch"], r["case"], r["flows"], r["size"]) == (nm, case, fl, size)]
                    med[nm] = median(xs)
                    lost = sum(r["lost"] for r in results
                               if (r["switch"], r["case"], r["flows"], r["size"]) == (nm, case, fl, size))
                    summary.append(dict(switch=nm, case=case, flows=fl, size=size,
                                        median_rx_pps=med[nm], rounds=xs, lost_total=lost))
                row = f"| {case} | {fl:,} | {size} | " + " | ".join(
                    f"{med[nm] / 1e6:.2f}" for nm in names)
                if "ferruled" in med and "ovs-dpdk" in med:
                    row += f" | {med['ferruled'] / med['ovs-dpdk']:.2f} |"
                else:
                    row += " |"
                table.append(row)
    text = "\n".join(table)
    print(text)
    if latency:
        print()
        print("| case | switch | rate | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | lost |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for (nm, case), t in sorted(latency.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            lat = t.get("latency") or {}
            print(f"| {case} | {nm} | {args.latency_rate} | "
                  + " | ".join(f"{lat.get(k, 0) / 1e3:.1f}"
                               for k in ("p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"))
                  + f" | {t['lost']} |")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(dict(args=vars(args), runs=results, summary=summary,
                       latency={f"{k[0]}/{k[1]}": v for k, v in latency.items()}), f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    plot(args.out, names, cases, flows, sizes, summary, latency, args.mode)
    log(f"results, table and plots: {args.out}")


def plot(out, names, cases, flows, sizes, summary, latency, mode):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(sizes), len(cases), figsize=(6 * len(cases), 4 * len(sizes)),
                             squeeze=False)
    for i, size in enumerate(sizes):
        for j, case in enumerate(cases):
            ax = axes[i][j]
            for nm in names:
                ys = [next(s["median_rx_pps"] for s in summary
                           if (s["switch"], s["case"], s["flows"], s["size"]) == (nm, case, fl, size)) / 1e6
                      for fl in flows]
                ax.plot(flows, ys, marker="o", label=nm)
            ax.set_xscale("log")
            ax.set_xlabel("flows")
            ax.set_ylabel("Mpps received (median)" if mode == "throughput"
                          else f"{mode.upper()}, Mpps (median)")
            ax.set_title(f"{case}, " + ("IMIX" if size == "imix" else f"{size}-byte") + " frames")
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput-vs-flows.png"), dpi=110)
    plt.close(fig)
    if latency:
        fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4), squeeze=False)
        for j, case in enumerate(cases):
            ax = axes[0][j]
            for nm in names:
                t = latency.get((nm, case))
                if t and t.get("latency_cdf"):
                    xs = [p[0] / 1e3 for p in t["latency_cdf"]]
                    ys = [p[1] for p in t["latency_cdf"]]
                    ax.step(xs, ys, where="post", label=nm)
            ax.set_xscale("log")
            ax.set_xlabel("latency, µs (generator to generator)")
            ax.set_ylabel("fraction of packets")
            ax.set_title(f"{case}: latency CDF, 1,000 flows, 64 B")
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "latency-cdf.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
