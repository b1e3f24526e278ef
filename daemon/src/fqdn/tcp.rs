//! DNS over TCP for the proxy: a userspace TCP endpoint (smoltcp), one per network,
//! takes the pods' connections to port 53 of the DNS service addresses from the
//! segments the pipeline punts, and reads the length-prefixed queries off them
//! (RFC 7766). [`super::Fqdn`] screens each query as it does a UDP one; an allowed
//! query goes upstream on a TCP connection of its own (an answer too large for UDP is
//! why a resolver asks over TCP), and the answer is written back once it is learned.
//!
//! One query at a time per connection, answered in order. Connections are limited
//! ([`MAX_CONNECTIONS`], past it a SYN is reset and counted) and closed when idle
//! ([`IDLE_TIMEOUT`]).

use super::ProxyReply;
use crate::acl::AclPort;
use ferrule_dataplane::pipeline::{dns::DNS_PORT, Parsed};
use ferrule_dataplane::wire::{EtherType, EthernetAddress, EthernetFrame, IpProtocol};
use ferrule_fqdn::dns;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{
    HardwareAddress, IpAddress, IpCidr, IpListenEndpoint, Ipv4Address, Ipv4Packet, Ipv6Address,
    Ipv6Packet, TcpPacket,
};
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Most connections from pods open at once, over all networks; past it a new
/// connection is reset (counted `tcp_refused`).
pub const MAX_CONNECTIONS: usize = 64;

/// A connection with no query in flight and nothing received for this long is closed
/// (RFC 7766 §6.2.3: servers close idle connections after seconds).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Receive and send buffer of each connection's socket.
const SOCKET_BUFFER: usize = 8192;

/// Largest DNS message (its length prefix is 16 bits).
const MAX_MESSAGE: usize = u16::MAX as usize;

/// Segments from pods waiting for the stack, per network; past it they are dropped.
const MAX_QUEUED: usize = 1024;

/// The MTU the endpoint sends with (its MSS is this less the headers; a pod's smaller
/// MSS is respected).
const MTU: usize = 1500;

/// Addresses of the endpoint itself (it answers on any address, as AnyIP, through
/// default routes over these); never seen by pods.
const SELF_V4: Ipv4Address = Ipv4Address::new(169, 254, 0, 53);
const SELF_V6: Ipv6Address = Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x53);

/// A connection: its network and its socket there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    network: u16,
    handle: SocketHandle,
}

/// A query read off a connection, for [`super::Fqdn`] to screen.
#[derive(Debug)]
pub struct TcpQuery {
    pub conn: ConnId,
    /// The DNS message (without its length prefix).
    pub message: Vec<u8>,
    /// The port the pod is on, as the ACL state names it.
    pub port: AclPort,
    /// The DNS service address the pod connected to.
    pub server: IpAddr,
}

/// An upstream answer to a query forwarded from a connection.
#[derive(Debug)]
pub struct TcpAnswer {
    pub conn: ConnId,
    /// The DNS message (without its length prefix).
    pub message: Vec<u8>,
    /// The query it answers: the pod's message (SERVFAIL to it if `message` is not its
    /// answer), who asked and for what name.
    pub forward: Forward,
}

/// What a query forwarded upstream needs.
#[derive(Debug)]
pub struct Forward {
    pub upstream: SocketAddr,
    pub query: Vec<u8>,
    pub endpoint: String,
    pub name: String,
}

/// What happened on the endpoint, since the daemon started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpEvents {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections reset because [`MAX_CONNECTIONS`] were open.
    pub refused: u64,
    /// Segments that were not TCP the endpoint could take (or its queue was full).
    pub malformed: u64,
    /// Upstream connections that failed (refused, reset, closed early).
    pub upstream_errors: u64,
    /// Queries whose upstream answer did not come in time.
    pub upstream_timeouts: u64,
    /// Segments for the pods that could not be addressed to one.
    pub reply_errors: u64,
}

/// The DNS-over-TCP endpoints of every network.
pub struct DnsTcp {
    stacks: HashMap<u16, Stack>,
    /// Connections open over all stacks.
    open: usize,
    /// The clock smoltcp reads (microseconds since this).
    epoch: Instant,
    pub events: TcpEvents,
}

impl std::fmt::Debug for DnsTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsTcp")
            .field("networks", &self.stacks.len())
            .field("open", &self.open)
            .field("events", &self.events)
            .finish()
    }
}

/// One network's endpoint.
struct Stack {
    iface: Interface,
    device: Queues,
    sockets: SocketSet<'static>,
    /// The socket waiting for the next connection (none while [`MAX_CONNECTIONS`] are
    /// open).
    listener: Option<SocketHandle>,
    conns: HashMap<SocketHandle, Conn>,
    /// Where each pod endpoint (address, port) was last seen.
    peers: HashMap<(IpAddr, u16), Peer>,
}

/// The pod side of connections: how to reach it and what the ACL state calls its port.
#[derive(Debug, Clone)]
struct Peer {
    port: u16,
    pod_mac: EthernetAddress,
    port_mac: EthernetAddress,
    acl_port: AclPort,
    last_seen: Instant,
}

/// One connection from a pod.
#[derive(Debug)]
struct Conn {
    /// Bytes received and not yet taken as a query.
    inbuf: Vec<u8>,
    /// Answer bytes not yet in the socket's send buffer.
    outbuf: Vec<u8>,
    /// A query of this connection is being screened or is upstream.
    busy: bool,
    upstream: Option<Upstream>,
    last_active: Instant,
}

/// A query on its way upstream over TCP.
#[derive(Debug)]
struct Upstream {
    stream: mio::net::TcpStream,
    connected: bool,
    /// Length-prefixed query, and how much of it is written.
    request: Vec<u8>,
    written: usize,
    response: Vec<u8>,
    sent: Instant,
    forward: Forward,
}

impl DnsTcp {
    pub fn new() -> DnsTcp {
        DnsTcp {
            stacks: HashMap::new(),
            open: 0,
            epoch: Instant::now(),
            events: TcpEvents::default(),
        }
    }

    fn smol_now(&self, now: Instant) -> smoltcp::time::Instant {
        let micros = now.saturating_duration_since(self.epoch).as_micros();
        smoltcp::time::Instant::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
    }

    /// Connections open.
    pub fn open(&self) -> usize {
        self.open
    }

    /// Queries upstream.
    pub fn pending(&self) -> usize {
        self.stacks
            .values()
            .flat_map(|s| s.conns.values())
            .filter(|c| c.upstream.is_some())
            .count()
    }

    /// Takes a punted TCP segment (`frame`, parsed as `parsed`) from port `port` of
    /// `network`; [`DnsTcp::poll`] processes it. False (counted) when it is not one the
    /// endpoint can take.
    pub fn ingest(
        &mut self,
        frame: &[u8],
        parsed: &Parsed,
        port: u16,
        network: u16,
        acl_port: &AclPort,
        now: Instant,
    ) -> bool {
        let key = &parsed.key;
        let packet = parsed
            .l3_offset
            .checked_add(parsed.l3_len)
            .and_then(|end| frame.get(parsed.l3_offset..end));
        let (Some(packet), Ok(eth)) = (packet, EthernetFrame::new_checked(frame)) else {
            self.events.malformed += 1;
            return false;
        };
        if key.proto != IpProtocol::TCP.0 || parsed.l4_offset == 0 || parsed.later_fragment {
            self.events.malformed += 1;
            return false;
        }
        let syn_only = frame
            .get(parsed.l4_offset + 13)
            .is_some_and(|flags| flags & 0x12 == 0x02);
        let smol_now = self.smol_now(now);
        let open = self.open;
        let stack = self
            .stacks
            .entry(network)
            .or_insert_with(|| Stack::new(smol_now, now));
        if stack.listener.is_none() && open < MAX_CONNECTIONS {
            stack.listen();
        }
        if syn_only && stack.listener.is_none() {
            // smoltcp resets it: no socket listens.
            self.events.refused += 1;
        }
        if stack.device.rx.len() >= MAX_QUEUED {
            self.events.malformed += 1;
            return false;
        }
        stack.peers.insert(
            (key.src_ip(), key.src_port),
            Peer {
                port,
                pod_mac: eth.src_addr(),
                port_mac: eth.dst_addr(),
                acl_port: acl_port.clone(),
                last_seen: now,
            },
        );
        stack.device.rx.push_back(packet.to_vec());
        true
    }

    /// Runs every stack: takes the segments ingested, accepts connections, reads the
    /// queries that are complete (one per connection at a time), writes what answers
    /// are waiting, closes finished and idle connections, and runs smoltcp's timers.
    /// Returns the frames for the pods and the queries to screen.
    pub fn poll(&mut self, now: Instant) -> (Vec<ProxyReply>, Vec<TcpQuery>) {
        let smol_now = self.smol_now(now);
        let mut frames = Vec::new();
        let mut queries = Vec::new();
        for (&network, stack) in &mut self.stacks {
            // The control tick calls this every 10 ms: a network with no connection, no
            // segment waiting and no pod endpoint to forget has nothing to do.
            if stack.is_idle() {
                continue;
            }
            stack
                .iface
                .poll(smol_now, &mut stack.device, &mut stack.sockets);
            if let Some(h) = stack.listener {
                if stack.sockets.get::<tcp::Socket>(h).state() != tcp::State::Listen {
                    stack.listener = None;
                    stack.conns.insert(h, Conn::new(now));
                    self.open += 1;
                    self.events.accepted += 1;
                }
            }
            let mut finished = Vec::new();
            for (&handle, conn) in &mut stack.conns {
                let socket = stack.sockets.get_mut::<tcp::Socket>(handle);
                if conn.exchange(socket, now) {
                    if let Some(q) = conn.next_query(socket, &stack.peers, network, handle) {
                        queries.push(q);
                    }
                }
                if conn.should_close(socket, now) {
                    socket.close();
                }
                if now.saturating_duration_since(conn.last_active) > 2 * IDLE_TIMEOUT {
                    socket.abort();
                }
                // (Listen: reset during the handshake, smoltcp listens again.)
                if matches!(
                    socket.state(),
                    tcp::State::Closed | tcp::State::TimeWait | tcp::State::Listen
                ) {
                    finished.push(handle);
                }
            }
            // Send what was written and closed above.
            stack
                .iface
                .poll(smol_now, &mut stack.device, &mut stack.sockets);
            for handle in finished {
                stack.sockets.remove(handle);
                stack.conns.remove(&handle);
                self.open -= 1;
            }
            stack.prune_peers(now);
            for packet in stack.device.tx.drain(..) {
                match to_pod(&stack.peers, packet) {
                    Some(reply) => frames.push(reply),
                    None => self.events.reply_errors += 1,
                }
            }
        }
        // Room again: every network gets its listener back.
        for stack in self.stacks.values_mut() {
            if stack.listener.is_none() && self.open < MAX_CONNECTIONS {
                stack.listen();
            }
        }
        (frames, queries)
    }

    /// Answers the query in flight on `conn` with `message` (sent on the next poll).
    pub fn respond(&mut self, conn: ConnId, message: &[u8]) {
        if let Some(c) = self.conn_mut(conn) {
            c.upstream = None;
            c.answer(message);
        }
    }

    /// Ends `conn` at once (a reset): its query was not DNS.
    pub fn reset(&mut self, conn: ConnId) {
        if let Some(stack) = self.stacks.get_mut(&conn.network) {
            if stack.conns.contains_key(&conn.handle) {
                stack.sockets.get_mut::<tcp::Socket>(conn.handle).abort();
            }
        }
    }

    /// Sends the query in flight on `conn` upstream on a new TCP connection.
    pub fn forward(&mut self, conn: ConnId, forward: Forward, now: Instant) -> std::io::Result<()> {
        let len = u16::try_from(forward.query.len())
            .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "query too long"))?;
        let c = self
            .conn_mut(conn)
            .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "connection closed"))?;
        let stream = mio::net::TcpStream::connect(forward.upstream)?;
        let mut request = Vec::with_capacity(2 + forward.query.len());
        request.extend_from_slice(&len.to_be_bytes());
        request.extend_from_slice(&forward.query);
        c.upstream = Some(Upstream {
            stream,
            connected: false,
            request,
            written: 0,
            response: Vec::new(),
            sent: now,
            forward,
        });
        Ok(())
    }

    /// Moves every upstream exchange on: returns the answers that are complete. A
    /// query whose upstream failed or did not answer within `timeout` is answered
    /// SERVFAIL (counted).
    pub fn poll_upstream(&mut self, now: Instant, timeout: Duration) -> Vec<TcpAnswer> {
        let mut answers = Vec::new();
        for (&network, stack) in &mut self.stacks {
            for (&handle, conn) in &mut stack.conns {
                let Some(up) = conn.upstream.as_mut() else {
                    continue;
                };
                let failed = match up.progress() {
                    Ok(Some(message)) => {
                        let up = conn.upstream.take().expect("upstream");
                        answers.push(TcpAnswer {
                            conn: ConnId { network, handle },
                            message,
                            forward: up.forward,
                        });
                        false
                    }
                    Ok(None) if now.saturating_duration_since(up.sent) >= timeout => {
                        self.events.upstream_timeouts += 1;
                        true
                    }
                    Ok(None) => false,
                    Err(e) => {
                        tracing::debug!(upstream = %up.forward.upstream, error = %e, "DNS over TCP upstream");
                        self.events.upstream_errors += 1;
                        true
                    }
                };
                if failed {
                    let up = conn.upstream.take().expect("upstream");
                    conn.answer(&dns::servfail_response(&up.forward.query).unwrap_or_default());
                }
            }
        }
        answers
    }

    fn conn_mut(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.stacks
            .get_mut(&conn.network)?
            .conns
            .get_mut(&conn.handle)
    }
}

impl Default for DnsTcp {
    fn default() -> Self {
        DnsTcp::new()
    }
}

impl Stack {
    /// No connection, nothing received or to send, no pod endpoint remembered.
    fn is_idle(&self) -> bool {
        self.conns.is_empty()
            && self.device.rx.is_empty()
            && self.device.tx.is_empty()
            && self.peers.is_empty()
    }

    fn new(smol_now: smoltcp::time::Instant, seed: Instant) -> Stack {
        let mut device = Queues::default();
        let mut config = Config::new(HardwareAddress::Ip);
        // Initial sequence numbers: not predictable from one start to the next.
        config.random_seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(seed.elapsed().as_nanos());
            h.finish()
        };
        let mut iface = Interface::new(config, &mut device, smol_now);
        iface.set_any_ip(true);
        iface.update_ip_addrs(|addrs| {
            // Two addresses fit smoltcp's default table.
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(SELF_V4), 32));
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv6(SELF_V6), 128));
        });
        let routes = iface.routes_mut();
        let _ = routes.add_default_ipv4_route(SELF_V4);
        let _ = routes.add_default_ipv6_route(SELF_V6);
        Stack {
            iface,
            device,
            sockets: SocketSet::new(Vec::new()),
            listener: None,
            conns: HashMap::new(),
            peers: HashMap::new(),
        }
    }

    fn listen(&mut self) {
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        // A peer that stops acknowledging is given up on.
        socket.set_timeout(Some(smoltcp::time::Duration::from_secs(
            IDLE_TIMEOUT.as_secs(),
        )));
        let endpoint = IpListenEndpoint {
            addr: None,
            port: DNS_PORT,
        };
        if socket.listen(endpoint).is_ok() {
            self.listener = Some(self.sockets.add(socket));
        }
    }

    /// Forgets pod endpoints with no connection that have been quiet for a while.
    fn prune_peers(&mut self, now: Instant) {
        let sockets = &self.sockets;
        let in_use: Vec<(IpAddr, u16)> = self
            .conns
            .keys()
            .filter_map(|&h| sockets.get::<tcp::Socket>(h).remote_endpoint())
            .map(|e| (IpAddr::from(e.addr), e.port))
            .collect();
        self.peers.retain(|k, p| {
            in_use.contains(k) || now.saturating_duration_since(p.last_seen) < IDLE_TIMEOUT
        });
    }
}

impl Conn {
    fn new(now: Instant) -> Conn {
        Conn {
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            busy: false,
            upstream: None,
            last_active: now,
        }
    }

    /// Moves bytes between the socket and the connection's buffers; true when the
    /// socket is established (queries may be read).
    fn exchange(&mut self, socket: &mut tcp::Socket<'_>, now: Instant) -> bool {
        // At most one message and its length prefix are held: the window closes
        // behind a pod that sends faster than it is answered.
        while socket.can_recv() && self.inbuf.len() < 2 + MAX_MESSAGE {
            let room = 2 + MAX_MESSAGE - self.inbuf.len();
            let got = socket.recv(|data| {
                let n = data.len().min(room);
                (n, data[..n].to_vec())
            });
            match got {
                Ok(bytes) if !bytes.is_empty() => {
                    self.inbuf.extend_from_slice(&bytes);
                    self.last_active = now;
                }
                _ => break,
            }
        }
        if !self.outbuf.is_empty() {
            if let Ok(n) = socket.send_slice(&self.outbuf) {
                self.outbuf.drain(..n);
                self.last_active = now;
            }
        }
        socket.may_send() || socket.may_recv()
    }

    /// The next complete query, when none is in flight.
    fn next_query(
        &mut self,
        socket: &tcp::Socket<'_>,
        peers: &HashMap<(IpAddr, u16), Peer>,
        network: u16,
        handle: SocketHandle,
    ) -> Option<TcpQuery> {
        if self.busy {
            return None;
        }
        let message = take_message(&mut self.inbuf)?;
        let (remote, local) = (socket.remote_endpoint()?, socket.local_endpoint()?);
        let peer = peers.get(&(IpAddr::from(remote.addr), remote.port))?;
        self.busy = true;
        Some(TcpQuery {
            conn: ConnId { network, handle },
            message,
            port: peer.acl_port.clone(),
            server: IpAddr::from(local.addr),
        })
    }

    /// The pod has closed its side and everything it asked is answered, or the
    /// connection is idle.
    fn should_close(&self, socket: &tcp::Socket<'_>, now: Instant) -> bool {
        if self.busy || !self.outbuf.is_empty() || !socket.may_send() {
            return false;
        }
        let drained = socket.send_queue() == 0;
        let pod_done = !socket.may_recv() && self.inbuf.len() < 2;
        let idle = now.saturating_duration_since(self.last_active) >= IDLE_TIMEOUT;
        drained && (pod_done || idle)
    }

    fn answer(&mut self, message: &[u8]) {
        let len = u16::try_from(message.len()).unwrap_or(u16::MAX);
        self.outbuf.extend_from_slice(&len.to_be_bytes());
        self.outbuf
            .extend_from_slice(&message[..usize::from(len).min(message.len())]);
        self.busy = false;
    }
}

impl Upstream {
    /// Connects, writes the query, reads the answer: `Some` once it is complete.
    fn progress(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if !self.connected {
            if let Some(e) = self.stream.take_error()? {
                return Err(e);
            }
            match self.stream.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.kind() == ErrorKind::NotConnected => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        while self.written < self.request.len() {
            match self.stream.write(&self.request[self.written..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.response.extend_from_slice(&buf[..n]);
                    if let Some(m) = take_message(&mut self.response) {
                        return Ok(Some(m));
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Takes one length-prefixed message off the front of `buf`, once it is whole.
fn take_message(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let len = usize::from(u16::from_be_bytes([*buf.first()?, *buf.get(1)?]));
    let message = buf.get(2..2 + len)?.to_vec();
    buf.drain(..2 + len);
    Some(message)
}

/// The frame that carries `packet` (from the endpoint) to the pod it is for.
fn to_pod(peers: &HashMap<(IpAddr, u16), Peer>, packet: Vec<u8>) -> Option<ProxyReply> {
    let (dst, payload, ethertype): (IpAddr, &[u8], EtherType) = match packet.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(&packet[..]).ok()?;
            (IpAddr::V4(ip.dst_addr()), ip.payload(), EtherType::IPV4)
        }
        6 => {
            let ip = Ipv6Packet::new_checked(&packet[..]).ok()?;
            (IpAddr::V6(ip.dst_addr()), ip.payload(), EtherType::IPV6)
        }
        _ => return None,
    };
    let dst_port = TcpPacket::new_checked(payload).ok()?.dst_port();
    let peer = peers.get(&(dst, dst_port))?;
    let mut frame = Vec::with_capacity(14 + packet.len());
    frame.extend_from_slice(&peer.pod_mac.0);
    frame.extend_from_slice(&peer.port_mac.0);
    frame.extend_from_slice(&ethertype.0.to_be_bytes());
    frame.extend_from_slice(&packet);
    Some(ProxyReply {
        port: peer.port,
        frame,
    })
}

/// smoltcp's device: IP packets from pods in, IP packets for them out. (The tests'
/// pods use it too.)
#[derive(Default)]
pub(crate) struct Queues {
    pub(crate) rx: VecDeque<Vec<u8>>,
    pub(crate) tx: Vec<Vec<u8>>,
}

pub(crate) struct Rx(Vec<u8>);

pub(crate) struct Tx<'a>(&'a mut Vec<Vec<u8>>);

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0; len];
        let r = f(&mut buf);
        self.0.push(buf);
        r
    }
}

impl Device for Queues {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((Rx(packet), Tx(&mut self.tx)))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(Tx(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = MTU;
        caps
    }
}
