//! FQDN policy in `ferruled`: the node's [`FqdnState`] (DNS names, identities,
//! selectors — `docs/fqdn.md`), the IP → identity map the workers read, the ports under
//! DNS policy, and the DNS proxy: queries the pipeline punts (`pipeline::dns`) are
//! checked against the port's allowed names (a refused name gets `REFUSED`), forwarded
//! upstream — UDP from the control thread's own UDP socket, TCP through the userspace
//! endpoint of [`tcp`] and a TCP connection upstream — and their answers learned
//! (published to the workers) before they are handed back to the pod.
//!
//! Needs no EAL: the caller gives frames and gets frames back; [`crate::daemon`]
//! moves them through the punt and inject queues.

pub mod tcp;
#[cfg(test)]
mod tests_tcp;

use crate::acl::AclPort;
use crate::config::FqdnSection;
use ferrule_api::acl::{AttachTarget, DnsPolicy};
use ferrule_dataplane::acl::identity::{Identities, IdentityId, IdentityMap};
use ferrule_dataplane::acl::Rule;
use ferrule_dataplane::pipeline::synth::{build_with_payload, SynthSpec};
use ferrule_dataplane::pipeline::{self, dns::DNS_PORT};
use ferrule_dataplane::snapshot::DnsIntercept;
use ferrule_dataplane::wire::{EthernetFrame, IpProtocol};
use ferrule_fqdn::{dns, Changes, FqdnSelector, FqdnState, Selector};
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Largest DNS message over UDP the proxy reads from upstream (EDNS0's usual limit).
const MAX_DNS_MESSAGE: usize = 4096;

/// Most queries waiting for upstream at once; past it a query is dropped (counted)
/// and the pod's resolver asks again.
const MAX_PENDING: usize = 4096;

/// Seconds since the Unix epoch: the name cache's clock.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub use ferrule_api::fqdn::ProxyCounters;

/// A query sent upstream, waiting for its answer.
#[derive(Debug, Clone)]
struct PendingQuery {
    /// Port index the query came from, and what is needed to answer it there.
    port: u16,
    endpoint: String,
    name: String,
    client_id: u16,
    pod_mac: ferrule_dataplane::wire::EthernetAddress,
    port_mac: ferrule_dataplane::wire::EthernetAddress,
    pod_ip: IpAddr,
    server_ip: IpAddr,
    pod_port: u16,
    upstream: SocketAddr,
    sent: Instant,
}

/// A frame for the pod on port `port`, ready once `changes` are in force.
#[derive(Debug)]
pub struct ProxyReply {
    pub port: u16,
    pub frame: Vec<u8>,
}

/// What handling a punted query gave.
#[derive(Debug)]
pub enum QueryOutcome {
    /// Sent upstream; the answer comes through [`Fqdn::poll_upstream`].
    Forwarded,
    /// Frames to send at once: a refusal, or the TCP endpoint's segments.
    Reply(Vec<ProxyReply>),
    /// Not handled (counted).
    Dropped,
}

/// What [`Fqdn::poll_upstream`] gave: the changes the answers made, to put in force
/// before the answers go to the pods.
#[derive(Debug, Default)]
pub struct Answers {
    /// Frames for pods (UDP answers).
    pub udp: Vec<ProxyReply>,
    /// DNS-over-TCP answers, for [`Fqdn::release_tcp`].
    pub tcp: Vec<(tcp::ConnId, Vec<u8>)>,
    pub changes: Changes,
}

/// How the proxy takes a query.
enum Screen {
    /// Not a DNS query (counted).
    Malformed,
    /// A name the port may not look up: the REFUSED answer (counted).
    Refused(Vec<u8>),
    /// Goes upstream.
    Allowed(dns::DnsQuestion),
}

/// The FQDN policy state of the daemon.
#[derive(Debug)]
pub struct Fqdn {
    section: FqdnSection,
    state: FqdnState,
    /// Restored from a checkpoint and not yet synchronized with a first `acl.apply`.
    restoring: bool,
    map: IdentityMap,
    /// The DNS policies as applied (by port or pod).
    policies: Vec<DnsPolicy>,
    socket: Option<UdpSocket>,
    pending: HashMap<u16, PendingQuery>,
    next_id: u16,
    pub counters: ProxyCounters,
    /// The DNS-over-TCP endpoint.
    tcp: tcp::DnsTcp,
    /// Rate of the circuit breaker's warnings.
    breaker_log: WarnLimiter,
    last_gc: Instant,
    /// The state changed since the last checkpoint.
    dirty: bool,
}

/// The selectors the rules of these tables name.
pub fn selectors_of<'a>(tables: impl IntoIterator<Item = &'a [Rule]>) -> BTreeSet<String> {
    tables
        .into_iter()
        .flatten()
        .filter_map(|r| r.dst_selector.clone())
        .collect()
}

/// The identities `state` gives the selector with label text `text` (none if the
/// selector is not in force).
pub fn selected_in(state: &FqdnState, text: &str) -> Vec<IdentityId> {
    Selector::parse(text)
        .ok()
        .and_then(|s| state.selected(&s).cloned())
        .map(|set| set.into_iter().map(|id| id.0).collect())
        .unwrap_or_default()
}

impl Fqdn {
    /// The state at start: restored from the checkpoint when there is one (a file that
    /// cannot be read is logged and set aside, and the state starts empty).
    pub fn new(section: FqdnSection) -> Fqdn {
        let mut restoring = false;
        let state = match &section.checkpoint {
            Some(path) if path.exists() => match FqdnState::restore(section.config, path) {
                Ok(state) => {
                    restoring = true;
                    tracing::info!(path = %path.display(), names = state.cache_view().len(), identities = state.identities_view().len(), "FQDN state restored from its checkpoint");
                    state
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot restore the FQDN checkpoint; starting empty");
                    FqdnState::new(section.config)
                }
            },
            _ => FqdnState::new(section.config),
        };
        Fqdn {
            section,
            state,
            restoring,
            map: IdentityMap::default(),
            policies: Vec::new(),
            socket: None,
            pending: HashMap::new(),
            next_id: 1,
            counters: ProxyCounters::default(),
            tcp: tcp::DnsTcp::new(),
            breaker_log: WarnLimiter::default(),
            last_gc: Instant::now(),
            dirty: false,
        }
    }

    /// The configuration in force.
    pub fn section(&self) -> &FqdnSection {
        &self.section
    }

    /// The FQDN state.
    pub fn state(&self) -> &FqdnState {
        &self.state
    }

    /// The identities the selector with label text `text` selects now.
    pub fn selected(&self, text: &str) -> Vec<IdentityId> {
        selected_in(&self.state, text)
    }

    /// Checks the DNS policies of an `acl.apply` against the configuration: they need
    /// DNS service addresses to intercept.
    pub fn check_policies(&self, policies: &[DnsPolicy]) -> Result<(), String> {
        if !policies.is_empty() && self.section.dns_servers.is_empty() {
            return Err(
                "ferruled's configuration has no [fqdn] dns_servers, so no DNS query can be sent \
                 to the proxy"
                    .into(),
            );
        }
        Ok(())
    }

    /// The state with `selectors` in force, and what changed, without changing this
    /// one: an `acl.apply` compiles its tables against it and commits it
    /// ([`Fqdn::commit`]) only when the apply succeeds.
    pub fn with_selectors(&self, selectors: &BTreeSet<String>) -> (FqdnState, Changes) {
        let mut next = self.state.clone();
        let parsed: Vec<Selector> = selectors
            .iter()
            .filter_map(|s| Selector::parse(s).ok())
            .collect();
        let changes = next.apply_policy_selectors(parsed);
        (next, changes)
    }

    /// Makes `state` (from [`Fqdn::with_selectors`]) the one in force with the DNS
    /// policies of the same apply. The IP → identity map is rebuilt from it.
    pub fn commit(&mut self, mut state: FqdnState, policies: Vec<DnsPolicy>) {
        if self.restoring {
            let freed = state.finish_restore();
            self.restoring = false;
            tracing::info!(
                freed,
                "FQDN identities of the checkpoint that no label set claimed are freed"
            );
        }
        self.state = state;
        self.policies = policies;
        self.rebuild_map();
        self.dirty = true;
    }

    fn rebuild_map(&mut self) {
        let mut map = IdentityMap::default();
        for (p, id) in self.state.ip_identity() {
            // ipnet prefixes are valid prefixes of their family.
            let _ = map.set(p.addr(), p.prefix_len(), id.0);
        }
        self.map = map;
    }

    /// Applies a DNS answer's or a collection's changes to the IP → identity map.
    /// Returns whether the rules (selectors' identity sets) changed.
    pub fn apply_changes(&mut self, changes: &Changes) -> bool {
        for (p, id) in &changes.upserts {
            let _ = self.map.set(p.addr(), p.prefix_len(), id.0);
        }
        for p in &changes.deletes {
            let _ = self.map.remove(p.addr(), p.prefix_len());
        }
        for r in &changes.refused {
            // An abusive name can make thousands a second: one warning per interval,
            // saying how many were not logged; all are counted (`fqdn identities`).
            match self.breaker_log.admit(Instant::now()) {
                Some(suppressed) => {
                    tracing::warn!(refusal = ?r, suppressed, "FQDN circuit breaker")
                }
                None => tracing::debug!(refusal = ?r, "FQDN circuit breaker"),
            }
        }
        if !changes.is_empty() {
            self.dirty = true;
        }
        changes.touches_rules()
    }

    /// The maps the next generation carries: this node's map in every network.
    pub fn identities(&self, networks: usize) -> Arc<Identities> {
        if self.map.is_empty() {
            return Arc::default();
        }
        let map = Arc::new(self.map.clone());
        Arc::new(Identities {
            maps: (0..networks).map(|_| Some(Arc::clone(&map))).collect(),
        })
    }

    /// The DNS policy of a port, if it is under one.
    fn policy_of(&self, port: &AclPort) -> Option<&DnsPolicy> {
        // A port named wins over the pod it records.
        self.policies
            .iter()
            .find(|p| matches!(&p.target, AttachTarget::Port(_)) && port.takes(&p.target))
            .or_else(|| self.policies.iter().find(|p| port.takes(&p.target)))
    }

    /// Which ports the pipeline hands DNS queries of to the proxy.
    pub fn intercept(&self, ports: &[AclPort]) -> Option<Arc<DnsIntercept>> {
        if self.policies.is_empty() || self.section.dns_servers.is_empty() {
            return None;
        }
        let flags: Vec<bool> = ports.iter().map(|p| self.policy_of(p).is_some()).collect();
        if !flags.iter().any(|&f| f) {
            return None;
        }
        Some(Arc::new(DnsIntercept {
            ports: flags,
            servers: self.section.dns_servers.clone(),
        }))
    }

    /// Handles a punted query from port `index` (`acl_port`, in `network`): refused, or
    /// forwarded upstream; a TCP segment goes to the TCP endpoint.
    pub fn on_query(
        &mut self,
        frame: &[u8],
        index: u16,
        network: u16,
        acl_port: &AclPort,
    ) -> QueryOutcome {
        let parsed = pipeline::parse(frame, network).ok();
        if let Some(p) = parsed.filter(|p| p.key.proto == IpProtocol::TCP.0) {
            let now = Instant::now();
            if !self.tcp.ingest(frame, &p, index, network, acl_port, now) {
                return QueryOutcome::Dropped;
            }
            return QueryOutcome::Reply(self.service_tcp(now));
        }
        self.counters.queries += 1;
        let Some((q, payload)) = parsed.as_ref().and_then(|p| read_query(frame, p)) else {
            self.counters.malformed_queries += 1;
            return QueryOutcome::Dropped;
        };
        let question = match self.screen(acl_port, payload) {
            Screen::Malformed => return QueryOutcome::Dropped,
            Screen::Refused(answer) => {
                return match reply_frame(&q, &answer) {
                    Some(frame) => QueryOutcome::Reply(vec![ProxyReply { port: index, frame }]),
                    None => {
                        self.counters.reply_errors += 1;
                        QueryOutcome::Dropped
                    }
                };
            }
            Screen::Allowed(question) => question,
        };
        if self.pending.len() >= MAX_PENDING {
            self.counters.upstream_errors += 1;
            return QueryOutcome::Dropped;
        }
        let upstream = self.upstream_for(q.server_ip);
        let id = self.take_id();
        let Some(socket) = self.socket_for(upstream) else {
            self.counters.upstream_errors += 1;
            return QueryOutcome::Dropped;
        };
        let mut out = payload.to_vec();
        out[..2].copy_from_slice(&id.to_be_bytes());
        if let Err(e) = socket.send_to(&out, upstream) {
            tracing::debug!(%upstream, error = %e, "cannot send a DNS query upstream");
            self.counters.upstream_errors += 1;
            return QueryOutcome::Dropped;
        }
        self.counters.forwarded += 1;
        self.pending.insert(
            id,
            PendingQuery {
                port: index,
                endpoint: endpoint_of(acl_port),
                name: question.name,
                client_id: question.id,
                pod_mac: q.pod_mac,
                port_mac: q.port_mac,
                pod_ip: q.pod_ip,
                server_ip: q.server_ip,
                pod_port: q.pod_port,
                upstream,
                sent: Instant::now(),
            },
        );
        QueryOutcome::Forwarded
    }

    /// Where a query to the DNS service address `server` goes: `[fqdn] upstream`, or
    /// the service address itself.
    fn upstream_for(&self, server: IpAddr) -> SocketAddr {
        self.section
            .upstream
            .unwrap_or(SocketAddr::new(server, DNS_PORT))
    }

    /// Checks a query (`payload`) from `acl_port` against its DNS policy.
    fn screen(&mut self, acl_port: &AclPort, payload: &[u8]) -> Screen {
        let Ok(question) = dns::parse_query(payload) else {
            self.counters.malformed_queries += 1;
            return Screen::Malformed;
        };
        // No policy: it went away while the query was queued; the name is not allowed.
        let allowed = self.policy_of(acl_port).is_some_and(|policy| {
            policy.allow.iter().any(|pattern| {
                FqdnSelector::match_pattern(pattern).is_ok_and(|s| s.matches(&question.name))
            })
        });
        if allowed {
            return Screen::Allowed(question);
        }
        tracing::debug!(name = %question.name, port = %acl_port.name, "DNS name refused by the port's DNS policy");
        self.counters.refused += 1;
        match dns::refused_response(payload) {
            Ok(answer) => Screen::Refused(answer),
            Err(_) => {
                self.counters.malformed_queries += 1;
                Screen::Malformed
            }
        }
    }

    /// Runs the TCP endpoint: screens the queries it has read (refused ones are
    /// answered, allowed ones go upstream) and returns the segments for the pods.
    fn service_tcp(&mut self, now: Instant) -> Vec<ProxyReply> {
        let mut frames = Vec::new();
        // A few rounds: answering a refused query can let the next one be read.
        for _ in 0..4 {
            let (out, queries) = self.tcp.poll(now);
            frames.extend(out);
            if queries.is_empty() {
                break;
            }
            for q in queries {
                self.tcp_query(q, now);
            }
        }
        frames
    }

    fn tcp_query(&mut self, q: tcp::TcpQuery, now: Instant) {
        self.counters.queries += 1;
        let question = match self.screen(&q.port, &q.message) {
            Screen::Malformed => return self.tcp.reset(q.conn),
            Screen::Refused(answer) => return self.tcp.respond(q.conn, &answer),
            Screen::Allowed(question) => question,
        };
        let forward = tcp::Forward {
            upstream: self.upstream_for(q.server),
            endpoint: endpoint_of(&q.port),
            name: question.name,
            query: q.message,
        };
        let upstream = forward.upstream;
        let servfail = dns::servfail_response(&forward.query).unwrap_or_default();
        match self.tcp.forward(q.conn, forward, now) {
            Ok(()) => self.counters.forwarded += 1,
            Err(e) => {
                tracing::debug!(%upstream, error = %e, "cannot open a DNS-over-TCP connection upstream");
                self.counters.upstream_errors += 1;
                self.tcp.respond(q.conn, &servfail);
            }
        }
    }

    /// Hands the TCP answers of [`Fqdn::poll_upstream`] to their connections, once
    /// their changes are in force, and runs the TCP endpoint (its timers too): the
    /// segments for the pods.
    pub fn release_tcp(&mut self, answers: Vec<(tcp::ConnId, Vec<u8>)>) -> Vec<ProxyReply> {
        for (conn, message) in answers {
            self.counters.answered += 1;
            self.tcp.respond(conn, &message);
        }
        self.service_tcp(Instant::now())
    }

    /// The proxy's counters, the TCP endpoint's included.
    pub fn proxy_counters(&self) -> ProxyCounters {
        let t = self.tcp.events;
        let mut c = self.counters;
        c.malformed_queries += t.malformed;
        c.upstream_errors += t.upstream_errors;
        c.upstream_timeouts += t.upstream_timeouts;
        c.reply_errors += t.reply_errors;
        c.tcp_connections = t.accepted;
        c.tcp_refused = t.refused;
        c
    }

    fn take_id(&mut self) -> u16 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if !self.pending.contains_key(&id) {
                return id;
            }
        }
    }

    /// The upstream socket of `upstream`'s family, opened (non-blocking) on first use.
    fn socket_for(&mut self, upstream: SocketAddr) -> Option<&UdpSocket> {
        let family_matches = |s: &UdpSocket| {
            s.local_addr()
                .is_ok_and(|a| a.is_ipv4() == upstream.is_ipv4())
        };
        if !self.socket.as_ref().is_some_and(family_matches) {
            let bind: SocketAddr = if upstream.is_ipv4() {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let socket = UdpSocket::bind(bind)
                .and_then(|s| s.set_nonblocking(true).map(|()| s))
                .map_err(
                    |e| tracing::warn!(error = %e, "cannot open the DNS proxy's upstream socket"),
                )
                .ok()?;
            self.socket = Some(socket);
        }
        self.socket.as_ref()
    }

    /// Reads every answer upstream has sent (UDP and TCP), learns their addresses, and
    /// returns the answers for the pods together with the changes to publish before
    /// they are sent. UDP queries waiting longer than the timeout are dropped (counted:
    /// the pod asks again); TCP ones are answered SERVFAIL.
    pub fn poll_upstream(&mut self, now: Instant) -> Answers {
        let mut replies = Vec::new();
        let mut all = Changes::default();
        let mut buf = [0u8; MAX_DNS_MESSAGE];
        while let Some(socket) = &self.socket {
            let (len, from) = match socket.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!(error = %e, "DNS proxy upstream socket");
                    break;
                }
            };
            let msg = &mut buf[..len];
            let Some(id) = msg.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
                self.counters.malformed_answers += 1;
                continue;
            };
            // Only the server a query went to may answer it.
            let Some(p) = self
                .pending
                .get(&id)
                .filter(|p| p.upstream == from)
                .cloned()
            else {
                self.counters.malformed_answers += 1;
                continue;
            };
            let answer = match dns::parse_response(msg) {
                Ok(a) if a.name == p.name => a,
                _ => {
                    self.counters.malformed_answers += 1;
                    continue;
                }
            };
            self.pending.remove(&id);
            if !answer.records.is_empty() {
                let changes = self.learn(&p.endpoint, &answer.name, &answer.records);
                merge(&mut all, changes);
            }
            msg[..2].copy_from_slice(&p.client_id.to_be_bytes());
            let q = QueryFrame {
                pod_mac: p.pod_mac,
                port_mac: p.port_mac,
                pod_ip: p.pod_ip,
                server_ip: p.server_ip,
                pod_port: p.pod_port,
            };
            match reply_frame(&q, msg) {
                Some(frame) => {
                    self.counters.answered += 1;
                    replies.push(ProxyReply {
                        port: p.port,
                        frame,
                    });
                }
                None => self.counters.reply_errors += 1,
            }
        }
        let timeout = Duration::from_millis(self.section.upstream_timeout_ms);
        let before = self.pending.len();
        self.pending
            .retain(|_, p| now.duration_since(p.sent) < timeout);
        self.counters.upstream_timeouts += (before - self.pending.len()) as u64;
        let mut tcp = Vec::new();
        for a in self.tcp.poll_upstream(now, timeout) {
            match dns::parse_response(&a.message) {
                Ok(answer) if answer.name == a.forward.name => {
                    if !answer.records.is_empty() {
                        let changes =
                            self.learn(&a.forward.endpoint, &answer.name, &answer.records);
                        merge(&mut all, changes);
                    }
                    tcp.push((a.conn, a.message));
                }
                _ => {
                    self.counters.malformed_answers += 1;
                    let servfail = dns::servfail_response(&a.forward.query).unwrap_or_default();
                    tcp.push((a.conn, servfail));
                }
            }
        }
        Answers {
            udp: replies,
            tcp,
            changes: all,
        }
    }

    /// Gives an answer's addresses (`name` looked up by `endpoint`) to the name manager
    /// and applies what changed to the IP → identity map; the caller publishes.
    pub fn learn(&mut self, endpoint: &str, name: &str, records: &[(IpAddr, u32)]) -> Changes {
        self.counters.addresses_learned += records.len() as u64;
        let changes = self
            .state
            .on_dns_answer_for(endpoint, name, records, now_s());
        self.apply_changes(&changes);
        changes
    }

    /// The expired addresses to ask the connection tracker about, when a collection
    /// is due (every `gc_interval_ms`).
    pub fn gc_due(&mut self, now: Instant) -> Option<Vec<IpAddr>> {
        if now.duration_since(self.last_gc) < Duration::from_millis(self.section.gc_interval_ms) {
            return None;
        }
        self.last_gc = now;
        let expired = self.state.expired(now_s());
        (!expired.is_empty()).then(|| expired.into_iter().collect())
    }

    /// Forgets the expired addresses no connection uses (`in_use`).
    pub fn gc(&mut self, in_use: &BTreeSet<IpAddr>) -> Changes {
        let changes = self.state.gc(now_s(), &|ip| in_use.contains(&ip));
        self.apply_changes(&changes);
        changes
    }

    /// An endpoint (pod) is gone: its names expire now.
    pub fn endpoint_removed(&mut self, endpoint: &str) {
        if !self.state.endpoint_removed(endpoint, now_s()).is_empty() {
            self.dirty = true;
        }
    }

    /// Writes the checkpoint if the state changed since the last one.
    pub fn checkpoint_if_dirty(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        if let Some(path) = &self.section.checkpoint {
            if let Err(e) = self.state.checkpoint(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the FQDN checkpoint");
            }
        }
    }

    /// Queries waiting for upstream (UDP and TCP).
    pub fn pending(&self) -> usize {
        self.pending.len() + self.tcp.pending()
    }

    /// The DNS policies in force.
    pub fn policies(&self) -> &[DnsPolicy] {
        &self.policies
    }
}

/// At most one circuit-breaker warning per this interval; the others are logged at debug
/// level and their number given with the next warning.
const BREAKER_WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Lets one warning through per [`BREAKER_WARN_INTERVAL`].
#[derive(Debug, Default)]
struct WarnLimiter {
    last: Option<Instant>,
    /// Warnings held back since the last one let through.
    suppressed: u64,
}

impl WarnLimiter {
    /// `Some(held back since the last)` when a warning may be logged now.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < BREAKER_WARN_INTERVAL => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Adds `b`'s changes to `a` (later changes win).
fn merge(a: &mut Changes, b: Changes) {
    for (id, labels) in b.identities_added {
        a.identities_removed.remove(&id);
        a.identities_added.insert(id, labels);
    }
    for id in b.identities_removed {
        if a.identities_added.remove(&id).is_none() {
            a.identities_removed.insert(id);
        }
    }
    a.selectors.extend(b.selectors);
    for (p, id) in b.upserts {
        a.deletes.remove(&p);
        a.upserts.insert(p, id);
    }
    for p in b.deletes {
        a.upserts.remove(&p);
        a.deletes.insert(p);
    }
    a.refused.extend(b.refused);
}

/// The addressing of a punted query, to answer it with.
#[derive(Debug, Clone, Copy)]
struct QueryFrame {
    pod_mac: ferrule_dataplane::wire::EthernetAddress,
    port_mac: ferrule_dataplane::wire::EthernetAddress,
    pod_ip: IpAddr,
    server_ip: IpAddr,
    pod_port: u16,
}

/// Who asked, as the name manager records owners: the pod (`namespace/name`) or the
/// port (`port/<name>`).
fn endpoint_of(port: &AclPort) -> String {
    port.pod
        .clone()
        .unwrap_or_else(|| format!("port/{}", port.name))
}

/// A punted frame's addressing and its UDP payload (the DNS message).
fn read_query<'a>(frame: &'a [u8], parsed: &pipeline::Parsed) -> Option<(QueryFrame, &'a [u8])> {
    let key = parsed.key;
    if key.proto != IpProtocol::UDP.0 || parsed.l4_offset == 0 || parsed.later_fragment {
        return None;
    }
    let end = parsed
        .l3_offset
        .checked_add(parsed.l3_len)?
        .min(frame.len());
    let payload = frame.get(parsed.l4_offset + 8..end)?;
    if payload.len() < 12 {
        return None;
    }
    let eth = EthernetFrame::new_checked(frame).ok()?;
    Some((
        QueryFrame {
            pod_mac: eth.src_addr(),
            port_mac: eth.dst_addr(),
            pod_ip: key.src_ip(),
            server_ip: key.dst_ip(),
            pod_port: key.src_port,
        },
        payload,
    ))
}

/// The frame that carries `message` from the DNS server's address back to the pod.
fn reply_frame(q: &QueryFrame, message: &[u8]) -> Option<Vec<u8>> {
    build_with_payload(
        &SynthSpec {
            src_mac: q.port_mac,
            dst_mac: q.pod_mac,
            proto: IpProtocol::UDP,
            src: q.server_ip,
            dst: q.pod_ip,
            src_port: DNS_PORT,
            dst_port: q.pod_port,
            tcp_flags: 0,
            ip_len: None,
            ttl: 64,
        },
        message,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_api::PortRole;
    use ferrule_dataplane::wire::EthernetAddress;

    pub(super) const POD_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 1, 2]);
    pub(super) const PORT_MAC: EthernetAddress = EthernetAddress([2, 0xfe, 0, 0, 0, 0xa]);
    pub(super) const POD_IP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
    pub(super) const DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

    /// A DNS query for `name` (type A), id `id`.
    pub(super) fn query(id: u16, name: &str) -> Vec<u8> {
        let mut q = id.to_be_bytes().to_vec();
        q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    /// The upstream server's answer to `q`: one A record `ip` with `ttl`.
    pub(super) fn answer(q: &[u8], ip: Ipv4Addr, ttl: u32) -> Vec<u8> {
        let mut a = q.to_vec();
        a[2] = 0x81;
        a[3] = 0x80;
        a[7] = 1;
        a.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        a.extend_from_slice(&ttl.to_be_bytes());
        a.extend_from_slice(&[0, 4]);
        a.extend_from_slice(&ip.octets());
        a
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        build_with_payload(
            &SynthSpec {
                src_mac: POD_MAC,
                dst_mac: PORT_MAC,
                proto: IpProtocol::UDP,
                src: IpAddr::V4(POD_IP),
                dst: IpAddr::V4(DNS),
                src_port: 40000,
                dst_port: 53,
                tcp_flags: 0,
                ip_len: None,
                ttl: 64,
            },
            payload,
        )
        .unwrap()
    }

    pub(super) fn pod_port() -> AclPort {
        AclPort {
            name: "pod-a".into(),
            role: PortRole::Pod,
            pod: Some("ns/a".into()),
            locked: false,
        }
    }

    /// The proxy with `*.example.test` in force and port pod-a allowed `*.example.test`,
    /// forwarding to `upstream`.
    pub(super) fn proxy(upstream: SocketAddr) -> Fqdn {
        let section = FqdnSection {
            dns_servers: vec![IpAddr::V4(DNS)],
            upstream: Some(upstream),
            ..FqdnSection::default()
        };
        let mut f = Fqdn::new(section);
        let selectors = BTreeSet::from(["fqdn:*.example.test".to_string()]);
        let (next, _) = f.with_selectors(&selectors);
        f.commit(
            next,
            vec![DnsPolicy {
                target: AttachTarget::Pod("ns/a".into()),
                allow: vec!["*.example.test".into()],
            }],
        );
        f
    }

    /// The UDP payload of a frame for the pod, checked against etherparse: addressed
    /// from the DNS service to the pod's port, checksum valid.
    fn payload_to_pod(frame: &[u8]) -> Vec<u8> {
        let p = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header().source_addr(), DNS);
        assert_eq!(ip.header().destination_addr(), POD_IP);
        let Some(etherparse::TransportSlice::Udp(udp)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!((udp.source_port(), udp.destination_port()), (53, 40000));
        let header = udp.to_header();
        let sum = header
            .calc_checksum_ipv4(&ip.header().to_header(), udp.payload())
            .unwrap();
        assert_eq!(header.checksum, sum, "UDP checksum");
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else {
            panic!("not Ethernet")
        };
        assert_eq!(eth.destination(), POD_MAC.0);
        assert_eq!(eth.source(), PORT_MAC.0);
        udp.payload().to_vec()
    }

    #[test]
    fn an_answer_is_learned_and_in_the_map_before_it_goes_back_to_the_pod() {
        let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = upstream.local_addr().unwrap();
        let mut f = proxy(at);
        let selected = f.selected("fqdn:*.example.test");
        assert_eq!(
            selected.len(),
            1,
            "the selector's identity is pre-allocated"
        );

        let out = f.on_query(&frame(&query(0x1234, "a.example.test")), 3, 0, &pod_port());
        assert!(matches!(out, QueryOutcome::Forwarded));
        let mut buf = [0u8; 512];
        upstream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (len, from) = upstream.recv_from(&mut buf).unwrap();
        let forwarded = buf[..len].to_vec();
        assert_ne!(
            &forwarded[..2],
            &[0x12, 0x34],
            "the proxy uses its own query id"
        );
        let ip = Ipv4Addr::new(192, 0, 2, 7);
        // A datagram from elsewhere is not an answer.
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger
            .send_to(
                &answer(&forwarded, Ipv4Addr::new(203, 0, 113, 9), 30),
                f.socket.as_ref().unwrap().local_addr().unwrap(),
            )
            .unwrap();
        upstream.send_to(&answer(&forwarded, ip, 30), from).unwrap();

        let deadline = Instant::now() + Duration::from_secs(5);
        let (replies, changes) = loop {
            let a = f.poll_upstream(Instant::now());
            if !a.udp.is_empty() {
                break (a.udp, a.changes);
            }
            assert!(Instant::now() < deadline, "no answer");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].port, 3);
        let to_pod = payload_to_pod(&replies[0].frame);
        assert_eq!(
            &to_pod[..2],
            &[0x12, 0x34],
            "the pod's query id is restored"
        );
        assert_eq!(
            dns::parse_response(&to_pod).unwrap().records,
            [(IpAddr::V4(ip), 30)]
        );
        // One upsert, no rule change: the selector's identity was there already.
        assert!(!changes.touches_rules());
        assert_eq!(changes.upserts.len(), 1);
        let maps = f.identities(2);
        assert_eq!(maps.map(1).unwrap().lookup(IpAddr::V4(ip)), selected[0]);
        assert_eq!(
            maps.map(0)
                .unwrap()
                .lookup(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9))),
            ferrule_dataplane::acl::identity::WORLD
        );
        assert_eq!(f.counters.forwarded, 1);
        assert_eq!(f.counters.answered, 1);
        assert_eq!(f.counters.addresses_learned, 1);
        assert_eq!(f.counters.malformed_answers, 1);
        assert_eq!(f.pending(), 0);
    }

    #[test]
    fn names_outside_the_policy_are_refused_and_junk_is_counted() {
        let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut f = proxy(upstream.local_addr().unwrap());
        match f.on_query(&frame(&query(7, "b.other.test")), 3, 0, &pod_port()) {
            QueryOutcome::Reply(r) => {
                let msg = payload_to_pod(&r[0].frame);
                assert_eq!(&msg[..2], &[0, 7]);
                assert_eq!(msg[3] & 0x0f, 5, "REFUSED");
            }
            other => panic!("{other:?}"),
        }
        // A port under no DNS policy: nothing is allowed.
        let mut other = pod_port();
        other.pod = Some("ns/other".into());
        assert!(matches!(
            f.on_query(&frame(&query(8, "a.example.test")), 4, 0, &other),
            QueryOutcome::Reply(_)
        ));
        assert!(matches!(
            f.on_query(&frame(b"not a dns message"), 3, 0, &pod_port()),
            QueryOutcome::Dropped
        ));
        assert_eq!(f.counters.refused, 2);
        assert_eq!(f.counters.malformed_queries, 1);
        assert_eq!(f.counters.forwarded, 0);
    }

    #[test]
    fn circuit_breaker_warnings_are_one_per_interval() {
        let mut l = WarnLimiter::default();
        let t = Instant::now();
        assert_eq!(l.admit(t), Some(0));
        for i in 1..=1000 {
            assert_eq!(l.admit(t + Duration::from_millis(i)), None);
        }
        assert_eq!(l.admit(t + BREAKER_WARN_INTERVAL), Some(1000));
        assert_eq!(l.admit(t + BREAKER_WARN_INTERVAL), None);
    }

    #[test]
    fn unanswered_queries_time_out() {
        let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut f = proxy(upstream.local_addr().unwrap());
        f.section.upstream_timeout_ms = 10;
        assert!(matches!(
            f.on_query(&frame(&query(1, "a.example.test")), 3, 0, &pod_port()),
            QueryOutcome::Forwarded
        ));
        let a = f.poll_upstream(Instant::now() + Duration::from_millis(50));
        assert!(a.udp.is_empty() && a.tcp.is_empty());
        assert_eq!((f.pending(), f.counters.upstream_timeouts), (0, 1));
    }

    #[test]
    fn dns_policies_need_dns_servers_and_pick_their_ports() {
        let f = Fqdn::new(FqdnSection::default());
        let p = DnsPolicy {
            target: AttachTarget::Port("pod-a".into()),
            allow: vec!["*".into()],
        };
        assert!(f
            .check_policies(std::slice::from_ref(&p))
            .unwrap_err()
            .contains("dns_servers"));
        let mut f = proxy("127.0.0.1:9".parse().unwrap());
        let (next, _) = f.with_selectors(&BTreeSet::new());
        f.commit(next, vec![p]);
        let mut b = pod_port();
        b.name = "pod-b".into();
        let dns = f.intercept(&[pod_port(), b]).unwrap();
        assert_eq!(dns.ports, [true, false]);
        assert_eq!(dns.servers, [IpAddr::V4(DNS)]);
    }
}
