//! Instance-type limits: ENIs per instance (N) and IPv4 addresses per ENI (M), from a
//! built-in table of common types for when DescribeInstanceTypes does not say, and the
//! node's maximum of pod addresses.

/// (instance type, N, M) for a handful of common types.
const BUILT_IN: &[(&str, u32, u32)] = &[
    ("t3.nano", 2, 2),
    ("t3.micro", 2, 2),
    ("t3.small", 3, 4),
    ("t3.medium", 3, 6),
    ("t3.large", 3, 12),
    ("t3.xlarge", 4, 15),
    ("m5.large", 3, 10),
    ("m5.xlarge", 4, 15),
    ("m5.2xlarge", 4, 15),
    ("m5.4xlarge", 8, 30),
    ("c5.large", 3, 10),
    ("c5.xlarge", 4, 15),
    ("r5.large", 3, 10),
    ("r5.xlarge", 4, 15),
];

/// The built-in (N, M) of `instance_type`.
pub fn built_in(instance_type: &str) -> Option<(u32, u32)> {
    BUILT_IN
        .iter()
        .find(|(name, _, _)| *name == instance_type)
        .map(|(_, n, m)| (*n, *m))
}

/// min(N·M − N, the subnet's free addresses + the addresses the node already holds).
pub fn max_pod_ips(max_enis: u32, ips_per_eni: u32, subnet_free: u32, held: u32) -> u32 {
    (max_enis * ips_per_eni - max_enis).min(subnet_free.saturating_add(held))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_formula() {
        assert_eq!(built_in("t3.medium"), Some((3, 6)));
        assert_eq!(built_in("x9.nonesuch"), None);
        assert_eq!(max_pod_ips(3, 6, 4000, 0), 15);
        assert_eq!(max_pod_ips(3, 6, 4, 5), 9);
    }
}
