//! Human-readable summaries.

use pathem_model::DropReason;
use pathem_runtime::replay::ReplayReport;
use std::fmt::Write;
use std::path::Path;

/// Formats a byte count with a binary unit.
pub fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// The one-screen summary of a replay.
pub fn summary(input: &Path, output: &Path, r: &ReplayReport) -> String {
    let s = &r.stats;
    let d = &s.dropped;
    let mut out = String::new();
    let pct = |n: u64| {
        if s.rx_packets == 0 {
            0.0
        } else {
            100.0 * n as f64 / s.rx_packets as f64
        }
    };
    let _ = writeln!(out, "pathem replay {} -> {} (seed {})", input.display(), output.display(), r.seed);
    let _ = writeln!(out, "  path       {}", r.path);
    let _ = writeln!(out, "  received   {:>10} frames  {:>12}", s.rx_packets, bytes(s.rx_bytes));
    let _ = writeln!(out, "  forwarded  {:>10} frames  {:>12}", s.tx_packets, bytes(s.tx_bytes));
    let _ =
        writeln!(out, "  dropped    {:>10} frames  ({:.3}%): {}", d.total(), pct(d.total()), d.describe());
    if let Some(aqm) = aqm_summary(s) {
        let _ = writeln!(out, "  aqm        {aqm}");
    }
    let _ = writeln!(
        out,
        "  duplicated {}, corrupted {}, ecn-marked {}, reordered {}",
        s.duplicated, s.corrupted, s.ecn_marked, s.reordered
    );
    if s.reorder_clamped > 0 {
        let _ = writeln!(
            out,
            "  held back  {} frames so that none overtook another, by {:.1} us on average",
            s.reorder_clamped,
            s.reorder_clamp_mean_ns / 1e3
        );
    }
    let _ = writeln!(
        out,
        "  delay line up to {} (grows with what is in flight)",
        bytes(r.delay_line_bytes as u64)
    );
    if let Some(peak) = r.peak_memory_bytes {
        let _ = writeln!(out, "  peak memory {}", bytes(peak));
    }
    if r.input_backwards_timestamps > 0 {
        let _ = writeln!(
            out,
            "  note: {} input frames had timestamps earlier than their predecessor; they arrived with it",
            r.input_backwards_timestamps
        );
    }
    out
}

/// What the queue discipline did, in one line, when one ran (`--aqm`): drops by reason,
/// marks, and the sojourn percentiles (upper bounds of log2 buckets).
pub fn aqm_summary(s: &pathem_engine::Stats) -> Option<String> {
    let (aqm_drop, overlimit) = (s.dropped.get(DropReason::Aqm), s.dropped.get(DropReason::Overlimit));
    (aqm_drop + overlimit + s.aqm_mark > 0 || s.sojourn.max_ns > 0).then(|| {
        format!(
            "drop {}, overlimit {}, mark {}; sojourn p50 ≤ {:.3} ms, p99 ≤ {:.3} ms, max {:.3} ms",
            aqm_drop,
            overlimit,
            s.aqm_mark,
            s.sojourn.p50_ns as f64 / 1e6,
            s.sojourn.p99_ns as f64 / 1e6,
            s.sojourn.max_ns as f64 / 1e6
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_units() {
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(4 << 20), "4.0 MiB");
    }
}
