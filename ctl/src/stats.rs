//! `ferrulectl stats`: uptime, per-worker, per-port and per-drop-reason counters.

use super::*;

/// `ferrulectl stats`.
pub fn render_stats(stats: &Stats) -> String {
    let mut out = format!(
        "uptime {}  rx {} packets  tx {} packets  drops {} packets\n",
        format_uptime(stats.uptime_secs),
        stats.totals.rx_packets,
        stats.totals.tx_packets,
        stats.totals.drops
    );

    out.push('\n');
    if stats.workers.is_empty() {
        out.push_str("no workers\n");
    } else {
        let mut workers = Table::new([
            "WORKER", "LCORE", "QUEUES", "POLLS", "BUSY%", "RX", "TX", "DROPS",
        ]);
        for w in &stats.workers {
            let queues = if w.queues.is_empty() {
                "-".to_string()
            } else {
                w.queues.join(",")
            };
            workers.row([
                w.worker.to_string(),
                w.lcore.to_string(),
                queues,
                w.polls.to_string(),
                busy_percent(w.busy_polls, w.polls),
                w.rx_packets.to_string(),
                w.tx_packets.to_string(),
                w.drops.to_string(),
            ]);
        }
        out.push_str(&workers.to_string());
    }

    out.push('\n');
    if stats.ports.is_empty() {
        out.push_str("no ports\n");
    } else {
        let mut ports = Table::new([
            "PORT",
            "RX-PKTS",
            "RX-BYTES",
            "TX-PKTS",
            "TX-BYTES",
            "DROPS",
            "RX-MISSED",
            "RX-ERRORS",
            "TX-ERRORS",
            "RX-NOMBUF",
        ]);
        for port in &stats.ports {
            let PortCounters {
                rx_packets,
                rx_bytes,
                tx_packets,
                tx_bytes,
                drops,
                hw_rx_missed,
                hw_rx_errors,
                hw_tx_errors,
                hw_rx_nombuf,
            } = &port.counters;
            let mut row = vec![port.name.clone()];
            row.extend(
                [
                    rx_packets,
                    rx_bytes,
                    tx_packets,
                    tx_bytes,
                    drops,
                    hw_rx_missed,
                    hw_rx_errors,
                    hw_tx_errors,
                    hw_rx_nombuf,
                ]
                .map(u64::to_string),
            );
            ports.row(row);
        }
        out.push_str(&ports.to_string());
    }

    out.push('\n');
    let drops: Vec<_> = stats
        .totals
        .drop_reasons
        .iter()
        .filter(|d| d.packets > 0)
        .collect();
    if drops.is_empty() {
        out.push_str("no drops\n");
    } else {
        let mut reasons = Table::new(["PACKETS", "REASON", "DESCRIPTION"]);
        for d in drops {
            reasons.row([
                d.packets.to_string(),
                d.reason.clone(),
                drop_reason_description(&d.reason).unwrap_or("").to_string(),
            ]);
        }
        out.push_str(&reasons.to_string());
    }
    out
}

/// What a drop reason means, for the drop reasons this ferrulectl knows.
pub fn drop_reason_description(reason: &str) -> Option<&'static str> {
    DropReason::from_name(reason).map(DropReason::description)
}

/// Uptime as `3d 04:05:06`, or `05:06:07` under a day.
pub(crate) fn format_uptime(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "unknown".to_string();
    }
    // Truncation is intended; `as` saturates for absurdly large values.
    let total = secs as u64;
    let (days, rest) = (total / 86_400, total % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}d {clock}")
    } else {
        clock
    }
}

/// Share of poll-loop iterations that received packets, one decimal.
pub(crate) fn busy_percent(busy: u64, polls: u64) -> String {
    if polls == 0 {
        return "-".to_string();
    }
    format!("{:.1}", busy as f64 * 100.0 / polls as f64)
}
