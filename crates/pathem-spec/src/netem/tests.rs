//! The netem grammar against tc-netem(8), its refusals, and its round trips through flags,
//! config lines and back.

use super::*;
use pathem_model::link::LinkConfig;

fn p(x: f64) -> Probability {
    Probability::new(x).unwrap()
}

/// The path a netem spec makes.
fn path(spec: &str) -> PathConfig {
    let n = NetemSpec::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    n.flags().to_config().unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The one-line refusal of a spec, through explain (prefix included).
fn refusal(spec: &str) -> String {
    explain(spec).expect_err(spec).to_string()
}

fn notes(spec: &str) -> String {
    NetemSpec::parse(spec).unwrap().notes().join("\n")
}

fn rate_link(rate: u64, overhead: i32, queue: u64) -> LinkConfig {
    LinkConfig { overhead, queue: Some(QueueLimit::Packets(queue)), ..LinkConfig::rate(Rate(rate)) }
}

#[test]
fn times_as_tc_reads_them() {
    for (word, ns) in [
        ("1s", 1_000_000_000),
        ("1sec", 1_000_000_000),
        ("2secs", 2_000_000_000),
        ("1.5ms", 1_500_000),
        ("10msec", 10_000_000),
        ("10msecs", 10_000_000),
        ("10MS", 10_000_000),
        ("250us", 250_000),
        ("250usec", 250_000),
        ("250usecs", 250_000),
        ("7ns", 7),
        ("7nsec", 7),
        ("7NSECS", 7),
        ("0", 0),
        (".5ms", 500_000),
        ("1e3us", 1_000_000),
        ("3600s", 3_600_000_000_000),
    ] {
        let d = path(&format!("delay {word}")).delay;
        assert_eq!(d.base, Nanos(ns), "delay {word}");
    }
    // tc(8) says microseconds, iproute2 6.9 and later read nanoseconds: refused, not guessed.
    for spec in ["delay 250", "delay 10ms 250", "delay 0.5"] {
        let e = NetemSpec::parse(spec).unwrap_err().to_string();
        assert!(e.contains("has no unit: tc(8) reads a bare"), "{spec}: {e}");
    }
    assert!(!notes("delay 250us").contains("read as"));
    // A bare slot time is nanoseconds in every tc.
    assert_eq!(path("slot 10 20").slot.unwrap().spacing, Spacing::Uniform { min: Nanos(10), max: Nanos(20) });
    assert_eq!(path("latency 5ms").delay.base, Nanos::from_millis(5));
}

#[test]
fn delay_jitter_correlation_and_distribution() {
    let d = path("delay 100ms 10ms 25%").delay;
    assert_eq!(
        (d.base, d.jitter, d.correlation),
        (Nanos::from_millis(100), Nanos::from_millis(10), Some(p(0.25)))
    );
    assert_eq!(d.dist, Dist::Uniform);
    // A bare correlation is a percentage too.
    assert_eq!(path("delay 100ms 10ms 25").delay.correlation, Some(p(0.25)));
    assert!(notes("delay 100ms 10ms 25").contains("read as 25%"));
    // A correlation of 0, or without jitter, correlates nothing.
    assert_eq!(path("delay 100ms 10ms 0%").delay.correlation, None);
    assert_eq!(
        path("delay 100ms 0 25%").delay,
        pathem_model::delay::DelayConfig::constant(Nanos::from_millis(100))
    );
    for (name, dist) in [
        ("uniform", Dist::Uniform),
        ("normal", Dist::Normal),
        ("pareto", Dist::Pareto),
        ("paretonormal", Dist::ParetoNormal),
    ] {
        assert_eq!(path(&format!("delay 10ms 2ms distribution {name}")).delay.dist, dist, "{name}");
    }
    assert_eq!(path("dist normal delay 10ms 2ms").delay.dist, Dist::Normal, "anywhere, shortened");
    // Jitter lets frames overtake unless a rate keeps them in order.
    assert!(path("delay 10ms 2ms").reorder);
    assert!(!path("delay 10ms").reorder);
    assert!(!path("delay 10ms 2ms rate 1mbit").reorder);
}

#[test]
fn tc_tables_from_a_file_or_tcs_folder() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("steps.dist");
    std::fs::write(&file, "# made by maketable\n-8192 0\n8192 16384\n").unwrap();
    let spec = format!("delay 10ms 1ms distribution {}", file.display());
    let d = path(&spec).delay;
    let Dist::Custom(t) = &d.dist else { panic!("{:?}", d.dist) };
    assert_eq!(t.len(), 4);
    // delay + jitter · value / 8192: 9, 10, 11 and 12 ms, each a quarter of the time.
    assert_eq!(d.dist.typical_max(d.base, d.jitter), Nanos::from_millis(12));
    assert!(notes(&spec).contains("entry by entry"));
    // Slots read the same tables in tc: the same note, for the slot's distribution.
    let slot = notes("slot distribution pareto 1ms 1ms");
    assert!(
        slot.contains("slot distribution pareto is pathem's exact one") && slot.contains("pareto.dist"),
        "{slot}"
    );
    assert!(notes("slot distribution uniform 1ms 1ms").contains("tc has no uniform table and refuses it"));
    assert!(notes("delay 10ms 1ms distribution uniform").contains("tc has no uniform table and refuses it"));
    let e = refusal("delay 10ms 1ms distribution no-such-table-here");
    assert!(
        e.starts_with("--netem \"delay 10ms 1ms distribution no-such-table-here\": word 5 \"no-such-table-here\" names no distribution table: no such table (looked for")
            && e.contains("/usr/lib/tc/no-such-table-here.dist")
            && e.contains("accepted: uniform, normal"),
        "{e}"
    );
    let e = refusal("delay 10ms 1ms distribution /nonexistent/x.dist");
    assert!(e.contains("word 5 \"/nonexistent/x.dist\" names no distribution table"), "{e}");
    let e = refusal("delay 10ms 1ms distribution /dev/zero");
    assert!(e.contains("longer than a table"), "{e}");
    std::fs::write(&file, "1 2 banana\n").unwrap();
    assert!(refusal(&spec).contains("line 1"));
}

#[test]
fn rates_as_tc_reads_them() {
    for (word, bits) in [
        ("200kbit", 200_000),
        ("1kbps", 8_000),
        ("1mbit", 1_000_000),
        ("1Mbit", 1_000_000),
        ("1MBps", 8_000_000),
        ("1kibit", 1024),
        ("1kibps", 8192),
        ("1mibit", 1 << 20),
        ("1gbit", 1_000_000_000),
        ("1gbps", 8_000_000_000),
        ("1tbit", 1_000_000_000_000),
        ("1000000", 1_000_000),
        ("1001bit", 1000),
        ("8bit", 8),
        ("1.5mbit", 1_500_000),
    ] {
        let l = path(&format!("rate {word}")).link.unwrap();
        assert_eq!(l.server, Server::Rate(Rate(bits)), "rate {word}");
    }
    assert!(notes("rate 1000000").contains("\"rate 1000000\" read as 1mbit: a bare rate is bits per second"));
    assert!(notes("rate 1kbps").contains("bytes per second"));
    assert!(notes("rate 1001bit").contains("whole bytes"));
    // NetEm's rate adds no framing unless told; its queue is 1000 frames unless told.
    assert_eq!(path("rate 10mbit").link, Some(rate_link(10_000_000, 0, 1000)));
    assert!(notes("rate 10mbit").contains("--overhead 0"));
    assert_eq!(path("limit 50 rate 10mbit 24").link, Some(rate_link(10_000_000, 24, 50)));
    let l = path("rate 5kbit 20 100 5").link.unwrap();
    assert_eq!((l.overhead, l.cell), (20, Some(Cell { size: 100, overhead: 5 })));
    assert_eq!(path("rate 5kbit -14").link.unwrap().overhead, -14);
    assert_eq!(path("rate 5kbit 0x10").link.unwrap().overhead, 16);
    assert!(notes("rate 5kbit 010").contains("octal"));
    assert_eq!(path("rate 5kbit 20 0").link.unwrap().cell, None, "cell size 0: no cells");
    assert_eq!(path("limit 1k rate 1mbit").link.unwrap().queue, Some(QueueLimit::Packets(1024)));
    assert!(notes("limit 1k rate 1mbit").contains("powers of 1024"));
    // Without a rate, the limit bounds the frames held in delay, as NetEm's does.
    assert_eq!((path("limit 20 delay 1ms").link, path("limit 20 delay 1ms").limit), (None, Some(20)));
    assert_eq!(path("limit 20 rate 1mbit").limit, None, "with a rate, the rate's queue");
    assert!(notes("limit 20 delay 1ms").contains("limit 20 bounds the frames held in delay (--limit 20)"));
    // That limit and a discipline (on a rate trace) exclude each other: said at the spec's word.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("rate.trace");
    std::fs::write(&trace, "1\n").unwrap();
    let flags = format!("--netem 'delay 10ms limit 20' --rate-trace {} --aqm codel", trace.display());
    let e = PathSpec::from_flags(&flags).unwrap().to_config().unwrap_err().to_string();
    assert!(e.contains("word 3 \"limit 20\" bounds the frames held (there is no rate)"), "{e}");
}

#[test]
fn loss_models_and_their_defaults() {
    assert_eq!(path("loss 1%").loss, Some(LossConfig::Random(p(0.01))));
    assert_eq!(path("loss random 1%").loss, Some(LossConfig::Random(p(0.01))));
    assert_eq!(path("drop 0.3").loss, Some(LossConfig::Random(p(0.003))));
    assert!(notes("drop 0.3").contains("\"drop 0.3\" read as 0.3%"));
    assert_eq!(path("loss random 1% 25%").loss, Some(LossConfig::Correlated { p: p(0.01), corr: p(0.25) }));
    assert!(notes("loss 1% 25%").contains("NetEm's correlated draw makes that"), "{}", notes("loss 1% 25%"));
    assert_eq!(
        path("loss state 1%").loss,
        Some(LossConfig::FourState { p13: p(0.01), p31: p(0.99), p32: p(0.0), p23: p(1.0), p14: p(0.0) })
    );
    assert_eq!(
        path("loss state 1% 30% 2% 50% 0.5%").loss,
        Some(LossConfig::FourState { p13: p(0.01), p31: p(0.3), p32: p(0.02), p23: p(0.5), p14: p(0.005) })
    );
    // gemodel: r = 1 − p, loss in bad 100% (1-H), in good 0% (1-K) unless given.
    assert_eq!(
        path("loss gemodel 1%").loss,
        Some(LossConfig::GilbertElliott { p: p(0.01), r: p(0.99), loss_bad: p(1.0), loss_good: p(0.0) })
    );
    assert_eq!(
        path("loss gemodel 1% 10% 70% 0.1%").loss,
        Some(LossConfig::GilbertElliott { p: p(0.01), r: p(0.1), loss_bad: p(0.7), loss_good: p(0.001) })
    );
    assert!(notes("loss gemodel 1%").contains("R defaults to 1 − p"));
    assert!(notes("loss gemodel 1% 10% 70%")
        .contains("third value (1-H, 70%) is the loss probability in the bad state"));
    assert!(path("loss 1% ecn").ecn && path("ecn loss 1%").ecn);
}

#[test]
fn duplicate_corrupt_reorder_and_gap() {
    let c = path("duplicate 1% 25% corrupt 0.1% 10%");
    assert_eq!((c.duplicate, c.duplicate_correlation), (Some(p(0.01)), Some(p(0.25))));
    assert_eq!((c.corrupt, c.corrupt_correlation), (Some(p(0.001)), Some(p(0.1))));
    let r = path("delay 10ms reorder 25% 50%");
    assert_eq!(r.skip_delay, Some(SkipConfig { p: p(0.25), corr: Some(p(0.5)), gap: 1 }));
    assert!(!r.reorder, "a frame sent at once overtakes without --reorder");
    let g = path("gap 5 delay 10ms reorder 100%");
    assert_eq!(g.skip_delay, Some(SkipConfig { p: p(1.0), corr: None, gap: 5 }));
    assert_eq!(path("delay 10ms reorder 50% gap 0").skip_delay.unwrap().gap, 1);
    // tc refuses only a gap above 0 without a reorder chance: `gap 0` alone does nothing.
    for spec in ["delay 10ms gap 0", "delay 10ms reorder 0% gap 0"] {
        assert_eq!(path(spec), path("delay 10ms"), "{spec}");
        assert!(notes(spec).contains("does nothing"), "{spec}");
    }
    // A rate below one byte per second is 0 in tc, which NetEm reads as no rate (`rate 0`
    // turns it off); the limit then bounds the frames held in delay.
    for spec in ["delay 50ms rate 0", "delay 50ms rate 7bit 10"] {
        assert_eq!(path(spec), path("delay 50ms"), "{spec}");
        assert!(notes(spec).contains("which NetEm reads as no rate"), "{spec}");
    }
    assert_eq!(path("delay 50ms rate 0 limit 10").limit, Some(10));
    assert!(refusal("rate 0 rate 1mbit").contains("word 3 \"rate\" is given twice (first as word 1)"));
    assert_eq!(path("delay 10ms reorder 0%").skip_delay, None, "reorder 0% does nothing");
    assert!(!path("delay 10ms reorder 0%").reorder);
}

#[test]
fn slots() {
    let s = path("slot 800us 1ms packets 32 bytes 64kb").slot.unwrap();
    assert_eq!(
        s,
        SlotConfig {
            packets: Some(32),
            bytes: Some(65_536),
            ..SlotConfig::uniform(Nanos::from_micros(800), Nanos::from_millis(1))
        }
    );
    assert_eq!(path("slot 2ms bytes 1500 packets 4").slot.unwrap().packets, Some(4), "either order");
    assert_eq!(path("slot 1ms packets 0").slot.unwrap().packets, None, "0 is no limit");
    assert_eq!(
        path("slot 800").slot.unwrap(),
        SlotConfig::uniform(Nanos(800), Nanos(800)),
        "a bare slot time is nanoseconds in tc"
    );
    assert_eq!(path("slot 0").slot, None, "slot 0 is no slots");
    let s = path("slot distribution normal 2ms 500us packets 4").slot.unwrap();
    assert_eq!(
        s.spacing,
        Spacing::Dist { delay: Nanos::from_millis(2), jitter: Nanos::from_micros(500), dist: Dist::Normal }
    );
    assert_eq!(s.packets, Some(4));
}

#[test]
fn shortened_keywords_as_tc_takes_them() {
    assert_eq!(path("d 10ms").delay.base, Nanos::from_millis(10));
    assert_eq!(path("del 10ms l 5 r 1% 2% lo 1%").loss, Some(LossConfig::Random(p(0.01))));
    assert!(path("del 10ms du 1%").duplicate.is_some());
    assert!(notes("del 10ms").contains("\"del\" read as delay"));
    assert_eq!(path("").link, None);
    assert!(NetemSpec::parse("  ").unwrap().is_empty());
}

#[test]
fn refusals_name_the_word_its_position_and_what_is_accepted() {
    assert_eq!(
        refusal("delay 10ms lose 1%"),
        format!("--netem \"delay 10ms lose 1%\": word 3 \"lose\" is not a netem keyword; accepted: {KEYWORDS_ACCEPTED}")
    );
    for (spec, says) in [
        ("delay", "word 1 \"delay\" needs a TIME; accepted: a time"),
        ("delay 10ms 1ms 25% loss", "word 5 \"loss\" needs a loss model or a PERCENT"),
        ("loss 101%", "word 2 \"101%\" is above 100%"),
        ("loss random 1% 150", "word 4 \"150\" is above 100%"),
        ("delay 10parsecs", "word 2 \"10parsecs\" has unknown unit `parsecs`"),
        ("delay 2h", "word 2 \"2h\" has unknown unit `h`"),
        ("delay 3601s", "word 2 \"3601s\" is out of range; accepted: a time from 0 to 1h"),
        ("delay -1ms", "word 2 \"-1ms\" is negative"),
        ("delay 1ms delay 2ms", "word 3 \"delay\" is given twice (first as word 1)"),
        ("delay 1ms latency 2ms", "word 3 \"latency\" is given twice (first as word 1)"),
        ("loss 1% drop 2%", "word 3 \"drop\" is given twice (first as word 1)"),
        ("delay 10ms distribution normal", "word 3 \"distribution\" needs a delay and a jitter above 0"),
        ("distribution normal", "word 1 \"distribution\" needs a delay and a jitter"),
        ("reorder 10%", "word 1 \"reorder\" needs a delay above 0"),
        ("delay 10ms gap 5", "word 3 \"gap\" needs reorder PERCENT above 0"),
        ("delay 10ms reorder 0% gap 5", "word 5 \"gap\" needs reorder PERCENT above 0"),
        ("delay 10ms ecn", "word 3 \"ecn\" needs a loss model"),
        ("loss 0% ecn", "word 3 \"ecn\" needs a loss model"),
        ("loss bursty 1%", "word 2 \"bursty\" is not a loss model; accepted: PERCENT"),
        ("loss gemodel 0% 0%", "word 2 \"gemodel\" has p + r = 0"),
        ("loss state 60% 50% 0% 100% 50%", "word 2 \"state\" has p13 + p14 above 100%"),
        ("seed 5", "word 1 \"seed\" is not a path setting in pathem"),
        ("rate 50%", "word 2 \"50%\" is a share of the device's speed"),
        ("rate 2tbps", "word 2 \"2tbps\" is out of range"),
        ("rate 1mbit 70000", "word 3 \"70000\" is out of range; accepted: a PACKETOVERHEAD"),
        ("rate 1mbit 0 48 -5", "word 5 \"-5\" is out of range; accepted: a CELLOVERHEAD"),
        ("rate 1furlong", "word 2 \"1furlong\" has unknown unit `furlong`"),
        ("limit 0", "word 2 \"0\" is zero"),
        ("limit 1.5", "word 2 \"1.5\" is not a whole number"),
        ("limit 5000000000", "word 2 \"5000000000\" is out of range"),
        ("delay 10ms reorder 50% gap x", "word 6 \"x\" is not a whole number"),
        ("slot 2ms 1ms", "word 3 \"1ms\" is below MIN_DELAY"),
        ("slot fast", "word 2 \"fast\" is not a slot's MIN_DELAY"),
        ("slot distribution normal 1ms 0", "word 5 \"0\" is zero"),
        ("slot distribution normal 1ms", "word 4 \"1ms\" needs a JITTER"),
        ("slot 1ms packets", "word 3 \"packets\" needs a number of frames"),
        ("slot 1ms packets 10 packets 5", "word 5 \"packets\" is given twice in slot"),
        ("slot 1ms bytes 10 packets 2 bytes 5", "word 7 \"bytes\" is given twice in slot"),
        ("slot 1ms bytes 3gb", "word 4 \"3gb\" is out of range"),
        ("delay 10ms % 5", "word 3 \"%\" is not a netem keyword"),
        ("help", "word 1 \"help\" is not a netem keyword"),
    ] {
        let e = refusal(spec);
        assert!(e.starts_with(&format!("--netem \"{spec}\": ")), "{spec}: {e}");
        assert!(e.contains(says) && e.contains("; accepted: "), "{spec}: {e}");
        assert_eq!(e.lines().count(), 1);
    }
}

/// Specs whose flags and config lines are checked to make the same path.
const SPECS: [&str; 14] = [
    "delay 100ms 10ms 25%",
    "delay 10ms 2ms 25% loss 1% duplicate 1% reorder 10% gap 3 rate 10mbit",
    "delay 250us 50us distribution normal",
    "delay 20ms 5ms distribution paretonormal loss state 1% 30% 2% 50% 0.5% ecn",
    "loss gemodel 1% 10% 70% 0.1% limit 30 rate 2mbit 14 48 5",
    "loss random 0.3% 25% corrupt 0.1% 5% duplicate 2%",
    "delay 1s 100ms 50% reorder 5% 10% gap 2",
    "slot 800us 1ms packets 32 bytes 64kb",
    "slot distribution pareto 2ms 1ms packets 4 delay 1ms",
    "rate 1kbps 0x10",
    "limit 100 delay 10ms",
    "delay 5ms 1ms distribution pareto rate 100mbit 24",
    "",
    "latency 3ms drop 0.5 ecn",
];

#[test]
fn explained_flags_and_config_lines_make_the_same_path() {
    let e = explain("delay 100ms 10ms 25%").unwrap();
    assert_eq!(e.flags, "--delay 100ms --jitter 10ms --delay-correlation 25% --reorder");
    assert_eq!(e.toml, "delay = \"100ms\"\njitter = \"10ms\"\ndelay-correlation = \"25%\"\nreorder = true");
    let e = explain("delay 10ms 2ms 25% loss 1% duplicate 1% reorder 10% gap 3 rate 10mbit").unwrap();
    assert_eq!(
        e.flags,
        "--delay 10ms --jitter 2ms --delay-correlation 25% --skip-delay 10%,gap=3 --loss 1% --rate 10mbit \
         --overhead 0 --queue 1000pkt --duplicate 1%"
    );
    for spec in SPECS {
        let e = explain(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let from_flags =
            PathSpec::from_flags(&e.flags).unwrap_or_else(|x| panic!("{spec}: {}: {x}", e.flags));
        assert_eq!(from_flags.to_config(), Ok(e.path.clone()), "{spec}: {}", e.flags);
        let from_toml: PathSpec = toml::from_str(&e.toml).unwrap_or_else(|x| panic!("{spec}: {x}"));
        assert_eq!(from_toml.to_config(), Ok(e.path.clone()), "{spec}: {}", e.toml);
        // And --netem itself, as a flag and as a key.
        let netem = PathSpec::from_flags(&format!("--netem {}", quote_word(spec))).unwrap();
        assert_eq!(netem.to_config(), Ok(e.path.clone()), "{spec}");
        let key: PathSpec = toml::from_str(&format!("netem = \"{spec}\"")).unwrap();
        assert_eq!(key.to_config(), Ok(e.path), "{spec}");
    }
}

#[test]
fn to_netem_and_back_make_the_same_path() {
    for flags in [
        "--delay 10ms",
        "--delay 10ms --jitter 2ms --reorder",
        "--delay 10ms --jitter 2ms --delay-dist normal --delay-correlation 30% --reorder",
        "--rate 10mbit --queue 100pkt",
        "--rate 10mbit --overhead -4 --cell 48,5 --queue 20pkt --delay 5ms --jitter 1ms",
        "--loss ge:p=0.5%,r=20% --ecn",
        "--loss gi:p13=1%,p14=0.1% --duplicate 1% --duplicate-correlation 10%",
        "--loss random:3%,corr=40% --corrupt 0.5%",
        "--delay 20ms --skip-delay 25%,corr=10%,gap=4",
        "--delay 20ms --jitter 5ms --skip-delay 25% --reorder",
        "--delay 20ms --jitter 5ms --skip-delay 25% --rate 10mbit --queue 50pkt",
        "--slot 1ms,2ms,packets=8,bytes=3000B --delay 1ms",
        "--delay 100ms --limit 20",
        "--slot dist=normal,delay=2ms,jitter=300us,packets=2",
        "",
    ] {
        let spec = PathSpec::from_flags(flags).unwrap();
        let text = to_netem(&spec).unwrap_or_else(|e| panic!("{flags}: {e}"));
        assert_eq!(path(&text), spec.to_config().unwrap(), "{flags} → {text}");
    }
    assert_eq!(
        to_netem(
            &PathSpec::from_flags("--delay 10ms --jitter 2ms --delay-correlation 30% --reorder").unwrap()
        )
        .unwrap(),
        "delay 10ms 2ms 30%"
    );
    assert_eq!(
        to_netem(&PathSpec::from_flags("--netem 'loss gemodel 81%' --ber 0").unwrap())
            .unwrap_err()
            .to_string(),
        "--ber 0 has no NetEm equivalent: NetEm corrupts frames, it does not drop them for bit errors"
    );
    let written =
        to_netem(&PathSpec::from_flags("--netem 'limit 60 rate 2mbit 14 48 5 loss gemodel 81%'").unwrap());
    assert_eq!(written.unwrap(), "limit 60 loss gemodel 81% rate 2mbit 14 48 5", "tc's defaults left to tc");
    assert_eq!(
        to_netem(&PathSpec::from_flags("--loss gi:p13=3%,p32=1%").unwrap()).unwrap(),
        "loss state 3% 97% 1%"
    );
    // tc opens NAME.dist in its own folder and takes no path: a table is written by its NAME,
    // one given as a file only when it lies in a folder of tc's.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("steps.dist"), "# t\n-8192 0 8192 16384\n").unwrap();
    let file = dir.path().join("steps.dist").to_string_lossy().into_owned();
    let e = to_netem(
        &PathSpec::from_flags(&format!("--delay 10ms --jitter 1ms --delay-dist tc:{file} --reorder"))
            .unwrap(),
    );
    assert!(e.unwrap_err().to_string().contains("tc reads a table only by its NAME"));
    // The same file in a folder of tc's goes by its name (the folder given, not this
    // machine's, so the test does not depend on where its tc keeps tables).
    let tc_dirs = [dir.path().to_path_buf()];
    assert_eq!(explain::table_word_among(&file, &tc_dirs).unwrap(), "steps");
    assert_eq!(explain::table_word_among("steps", &tc_dirs).unwrap(), "steps");
    let flags = "--slot dist=uniform,delay=2ms,jitter=1ms";
    let e = to_netem(&PathSpec::from_flags(flags).unwrap()).unwrap_err().to_string();
    assert!(e.contains("tc has no uniform table and refuses it"), "{e}");
    // Netem specs round trip too.
    for spec in SPECS {
        let s = PathSpec::from_flags(&format!("--netem {}", quote_word(spec))).unwrap();
        if let Ok(text) = to_netem(&s) {
            assert_eq!(path(&text), s.to_config().unwrap(), "{spec} → {text}");
        }
    }
    for (flags, says) in [
        ("--police 5mbit,burst=10KB", "--police"),
        ("--rate 10mbit --queue 50pkt --aqm codel", "--aqm codel has no NetEm equivalent"),
        ("--ber 1e-6", "--ber"),
        ("--delay 10ms --jitter 1ms --delay-half-life 5ms", "--delay-half-life 5ms"),
        ("--rate 10mbit", "--rate 10mbit without --queue has no NetEm equivalent: NetEm always bounds"),
        ("--rate 10mbit --queue 64KB", "--queue 64000B"),
        ("--rate 1001bit --queue 5pkt", "--rate 1001bit"),
        ("--delay 10ms --jitter 1ms", "--jitter without --reorder"),
        ("--delay 10ms --reorder", "--reorder without --jitter"),
        ("--delay 10ms --skip-delay 10% --reorder", "--reorder without --jitter"),
        ("--delay 10ms --jitter 1ms --rate 1mbit --queue 5pkt --reorder", "--reorder with a rate"),
        ("--delay 10ms --jitter 1ms --delay-dist exponential --reorder", "--delay-dist exponential"),
        ("--ecn", "--ecn without --loss"),
        ("--rate 10mbit --queue 5pkt --limit 5", "--limit 5 with a rate"),
        // tc and pathem's own netem parser refuse `loss random 0% ecn`: never written.
        ("--ecn --loss 0%", "--ecn with a loss of 0%"),
        ("--ecn --loss random:0%,corr=25%", "--ecn with a loss of 0%"),
        ("--slot 0ns", "--slot 0ns"),
        ("--delay 10ms --jitter 3s --reorder", "--jitter 3s"),
    ] {
        let e = to_netem(&PathSpec::from_flags(flags).unwrap()).unwrap_err().to_string();
        assert!(e.starts_with(says) || e.contains(says), "{flags}: {e}");
        assert!(e.contains("has no NetEm equivalent"), "{flags}: {e}");
    }
}

#[test]
fn a_netem_spec_with_flags_that_say_the_same_is_refused() {
    let spec = |flags: &str| PathSpec::from_flags(flags).unwrap().to_config();
    for (flags, flag) in [
        ("--netem 'delay 10ms' --delay 5ms", "delay"),
        ("--netem 'delay 10ms' --loss 1%", "loss"),
        ("--netem 'loss 1%' --ecn", "ecn"),
        ("--netem 'rate 1mbit' --queue 5pkt", "queue"),
        ("--netem 'delay 1ms' --skip-delay 5%", "skip-delay"),
    ] {
        let e = spec(flags).unwrap_err();
        assert!(e.is_usage());
        let e = e.to_string();
        assert!(e.starts_with(&format!("--netem and --{flag} cannot be used together")), "{flags}: {e}");
    }
    // What NetEm has no words for combines with it.
    let c = spec("--netem 'rate 10mbit limit 20' --aqm codel --ber 1e-7").unwrap();
    assert!(c.aqm != pathem_model::aqm::AqmConfig::DropTail && c.ber.is_some());
    let c = spec("--netem 'delay 10ms 2ms' --delay-half-life 5ms").unwrap();
    assert_eq!(c.delay.half_life, Some(Nanos::from_millis(5)));
    let e = spec("--netem 'delay 10ms 2ms 25%' --delay-half-life 5ms").unwrap_err().to_string();
    assert!(e.starts_with("--netem and --delay-half-life cannot be used together"), "{e}");
    // --no-reorder wins over the overtaking jitter implies, also once merged.
    assert!(!spec("--netem 'delay 10ms 2ms' --no-reorder").unwrap().reorder);
    let keys: PathSpec = toml::from_str("netem = 'delay 10ms 2ms'\nno-reorder = true").unwrap();
    assert!(!keys.to_config().unwrap().reorder, "the key too");
    let base = PathSpec::from_flags("--netem 'delay 10ms 2ms' --no-reorder").unwrap();
    let merged =
        PathSpec::default().overridden_by(&base).overridden_by(&PathSpec::from_flags("--ber 1e-9").unwrap());
    assert!(!merged.to_config().unwrap().reorder);
    assert!(merged.overridden_by(&PathSpec::from_flags("--reorder").unwrap()).to_config().unwrap().reorder);
    // A netem spec replaces what netem has words for, from flags or an earlier spec, and the
    // switches; what it has no words for stays. An empty one clears it, and flags may follow.
    let flags =
        PathSpec::from_flags("--delay 10ms --ecn --loss 1% --reorder --ber 1e-9 --no-ecn --ecn").unwrap();
    let netem = flags.overridden_by(&PathSpec::from_flags("--netem 'duplicate 1%'").unwrap());
    let c = netem.to_config().unwrap();
    assert_eq!((c.delay.base, c.loss, c.ecn, c.reorder), (Nanos::ZERO, None, false, false));
    assert!(c.ber.is_some() && c.duplicate.is_some());
    // Flags of a later layer change an earlier spec word for word (ctl set on a netem link).
    let later =
        netem.overridden_by(&PathSpec::from_flags("--no-ecn --delay 4ms").unwrap()).to_config().unwrap();
    assert_eq!((later.ecn, later.delay.base), (false, Nanos::from_millis(4)));
    assert!(later.duplicate.is_some(), "the spec's duplicate stays");
    let next = merged.overridden_by(&PathSpec::from_flags("--netem 'loss 2%'").unwrap());
    assert_eq!(next.to_config().unwrap().delay.base, Nanos::ZERO);
    let cleared = next.overridden_by(&PathSpec::from_flags("--netem '' --delay 3ms").unwrap());
    let c = cleared.to_config().unwrap();
    assert_eq!((c.delay.base, c.loss), (Nanos::from_millis(3), None));
    // An empty spec replaces what netem has words for as any spec does, and stays said: `ctl
    // set`'s layers, kept apart from the start's and put on top of it, hide its delay (they
    // brought the start's 10 ms back).
    let start = PathSpec::from_flags("--delay 10ms --ber 1e-9").unwrap();
    let held = ["--delay 20ms", "--netem 'loss 2%'", "--netem ''"]
        .iter()
        .fold(PathSpec::default(), |h, f| h.overridden_by(&PathSpec::from_flags(f).unwrap()));
    let c = start.overridden_by(&held).to_config().unwrap();
    assert_eq!((c.delay.base, c.loss, c.ber.is_some()), (Nanos::ZERO, None, true));
    let c = start.overridden_by(&held.overridden_by(&PathSpec::from_flags("--delay 5ms").unwrap()));
    assert_eq!(c.to_config().unwrap().delay.base, Nanos::from_millis(5));
}

#[test]
fn a_netem_spec_inside_direction_strings_ctl_set_and_schedules() {
    let s = PathSpec::from_flags("--netem \"delay 10ms 1ms\" --ber 1e-6").unwrap();
    assert_eq!(s.netem.as_ref().unwrap().text(), "delay 10ms 1ms");
    let c =
        crate::change::Change::parse(&["--a-to-b".into(), "--netem 'delay 20ms loss 1%'".into()]).unwrap();
    assert_eq!(c.a_to_b.to_config().unwrap().delay.base, Nanos::from_millis(20));
    let words: Vec<String> = ["--netem", "delay 5ms"].iter().map(|w| w.to_string()).collect();
    assert_eq!(
        crate::change::Change::parse(&words).unwrap().both.to_config().unwrap().delay.base,
        Nanos::from_millis(5)
    );
    let sched = crate::schedule::parse(
        "0s --netem \"delay 20ms 1ms\"\n10s --netem 'loss 5%'\n",
        &PathSpec::default(),
        Path::new("."),
    )
    .unwrap();
    let steps = crate::schedule::to_schedule(&sched, Path::new("s")).unwrap();
    assert_eq!(steps.steps()[0].1.delay.jitter, Nanos::from_millis(1));
    assert_eq!(steps.steps()[1].1.loss, Some(LossConfig::Random(p(0.05))));
    let e = crate::change::Change::parse(&["--a-to-b".into(), "--netem 'delay 2x'".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("word 2 \"2x\" has unknown unit `x`"), "{e}");
    let e = toml::from_str::<PathSpec>("netem = \"delay 10ms lose 1%\"").unwrap_err().to_string();
    assert!(e.contains("word 3 \"lose\" is not a netem keyword"), "{e}");
}
