//! End-to-end: every model through `pathem replay`, checked on the output capture.

use pathem_io::mem::{ipv4_checksum, udp_frame};
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::Nanos;
use std::path::Path;

mod common;
use common::{bursts, cbr, pathem, seq, Dir};

/// Replays `frames` with `args`; returns the output frames as (time, bytes) and the stats.
fn replay(d: &Dir, frames: &[(Nanos, Vec<u8>)], args: &[&str]) -> (Vec<(Nanos, Vec<u8>)>, serde_json::Value) {
    write_capture(&d.path("in.pcap"), frames.iter().cloned()).unwrap();
    let (i, o, s) = (d.s("in.pcap"), d.s("out.pcap"), d.s("stats.json"));
    let mut all = vec!["replay", &i, &o, "--stats", &s];
    all.extend_from_slice(args);
    let out = pathem(&all);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let stats = serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap();
    let frames = read_capture(&d.path("out.pcap")).unwrap().into_iter().map(|(t, _, f)| (t, f)).collect();
    (frames, stats)
}

/// Which input frames (by sequence number) were lost.
fn lost_pattern(n: u64, out: &[(Nanos, Vec<u8>)]) -> Vec<bool> {
    let mut lost = vec![true; n as usize];
    for (_, f) in out {
        lost[seq(f) as usize] = false;
    }
    lost
}

#[test]
fn gilbert_elliott_from_rate_and_burst() {
    let d = Dir::new();
    let n = 400_000;
    let (out, s) =
        replay(&d, &cbr(n, 60, Nanos::from_micros(1)), &["--loss", "ge:loss=2%,burst=4", "--seed", "3"]);
    let lost = lost_pattern(n, &out);
    let rate = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
    let b = bursts(&lost);
    let mean = b.iter().sum::<usize>() as f64 / b.len() as f64;
    assert!((rate / 0.02 - 1.0).abs() < 0.05, "rate {rate}");
    assert!((mean / 4.0 - 1.0).abs() < 0.05, "mean burst {mean}");
    assert_eq!(s["dropped"]["loss"].as_u64().unwrap() as usize, lost.iter().filter(|&&l| l).count());
}

#[test]
fn four_state_and_trace_loss() {
    let d = Dir::new();
    // Bursts (mean 2 frames here) make the count vary more than Bernoulli: 1M frames keep
    // the standard error near 1%.
    let n = 1_000_000;
    let (out, _) =
        replay(&d, &cbr(n, 60, Nanos::from_micros(1)), &["--loss", "gi:p13=1%,p31=50%", "--seed", "4"]);
    let rate = lost_pattern(n, &out).iter().filter(|&&l| l).count() as f64 / n as f64;
    // p31 = 0.5, p32 = 0, p14 = 0: π3 = π1·p13/p31 → loss = 0.02/1.02.
    assert!((rate / (0.02 / 1.02) - 1.0).abs() < 0.06, "rate {rate}");

    std::fs::write(d.path("pattern.txt"), "# two delivered, one lost\n0 0 1\n").unwrap();
    let spec = format!("trace:{}", d.s("pattern.txt"));
    let (out, _) = replay(&d, &cbr(30, 60, Nanos::from_micros(1)), &["--loss", &spec]);
    let lost = lost_pattern(30, &out);
    assert_eq!(lost, (0..30).map(|i| i % 3 == 2).collect::<Vec<_>>());
}

#[test]
fn bit_errors_hit_long_frames_more() {
    let d = Dir::new();
    let n = 100_000u64;
    let frames: Vec<_> = (0..n)
        .map(|i| (Nanos::from_secs(1) + Nanos(i * 1000), udp_frame(if i % 2 == 0 { 64 } else { 1500 }, i)))
        .collect();
    let (out, s) = replay(&d, &frames, &["--ber", "1e-5", "--seed", "9"]);
    let lost = lost_pattern(n, &out);
    for (len, parity) in [(64.0f64, 0), (1500.0, 1)] {
        let k = lost.iter().enumerate().filter(|(i, &l)| l && i % 2 == parity).count() as f64;
        let p = 1.0 - (1.0f64 - 1e-5).powf(8.0 * len);
        let m = n as f64 / 2.0;
        assert!((k - m * p).abs() < 4.0 * (m * p * (1.0 - p)).sqrt() + 1.0, "len {len}: {k} vs {}", m * p);
    }
    assert_eq!(s["dropped"]["ber"].as_u64().unwrap() as usize, lost.iter().filter(|&&l| l).count());
}

fn normal_cdf(x: f64) -> f64 {
    0.5 * libm_erfc(-x / std::f64::consts::SQRT_2)
}

/// erfc by the Numerical Recipes Chebyshev fit (|error| < 1.2e-7), so the test checks pathem
/// against an independent implementation.
fn libm_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[test]
fn reorder_releases_each_frame_at_its_own_delay() {
    let d = Dir::new();
    let n = 50_000u64;
    let frames = cbr(n, 80, Nanos::from_micros(20));
    let args = ["--delay", "10ms", "--jitter", "2ms", "--delay-dist", "normal", "--reorder", "--seed", "5"];
    let (out, s) = replay(&d, &frames, &args);
    assert_eq!(out.len() as u64, n);
    let mut delays: Vec<f64> =
        out.iter().map(|(t, f)| (*t - frames[seq(f) as usize].0).as_nanos() as f64).collect();
    // Output is in release order, and reordering happened.
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
    assert!(s["reordered"].as_u64().unwrap() > 1000, "{s}");
    assert_eq!(s["reorder_clamped"], 0);
    delays.sort_by(f64::total_cmp);
    let ks = delays
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = normal_cdf((x - 10e6) / 2e6);
            (f - i as f64 / n as f64).abs().max(((i + 1) as f64 / n as f64 - f).abs())
        })
        .fold(0.0, f64::max);
    assert!(ks < 1.95 / (n as f64).sqrt(), "KS distance {ks}");
}

#[test]
fn without_reorder_no_frame_overtakes_and_clamps_are_reported() {
    let d = Dir::new();
    let n = 50_000u64;
    let frames = cbr(n, 80, Nanos::from_micros(20));
    for extra in [&["--delay-dist", "normal"][..], &["--delay-half-life", "5ms"][..]] {
        let mut args = vec!["--delay", "10ms", "--jitter", "2ms", "--seed", "5"];
        args.extend_from_slice(extra);
        let (out, s) = replay(&d, &frames, &args);
        let seqs: Vec<u64> = out.iter().map(|(_, f)| seq(f)).collect();
        assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "{extra:?}: order kept");
        assert!(s["reorder_clamped"].as_u64().unwrap() > 0, "{extra:?}: {s}");
        assert!(s["reorder_clamp_mean_ns"].as_f64().unwrap() > 0.0);
        assert_eq!(s["reordered"], 0);
    }
}

#[test]
fn correlated_delay_mean_std_and_correlation_end_to_end() {
    let d = Dir::new();
    let n = 200_000u64;
    let gap = Nanos::from_micros(50);
    let frames = cbr(n, 80, gap);
    let args = [
        "--delay",
        "20ms",
        "--jitter",
        "2ms",
        "--delay-dist",
        "normal",
        "--delay-half-life",
        "1ms",
        "--reorder",
    ];
    let (out, _) = replay(&d, &frames, &[&args[..], &["--seed", "8"]].concat());
    let mut by_seq = vec![0.0; n as usize];
    for (t, f) in &out {
        by_seq[seq(f) as usize] = (*t - frames[seq(f) as usize].0).as_nanos() as f64;
    }
    let m = by_seq.iter().sum::<f64>() / n as f64;
    let sd = (by_seq.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64).sqrt();
    assert!((m / 20e6 - 1.0).abs() < 0.02 && (sd / 2e6 - 1.0).abs() < 0.02, "mean {m} std {sd}");
    let lag = 20; // 1 ms / 50 us
    let c = (0..by_seq.len() - lag).map(|i| (by_seq[i] - m) * (by_seq[i + lag] - m)).sum::<f64>()
        / (by_seq.len() - lag) as f64
        / (sd * sd);
    assert!((c - 0.5).abs() < 0.1, "correlation at the half-life {c}");
}

#[test]
fn policer_bounds_every_window() {
    let d = Dir::new();
    // 1000-byte frames every 100 us = 80 Mbit/s into a 20 Mbit/s policer with a 10 KB bucket.
    let frames = cbr(20_000, 1000, Nanos::from_micros(100));
    let (out, s) = replay(&d, &frames, &["--police", "20mbit,burst=10KB"]);
    assert!(s["dropped"]["police"].as_u64().unwrap() > 10_000);
    let times: Vec<u64> = out.iter().map(|(t, _)| t.as_nanos()).collect();
    for window in [1_000_000u64, 10_000_000, 100_000_000] {
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] > window {
                lo += 1;
            }
            let bytes = (hi - lo + 1) as u64 * 1000;
            assert!(bytes <= window * 20 / 8 / 1000 + 10_000, "window {window}: {bytes} B");
        }
    }
    let span = (times[times.len() - 1] - times[0]) as f64 / 1e9;
    let rate = out.len() as f64 * 8000.0 / span;
    assert!((rate / 20e6 - 1.0).abs() < 0.02, "long-run {rate}");
}

#[test]
fn rate_trace_departures_only_at_opportunities() {
    let d = Dir::new();
    // One opportunity every 2 ms (6 Mbit/s); 1514-byte frames every 1 ms (twice that).
    let trace: String = (1..=50).map(|i| format!("{}\n", 2 * i)).collect();
    std::fs::write(d.path("link.trace"), trace).unwrap();
    let frames = cbr(5000, 1514, Nanos::from_millis(1));
    let t = d.s("link.trace");
    let (out, _) = replay(&d, &frames, &["--rate-trace", &t]);
    let start = frames[0].0;
    for (i, (t, _)) in out.iter().enumerate() {
        let rel = (*t - start).as_nanos();
        assert_eq!(rel % 2_000_000, 0, "frame {i} left at {rel} ns, between opportunities");
        assert_eq!(rel, 2_000_000 * (i as u64 + 1), "one full frame per opportunity");
    }
}

/// A change that names a trace again (a schedule line, `ctl set`, a config read again) keeps
/// the trace's place: the file is read anew each time, and "the same trace" is the same
/// contents, not the same copy in memory. A different trace starts at the change, and a rate
/// trace's frames queue behind those the link before it still holds.
#[test]
fn traces_keep_their_place_across_a_change_that_names_them_again() {
    let d = Dir::new();
    // Opportunities every 2 ms; 1514-byte frames every 1 ms: a queue grows, one frame a 2 ms.
    std::fs::write(d.path("link.trace"), (1..=50).map(|i| format!("{}\n", 2 * i)).collect::<String>())
        .unwrap();
    std::fs::write(d.path("pattern.txt"), "0 0 1\n").unwrap();
    std::fs::write(d.path("delay.trace"), "0ms 1ms\n3ms 4ms\nperiod 7ms\n").unwrap();
    let (rate, loss, delay) =
        (d.s("link.trace"), format!("trace:{}", d.s("pattern.txt")), d.s("delay.trace"));
    // The change comes between frames 7 and 8 (8 is not a multiple of the loss pattern's 3,
    // nor 7.5 ms of the delay trace's 7 ms period).
    let cases: [(&[&str], String); 3] = [
        (&["--rate-trace", &rate], format!("7500us --rate-trace {rate}\n")),
        (&["--loss", &loss], format!("7500us --loss {loss}\n")),
        (&["--delay-trace", &delay], format!("7500us --delay-trace {delay}\n")),
    ];
    let frames = cbr(40, 1514, Nanos::from_millis(1));
    for (flags, line) in cases {
        let (alone, _) = replay(&d, &frames, flags);
        std::fs::write(d.path("s.txt"), &line).unwrap();
        let mut args = flags.to_vec();
        let s = d.s("s.txt");
        args.extend(["--schedule", &s]);
        let (changed, stats) = replay(&d, &frames, &args);
        assert_eq!(stats["schedule"].as_array().map(Vec::len), Some(1), "{flags:?}: {stats}");
        let times = |out: &[(Nanos, Vec<u8>)]| out.iter().map(|(t, f)| (*t, seq(f))).collect::<Vec<_>>();
        assert_eq!(times(&changed), times(&alone), "{flags:?} with {line:?}");
    }

    // A rate link, then a trace: frames from the change on leave at opportunities, and not
    // before the last frame the rate link holds (none is held back for overtaking).
    std::fs::write(d.path("s.txt"), format!("7500us --rate-trace {rate}\n")).unwrap();
    let s = d.s("s.txt");
    let (out, stats) = replay(&d, &frames, &["--rate", "4mbit", "--schedule", &s]);
    assert_eq!(stats["reorder_clamped"], 0, "{stats}");
    let start = frames[0].0;
    let held = out.iter().take_while(|(t, f)| seq(f) < 8 && *t >= start).count();
    assert_eq!(held, 8, "frames 0-7 took the rate link");
    let last_rate = out[7].0;
    for (t, f) in &out[8..] {
        assert!(*t > last_rate, "frame {} left at {t}, before the rate link's last at {last_rate}", seq(f));
    }
    assert_eq!(out.len(), 40);
}

#[test]
fn slots_release_in_batches() {
    let d = Dir::new();
    let frames = cbr(10_000, 100, Nanos::from_micros(10));
    let (out, _) = replay(&d, &frames, &["--slot", "1ms,packets=20", "--seed", "2"]);
    assert_eq!(out.len(), 10_000);
    let mut per_slot = std::collections::BTreeMap::new();
    for (t, _) in &out {
        *per_slot.entry(t.as_nanos()).or_insert(0) += 1;
    }
    assert!(per_slot.values().all(|&n| n <= 20));
    let times: Vec<u64> = per_slot.keys().copied().collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] >= 1_000_000), "slots at least 1 ms apart");
}

#[test]
fn duplicate_corrupt_and_cells() {
    let d = Dir::new();
    let n = 100_000u64;
    let frames = cbr(n, 200, Nanos::from_micros(5));
    let (out, s) = replay(&d, &frames, &["--duplicate", "2%", "--corrupt", "1%", "--seed", "6"]);
    let dups = s["duplicated"].as_u64().unwrap();
    let bad = s["corrupted"].as_u64().unwrap();
    assert_eq!(out.len() as u64, n + dups);
    for (count, p) in [(dups, 0.02), (bad, 0.01)] {
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((count as f64 - n as f64 * p).abs() < 4.0 * sigma, "{count} vs {p}");
    }
    // Walk the output in order: frame i, with at most one bit flipped, then maybe its copy,
    // which is never corrupted and leaves at the same instant.
    let (mut j, mut seen_dups, mut flips) = (0, 0u64, 0u64);
    for (t_in, original) in &frames {
        let (t, f) = &out[j];
        let diff: u32 = f.iter().zip(original).map(|(a, b)| (a ^ b).count_ones()).sum();
        assert!(diff <= 1, "frame {j} differs from its original by {diff} bits");
        assert_eq!(*t, *t_in);
        flips += u64::from(diff);
        j += 1;
        if j < out.len() && out[j].1 == *original {
            assert_eq!(out[j].0, *t, "the copy leaves with its original");
            seen_dups += 1;
            j += 1;
        }
    }
    assert_eq!(j, out.len());
    assert_eq!((seen_dups, flips), (dups, bad));

    // ATM cells: 100 B + 0 overhead = 3 cells of 53 B = 159 B at 1.272 Mbit/s = 1 ms.
    let burst: Vec<_> = (0..10).map(|i| (Nanos::from_secs(1), udp_frame(100, i))).collect();
    let (out, _) = replay(&d, &burst, &["--rate", "1272kbit", "--overhead", "0", "--cell", "48,5"]);
    for (k, (t, _)) in out.iter().enumerate() {
        assert_eq!(*t, Nanos::from_secs(1) + Nanos::from_millis(k as u64 + 1));
    }
}

fn ect_frame(i: u64) -> Vec<u8> {
    let mut f = udp_frame(100, i);
    f[15] |= 0b10; // ECT(0)
    let c = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn ecn_marks_instead_of_dropping() {
    let d = Dir::new();
    let n = 20_000u64;
    let frames: Vec<_> = (0..n)
        .map(|i| {
            (Nanos::from_secs(1) + Nanos(i * 1000), if i % 2 == 0 { ect_frame(i) } else { udp_frame(100, i) })
        })
        .collect();
    let (out, s) = replay(&d, &frames, &["--loss", "10%", "--ecn", "--seed", "1"]);
    let marked = s["ecn_marked"].as_u64().unwrap();
    let lost = s["dropped"]["loss"].as_u64().unwrap();
    assert!(marked > 700 && lost > 700, "{s}");
    assert_eq!(out.len() as u64, n - lost);
    let mut ce = 0;
    for (_, f) in &out {
        if f[15] & 0b11 == 0b11 {
            ce += 1;
            assert_eq!(seq(f) % 2, 0, "only ECN-capable frames are marked");
            assert_eq!(ipv4_checksum(&f[14..34]).to_be_bytes(), [f[24], f[25]], "checksum fixed");
        }
    }
    assert_eq!(ce, marked);
    // Every not-ECT frame that the model hit is gone; no ECT frame is.
    assert!(out.iter().filter(|(_, f)| seq(f) % 2 == 0).count() as u64 == n / 2);
}

#[test]
fn same_seed_same_decisions_for_every_model() {
    let d = Dir::new();
    let frames = cbr(30_000, 300, Nanos::from_micros(3));
    let args = [
        "--loss",
        "ge:p=1%,r=30%",
        "--ber",
        "1e-6",
        "--delay",
        "5ms",
        "--jitter",
        "1ms",
        "--delay-dist",
        "pareto",
        "--delay-half-life",
        "2ms",
        "--rate",
        "500mbit",
        "--queue",
        "50pkt",
        "--police",
        "400mbit,burst=30KB",
        "--duplicate",
        "1%",
        "--corrupt",
        "1%",
        "--slot",
        "100us,300us,packets=40",
    ];
    let run = |seed: &str| {
        let (out, s) = replay(&d, &frames, &[&args[..], &["--seed", seed]].concat());
        (out, s["tx_packets"].clone())
    };
    let (a, ta) = run("11");
    let (b, tb) = run("11");
    let (c, _) = run("12");
    assert_eq!(a, b);
    assert_eq!(ta, tb);
    assert_ne!(a, c);
}

#[test]
fn bad_specs_get_one_line_and_exit_2() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(5, 60, Nanos(1))).unwrap();
    let (i, o) = (d.s("in.pcap"), d.s("out.pcap"));
    for (args, says) in [
        (&["--loss", "gx:p=1"][..], "unknown loss model"),
        (&["--loss", "ge:p=1%"], "missing `r`"),
        (&["--loss", "ge:p=120%,r=1%"], "above 100%"),
        (&["--loss", "ge:p=0,r=0"], "p + r = 0"),
        (&["--loss", "trace:/nonexistent/loss.txt"], "cannot read"),
        (&["--delay-dist", "gamma", "--jitter", "1ms"], "not a known distribution"),
        (&["--delay-dist", "normal"], "needs --jitter"),
        (&["--delay-half-life", "1ms", "--delay", "1ms"], "needs --jitter"),
        (&["--police", "10mbit"], "missing `burst`"),
        (&["--slot", "2ms,1ms"], "MAX below MIN"),
        (&["--cell", "48"], "SIZE,OVERHEAD"),
        (&["--rate-trace", "/nonexistent/trace"], "cannot read"),
        (&["--rate", "1mbit", "--rate-trace", "x"], "cannot be used together"),
        (&["--duplicate", "200%"], "above 100%"),
        (&["--ber", "2"], "above 1"),
    ] {
        let out = pathem(&[&["replay", &i, &o][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!Path::new(&o).exists());
    }
    std::fs::write(d.path("bad.trace"), "1\n2\nfoo\n").unwrap();
    let t = d.s("bad.trace");
    let out = pathem(&["replay", &i, &o, "--rate-trace", &t]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
}

#[test]
fn reorder_holds_a_million_frames_in_flight() {
    let d = Dir::new();
    // 1M frames within 0.1 s, each delayed 10 s ± 1 s: all of them are in flight at once.
    let n = 1_000_000u64;
    let frames = cbr(n, 60, Nanos(100));
    let args = ["--delay", "10s", "--jitter", "1s", "--reorder", "--buffer", "256MiB", "--seed", "1"];
    let (out, s) = replay(&d, &frames, &args);
    assert_eq!(out.len() as u64, n, "{s}");
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "release order");
    assert!(s["reordered"].as_u64().unwrap() > n / 2);
}
