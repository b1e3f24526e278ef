//! The circuit breaker: limits on what untrusted DNS answers may make the node allocate
//! (addresses per name, identities from answers), and the counters of what they refused.
//!
//! Policy: past `max_ips_per_name`, a name's addresses that expire soonest are evicted
//! to make room for the newest answer (which is what the pod is about to use), and an
//! answer that alone has more is cut to its first `max_ips_per_name`; past
//! `max_fqdn_identities`, an address whose label set would need a new identity is not
//! learned (it stays unallowed); should the local identity range be used up, a prefix
//! that needs a new identity leaves the IP → identity map (world: denied). Each is
//! counted and returned as a `Refusal`.

use std::net::IpAddr;

use ipnet::IpNet;

use serde::{Deserialize, Serialize};

/// The breaker's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Addresses kept per name.
    pub max_ips_per_name: usize,
    /// Identities with an `fqdn:` label a DNS answer may bring into use.
    pub max_fqdn_identities: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_ips_per_name: 1000,
            max_fqdn_identities: 1024,
        }
    }
}

/// What the breaker refused, as counts since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Addresses evicted from a name to make room past `max_ips_per_name`.
    pub ips_evicted_over_limit: u64,
    /// Addresses of an answer beyond `max_ips_per_name`, not learned.
    pub ips_refused_over_limit: u64,
    /// Addresses not learned because their label set would pass `max_fqdn_identities`
    /// (or the local range is used up), and prefixes dropped for want of an identity.
    pub identities_refused: u64,
}

/// Why one address of an answer was not (or is no longer) learned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Refusal {
    /// Evicted from `name` to make room for newer addresses.
    IpEvicted { name: String, ip: IpAddr },
    /// Beyond the per-name limit within one answer.
    IpsPerName { name: String, ip: IpAddr },
    /// Its label set would need an identity past the limit (or the range is used up).
    IdentityLimit {
        name: String,
        ip: IpAddr,
        labels: String,
    },
    /// A policy change needed a new identity for this prefix and the local range is used
    /// up: the prefix left the IP → identity map (its addresses are world).
    IdentitiesExhausted { prefix: IpNet, labels: String },
}

impl Counters {
    /// Counts one refusal.
    pub fn count(&mut self, r: &Refusal) {
        match r {
            Refusal::IpEvicted { .. } => self.ips_evicted_over_limit += 1,
            Refusal::IpsPerName { .. } => self.ips_refused_over_limit += 1,
            Refusal::IdentityLimit { .. } | Refusal::IdentitiesExhausted { .. } => {
                self.identities_refused += 1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_counter() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let mut c = Counters::default();
        c.count(&Refusal::IpEvicted {
            name: "a".into(),
            ip,
        });
        c.count(&Refusal::IpsPerName {
            name: "a".into(),
            ip,
        });
        c.count(&Refusal::IpsPerName {
            name: "a".into(),
            ip,
        });
        c.count(&Refusal::IdentityLimit {
            name: "a".into(),
            ip,
            labels: String::new(),
        });
        assert_eq!(
            c,
            Counters {
                ips_evicted_over_limit: 1,
                ips_refused_over_limit: 2,
                identities_refused: 1
            }
        );
        let json = serde_json::to_value(Refusal::IpsPerName {
            name: "a".into(),
            ip,
        })
        .unwrap();
        assert_eq!(json["reason"], "ips-per-name");
    }
}
