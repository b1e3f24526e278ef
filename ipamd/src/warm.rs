//! The warm-pool decision: from the pool's counts, the instance type's limits and the
//! AWS VPC CNI knobs (`WARM_ENI_TARGET`, `WARM_IP_TARGET`, `MINIMUM_IP_TARGET`), the one
//! next EC2 change to make — assign addresses, attach an ENI, unassign surplus
//! addresses or free an ENI — or none. Pure: the reconciler carries the action out and
//! asks again.

use std::net::Ipv4Addr;

use crate::pool::{Pool, Stats};

/// The thresholds in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// Keep this many ENIs' worth of available addresses (ignored when either IP
    /// target is set).
    pub warm_eni: u32,
    /// Keep this many available addresses.
    pub warm_ip: Option<u32>,
    /// Keep at least this many addresses on the node, assigned or not.
    pub minimum_ip: Option<u32>,
}

impl Targets {
    /// Whether the IP targets are in force (either is set and not zero): they take
    /// precedence over `WARM_ENI_TARGET`.
    pub fn ip_mode(&self) -> bool {
        self.warm_ip.unwrap_or(0) > 0 || self.minimum_ip.unwrap_or(0) > 0
    }
}

/// What the instance allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// ENIs (N), after the configured cap.
    pub max_enis: u32,
    /// IPv4 addresses per ENI (M), the primary included.
    pub ips_per_eni: u32,
    /// min(N·M − N, the subnet's free addresses + those held).
    pub max_pod_ips: u32,
}

impl Limits {
    /// Secondary addresses one ENI can carry (M − 1).
    pub fn secondaries_per_eni(&self) -> u32 {
        self.ips_per_eni.saturating_sub(1)
    }
}

/// The next change to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Assign `count` more secondary addresses to an attached ENI that has room.
    AssignIps { eni_id: String, count: u32 },
    /// Create and attach a new ENI with `ips` secondary addresses.
    AttachEni { ips: u32 },
    /// Unassign these free secondary addresses (WARM_IP_TARGET surplus).
    UnassignIps { eni_id: String, ips: Vec<Ipv4Addr> },
    /// Detach and delete this ENI: not the primary, no address assigned or cooling.
    FreeEni { eni_id: String },
}

/// Why the pool cannot grow although it is below its thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// Every ENI the instance allows is attached and full.
    EniLimit(u32),
    /// The node holds its maximum of pod addresses.
    MaxPodIps(u32),
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocked::EniLimit(n) => write!(f, "ENI limit {n} reached"),
            Blocked::MaxPodIps(n) => write!(f, "max pod IPs {n} reached"),
        }
    }
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Act(Action),
    /// Below the thresholds, but the limits forbid growing.
    Blocked(Blocked),
    /// Within the thresholds.
    Steady,
}

/// How many addresses the pool lacks and has in surplus.
fn shortage_and_surplus(targets: &Targets, limits: &Limits, stats: &Stats) -> (u32, u32) {
    if targets.ip_mode() {
        let warm = targets.warm_ip.unwrap_or(0);
        let minimum = targets.minimum_ip.unwrap_or(0);
        let short = warm
            .saturating_sub(stats.available)
            .max(minimum.saturating_sub(stats.total));
        let over = stats
            .available
            .saturating_sub(warm)
            .min(stats.total.saturating_sub(minimum));
        (short, over)
    } else {
        let wanted = targets.warm_eni * limits.secondaries_per_eni();
        (wanted.saturating_sub(stats.available), 0)
    }
}

/// The next change that brings the pool towards its thresholds, at `now_ms`.
pub fn plan(pool: &Pool, targets: &Targets, limits: &Limits, now_ms: u64) -> Plan {
    let stats = pool.stats(now_ms);
    let (short, over) = shortage_and_surplus(targets, limits, &stats);
    let per_eni = limits.secondaries_per_eni();
    let enis: Vec<_> = pool.enis().collect();

    if short > 0 {
        // In ENI mode an ENI is always filled whole; with the IP targets only what
        // the targets need is assigned.
        let want = if targets.ip_mode() { short } else { per_eni };
        let with_room = enis
            .iter()
            .filter(|e| (e.secondary_ips.len() as u32) < per_eni)
            .min_by_key(|e| e.device_index);
        if with_room.is_none() && enis.len() as u32 >= limits.max_enis {
            return Plan::Blocked(Blocked::EniLimit(limits.max_enis));
        }
        let room_left = limits.max_pod_ips.saturating_sub(stats.total);
        if room_left == 0 {
            return Plan::Blocked(Blocked::MaxPodIps(limits.max_pod_ips));
        }
        if let Some(eni) = with_room {
            let room = per_eni - eni.secondary_ips.len() as u32;
            return Plan::Act(Action::AssignIps {
                eni_id: eni.id.clone(),
                count: want.min(room).min(room_left),
            });
        }
        return Plan::Act(Action::AttachEni {
            ips: want.min(per_eni).min(room_left),
        });
    }

    // An ENI other than the primary whose addresses are all free (none assigned, none
    // cooling), highest device index first.
    let freeable = |eni: &&&crate::pool::Eni| {
        eni.device_index != 0
            && eni
                .secondary_ips
                .iter()
                .all(|ip| pool.is_available(*ip, now_ms))
    };
    if targets.ip_mode() {
        if let Some(eni) = enis
            .iter()
            .filter(freeable)
            .filter(|e| e.secondary_ips.len() as u32 <= over)
            .max_by_key(|e| e.device_index)
        {
            return Plan::Act(Action::FreeEni {
                eni_id: eni.id.clone(),
            });
        }
        if over > 0 {
            // Take surplus addresses from the highest ENI that has free ones, so that
            // ENIs empty and can be freed.
            if let Some(eni) = enis
                .iter()
                .filter(|e| !pool.free_ips_of(&e.id, now_ms).is_empty())
                .max_by_key(|e| e.device_index)
            {
                let mut free = pool.free_ips_of(&eni.id, now_ms);
                free.sort_unstable_by(|a, b| b.cmp(a));
                free.truncate(over as usize);
                return Plan::Act(Action::UnassignIps {
                    eni_id: eni.id.clone(),
                    ips: free,
                });
            }
        }
        return Plan::Steady;
    }

    let wanted = targets.warm_eni * per_eni;
    if let Some(eni) = enis
        .iter()
        .filter(freeable)
        .filter(|e| stats.available - e.secondary_ips.len() as u32 >= wanted)
        .max_by_key(|e| e.device_index)
    {
        return Plan::Act(Action::FreeEni {
            eni_id: eni.id.clone(),
        });
    }
    Plan::Steady
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Eni, PodKey};

    const LIMITS: Limits = Limits {
        max_enis: 3,
        ips_per_eni: 6,
        max_pod_ips: 15,
    };

    fn eni(index: u32, count: u8) -> Eni {
        Eni {
            id: format!("eni-{index}"),
            mac: String::new(),
            device_index: index,
            attachment_id: None,
            subnet_id: "subnet-1".into(),
            primary_ip: Ipv4Addr::new(10, 0, index as u8, 1),
            secondary_ips: (0..count)
                .map(|d| Ipv4Addr::new(10, 0, index as u8, 10 + d))
                .collect(),
        }
    }

    fn take(pool: &mut Pool, n: usize) {
        for i in 0..n {
            let key = PodKey {
                container_id: format!("c{i}-{}", pool.stats(0).assigned),
                ifname: "eth0".into(),
            };
            pool.assign(&key, "ns", "p", 0).unwrap();
        }
    }

    const ENI1: Targets = Targets {
        warm_eni: 1,
        warm_ip: None,
        minimum_ip: None,
    };

    #[test]
    fn warm_eni_fills_the_primary_then_attaches() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 0)]);
        assert_eq!(
            plan(&pool, &ENI1, &LIMITS, 0),
            Plan::Act(Action::AssignIps {
                eni_id: "eni-0".into(),
                count: 5
            })
        );
        pool.set_enis(vec![eni(0, 5)]);
        assert_eq!(plan(&pool, &ENI1, &LIMITS, 0), Plan::Steady);
        take(&mut pool, 1);
        assert_eq!(
            plan(&pool, &ENI1, &LIMITS, 0),
            Plan::Act(Action::AttachEni { ips: 5 })
        );
    }

    #[test]
    fn warm_eni_frees_an_unused_eni_only_when_the_rest_suffices() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 5), eni(1, 5)]);
        assert_eq!(
            plan(&pool, &ENI1, &LIMITS, 0),
            Plan::Act(Action::FreeEni {
                eni_id: "eni-1".into()
            })
        );
        take(&mut pool, 1); // on eni-0 or eni-1: either way nothing to free
        assert_eq!(plan(&pool, &ENI1, &LIMITS, 0), Plan::Steady);
    }

    #[test]
    fn limits_block_growth() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 5), eni(1, 5), eni(2, 5)]);
        take(&mut pool, 15);
        assert_eq!(
            plan(&pool, &ENI1, &LIMITS, 0),
            Plan::Blocked(Blocked::EniLimit(3))
        );
        // A small subnet: room on the ENIs, but the node holds all it may.
        let small = Limits {
            max_pod_ips: 4,
            ..LIMITS
        };
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 4)]);
        take(&mut pool, 4);
        assert_eq!(
            plan(&pool, &ENI1, &small, 0),
            Plan::Blocked(Blocked::MaxPodIps(4))
        );
    }

    #[test]
    fn ip_targets_take_precedence_and_trim() {
        let t = Targets {
            warm_eni: 1,
            warm_ip: Some(5),
            minimum_ip: Some(10),
        };
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 0)]);
        // Short of 10 (the minimum): the primary's room first.
        assert_eq!(
            plan(&pool, &t, &LIMITS, 0),
            Plan::Act(Action::AssignIps {
                eni_id: "eni-0".into(),
                count: 5
            })
        );
        pool.set_enis(vec![eni(0, 5)]);
        assert_eq!(
            plan(&pool, &t, &LIMITS, 0),
            Plan::Act(Action::AttachEni { ips: 5 })
        );
        pool.set_enis(vec![eni(0, 5), eni(1, 5)]);
        assert_eq!(plan(&pool, &t, &LIMITS, 0), Plan::Steady);
        take(&mut pool, 7);
        // 3 available < 5: only 2 more.
        assert_eq!(
            plan(&pool, &t, &LIMITS, 0),
            Plan::Act(Action::AttachEni { ips: 2 })
        );
        // Surplus with only the warm target: unassign down to it.
        let warm_only = Targets {
            warm_eni: 1,
            warm_ip: Some(2),
            minimum_ip: None,
        };
        let mut pool = Pool::default();
        pool.set_enis(vec![eni(0, 5)]);
        match plan(&pool, &warm_only, &LIMITS, 0) {
            Plan::Act(Action::UnassignIps { eni_id, ips }) => {
                assert_eq!(eni_id, "eni-0");
                assert_eq!(ips.len(), 3);
            }
            other => panic!("{other:?}"),
        }
    }
}
