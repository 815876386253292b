//! How often this machine takes the CPU away from a busy-polling thread, and for how long
//! (`pathem bench --hiccups`, and the bound `pathem validate --target` reports).
//!
//! One thread per CPU, pinned, reads CLOCK_MONOTONIC in a tight loop; a gap between two
//! consecutive reads is time the thread did not run (an interrupt, another task, or on a
//! virtual machine the hypervisor running something else). pathem's live loop is such a
//! thread: a frame due during a hiccup leaves when it ends, so the hiccups bound the tail of
//! release precision that any software emulator can reach on the machine.

use pathem_engine::monotonic_now;
use pathem_model::Nanos;
use serde::Serialize;

/// Gap thresholds counted, in microseconds.
pub const THRESHOLDS_US: [u64; 5] = [10, 50, 100, 1_000, 10_000];

/// One CPU's hiccups over a measurement.
#[derive(Serialize, Debug, Clone)]
pub struct CpuHiccups {
    /// The CPU the thread ran on (`None`: it could not be pinned).
    pub cpu: Option<usize>,
    pub seconds: f64,
    /// Per second, gaps of at least 10, 50, 100, 1000 and 10 000 µs.
    pub per_second_at_least_us: Vec<(u64, f64)>,
    pub max_us: f64,
    /// Share of the time lost in gaps of 10 µs or more.
    pub lost_percent: f64,
    /// Share of the time the hypervisor ran something else on this CPU (steal), where the
    /// kernel reports it.
    pub steal_percent: Option<f64>,
    /// Release lateness a zero-cost emulator on this CPU would show at 100 kpps: a frame due
    /// during a gap leaves when the gap ends. Median, p99 and p99.9, µs.
    pub ideal_late_at_100kpps_us: [f64; 3],
}

/// Steal time of each CPU in clock ticks, from /proc/stat.
fn steal_ticks() -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split_whitespace().nth(8).and_then(|v| v.parse().ok()).unwrap_or(0))
        .collect()
}

fn spin(cpu: usize, seconds: f64) -> CpuHiccups {
    let pinned = pathem_runtime::link::pin(cpu).is_ok();
    let start = monotonic_now();
    let end = start + Nanos((seconds * 1e9) as u64);
    let mut counts = [0u64; THRESHOLDS_US.len()];
    let mut gaps: Vec<u64> = Vec::with_capacity(1 << 20);
    let (mut prev, mut max, mut lost) = (start, Nanos::ZERO, Nanos::ZERO);
    loop {
        let now = monotonic_now();
        let gap = now - prev;
        prev = now;
        if gap >= Nanos::from_micros(1) && gaps.len() < gaps.capacity() {
            gaps.push(gap.as_nanos());
        }
        if gap >= Nanos::from_micros(THRESHOLDS_US[0]) {
            lost += gap;
            max = max.max(gap);
            for (c, &t) in counts.iter_mut().zip(&THRESHOLDS_US) {
                if gap >= Nanos::from_micros(t) {
                    *c += 1;
                }
            }
        }
        if now >= end {
            break;
        }
    }
    let took = (prev - start).as_secs_f64();
    CpuHiccups {
        cpu: pinned.then_some(cpu),
        seconds: took,
        per_second_at_least_us: THRESHOLDS_US
            .iter()
            .zip(counts)
            .map(|(&t, c)| (t, c as f64 / took))
            .collect(),
        max_us: max.as_nanos() as f64 / 1e3,
        lost_percent: 100.0 * lost.as_secs_f64() / took,
        steal_percent: None,
        ideal_late_at_100kpps_us: [0.5, 0.99, 0.999]
            .map(|q| ideal_lateness(&gaps, took, 10_000, q) as f64 / 1e3),
    }
}

/// Quantile `q` of the lateness of frames due every `period` ns over `seconds`, when the CPU
/// that releases them is away for each of `gaps` (ns) and otherwise releases instantly.
///
/// A gap of length G holds the frames due within it; the k-th from its end is late by
/// G − k·period for k ≥ 0 while that is positive, so the number of frames later than L is
/// Σ ⌈(G − L) / period⌉ over the gaps longer than L. The quantile is the smallest L for which
/// that count is within the allowed share, found by bisection.
pub fn ideal_lateness(gaps: &[u64], seconds: f64, period: u64, q: f64) -> u64 {
    let frames = seconds * 1e9 / period as f64;
    let allowed = ((1.0 - q) * frames).floor() as u64;
    let later_than =
        |l: u64| -> u64 { gaps.iter().filter(|&&g| g > l).map(|&g| (g - l).div_ceil(period)).sum() };
    let (mut lo, mut hi) = (0u64, gaps.iter().copied().max().unwrap_or(0));
    if later_than(0) <= allowed {
        return 0;
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if later_than(mid) <= allowed {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Spins one pinned thread on each CPU (never more threads than CPUs) for `seconds` (0.001
/// to 3600).
pub fn measure(seconds: f64) -> Result<Vec<CpuHiccups>, crate::Error> {
    pathem_model::limits::within("seconds", seconds, 0.001..=3600.0, "0.001 to 3600")?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let steal_before = steal_ticks();
    let handles: Vec<_> = (0..cpus).map(|cpu| std::thread::spawn(move || spin(cpu, seconds))).collect();
    let mut out: Vec<CpuHiccups> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    let steal_after = steal_ticks();
    // /proc/stat counts in USER_HZ, which Linux fixes at 100 for every architecture.
    let hz = 100.0;
    for h in &mut out {
        let Some(cpu) = h.cpu else { continue };
        if let (Some(a), Some(b)) = (steal_before.get(cpu), steal_after.get(cpu)) {
            h.steal_percent = Some(100.0 * (b.saturating_sub(*a)) as f64 / hz / h.seconds);
        }
    }
    Ok(out)
}

/// `bench --hiccups`'s report of `all`, measured for `seconds` each.
pub fn text(all: &[CpuHiccups], seconds: f64) -> String {
    let mut out = format!("pathem bench --hiccups: a busy-polling thread on each CPU for {seconds} s; gaps between clock reads are time it did not run\n");
    all.iter().for_each(|h| out += &format!("  {}\n", describe(h)));
    out
}

/// One line per CPU.
pub fn describe(h: &CpuHiccups) -> String {
    let rates: Vec<String> = h
        .per_second_at_least_us
        .iter()
        .map(|(t, r)| {
            let t = if *t >= 1000 { format!("{}ms", t / 1000) } else { format!("{t}us") };
            format!("≥{t} {r:.1}/s")
        })
        .collect();
    let steal = h.steal_percent.map(|s| format!(", steal {s:.2}%")).unwrap_or_default();
    let cpu = h.cpu.map_or("unpinned".to_string(), |c| format!("CPU {c}"));
    let [m, p99, p999] = h.ideal_late_at_100kpps_us;
    format!(
        "{cpu}: gaps {}; longest {:.0} us; {:.2}% of the time lost{steal}; a zero-cost emulator here at 100 kpps: late median {m:.1}, p99 {p99:.1}, p99.9 {p999:.1} us",
        rates.join(", "),
        h.max_us,
        h.lost_percent
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gaps_no_lateness() {
        assert_eq!(ideal_lateness(&[], 1.0, 10_000, 0.999), 0);
    }

    #[test]
    fn one_long_gap_sets_the_tail() {
        // 1 s at 100 kpps = 100 000 frames; p99.9 allows 100 later than L. One 2 ms gap holds
        // 200 frames late by 2000, 1990, …, 10 µs: the 100 latest are later than 1000 µs.
        let l = ideal_lateness(&[2_000_000], 1.0, 10_000, 0.999);
        assert_eq!(l, 1_000_000);
        // The median frame is not late at all.
        assert_eq!(ideal_lateness(&[2_000_000], 1.0, 10_000, 0.5), 0);
    }

    #[test]
    fn many_short_gaps_add_up() {
        // 2 000 gaps of 25 µs: each holds frames late by 25, 15, 5 µs (3 frames).
        let gaps = vec![25_000; 2_000];
        // 6 000 frames of 100 000 are late: p99 (1 000 allowed) is still late; p90 is not.
        assert!(ideal_lateness(&gaps, 1.0, 10_000, 0.99) >= 15_000);
        assert_eq!(ideal_lateness(&gaps, 1.0, 10_000, 0.9), 0);
    }
}
