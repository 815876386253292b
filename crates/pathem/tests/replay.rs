//! End-to-end: `pathem replay` on generated captures, checked frame by frame in virtual time.

use pathem_io::mem::udp_frame;

mod common;
use common::{bursts, cbr, pathem, refused, seq, Dir};
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::Nanos;
use std::path::Path;
use std::process::Output;

fn replay(input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["replay", input.to_str().unwrap(), output.to_str().unwrap()];
    args.extend_from_slice(extra);
    pathem(&args)
}

fn ok(out: &Output) {
    assert!(out.status.success(), "pathem failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn stats(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn constant_delay_is_exact_for_every_frame() {
    let d = Dir::new();
    let frames = cbr(5000, 200, Nanos(12_345));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--delay", "10ms", "--seed", "1"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out.len(), frames.len());
    for ((t_in, f_in), (t_out, len, f_out)) in frames.iter().zip(&out) {
        assert_eq!(*t_out, *t_in + Nanos::from_millis(10));
        assert_eq!(f_in, f_out);
        assert_eq!(*len as usize, f_in.len());
    }
}

#[test]
fn microsecond_input_and_zero_delay_pass_through_unchanged() {
    let d = Dir::new();
    let frames = cbr(100, 64, Nanos::from_micros(7));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--seed", "1"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    let got: Vec<(Nanos, Vec<u8>)> = out.into_iter().map(|(t, _, f)| (t, f)).collect();
    assert_eq!(got, frames);
}

#[test]
fn rate_spaces_frames_exactly() {
    let d = Dir::new();
    // 200 frames of 1000 B all arriving at once; 8 Mbit/s with 24 B overhead = 1024 us each.
    let frames: Vec<_> = (0..200).map(|i| (Nanos::from_secs(1), udp_frame(1000, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--rate", "8mbit", "--delay", "1ms"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out.len(), 200);
    for (k, (t, _, f)) in out.iter().enumerate() {
        assert_eq!(seq(f), k as u64, "order kept");
        let want = Nanos::from_secs(1) + Nanos::from_micros(1024 * (k as u64 + 1)) + Nanos::from_millis(1);
        assert_eq!(*t, want, "frame {k}");
    }
}

#[test]
fn rate_with_fractional_nanoseconds_does_not_drift() {
    let d = Dir::new();
    // 64 + 24 B at 3 Gbit/s = 234.67 ns per frame; 100k back to back.
    let n = 100_000u64;
    let frames: Vec<_> = (0..n).map(|i| (Nanos::from_secs(1), udp_frame(64, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--rate", "3gbit", "--buffer", "64MiB"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    for (k, (t, _, _)) in out.iter().enumerate() {
        let exact = (k as u64 + 1) * 88 * 8 * 1_000_000_000 / 3_000_000_000;
        assert_eq!(*t, Nanos::from_secs(1) + Nanos(exact));
    }
}

#[test]
fn queue_limits_drop_tail() {
    let d = Dir::new();
    // A burst of 100 frames of 1000 B at t = 1 s into an 8 Mbit/s link.
    let frames: Vec<_> = (0..100).map(|i| (Nanos::from_secs(1), udp_frame(1000, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    for (queue, kept) in [("10pkt", 10u64), ("5000B", 5), ("4999B", 4), ("1pkt", 1)] {
        let st = d.path("s.json");
        ok(&replay(
            &d.path("in.pcap"),
            &d.path("out.pcap"),
            &["--rate", "8mbit", "--queue", queue, "--stats", st.to_str().unwrap()],
        ));
        let s = stats(&st);
        assert_eq!(s["tx_packets"], kept, "{queue}");
        assert_eq!(s["dropped"]["queue"], 100 - kept, "{queue}");
        let out = read_capture(&d.path("out.pcap")).unwrap();
        let seqs: Vec<u64> = out.iter().map(|(_, _, f)| seq(f)).collect();
        assert_eq!(seqs, (0..kept).collect::<Vec<_>>(), "drop-tail keeps the first frames");
    }
    // Frames arriving one transmission time apart never find the queue full.
    let frames: Vec<_> =
        (0..100).map(|i| (Nanos::from_secs(1) + Nanos::from_micros(1024 * i), udp_frame(1000, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    let st = d.path("s.json");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--rate", "8mbit", "--queue", "1pkt", "--stats", st.to_str().unwrap()],
    ));
    assert_eq!(stats(&st)["tx_packets"], 100);
}

#[test]
fn random_loss_within_four_sigma_and_accounted() {
    let d = Dir::new();
    let n = 200_000u64;
    write_capture(&d.path("in.pcap"), cbr(n, 60, Nanos::from_micros(1))).unwrap();
    for (p, arg) in [(0.05, "5%"), (0.3, "0.3")] {
        let st = d.path("s.json");
        ok(&replay(
            &d.path("in.pcap"),
            &d.path("out.pcap"),
            &["--loss", arg, "--seed", "7", "--stats", st.to_str().unwrap()],
        ));
        let s = stats(&st);
        let lost = s["dropped"]["loss"].as_u64().unwrap() as f64;
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((lost - n as f64 * p).abs() < 4.0 * sigma, "{arg}: lost {lost} of {n}");
        assert_eq!(s["rx_packets"].as_u64().unwrap(), n);
        assert_eq!(s["tx_packets"].as_u64().unwrap() + lost as u64, n);
        assert_eq!(read_capture(&d.path("out.pcap")).unwrap().len() as u64, n - lost as u64);
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(20_000, 100, Nanos::from_micros(3))).unwrap();
    let args = ["--loss", "10%", "--rate", "100mbit", "--queue", "20pkt", "--delay", "3ms"];
    let run = |name: &str, seed: &str| {
        let mut a = args.to_vec();
        a.extend_from_slice(&["--seed", seed]);
        ok(&replay(&d.path("in.pcap"), &d.path(name), &a));
        std::fs::read(d.path(name)).unwrap()
    };
    let a = run("a.pcap", "42");
    let b = run("b.pcap", "42");
    let c = run("c.pcap", "43");
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn seed_is_printed_when_not_given_and_stats_have_every_key() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 60, Nanos::from_micros(1))).unwrap();
    let st = d.path("s.json");
    let out =
        replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--loss", "1%", "--stats", st.to_str().unwrap()]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let s = stats(&st);
    let seed = s["seed"].as_u64().unwrap();
    assert!(err.contains(&format!("seed {seed}")), "{err}");
    for key in ["rx_packets", "tx_packets", "tx_bytes", "duplicated", "corrupted", "reorder_clamped"] {
        assert!(s[key].is_u64(), "{key} in {s}");
    }
    for key in ["loss", "queue", "police", "delay_line"] {
        assert!(s["dropped"][key].is_u64(), "dropped.{key} in {s}");
    }
    // Without --stats, a summary goes to stderr.
    let out = replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--seed", "3"]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("received") && err.contains("forwarded") && err.contains("dropped"), "{err}");
    assert!(!err.contains("pass --seed"), "seed was given: {err}");
}

#[test]
fn full_delay_line_drops_and_counts() {
    let d = Dir::new();
    // 1 s of delay, 100k frames of 1000 B within 0.1 s, in a 4 MiB delay line: most cannot fit.
    write_capture(&d.path("in.pcap"), cbr(100_000, 1000, Nanos::from_micros(1))).unwrap();
    let st = d.path("s.json");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--delay", "1s", "--buffer", "4MiB", "--stats", st.to_str().unwrap()],
    ));
    let s = stats(&st);
    let dl = s["dropped"]["delay_line"].as_u64().unwrap();
    let tx = s["tx_packets"].as_u64().unwrap();
    assert!(dl > 90_000, "{s}");
    assert_eq!(dl + tx, 100_000);
    assert!(tx <= (4 << 20) / 1016 + 1);
}

#[test]
fn oversize_frames_are_dropped_and_counted() {
    let d = Dir::new();
    let frames: Vec<_> = (0..10)
        .map(|i| (Nanos::from_secs(1) + Nanos(i), udp_frame(if i % 2 == 0 { 100 } else { 1514 }, i)))
        .collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    let st = d.path("s.json");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--max-frame", "1500", "--stats", st.to_str().unwrap()],
    ));
    let s = stats(&st);
    assert_eq!(s["dropped"]["oversize"], 5);
    assert_eq!(s["tx_packets"], 5);
    // A capture cut short (snapshot length 96) holds 96 bytes of each: the frame's length is
    // its original one, and the 1514-byte ones are still too long.
    let mut cut = Vec::new();
    for v in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 96, 1] {
        cut.extend_from_slice(&v.to_le_bytes());
    }
    for (i, orig) in [100u32, 1514, 1500, 1501].into_iter().enumerate() {
        let data = udp_frame(orig as usize, i as u64);
        let incl = orig.min(96);
        for v in [1u32, i as u32, incl, orig] {
            cut.extend_from_slice(&v.to_le_bytes());
        }
        cut.extend_from_slice(&data[..incl as usize]);
    }
    std::fs::write(d.path("cut.pcap"), cut).unwrap();
    ok(&replay(
        &d.path("cut.pcap"),
        &d.path("out.pcap"),
        &["--max-frame", "1500", "--stats", st.to_str().unwrap()],
    ));
    let s = stats(&st);
    assert_eq!((&s["dropped"]["oversize"], &s["tx_packets"]), (&2.into(), &2.into()), "{s}");
}

#[test]
fn config_file_with_flags_on_top() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 60, Nanos::from_micros(1))).unwrap();
    std::fs::write(
        d.path("c.toml"),
        "seed = 5\n[a_to_b]\ndelay = '10ms'\nloss = '100%'\n[b_to_a]\ndelay = '1s'\n",
    )
    .unwrap();
    let st = d.path("s.json");
    let c = d.path("c.toml");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--config", c.to_str().unwrap(), "--loss", "0%", "--stats", st.to_str().unwrap()],
    ));
    let s = stats(&st);
    assert_eq!(s["seed"], 5);
    assert_eq!(s["tx_packets"], 10, "the flag overrode the file's loss");
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out[0].0, Nanos::from_secs(1) + Nanos::from_millis(10), "a_to_b's delay applies");
}

/// Runs a bad command and returns its one stderr line; checks exit code and that OUT is absent.
#[test]
fn bad_values_get_one_line_and_exit_2() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 60, Nanos::from_micros(1))).unwrap();
    let i = d.path("in.pcap");
    let o = d.path("out.pcap");
    let (i, o) = (i.to_str().unwrap(), o.to_str().unwrap());
    for (flag, value, says) in [
        ("--delay", "10q", "unknown unit `q`"),
        ("--delay", "-5ms", "negative"),
        ("--delay", "NaNms", "ms"),
        ("--delay", "10", "no unit"),
        ("--loss", "150%", "above 100%"),
        ("--loss", "2", "above 1"),
        ("--loss", "", "empty"),
        ("--rate", "0mbit", "zero"),
        ("--rate", "10parsecs", "unknown unit"),
        ("--queue", "10frogs", "unknown unit"),
        ("--buffer", "-1MB", "negative"),
    ] {
        let err = refused(&d, &["replay", i, o, flag, value], 2);
        assert!(
            err.contains(flag) && err.contains(says) && err.contains("accepted"),
            "{flag} {value}: {err}"
        );
        if !value.is_empty() {
            assert!(err.contains(value), "names the value: {err}");
        }
    }
    let err = refused(&d, &["replay", i, o, "--queue", "10pkt"], 2);
    assert!(err.contains("--queue needs --rate"), "{err}");
    refused(&d, &["replay", i, o, "--frobnicate"], 2);
    let cfg = d.path("bad.toml");
    std::fs::write(&cfg, "[a_to_b]\ndelay = '1ms'\njiter = '1ms'\n").unwrap();
    let err = refused(&d, &["replay", i, o, "--config", cfg.to_str().unwrap()], 2);
    assert!(err.contains(":3:") && err.contains("unknown field `jiter`"), "{err}");
}

#[test]
fn values_past_their_range_are_refused_not_wrapped() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 60, Nanos::from_micros(1))).unwrap();
    let (i, o) = (d.s("in.pcap"), d.s("out.pcap"));
    for (args, says) in [
        (&["--delay", "18446744073s"][..], "--delay 18446744073s is out of range; accepted: 0ns to 1h"),
        (&["--delay", "18446744073709551615ns"], "--delay"),
        (&["--delay", "1h", "--jitter", "18446744073s", "--delay-dist", "normal"], "--jitter"),
        (&["--rate", "1mbit", "--overhead", "4294967295"], "--overhead"),
        (&["--rate", "1mbit", "--overhead", "-65537"], "-65536 to 65536"),
        (&["--max-frame", "1099511627776"], "--max-frame"),
        (&["--max-frame", "65537"], "1 to 65536"),
        (&["--max-frame", "0"], "1 to 65536"),
        (&["--buffer", "2TiB"], "up to 1TiB"),
        (&["--police", "1mbit,burst=3GB"], "2GB"),
        (&["--slot", "2h"], "1h"),
        (&["--delay-half-life", "2h", "--jitter", "1ms"], "--delay-half-life"),
    ] {
        let err = refused(&d, &[&["replay", &i, &o][..], args].concat(), 2);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Exactly at the bounds is accepted.
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--delay", "1h", "--max-frame", "65536"]));
    assert_eq!(read_capture(&d.path("out.pcap")).unwrap()[0].0, Nanos::from_secs(1 + 3600));
}

#[test]
fn release_times_past_what_pcap_holds_are_refused() {
    let d = Dir::new();
    // Frames in 2106, a second before pcap's 32-bit seconds run out; an hour of delay is past it.
    let t = Nanos::from_secs(u64::from(u32::MAX) - 1);
    write_capture(&d.path("in.pcap"), vec![(t, udp_frame(60, 0))]).unwrap();
    let err = refused(&d, &["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--delay", "1h"], 2);
    assert!(
        err.contains("released at 4294970894 s") && err.contains("past what a pcap timestamp holds"),
        "{err}"
    );
}

#[test]
fn a_duplicate_the_full_line_drops_is_counted_made_and_dropped() {
    // A line of two records: every original fits at first, its copy not always.
    let d = Dir::new();
    let frames: Vec<_> =
        (0..10).map(|i| (Nanos::from_secs(1) + Nanos(i * 1_000), udp_frame(60, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    let st = d.s("s.json");
    let args =
        ["--duplicate", "100%", "--delay", "10ms", "--max-frame", "100", "--buffer", "1", "--stats", &st];
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &args));
    let s = stats(&d.path("s.json"));
    let dropped: u64 = s["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    let n = |k: &str| s[k].as_u64().unwrap();
    assert!(n("duplicated") > 0 && s["dropped"]["delay_line"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(n("rx_packets") + n("duplicated"), n("tx_packets") + dropped + n("in_flight"), "{s}");
    assert_eq!(read_capture(&d.path("out.pcap")).unwrap().len() as u64, n("tx_packets"));
    // The gauges are read at the end: nothing is held.
    assert_eq!((n("delay_line_used"), n("queue_frames"), n("queue_bytes")), (0, 0, 0), "{s}");
}

#[test]
fn a_release_at_the_clocks_end_is_refused_not_waited_for_nor_lost() {
    // 65 535 bytes in 1-byte cells with 65 535 bytes of overhead each, at 1 bit/s: past the
    // clock's end on the wire. Its release saturates, and must not read as a record with no
    // decision yet (the replay waited forever) or as a dropped one (exit 0, a frame unsent and
    // uncounted): exit 2 as for any release past pcap's end, or a queue limit's counted drop.
    let d = Dir::new();
    let t = Nanos::from_secs(1);
    write_capture(&d.path("in.pcap"), vec![(t, udp_frame(60, 0)), (t + Nanos(1_000), udp_frame(65_535, 1))])
        .unwrap();
    for aqm in ["droptail", "pie", "codel", "red", "drophead", "fq-codel", "dualpi2"] {
        let (i, o, st) = (d.s("in.pcap"), d.s("out.pcap"), d.s("s.json"));
        let args = ["replay", &i, &o, "--rate", "1bit", "--cell", "1,65535", "--aqm", aqm, "--stats", &st];
        let out = pathem_within(&args, std::time::Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(2) => assert!(err.contains("past what a pcap timestamp holds"), "{aqm}: {err}"),
            Some(0) => {
                let a = stats(&d.path("s.json"));
                let dropped: u64 =
                    a["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
                assert_eq!(a["rx_packets"], 2, "{aqm}");
                assert_eq!(a["tx_packets"].as_u64().unwrap() + dropped, 2, "{aqm}: {a}");
            }
            c => panic!("{aqm}: exit {c:?}: {err}"),
        }
    }
}

/// Runs pathem, killing it (and failing) if it has not finished within `limit`: a guard
/// against runs that never end, not a timing.
fn pathem_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("pathem {args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A repeating schedule over frames far apart: each frame meets the step its time in the lap
/// says, and the idle laps between them are passed over (walked one step at a time, frames a
/// year apart under a 2 ms schedule took minutes and gigabytes).
#[test]
fn a_repeating_schedule_passes_over_idle_laps() {
    let d = Dir::new();
    let year = Nanos::from_secs(365 * 86_400);
    let t0 = Nanos::from_secs(1_000_000);
    // In the lap (2 ms from t0): 0–1 ms delay 1 ms, 1–2 ms delay 2 ms.
    let at = [
        t0,
        t0 + Nanos::from_micros(1_500),
        t0 + Nanos::from_secs(3_600) + Nanos::from_micros(999),
        t0 + Nanos::from_secs(3_600) + Nanos::from_micros(1_000),
        t0 + year + Nanos::from_micros(2_000 * 7 + 1_999),
        t0 + year + Nanos::from_micros(2_000 * 9 + 5),
    ];
    let frames: Vec<_> = at.iter().enumerate().map(|(i, &t)| (t, udp_frame(60, i as u64))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    std::fs::write(d.path("s.txt"), "0s --delay 1ms\n1ms --delay 2ms\nrepeat 2ms\n").unwrap();
    let out = pathem_within(
        &["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--schedule", &d.s("s.txt")],
        std::time::Duration::from_secs(60),
    );
    ok(&out);
    let got: Vec<Nanos> = read_capture(&d.path("out.pcap")).unwrap().into_iter().map(|f| f.0).collect();
    let want: Vec<Nanos> = at
        .iter()
        .map(|&t| t + Nanos::from_millis(if (t - t0).as_nanos() % 2_000_000 < 1_000_000 { 1 } else { 2 }))
        .collect();
    assert_eq!(got, want);
}

/// Once the capture has ended, the laps of a repeating schedule are passed over while the last
/// frames wait out a slow link (a 1 bit/s link holds them for 12 and 18 days): a step at a
/// time, 1 ms apart, took five minutes here.
#[test]
fn a_repeating_schedule_ends_with_the_capture() {
    let d = Dir::new();
    let t0 = Nanos::from_secs(10);
    let frames = vec![(t0, udp_frame(65_535, 0)), (t0 + Nanos::from_secs(1), udp_frame(60, 1))];
    write_capture(&d.path("in.pcap"), frames).unwrap();
    std::fs::write(d.path("s.txt"), "0s --delay 1ms\n1ms --delay 2ms\nrepeat 2ms\n").unwrap();
    let args = ["--rate", "1bit", "--overhead", "65536", "--schedule", &d.s("s.txt")];
    let out = pathem_within(
        &[&["replay", &d.s("in.pcap"), &d.s("out.pcap")][..], &args[..]].concat(),
        std::time::Duration::from_secs(60),
    );
    ok(&out);
    let got: Vec<Nanos> = read_capture(&d.path("out.pcap")).unwrap().into_iter().map(|f| f.0).collect();
    // (65 535 + 65 536) B and (60 + 65 536) B at 1 bit/s, back to back, then the delay each
    // met on arrival (both at a whole lap: 1 ms).
    let first = t0 + Nanos::from_secs(131_071 * 8) + Nanos::from_millis(1);
    assert_eq!(got, vec![first, first + Nanos::from_secs(65_596 * 8)]);
}

#[test]
fn frames_a_year_apart_replay_exactly_without_waiting() {
    let d = Dir::new();
    let year = Nanos::from_secs(365 * 86_400);
    let t0 = Nanos::from_secs(1_000_000);
    write_capture(&d.path("in.pcap"), vec![(t0, udp_frame(60, 0)), (t0 + year, udp_frame(60, 1))]).unwrap();
    let out = pathem_within(
        &["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--delay", "10ms"],
        std::time::Duration::from_secs(60),
    );
    ok(&out);
    let got: Vec<Nanos> = read_capture(&d.path("out.pcap")).unwrap().into_iter().map(|f| f.0).collect();
    assert_eq!(got, vec![t0 + Nanos::from_millis(10), t0 + year + Nanos::from_millis(10)]);
}

#[test]
fn a_long_delay_takes_memory_for_what_is_in_flight_only() {
    let d = Dir::new();
    // 2000 frames of 200 B (400 KB) held 10 s: the delay line follows them, not rate × delay.
    write_capture(&d.path("in.pcap"), cbr(2000, 200, Nanos::from_micros(10))).unwrap();
    let st = d.s("s.json");
    let out = pathem_within(
        &["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--delay", "10s", "--stats", &st],
        std::time::Duration::from_secs(60),
    );
    ok(&out);
    let s = stats(Path::new(&st));
    assert_eq!(s["tx_packets"], 2000);
    let peak = s["peak_memory_bytes"].as_u64().expect("the system reports peak memory");
    assert!(peak < 100 << 20, "peak memory {peak} B for 400 KB in flight");
}

/// Drop-tail's queue is unbounded unless `--queue` says otherwise, and offline the line holds
/// what it queues: 5000 frames of 1514 B offered at ten times a 12 Mbit/s link all leave, at
/// its rate (they were 42% `delay_line` drops in a line sized from the rate and no delay).
#[test]
fn an_unbounded_queue_drops_nothing_offline() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(5000, 1514, Nanos::from_micros(100))).unwrap();
    let st = d.s("s.json");
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--rate", "12mbit", "--stats", &st]));
    let s = stats(Path::new(&st));
    assert_eq!(s["tx_packets"], 5000, "{s}");
    let out = read_capture(&d.path("out.pcap")).unwrap();
    // Back to back from the first: 1538 B on the wire at 12 Mbit/s is 1 025 333.3 ns a frame.
    let first = out[0].0;
    assert_eq!(out[4999].0 - first, Nanos(4999 * 1538 * 8 * 1_000_000_000 / 12_000_000));
}

/// The output (or the report) naming the input capture, however spelled, is refused before
/// anything is written: the capture read is kept byte for byte (it was replaced by the output).
#[test]
fn an_output_that_is_the_input_is_refused_and_the_input_kept() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(3, 100, Nanos::from_micros(500))).unwrap();
    let before = std::fs::read(d.path("in.pcap")).unwrap();
    let dotted = format!("{}/./in.pcap", d.s(""));
    for args in [
        vec!["replay", &d.s("in.pcap"), &d.s("in.pcap"), "--loss", "50%"][..].to_vec(),
        vec!["replay", &d.s("in.pcap"), &dotted],
        vec!["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--stats", &dotted],
    ] {
        let err = refused(&d, &args, 2);
        assert!(err.contains("in.pcap: it is the input"), "{err}");
        assert_eq!(std::fs::read(d.path("in.pcap")).unwrap(), before);
    }
}

/// SIGTERM (or Ctrl-C) ends a replay without its output: one line, exit 1, and none of its
/// temporary files left beside the output (killed outright, it left them).
#[test]
fn a_replay_stopped_by_a_signal_leaves_nothing() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(1_000_000, 60, Nanos(1_000))).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--aqm", "fq-codel", "--rate", "500mbit"])
        .args(["--delay", "10ms", "--stats", &d.s("s.json")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once its files are made, it is replaying.
    let names = || -> Vec<String> {
        std::fs::read_dir(d.path(""))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let start = std::time::Instant::now();
    while names().iter().filter(|n| n.starts_with(".pathem")).count() < 2 {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "no temporary files: {:?}", names());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    use nix::sys::signal::{kill, Signal};
    kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM to the replay");
    let out = child.wait_with_output().unwrap();
    // A replay of a million frames through FQ-CoDel takes a quarter of a second here, and the
    // signal comes within a millisecond of its files: one that ended first says nothing.
    assert!(!out.status.success(), "the replay ended before the signal came: make its capture longer");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("stopped by a signal") && err.trim_end().lines().count() == 1, "{err}");
    assert_eq!(names(), vec!["in.pcap".to_string()]);
}

/// A jitter above the delay and a policer's burst under a full frame are run as asked, with a
/// note saying what that does: draws below 0 leave at once (the mean delay rises), frames
/// longer than the burst never pass.
#[test]
fn paths_that_do_more_than_their_flags_say_get_a_note() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(20_000, 100, Nanos::from_micros(100))).unwrap();
    let out =
        replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--delay", "1ms", "--jitter", "5ms", "--reorder"]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("note: jitter 5ms is larger than the delay 1ms: draws below 0 send at once"),
        "{err}"
    );
    // Uniform on −4..6 ms, below 0 sent at once: the mean is 0.6·3 ms = 1.8 ms, not 1 ms.
    let (frames, out) =
        (cbr(20_000, 100, Nanos::from_micros(100)), read_capture(&d.path("out.pcap")).unwrap());
    let sent: std::collections::HashMap<u64, Nanos> = frames.iter().map(|(t, f)| (seq(f), *t)).collect();
    let mean =
        out.iter().map(|(t, _, f)| (*t - sent[&seq(f)]).as_nanos() as f64).sum::<f64>() / out.len() as f64;
    assert!((mean / 1.8e6 - 1.0).abs() < 0.03, "mean delay {mean} ns");
    let out = replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--police", "4mbit,burst=99B"]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("note: police burst 99 B holds less than a full 1514-byte frame"), "{err}");
    // A config's b→a table is not what a capture goes through: said, not silently passed over.
    std::fs::write(d.path("c.toml"), "[a_to_b]\ndelay = '1ms'\n[b_to_a]\ndelay = '2ms'\n").unwrap();
    let out = replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--config", &d.s("c.toml")]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("note: the config's [b_to_a] table is not used"), "{err}");
    assert!(!replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--delay", "5ms", "--jitter", "5ms"])
        .stderr
        .windows(5)
        .any(|w| w == b"note:"));
}

#[test]
fn absurd_original_lengths_are_refused_with_the_frame_number() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(3, 60, Nanos::from_micros(1))).unwrap();
    let mut bytes = std::fs::read(d.path("in.pcap")).unwrap();
    // Frame 2's orig_len (native-endian record header: ts_sec, ts_frac, incl_len, orig_len).
    let at = 24 + (16 + 60) + 12;
    bytes[at..at + 4].copy_from_slice(&3_000_000_000u32.to_ne_bytes());
    std::fs::write(d.path("bad.pcap"), bytes).unwrap();
    // A value past its range (README's Ranges) is bad input: exit 2, as for a flag.
    let err = refused(&d, &["replay", &d.s("bad.pcap"), &d.s("out.pcap"), "--rate", "1mbit"], 2);
    assert!(err.contains("frame 2") && err.contains("original length 3000000000"), "{err}");
}

#[test]
fn bad_captures_get_one_line_and_leave_no_output() {
    let d = Dir::new();
    let o = d.path("out.pcap");
    let o = o.to_str().unwrap();
    let missing = d.path("missing.pcap");
    let err = refused(&d, &["replay", missing.to_str().unwrap(), o], 1);
    assert!(err.contains("cannot open") && err.contains("missing.pcap"), "{err}");

    std::fs::write(d.path("text.pcap"), "this is not a capture at all").unwrap();
    let err = refused(&d, &["replay", d.path("text.pcap").to_str().unwrap(), o], 1);
    assert!(err.contains("not a pcap capture"), "{err}");

    write_capture(&d.path("good.pcap"), cbr(1000, 100, Nanos::from_micros(1))).unwrap();
    let bytes = std::fs::read(d.path("good.pcap")).unwrap();
    std::fs::write(d.path("cut.pcap"), &bytes[..bytes.len() - 30]).unwrap();
    let err = refused(&d, &["replay", d.path("cut.pcap").to_str().unwrap(), o, "--delay", "1ms"], 1);
    assert!(err.contains("truncated") && err.contains("frame 1000"), "{err}");

    let mut raw_ip = bytes.clone();
    raw_ip[20..24].copy_from_slice(&101u32.to_ne_bytes());
    std::fs::write(d.path("raw.pcap"), raw_ip).unwrap();
    let err = refused(&d, &["replay", d.path("raw.pcap").to_str().unwrap(), o], 1);
    assert!(err.contains("not Ethernet"), "{err}");

    // A header cut short says how short.
    std::fs::write(d.path("h20.pcap"), &bytes[..20]).unwrap();
    let err = refused(&d, &["replay", d.path("h20.pcap").to_str().unwrap(), o], 1);
    assert!(err.contains("(20 bytes, shorter than a pcap header)"), "{err}");

    // Values past their range (README's Ranges) are bad input, named with their frame: exit 2.
    // Frame 3 holds 9 MB, every byte of it there: more than the pcap reader's own buffer.
    let record = |at: usize| 16 + u32::from_ne_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    let third = 24 + record(24) + record(24 + record(24));
    let mut huge = bytes[..third + 16].to_vec();
    huge[third + 8..third + 16]
        .copy_from_slice(&[9_000_000u32.to_ne_bytes(), 9_000_000u32.to_ne_bytes()].concat());
    huge.resize(third + 16 + 9_000_000, 0);
    std::fs::write(d.path("huge.pcap"), huge).unwrap();
    let err = refused(&d, &["replay", d.path("huge.pcap").to_str().unwrap(), o], 2);
    assert!(err.contains("frame 3: captured length 9000000 is larger than 262144 bytes"), "{err}");
    let mut frac = bytes.clone();
    frac[28..32].copy_from_slice(&1_000_000_000u32.to_ne_bytes());
    std::fs::write(d.path("frac.pcap"), frac).unwrap();
    let err = refused(&d, &["replay", d.path("frac.pcap").to_str().unwrap(), o], 2);
    assert!(err.contains("frame 1: timestamp fraction 1000000000 is out of range (0 to 999999999)"), "{err}");

    // A big-endian capture (microseconds) reads as the same frames.
    let frame = udp_frame(60, 0);
    let mut be = [0xa1b2_c3d4u32, 0x0002_0004, 0, 0, 65_535, 1]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect::<Vec<_>>();
    be.extend([1u32, 5, 60, 60].iter().flat_map(|w| w.to_be_bytes()));
    be.extend(&frame);
    std::fs::write(d.path("be.pcap"), be).unwrap();
    ok(&replay(&d.path("be.pcap"), &d.path("out.pcap"), &[]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!((out.len(), out[0].0, &out[0].2), (1, Nanos::from_secs(1) + Nanos::from_micros(5), &frame));
}

#[test]
fn a_capture_from_a_pipe_is_read_whole() {
    // A pipe cannot be read from its start twice: the header is read once.
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(100, 100, Nanos::from_micros(1))).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(["replay", "/dev/stdin", &d.s("out.pcap"), "--delay", "1ms"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = std::fs::read(d.path("in.pcap")).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &bytes));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    ok(&out);
    assert_eq!(read_capture(&d.path("out.pcap")).unwrap().len(), 100);
}

#[test]
fn demo_runs_and_reports() {
    let out = pathem(&["demo", "--frames", "4000"]);
    ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("one-way delay") && text.contains("loss after the link"), "{text}");
}

/// `--reorder` and `--ecn` change on a running path like any field: a schedule turns
/// reordering on for the middle third and off again; frames overtake each other only there,
/// and every frame leaves, at its own time while reordering and in order before and after.
#[test]
fn reordering_turns_on_and_off_while_running() {
    let d = Dir::new();
    // A frame every 100 us for 60 ms, starting at 1 s; the delay varies by up to 4 ms.
    let frames = cbr(600, 100, Nanos::from_micros(100));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    std::fs::write(d.path("s.txt"), "20ms --reorder --ecn\n40ms --no-reorder --no-ecn\n").unwrap();
    let st = d.path("s.json");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &[
            "--delay",
            "5ms",
            "--jitter",
            "2ms",
            "--seed",
            "3",
            "--schedule",
            &d.s("s.txt"),
            "--stats",
            st.to_str().unwrap(),
        ],
    ));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out.len(), 600, "every frame leaves");
    // Where each frame was sent, by its sequence number.
    let order: Vec<u64> = out.iter().map(|(_, _, f)| seq(f)).collect();
    // Frames of one third, in the order they left: how many left before one that came earlier.
    let overtaking = |from: u64, to: u64| {
        let third: Vec<u64> = order.iter().copied().filter(|s| (from..to).contains(s)).collect();
        third.windows(2).filter(|w| w[1] < w[0]).count()
    };
    // Frames arrive every 100 us from the start: 200 before 20 ms, 200 until 40 ms.
    let (before, during, after) = (overtaking(0, 200), overtaking(200, 400), overtaking(400, 600));
    assert_eq!(before, 0, "no reordering among frames before it is turned on");
    assert!(during > 20, "frames overtake each other while it is on: {during}");
    assert_eq!(after, 0, "none among frames after it is turned off");
    let times: Vec<Nanos> = out.iter().map(|(t, _, _)| *t).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "the capture is in wire order");
    let s = stats(&st);
    assert!(s["reordered"].as_u64().unwrap() > 20, "{s}");
    assert!(s["reorder_clamped"].as_u64().unwrap() > 0, "{s}");
}

/// Reordering turned on while a queue discipline runs: egress moves to releasing by time in
/// the middle of the discipline's decisions (some frames were decided at their arrival, the
/// rest while they queued); every frame still leaves, once.
#[test]
fn reordering_turns_on_behind_a_discipline() {
    let d = Dir::new();
    // Bursts of five frames every millisecond for 80 ms: the first of each finds the queue
    // empty (decided at once), the others queue behind it (decided as they are served).
    let n = 400u64;
    let frames: Vec<_> =
        (0..n).map(|i| (Nanos::from_secs(1) + Nanos::from_millis(i / 5), udp_frame(150, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    std::fs::write(d.path("s.txt"), "37ms --reorder\n").unwrap();
    let (schedule, st) = (d.s("s.txt"), d.s("s.json"));
    let mut args: Vec<&str> =
        "--rate 10mbit --aqm codel --delay 5ms --jitter 2ms --seed 4".split(' ').collect();
    args.extend(["--schedule", &schedule, "--stats", &st]);
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &args));
    let mut sent: Vec<u64> =
        read_capture(&d.path("out.pcap")).unwrap().iter().map(|(_, _, f)| seq(f)).collect();
    let s = stats(Path::new(&st));
    assert_eq!(s["tx_packets"].as_u64(), Some(n), "{s}");
    sent.sort_unstable();
    assert_eq!(sent, (0..n).collect::<Vec<_>>(), "every frame once");
    assert!(s["reordered"].as_u64().unwrap() > 0, "frames overtake once reordering is on: {s}");
}

/// Reordering turned on while egress holds the decision for a queued frame (A) and a frame
/// decided at its arrival (B) waits behind it with the same release (held back to A's):
/// A still leaves first.
#[test]
fn a_frame_decided_at_arrival_stays_behind_an_earlier_decision_of_its_release() {
    let d = Dir::new();
    // Z finds the queue empty; A queues behind Z; B comes 15 ms later to an empty queue.
    let start = Nanos::from_secs(1);
    let frames = vec![
        (start, udp_frame(150, 0)),
        (start + Nanos::from_micros(1), udp_frame(150, 1)),
        (start + Nanos::from_millis(15), udp_frame(150, 2)),
        // C, after reordering came on (the schedule takes effect as the next frame comes).
        (start + Nanos::from_millis(25), udp_frame(150, 3)),
    ];
    write_capture(&d.path("in.pcap"), frames).unwrap();
    // Z is decided at its arrival (10 ms delay, it leaves the link at 139 us), A when it is
    // served at 139 us (30 ms, leaving at 278 us), B at its arrival (1 ms, so held back to A's
    // release); reordering comes on while A's decision waits in egress.
    std::fs::write(d.path("s.txt"), "100us --delay 30ms\n1ms --delay 1ms\n20ms --reorder\n").unwrap();
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--rate", "10mbit", "--aqm", "codel", "--delay", "10ms", "--schedule", &d.s("s.txt")],
    ));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    let sent: Vec<(u64, Nanos)> = out.iter().map(|(t, _, f)| (seq(f), *t - start)).collect();
    // C overtakes A and B (reordering is on); A still leaves before B.
    assert_eq!(sent.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 3, 1, 2], "A before B: {sent:?}");
    // A and B leave together, at A's release.
    assert_eq!(sent[2].1, sent[3].1, "{sent:?}");
    assert_eq!(sent[2].1.as_nanos() / 1000, 30_278, "{sent:?}");
}

#[test]
fn a_schedule_changes_the_path_exactly_at_its_times() {
    let d = Dir::new();
    // A frame every 100 us for 20 ms, starting at 1 s.
    let frames = cbr(200, 100, Nanos::from_micros(100));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    std::fs::write(d.path("s.txt"), "0s --delay 10ms\n5ms --delay 20ms   # slower\n10ms --delay 5ms\n")
        .unwrap();
    let st = d.path("s.json");
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--delay", "1ms", "--schedule", &d.s("s.txt"), "--stats", st.to_str().unwrap()],
    ));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out.len(), 200, "nothing lost by a change");
    let start = Nanos::from_secs(1);
    let mut last = Nanos::ZERO;
    for ((t_in, f_in), (t_out, _, f_out)) in frames.iter().zip(&out) {
        assert_eq!(f_in, f_out, "order kept");
        let since = *t_in - start;
        let delay = match since.as_nanos() {
            t if t < 5_000_000 => Nanos::from_millis(10),
            t if t < 10_000_000 => Nanos::from_millis(20),
            _ => Nanos::from_millis(5),
        };
        // A delay decrease would let frames overtake: they are held back, as always.
        let want = (*t_in + delay).max(last);
        assert_eq!(*t_out, want, "frame arriving {since} after the start");
        last = want;
    }
    let s = stats(&st);
    assert!(s["reorder_clamped"].as_u64().unwrap() > 0, "the 20 ms → 5 ms step clamps: {s}");
    // The report says the start path and each change, not the start path alone.
    assert_eq!(s["path"], "delay 1ms");
    let changes: Vec<_> = s["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["at_ns"].as_u64().unwrap(), c["class"].as_str().unwrap(), c["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        changes,
        [
            (0, "default", "delay 10ms"),
            (5_000_000, "default", "delay 20ms"),
            (10_000_000, "default", "delay 5ms")
        ]
    );
    let summary =
        pathem(&["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--delay", "1ms", "--schedule", &d.s("s.txt")]);
    let summary = String::from_utf8_lossy(&summary.stderr);
    for line in [
        "  path       delay 1ms (at the start)",
        "  schedule  +0s  delay 10ms",
        "            +5ms  delay 20ms",
    ] {
        assert!(summary.contains(line), "{line:?} in {summary}");
    }
    // Bad schedules are refused up front, with the line.
    std::fs::remove_file(d.path("out.pcap")).unwrap();
    std::fs::write(d.path("bad.txt"), "0s --delay 1ms\n2s --loss 150%\n").unwrap();
    let err = refused(&d, &["replay", &d.s("in.pcap"), &d.s("out.pcap"), "--schedule", &d.s("bad.txt")], 2);
    assert!(err.contains("line 2") && err.contains("150%"), "{err}");
}

/// A schedule line with `--reset` starts from no impairment: the run's loss is gone with it, and
/// the line's delay alone applies from its time on.
#[test]
fn a_reset_line_drops_what_the_path_had() {
    let d = Dir::new();
    let frames = cbr(200, 100, Nanos::from_micros(100));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    std::fs::write(d.path("s.txt"), "0s --delay 10ms\n5ms --reset --delay 3ms\n").unwrap();
    let st = d.path("s.json");
    let args =
        ["--loss", "50%", "--delay", "1ms", "--schedule", &d.s("s.txt"), "--stats", st.to_str().unwrap()];
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &args));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    let start = Nanos::from_secs(1);
    let late: Vec<_> = frames.iter().filter(|(t, _)| *t - start >= Nanos::from_millis(5)).collect();
    let early = frames.len() - late.len();
    // Half of the first 50 lost, give or take (seeded); none of the 150 after the reset.
    assert!((10..=40).contains(&(early + late.len() - out.len())), "{} of {} out", out.len(), frames.len());
    let (kept_early, kept_late) = out.split_at(out.len() - late.len());
    // The last frame before the reset leaves 10 ms after it came.
    let mut last = kept_early.last().unwrap().0;
    for ((t_in, f_in), (t_out, _, f_out)) in late.iter().zip(kept_late) {
        assert_eq!(f_in, f_out, "every frame after the reset, in order");
        // 10 ms → 3 ms: frames are held back behind the earlier ones, as always.
        last = (*t_in + Nanos::from_millis(3)).max(last);
        assert_eq!(*t_out, last);
    }
    let s = stats(&st);
    let changes: Vec<_> =
        s["schedule"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(changes, ["loss random 50%, delay 10ms", "delay 3ms"], "{s}");
}

/// A file without end given for a trace, a config or a schedule is one line past its limit,
/// not memory read until the machine runs out.
#[test]
fn endless_files_are_refused_at_their_limit() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(2, 100, Nanos::from_micros(100))).unwrap();
    let (input, output) = (d.s("in.pcap"), d.s("out.pcap"));
    for flags in [
        &["--loss", "trace:/dev/zero"][..],
        &["--delay-trace", "/dev/zero"],
        &["--rate-trace", "/dev/zero"],
        &["--config", "/dev/zero"],
        &["--schedule", "/dev/zero"],
    ] {
        let mut args = vec!["replay", &input, &output];
        args.extend_from_slice(flags);
        let err = refused(&d, &args, 2);
        assert!(err.contains("longer than") && err.contains("/dev/zero"), "{flags:?}: {err}");
    }
}

#[test]
fn a_gilbert_elliott_chain_keeps_its_state_across_changes() {
    let d = Dir::new();
    // Loss bursts of mean 50 frames; the path is changed every 100 frames (1 ms), 4000 times.
    // A chain that restarted at each change would cut bursts short (mean well under 50).
    let n = 400_000u64;
    let frames: Vec<_> =
        (0..n).map(|i| (Nanos::from_secs(1) + Nanos::from_micros(10 * i), udp_frame(60, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    std::fs::write(d.path("s.txt"), "0s --ecn\n1ms --delay 1ms\nrepeat 2ms\n").unwrap();
    ok(&replay(
        &d.path("in.pcap"),
        &d.path("out.pcap"),
        &["--loss", "ge:loss=10%,burst=50", "--seed", "11", "--schedule", &d.s("s.txt")],
    ));
    let mut lost = vec![true; n as usize];
    for (_, _, f) in read_capture(&d.path("out.pcap")).unwrap() {
        lost[seq(&f) as usize] = false;
    }
    let bursts = bursts(&lost);
    let rate = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
    let mean = bursts.iter().sum::<usize>() as f64 / bursts.len() as f64;
    // ~800 bursts: the mean's standard error is ~1.8 frames (3.5%); 10% is about 3 sigma.
    assert!((mean / 50.0 - 1.0).abs() < 0.1, "mean burst {mean} over {} bursts", bursts.len());
    assert!((rate / 0.1 - 1.0).abs() < 0.15, "loss rate {rate}");
}

/// `--stats` where no file can be written fails before the run, with one line and exit 1, and
/// leaves no OUT: the capture and the report appear together or not at all.
#[test]
fn a_stats_file_that_cannot_be_written_leaves_no_output() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 100, Nanos::from_micros(100))).unwrap();
    let (i, o) = (d.s("in.pcap"), d.s("out.pcap"));
    let nowhere = d.s("missing/s.json");
    let err = refused(&d, &["replay", &i, &o, "--delay", "1ms", "--stats", &nowhere], 1);
    assert!(err.contains(&nowhere) && err.contains("No such file"), "{err}");
    // A directory, or one of the captures (named wrongly: exit 2), is no place for the report
    // either.
    for (at, says, code) in [
        (d.s(""), "directory", 1),
        (o.clone(), "input or the output", 2),
        (i.clone(), "input or the output", 2),
    ] {
        let err = refused(&d, &["replay", &i, &o, "--stats", &at], code);
        assert!(err.contains(says), "{err}");
    }
    // However they are spelled: the input by another path, or a link to it, was overwritten
    // with the report.
    std::os::unix::fs::symlink(d.path("in.pcap"), d.path("link.pcap")).unwrap();
    let before = std::fs::read(d.path("in.pcap")).unwrap();
    let name = d.path("").file_name().unwrap().to_str().unwrap().to_string();
    for at in [d.s("./in.pcap"), d.s("link.pcap"), d.s(&format!("../{name}/out.pcap"))] {
        let err = refused(&d, &["replay", &i, &o, "--stats", &at], 2);
        assert!(err.contains("input or the output"), "{at}: {err}");
    }
    assert_eq!(std::fs::read(d.path("in.pcap")).unwrap(), before, "the input is untouched");
    std::fs::remove_file(d.path("link.pcap")).unwrap();
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--stats", &d.s("s.json")]));
    assert_eq!(stats(&d.path("s.json"))["tx_packets"], 10);
    let left: Vec<_> = std::fs::read_dir(d.path("")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 3, "in, out and the report, no temporary left: {left:?}");
    // Both made as any new file is (0666 less the umask), not with a temporary's 0600.
    use std::os::unix::fs::PermissionsExt;
    std::fs::File::create(d.path("plain")).unwrap();
    let mode = |f: &str| std::fs::metadata(d.path(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("out.pcap"), mode("s.json")), (mode("plain"), mode("plain")));
    std::fs::remove_file(d.path("plain")).unwrap();
    // A --buffer made larger than asked says so, in the summary and the report.
    let out = replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--buffer", "300KiB"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("delay line up to 512.0 KiB") && said.contains("rounded up"), "{said}");
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &["--buffer", "300KiB", "--stats", &d.s("s.json")]));
    assert!(stats(&d.path("s.json"))["delay_line_note"].as_str().is_some_and(|n| n.contains("rounded up")));
    // A power of two is taken as it is, with a queue discipline too: no note.
    let args = ["--rate", "10mbit", "--aqm", "codel", "--buffer", "1MiB", "--stats", &d.s("s.json")];
    ok(&replay(&d.path("in.pcap"), &d.path("out.pcap"), &args));
    assert_eq!(stats(&d.path("s.json"))["delay_line_note"], serde_json::Value::Null);
}
