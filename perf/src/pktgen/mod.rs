//! `ferrule-pktgen`'s parts: what to send (flows, sizes, frames), the stamp each packet
//! carries, what a trial measured (loss, reordering, latency), the NDR/PDR search, and
//! the DPDK poll loop that runs trials.

pub mod flows;
pub mod generator;
pub mod measure;
pub mod search;
pub mod stamp;

/// Parses a packet rate: `14.2M`, `500k`, `1e6`, `250000` (packets per second).
pub fn parse_rate(s: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('M' | 'm') => (&t[..t.len() - 1], 1e6),
        Some('K' | 'k') => (&t[..t.len() - 1], 1e3),
        Some('G' | 'g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("bad rate {s:?}: packets per second, e.g. 14.2M, 500k"))?;
    if !(v.is_finite() && v > 0.0) {
        anyhow::bail!("bad rate {s:?}: must be above 0");
    }
    Ok(v * mult)
}

/// Parses a MAC address `02:00:00:0a:01:0b`.
pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let parts: Vec<&str> = s.trim().split([':', '-']).collect();
    if parts.len() != 6 {
        anyhow::bail!("bad MAC address {s:?}: six hex bytes, e.g. 02:00:00:0a:01:0b");
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16)
            .map_err(|_| anyhow::anyhow!("bad MAC address {s:?}: {p:?} is not a hex byte"))?;
    }
    Ok(mac)
}
