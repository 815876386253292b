//! End-to-end: `pathem replay --netem "SPEC"` on generated captures, in virtual time. A netem
//! spec must make exactly the path its equivalent flags make, and mean what tc-netem(8) says.

mod common;
use common::{cbr, pathem, refused, seq, Dir};
use pathem_io::mem::udp_frame;
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::Nanos;
use std::process::Output;

fn replay(d: &Dir, extra: &[&str]) -> Output {
    let mut args = vec!["replay".to_string(), d.s("in.pcap"), d.s("out.pcap")];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    pathem(&args)
}

fn ok(out: &Output) {
    assert!(out.status.success(), "pathem failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn stats(d: &Dir) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap()
}

#[test]
fn a_netem_spec_replays_byte_for_byte_as_its_equivalent_flags() {
    let spec = "delay 10ms 2ms 25% loss 1% duplicate 1% reorder 10% gap 3 rate 10mbit";
    let flags = pathem_spec::netem::explain(spec).unwrap().flags;
    let flag_words = pathem_spec::path::split_words(&flags).unwrap();
    // 20 000 frames of 200 to 1400 bytes, 700 µs apart: about 9 Mbit/s, so the rate (10 Mbit/s)
    // queues some.
    let frames: Vec<_> = (0..20_000u64)
        .map(|i| {
            (Nanos::from_secs(1) + Nanos::from_micros(700 * i), udp_frame(200 + (i as usize * 37) % 1200, i))
        })
        .collect();
    let (a, b) = (Dir::new(), Dir::new());
    write_capture(&a.path("in.pcap"), frames.clone()).unwrap();
    write_capture(&b.path("in.pcap"), frames).unwrap();
    let st = |d: &Dir| d.s("stats.json");
    ok(&replay(&a, &["--netem", spec, "--seed", "11", "--stats", &st(&a)]));
    let mut args: Vec<&str> = flag_words.iter().map(String::as_str).collect();
    let stats_b = st(&b);
    args.extend(["--seed", "11", "--stats", &stats_b]);
    ok(&replay(&b, &args));
    let (out_a, out_b) =
        (std::fs::read(a.path("out.pcap")).unwrap(), std::fs::read(b.path("out.pcap")).unwrap());
    assert!(out_a == out_b, "the netem spec and `{flags}` give different captures");
    // Not identical by doing nothing: frames were lost, duplicated and sent ahead of others.
    let counters = |d: &Dir| {
        let mut s = stats(d);
        s.as_object_mut().unwrap().remove("peak_memory_bytes");
        s
    };
    let s = counters(&a);
    assert_eq!(s, counters(&b));
    let lost = s["dropped"]["loss"].as_u64().unwrap();
    let dup = s["duplicated"].as_u64().unwrap();
    assert!((100..300).contains(&lost) && (100..300).contains(&dup), "lost {lost}, duplicated {dup}");
    let out = read_capture(&a.path("out.pcap")).unwrap();
    let overtaken = out.windows(2).filter(|w| seq(&w[1].2) < seq(&w[0].2)).count();
    assert!(overtaken > 100, "{overtaken} frames left before an earlier one");
}

#[test]
fn delay_100ms_delays_every_frame_by_exactly_100ms_and_a_bare_250_is_refused() {
    for (spec, delay) in [("delay 100ms", Nanos::from_millis(100)), ("delay 250us", Nanos::from_micros(250))]
    {
        let d = Dir::new();
        let frames = cbr(3000, 300, Nanos(33_333));
        write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
        ok(&replay(&d, &["--netem", spec, "--seed", "1"]));
        let out = read_capture(&d.path("out.pcap")).unwrap();
        assert_eq!(out.len(), frames.len(), "{spec}");
        for ((t_in, f_in), (t_out, _, f_out)) in frames.iter().zip(&out) {
            assert_eq!(*t_out, *t_in + delay, "{spec}");
            assert_eq!(f_in, f_out);
        }
    }
    // tc(8) says microseconds, tc since iproute2 6.9 reads nanoseconds: no guess.
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 300, Nanos(33_333))).unwrap();
    let (input, output) = (d.s("in.pcap"), d.s("out.pcap"));
    let err = refused(&d, &["replay", &input, &output, "--netem", "delay 250"], 2);
    assert!(err.contains("word 2 \"250\" has no unit"), "{err}");
}

#[test]
fn rate_200kbit_spaces_back_to_back_1000_byte_frames_40ms_apart() {
    let d = Dir::new();
    // 60 frames of 1000 B at once: NetEm's rate counts 8000 bits each, no framing: 40 ms.
    let frames: Vec<_> = (0..60).map(|i| (Nanos::from_secs(1), udp_frame(1000, i))).collect();
    write_capture(&d.path("in.pcap"), frames).unwrap();
    ok(&replay(&d, &["--netem", "rate 200kbit"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    assert_eq!(out.len(), 60, "NetEm's 1000-frame queue holds them all");
    for (k, (t, _, f)) in out.iter().enumerate() {
        assert_eq!(seq(f), k as u64);
        assert_eq!(*t, Nanos::from_secs(1) + Nanos::from_millis(40 * (k as u64 + 1)), "frame {k}");
    }
    // tc's limit bounds that queue in frames.
    let st = d.s("stats.json");
    ok(&replay(&d, &["--netem", "rate 200kbit limit 10", "--stats", &st]));
    assert_eq!(stats(&d)["dropped"]["queue"], 50);
}

/// Without a rate, tc's limit bounds the frames held in delay: a frame every millisecond
/// through 100 ms with limit 10 holds 10, so 10 of each 100 leave (the first ten of them), the
/// others are queue drops, and `--limit 10` is the same path.
#[test]
fn limit_bounds_the_frames_held_in_delay() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(1000, 100, Nanos::from_millis(1))).unwrap();
    let st = d.s("stats.json");
    for args in [vec!["--netem", "delay 100ms limit 10"], vec!["--delay", "100ms", "--limit", "10"]] {
        ok(&replay(&d, &[&args[..], &["--stats", &st]].concat()));
        let out = read_capture(&d.path("out.pcap")).unwrap();
        let sent: Vec<u64> = out.iter().map(|(_, _, f)| seq(f)).collect();
        assert_eq!(sent, (0..1000).filter(|i| i % 100 < 10).collect::<Vec<u64>>(), "{args:?}");
        assert_eq!(stats(&d)["dropped"]["queue"], 900, "{args:?}");
    }
}

#[test]
fn netem_reorder_gap_sends_every_nth_frame_at_once() {
    let d = Dir::new();
    let frames = cbr(30, 100, Nanos::from_millis(1));
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    ok(&replay(&d, &["--netem", "delay 10ms reorder 100% gap 5"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    for (t, _, f) in &out {
        let k = seq(f);
        let sent = frames[k as usize].0;
        let want = if k % 5 == 4 { sent } else { sent + Nanos::from_millis(10) };
        assert_eq!(*t, want, "frame {k}");
    }
}

#[test]
fn netem_mistakes_are_one_line_and_exit_2() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), cbr(10, 100, Nanos(1000))).unwrap();
    let (input, output) = (d.s("in.pcap"), d.s("out.pcap"));
    let run = |extra: &[&str]| {
        let mut args = vec!["replay", &input, &output];
        args.extend_from_slice(extra);
        refused(&d, &args, 2)
    };
    let e = run(&["--netem", "delay 10ms lose 1%"]);
    assert!(e.contains("word 3 \"lose\" is not a netem keyword; accepted: limit, delay"), "{e}");
    let e = run(&["--netem", "delay 10ms", "--delay", "5ms"]);
    assert!(e.contains("--netem and --delay cannot be used together"), "{e}");
    let e = run(&["--netem", "delay 10ms 1ms distribution no-such-table-anywhere"]);
    assert!(e.contains("word 5 \"no-such-table-anywhere\" names no distribution table"), "{e}");
}

/// Standard output that cannot take what pathem prints (a full disk: `/dev/full`) ends the run
/// with one line and exit 1, never a panic (`print!`'s); a usage error stays exit 2 whatever
/// standard error is.
#[test]
fn output_that_cannot_be_written_is_one_line_and_exit_1() {
    use std::process::{Command, Stdio};
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full (Linux)");
    for args in [
        &["netem", "delay 1ms"][..],
        &["netem", "--from-flags", "--delay 1ms"],
        &["completions", "bash"],
        &["--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pathem"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(full())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("cannot write to standard output") && !err.contains("panicked"), "{err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(["netem", "delay 1ms loss 150%"])
        .stdin(Stdio::null())
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a refusal that cannot be said is still exit 2");
}
