//! DNS over TCP through the proxy: a pod's TCP stack (smoltcp, on the pod's side of
//! the punt path) against [`super::tcp`], with a real TCP server upstream.

use super::tcp::{Queues, IDLE_TIMEOUT, MAX_CONNECTIONS};
use super::tests::{answer, pod_port, proxy, query, DNS, POD_IP, POD_MAC, PORT_MAC};
use super::{Fqdn, ProxyReply, QueryOutcome};
use ferrule_dataplane::pipeline::synth::{build_with_payload, SynthSpec};
use ferrule_dataplane::wire::IpProtocol;
use ferrule_fqdn::dns;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// A pod with a TCP stack whose segments go through the proxy.
struct Pod {
    iface: Interface,
    device: Queues,
    sockets: SocketSet<'static>,
    epoch: Instant,
}

impl Pod {
    fn new() -> Pod {
        let mut device = Queues::default();
        let mut iface = Interface::new(
            Config::new(HardwareAddress::Ip),
            &mut device,
            smoltcp::time::Instant::ZERO,
        );
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv4(POD_IP), 24)).unwrap();
        });
        iface
            .routes_mut()
            .add_default_ipv4_route(Ipv4Address::new(10, 1, 0, 1))
            .unwrap();
        Pod {
            iface,
            device,
            sockets: SocketSet::new(Vec::new()),
            epoch: Instant::now(),
        }
    }

    fn connect(&mut self, local_port: u16) -> SocketHandle {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 65536]),
            tcp::SocketBuffer::new(vec![0; 65536]),
        );
        s.connect(self.iface.context(), (IpAddress::Ipv4(DNS), 53), local_port)
            .unwrap();
        self.sockets.add(s)
    }

    fn socket(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// Segments for the pod, checked to be addressed to it, into its stack.
    fn take(&mut self, frames: Vec<ProxyReply>) {
        for r in frames {
            assert_eq!(r.port, 3);
            assert_eq!(&r.frame[..6], &POD_MAC.0);
            assert_eq!(&r.frame[6..12], &PORT_MAC.0);
            self.device.rx.push_back(r.frame[14..].to_vec());
        }
    }

    /// One round: the pod's stack runs, its segments go to the proxy, the proxy's
    /// upstream answers are released (learned first), the segments come back.
    fn pump(&mut self, f: &mut Fqdn) -> ferrule_fqdn::Changes {
        let now = self.now();
        self.iface.poll(now, &mut self.device, &mut self.sockets);
        for packet in std::mem::take(&mut self.device.tx) {
            let mut frame = Vec::with_capacity(14 + packet.len());
            frame.extend_from_slice(&PORT_MAC.0);
            frame.extend_from_slice(&POD_MAC.0);
            frame.extend_from_slice(&[0x08, 0x00]);
            frame.extend_from_slice(&packet);
            match f.on_query(&frame, 3, 0, &pod_port()) {
                QueryOutcome::Reply(frames) => self.take(frames),
                other => panic!("a TCP segment gives segments: {other:?}"),
            }
        }
        let answers = f.poll_upstream(Instant::now());
        let changes = answers.changes;
        let segments = f.release_tcp(answers.tcp);
        self.take(segments);
        self.iface
            .poll(self.now(), &mut self.device, &mut self.sockets);
        changes
    }

    /// Pumps until `done` (or fails after 5 s).
    fn until(&mut self, f: &mut Fqdn, what: &str, mut done: impl FnMut(&mut Pod) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out: {what}");
            self.pump(f);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sends `message` length-prefixed and reads one length-prefixed answer.
    fn ask(&mut self, f: &mut Fqdn, h: SocketHandle, message: &[u8]) -> Vec<u8> {
        let mut out = (message.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(message);
        self.until(f, "connected", |p| p.socket(h).may_send());
        assert_eq!(self.socket(h).send_slice(&out).unwrap(), out.len());
        let mut got = Vec::new();
        self.until(f, "an answer", |p| {
            let s = p.socket(h);
            while s.can_recv() {
                s.recv(|d| (d.len(), got.extend_from_slice(d))).unwrap();
            }
            got.len() >= 2 && got.len() >= 2 + usize::from(u16::from_be_bytes([got[0], got[1]]))
        });
        got.split_off(2)
    }
}

/// An upstream DNS server over TCP answering `ip` (TTL 30) to every query; with
/// `silent`, it reads the query and never answers.
fn upstream(silent: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                let mut len = [0u8; 2];
                if c.read_exact(&mut len).is_err() {
                    return;
                }
                let mut q = vec![0; usize::from(u16::from_be_bytes(len))];
                c.read_exact(&mut q).unwrap();
                if silent {
                    std::thread::sleep(Duration::from_secs(3));
                    return;
                }
                let a = answer(&q, Ipv4Addr::new(192, 0, 2, 53), 30);
                c.write_all(&(a.len() as u16).to_be_bytes()).unwrap();
                c.write_all(&a).unwrap();
            });
        }
    });
    addr
}

#[test]
fn queries_over_tcp_are_screened_forwarded_and_learned_before_the_answer() {
    let mut f = proxy(upstream(false));
    let mut pod = Pod::new();
    let h = pod.connect(40000);

    let q = query(0x4242, "www.example.test");
    let a = pod.ask(&mut f, h, &q);
    let parsed = dns::parse_response(&a).unwrap();
    assert_eq!(parsed.id, 0x4242, "the pod's id");
    let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 53));
    assert_eq!(parsed.records, [(ip, 30)]);
    // Learned: the address maps to the selector's identity.
    let selected = f.selected("fqdn:*.example.test");
    assert_eq!(f.identities(1).map(0).unwrap().lookup(ip), selected[0]);

    // The same connection: a name outside the policy is REFUSED, never forwarded.
    let a = pod.ask(&mut f, h, &query(7, "b.other.test"));
    assert_eq!((a[0], a[1], a[3] & 0x0f), (0, 7, 5), "REFUSED");

    let c = f.proxy_counters();
    assert_eq!(
        (
            c.tcp_connections,
            c.queries,
            c.forwarded,
            c.answered,
            c.refused
        ),
        (1, 2, 1, 1, 1)
    );
    assert_eq!(f.tcp.open(), 1);

    // The pod closes: so does the proxy, and the connection is gone.
    pod.socket(h).close();
    pod.until(&mut f, "closed", |p| {
        p.socket(h).state() == tcp::State::Closed || p.socket(h).state() == tcp::State::TimeWait
    });
    pod.pump(&mut f);
    assert_eq!(f.tcp.open(), 0);
}

#[test]
fn an_upstream_that_does_not_answer_gets_the_pod_servfail() {
    let mut f = proxy(upstream(true));
    f.section.upstream_timeout_ms = 200;
    let mut pod = Pod::new();
    let h = pod.connect(40001);
    let a = pod.ask(&mut f, h, &query(9, "slow.example.test"));
    assert_eq!((a[0], a[1], a[3] & 0x0f), (0, 9, 2), "SERVFAIL");
    assert_eq!(f.proxy_counters().upstream_timeouts, 1);
    assert_eq!(f.pending(), 0);

    // Junk on a connection ends it (reset) and is counted.
    let before = f.proxy_counters().malformed_queries;
    let junk = b"\x00\x05hello";
    assert_eq!(pod.socket(h).send_slice(junk).unwrap(), junk.len());
    pod.until(&mut f, "reset", |p| !p.socket(h).is_open());
    assert_eq!(f.proxy_counters().malformed_queries, before + 1);
}

#[test]
fn connections_past_the_limit_are_reset_and_idle_ones_closed() {
    let mut f = proxy(upstream(false));
    let syn = |port: u16| {
        build_with_payload(
            &SynthSpec {
                src_mac: POD_MAC,
                dst_mac: PORT_MAC,
                proto: IpProtocol::TCP,
                src: IpAddr::V4(POD_IP),
                dst: IpAddr::V4(DNS),
                src_port: port,
                dst_port: 53,
                tcp_flags: 0x02,
                ip_len: None,
                ttl: 64,
            },
            &[],
        )
        .unwrap()
    };
    let flags_of = |out: QueryOutcome| -> Vec<u8> {
        match out {
            QueryOutcome::Reply(frames) => frames.iter().map(|r| r.frame[14 + 20 + 13]).collect(),
            other => panic!("{other:?}"),
        }
    };
    for port in 0..MAX_CONNECTIONS as u16 {
        let flags = flags_of(f.on_query(&syn(41000 + port), 3, 0, &pod_port()));
        assert_eq!(flags, [0x12], "SYN-ACK to connection {port}");
    }
    let flags = flags_of(f.on_query(&syn(42000), 3, 0, &pod_port()));
    assert_eq!(flags.len(), 1);
    assert_ne!(flags[0] & 0x04, 0, "RST past the limit");
    let c = f.proxy_counters();
    assert_eq!(
        (c.tcp_connections, c.tcp_refused),
        (MAX_CONNECTIONS as u64, 1)
    );

    // None of them completes the handshake: they are given up on.
    let later = Instant::now() + 3 * IDLE_TIMEOUT;
    let _ = f.tcp.poll(later);
    let _ = f.tcp.poll(later + Duration::from_millis(1));
    assert_eq!(f.tcp.open(), 0);
    let flags = flags_of(f.on_query(&syn(42001), 3, 0, &pod_port()));
    assert!(flags.contains(&0x12), "room again: {flags:?}");
}
