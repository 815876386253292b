//! What each fuzz target does with its input, written once: the cargo-fuzz targets in
//! `fuzz_targets/` call these, and `crates/pathem/tests/fuzz_corpus.rs` runs every file of the
//! corpora and of `regressions/` through them on stable Rust, so a crash found once stays fixed.
//!
//! Each function must never panic, hang or allocate without bound, whatever the bytes; where a
//! parser accepts its input, the result is also used (a path built and run, a trace sampled),
//! so what a parser lets through is exercised too.

use pathem_engine::EngineConfig;
use pathem_io::mem::MemSink;
use pathem_io::pcap::PcapSource;
use pathem_model::delay::{Delay, DelayConfig, DelayTrace};
use pathem_model::dist::{DelayTable, Dist};
use pathem_model::link::{Cell, Link, LinkConfig, RateTrace, Server};
use pathem_model::loss::{Loss, LossConfig, LossTrace};
use pathem_model::police::PolicerConfig;
use pathem_model::slot::SlotConfig;
use pathem_model::units::{parse_duration, Probability, QueueLimit, Rate, Size};
use pathem_model::{FrameMeta, Nanos, Path, PathConfig, Rng};
use std::sync::Arc;

/// Runs `path` over a few frames, checking that every frame is accounted for.
fn exercise(path: &PathConfig) {
    if path.validate().is_err() {
        return;
    }
    let mut p = Path::new(path);
    let mut rng = Rng::seeded(1);
    for i in 0..64u64 {
        let _ = p.process(FrameMeta::new(Nanos::from_micros(37 * i), 60 + (i as u32 * 97) % 1455), &mut rng);
    }
}

/// A pcap capture, replayed through one of a few paths in virtual time.
pub fn pcap(data: &[u8]) {
    let Ok(src) = PcapSource::from_bytes(std::path::Path::new("fuzz.pcap"), data.to_vec()) else { return };
    let paths = [
        PathConfig::default(),
        PathConfig {
            link: Some(LinkConfig {
                queue: Some(QueueLimit::Packets(10)),
                ..LinkConfig::rate(Rate(1_000_000))
            }),
            loss: Some(LossConfig::Random(Probability::new(0.1).unwrap())),
            delay: DelayConfig::constant(Nanos::from_millis(10)),
            ..PathConfig::default()
        },
        PathConfig {
            delay: DelayConfig {
                base: Nanos::from_millis(5),
                jitter: Nanos::from_millis(5),
                dist: Dist::Normal,
                ..Default::default()
            },
            reorder: true,
            duplicate: Some(Probability::new(0.2).unwrap()),
            corrupt: Some(Probability::new(0.2).unwrap()),
            limit: Some(8),
            ..PathConfig::default()
        },
    ];
    let path = &paths[data.len() % paths.len()];
    // Every other input also through classes: frames split by filters onto the other paths.
    let class = |name: &str, filter: &str, path: &PathConfig| pathem_engine::ClassConfig {
        name: name.into(),
        filter: pathem_filter::Filter::compile(filter).expect("a valid filter"),
        path: path.clone(),
        schedule: None,
    };
    let classes = match data.len() % 2 {
        0 => Vec::new(),
        _ => vec![
            class("c1", "udp or ip6", &paths[(data.len() + 1) % 3]),
            class("c2", "tcp or arp", &paths[(data.len() + 2) % 3]),
        ],
    };
    let engine = EngineConfig { buffer: Some(1 << 20), ..EngineConfig::default() };
    // The offline runtime `pathem replay` runs, into a counting sink.
    let Ok(done) = pathem_runtime::replay::replay(
        src,
        MemSink::default(),
        path,
        &classes,
        None,
        1,
        &engine,
        &Default::default(),
    ) else {
        return;
    };
    let s = done.stats;
    assert_eq!(
        s.rx_packets + s.duplicated,
        s.tx_packets + s.dropped.total(),
        "every frame accounted for: {s:?}"
    );
    let rx: u64 = done.classes.iter().map(|(_, c)| c.rx_packets).sum();
    assert!(classes.is_empty() || rx == s.rx_packets, "the classes' frames add up: {s:?}");
}

/// The unit parsers (durations, rates, sizes, queue limits, probabilities, the probe's rate
/// and pattern), and the short strings of a live link: its `--name`, its `--metrics` address, a control socket request,
/// an attach's `--mark`, a `dpdk:` device and `--eal` words.
pub fn units(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if pathem_runtime::control::check_name(text).is_ok() {
        assert!(!text.contains('/') && !text.starts_with('.'), "{text:?} names a socket elsewhere");
    }
    let _ = pathem_runtime::metrics::parse_addr(text);
    let _ = pathem_runtime::control::parse_request(text);
    if let Ok(m) = pathem_io::attach::parse_mark(text) {
        assert!(m != 0, "{text:?}: mark 0 would pass every frame");
        assert_eq!(pathem_io::attach::parse_mark(&format!("{m:#x}")), Ok(m), "{text:?} in hex");
    }
    dpdk_words(text);
    if let Ok(d) = parse_duration(text) {
        assert_eq!(parse_duration(&d.to_string()), Ok(d), "{text:?} prints back");
    }
    let _ = text.parse::<Rate>();
    let _ = text.parse::<Size>();
    let _ = text.parse::<QueueLimit>();
    if let Ok(p) = text.parse::<Probability>() {
        assert!((0.0..=1.0).contains(&p.get()));
    }
    probe_plan(text);
    // `--run`: what parses is 1 to 4 hex digits, and reads back from the form a sender prints.
    if let Ok(r) = pathem_probe::packet::parse_run(text) {
        assert!((1..=4).contains(&text.len()), "{text:?}");
        assert_eq!(pathem_probe::packet::parse_run(&format!("{r:04x}")), Ok(r), "{text:?}");
    }
}

/// The probe sender's `--rate` and `--pattern`, each tried on the text (a pattern with the
/// text's rate, when both parse): a rate is finite and above 0, and a plan made without
/// `--count` (five seconds) or with a duration sends 1 to 10^10 datagrams or is refused.
fn probe_plan(text: &str) {
    use pathem_probe::session::{Plan, ProbeRate, MAX_COUNT};
    use pathem_probe::Pattern;
    let rate = text.parse::<ProbeRate>();
    if let Ok(ProbeRate::Pps(p)) = rate {
        assert!(p > 0.0 && p.is_finite(), "{text:?}: {p}");
    }
    let pattern = text.parse::<Pattern>().unwrap_or(Pattern::Cbr);
    let rate = rate.unwrap_or(ProbeRate::Pps(1000.0));
    for duration in [None, Some(Nanos::from_secs(86_400))] {
        if let Ok(plan) = Plan::new(pattern, rate, 100, None, duration, 1) {
            assert!((1..=MAX_COUNT).contains(&plan.count), "{text:?}: {} datagrams", plan.count);
        }
    }
}

/// A `dpdk:` device string and `--eal` words: what parses is well-formed, and the EAL's
/// arguments built from it keep the user's words in order and name each PCI port once.
fn dpdk_words(text: &str) {
    use pathem_io::dpdk::{eal_args, parse, split_eal, Device};
    let dev = parse(text);
    if let Ok(d) = &dev {
        match d {
            Device::Pci { addr, .. } => assert_eq!(addr.len(), 12, "{text:?}: {addr}"),
            Device::PortId(id) => assert!(*id <= pathem_io::dpdk::MAX_PORT_ID),
            Device::Vdev { name, devargs } => {
                assert!(name.starts_with("net_") && devargs.starts_with(name.as_str()))
            }
        }
        let written = format!("dpdk:{text}");
        let port: pathem_io::live::PortSpec = written.parse().expect("a device dpdk::parse takes is a port");
        assert_eq!(port.to_string(), written, "a port is written back as given");
        let _ = port.kernel_iface();
    }
    if let Ok(port) = text.parse::<pathem_io::live::PortSpec>() {
        assert_eq!(port.to_string(), text, "a port is written back as given");
    }
    if let Ok(words) = split_eal(text) {
        assert!(words.iter().all(|w| !w.is_empty() && !w.contains(char::is_whitespace)));
        let devices: Vec<Device> = dev.into_iter().collect();
        let plan = eal_args(&words, &devices, 0, 0);
        assert_eq!(plan.args[0], "pathem");
        let at =
            plan.args.windows(words.len().max(1)).position(|w| words.is_empty() || w == words.as_slice());
        assert!(at.is_some(), "{text:?}: the user's words, in order, in {:?}", plan.args);
    }
}

/// A queue discipline that parsed, fed a burst of frames whose sizes, gaps and ECN bits come
/// from the input: every frame is decided exactly once, sent frames leave in order of their
/// service, after they arrived.
fn queue_discipline(aqm: &pathem_model::aqm::AqmConfig, data: &[u8]) {
    // At 10 Mbit/s text's frames leave before the next arrives; at 1 Mbit/s a queue builds
    // and reaches the limits a spec sets (drop-head's and FQ-CoDel's eviction).
    // The second run also gives the link a short queue of 1 to 40 frames, which the
    // discipline must keep to.
    let short = 1 + u64::from(data.first().copied().unwrap_or(0) % 40);
    bottleneck_run(aqm, data, 10_000_000, None);
    bottleneck_run(aqm, data, 1_000_000, Some(short));
}

fn bottleneck_run(aqm: &pathem_model::aqm::AqmConfig, data: &[u8], rate: u64, frames: Option<u64>) {
    use pathem_model::aqm::{Bottleneck, Decision, Entry};
    use pathem_model::units::QueueLimit;
    use pathem_model::Nanos;
    let mut link = pathem_model::link::LinkConfig::rate(pathem_model::units::Rate(rate));
    link.queue = frames.map(QueueLimit::Packets);
    let mut b = Bottleneck::new(aqm, &link, data.len() % 2 == 0);
    let mut rng = Rng::seeded(3);
    let mut decided = vec![0u8; 300];
    let mut last_start = Nanos::ZERO;
    let mut t = Nanos::ZERO;
    let mut take = |d: Decision| match d {
        Decision::Send { entry, start, exit, .. } => {
            assert!(start >= entry.arrival && exit > start && start >= last_start, "{aqm:?}: {d:?}");
            last_start = start;
            decided[entry.seq as usize] += 1;
        }
        Decision::Drop { entry, .. } => decided[entry.seq as usize] += 1,
    };
    for i in 0..300u64 {
        let byte = data.get(i as usize % data.len().max(1)).copied().unwrap_or(0);
        t += Nanos(u64::from(byte) * 20_000);
        b.serve(t, &mut rng, &mut take);
        let len = 64 + u32::from(byte) * 5;
        let e = Entry {
            seq: i,
            arrival: t,
            len,
            caplen: len,
            ecn: byte & 3,
            flow: u32::from(byte % 7),
            marked: false,
        };
        b.enqueue(e, &mut rng, &mut take);
        if let Some(limit) = frames {
            assert!(b.backlog().0 as u64 <= limit, "{aqm:?}: {:?} over {limit} frames", b.backlog());
        }
    }
    b.serve(Nanos::MAX, &mut rng, &mut take);
    assert!(decided.iter().all(|&n| n == 1), "{aqm:?}: every frame decided once");
    assert_eq!(b.backlog(), (0, 0));
}

/// The model specs (`ge:`, `gi:`, police, slot, cell, dist, codel, aqm, skip-delay, netem) and the
/// probe's datagram header; what parses is run through a path.
pub fn specs(data: &[u8]) {
    let _ = pathem_probe::packet::decode(data);
    netem(data);
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = text.parse::<pathem_model::aqm::CodelConfig>() {
        assert!(c.target > pathem_model::Nanos::ZERO && c.target < c.interval, "{text:?}: {c:?}");
    }
    if let Ok(aqm) = text.parse::<pathem_model::aqm::AqmConfig>() {
        queue_discipline(&aqm, data);
    }
    if let Ok(loss) = text.parse::<LossConfig>() {
        let rate = loss.loss_rate();
        assert!(rate.is_nan() || (0.0..=1.0 + 1e-9).contains(&rate), "{text:?}: {rate}");
        let mut l = Loss::new(&loss);
        let mut rng = Rng::seeded(2);
        for _ in 0..64 {
            l.lose(&mut rng);
        }
    }
    if let Ok(p) = text.parse::<PolicerConfig>() {
        exercise(&PathConfig { police: Some(p), ..PathConfig::default() });
    }
    if let Ok(s) = text.parse::<pathem_model::skip::SkipConfig>() {
        let delay = DelayConfig::constant(Nanos::from_millis(1));
        exercise(&PathConfig { skip_delay: Some(s), delay, ..PathConfig::default() });
    }
    if let Ok(s) = text.parse::<SlotConfig>() {
        exercise(&PathConfig { slot: Some(s), ..PathConfig::default() });
    }
    if let Ok(c) = text.parse::<Cell>() {
        exercise(&PathConfig {
            link: Some(LinkConfig { cell: Some(c), ..LinkConfig::rate(Rate(1_000_000)) }),
            ..PathConfig::default()
        });
    }
    if let Ok(d) = text.parse::<Dist>() {
        let delay = DelayConfig {
            base: Nanos::from_millis(1),
            jitter: Nanos::from_millis(1),
            dist: d,
            ..Default::default()
        };
        exercise(&PathConfig { delay, ..PathConfig::default() });
    }
}

/// A netem spec (`--netem "..."`): never a panic; what parses makes its flags, and where they
/// make a path it is run, the flags `explain` prints make the same path, and so does the netem
/// spec `to_netem` writes for it, where NetEm has the words.
pub fn netem(data: &[u8]) {
    use pathem_spec::netem::{explain, to_netem};
    use pathem_spec::{NetemSpec, PathSpec};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(spec) = text.parse::<NetemSpec>() else { return };
    let _ = spec.notes();
    let flags = spec.flags();
    // Tables are files: the fuzzer does not get to name what is read.
    if matches!(flags.delay_dist, Some(pathem_spec::path::DistSpec::Tc(_)))
        || flags.slot.as_ref().is_some_and(|s| s.table.is_some())
    {
        return;
    }
    let Ok(path) = flags.to_config() else { return };
    exercise(&path);
    let explained = explain(text).expect("a spec whose flags make a path is explained");
    let back = PathSpec::from_flags(&explained.flags).expect("explain's flags parse");
    assert_eq!(back.to_config().as_ref(), Ok(&path), "{text:?}: {}", explained.flags);
    let whole = PathSpec { netem: Some(spec), ..PathSpec::default() };
    if let Ok(written) = to_netem(&whole) {
        let again: NetemSpec = written.parse().expect("to_netem's spec parses");
        assert_eq!(again.flags().to_config().as_ref(), Ok(&path), "{text:?} → {written:?}");
    }
}

/// The TOML config file, flag strings with classes, `ctl set` words and the schedule file (`TIME
/// FLAGS` lines, which may name a class `dns`); what parses is turned into
/// paths (files they name are read, and fail).
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(file) = pathem_spec::file::parse(text) {
        for spec in [&file.a_to_b, &file.b_to_a] {
            if let Ok(path) = spec.to_config() {
                exercise(&path);
            }
            // Its classes (`[[a_to_b.class]]`, and the file's `[[class]]` for both).
            classes(&spec.overridden_by(&file.common()));
        }
    }
    // Flags as a direction string or `ctl set` takes them, `--class` pairs included.
    if let Ok(spec) = pathem_spec::PathSpec::from_flags(text) {
        classes(&spec);
    }
    if let Ok(words) = pathem_spec::path::split_words(text) {
        if let Ok(change) = pathem_spec::change::Change::parse(&words) {
            let _ = change.classes(false);
        }
    }
    let base = pathem_spec::PathSpec::default();
    let dns = pathem_spec::PathSpec::default();
    let named = [("dns", &dns)];
    let dir = std::path::Path::new("/nonexistent");
    // `web` is a class of the other direction only: lines naming it are that direction's.
    let elsewhere = ["web".to_string()];
    if let Ok(s) = pathem_spec::schedule::parse_with_classes(text, &base, &named, &elsewhere, dir) {
        if let Ok(schedule) = pathem_spec::schedule::to_schedule(&s, std::path::Path::new("fuzz")) {
            for (_, path) in schedule.steps() {
                exercise(path);
            }
        }
        let _ = pathem_spec::schedule::class_schedules(&s, std::path::Path::new("fuzz"));
    }
}

/// A spec's classes, resolved (names, filters, paths); each path that is made is run.
fn classes(spec: &pathem_spec::PathSpec) {
    if let Ok(classes) = pathem_spec::class::resolve(spec) {
        assert!(classes.len() <= pathem_spec::class::MAX_CLASSES);
        for c in classes {
            exercise(&c.path);
        }
    }
}

/// The trace and table files: loss traces, Mahimahi rate traces, delay traces, delay tables.
pub fn traces(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut rng = Rng::seeded(3);
    if let Ok(t) = LossTrace::parse(text) {
        let mut l = Loss::new(&LossConfig::Trace(Arc::new(t)));
        for _ in 0..64 {
            l.lose(&mut rng);
        }
    }
    if let Ok(t) = RateTrace::parse(text) {
        let mut link = Link::new(LinkConfig {
            server: Server::Trace(Arc::new(t)),
            overhead: 0,
            cell: None,
            queue: None,
        });
        for i in 0..64u64 {
            let exit = link.admit(Nanos::from_secs(1) + Nanos::from_micros(i * 300), 1514);
            assert!(exit.is_some_and(|e| e >= Nanos::from_secs(1)));
        }
    }
    if let Ok(t) = DelayTrace::parse(text) {
        let trace = Arc::new(t);
        let mut d = Delay::new(&DelayConfig { trace: Some(trace), ..Default::default() });
        for i in 0..64u64 {
            d.sample(Nanos::from_millis(i * 977), &mut rng);
        }
    }
    if let Ok(t) = DelayTable::parse(text) {
        let dist = Dist::Table(Arc::new(t));
        let delay = DelayConfig { dist, half_life: Some(Nanos::from_millis(1)), ..Default::default() };
        exercise(&PathConfig { delay, ..PathConfig::default() });
    }
}

/// Bytes as a live port receives them: a virtio-net header and a frame. Whatever they say,
/// the port's offload work never panics; a super-frame is cut whole or not at all, each
/// segment no longer than the headers and one segment size and with a checksum that verifies;
/// a checksum the pseudo-header rule completes verifies afterwards; the engine's header
/// reads and CE mark hold as [`headers`] says.
pub fn offload(data: &[u8]) {
    use pathem_io::offload::{
        checksum_ok, complete_at, complete_if_partial, segment, vnet_request, VnetRequest, MAX_HEADER,
        VNET_HDR_LEN,
    };
    let Some((hdr, frame)) = data.split_first_chunk::<VNET_HDR_LEN>() else { return };
    let mut buf = frame.to_vec();
    match vnet_request(hdr) {
        Ok(VnetRequest::Segment(gso)) => {
            let mut seen = 0;
            let cut = segment(&mut buf, gso, |s| {
                seen += 1;
                assert!(s.len() <= MAX_HEADER + usize::from(gso.size) && s.len() <= frame.len());
                assert_eq!(checksum_ok(s), Some(true), "a segment with a bad checksum");
            });
            match cut {
                Ok(n) => assert_eq!(n, seen),
                Err(_) => assert_eq!(seen, 0, "a refused super-frame was half handed over"),
            }
        }
        Ok(VnetRequest::Checksum { start, offset }) => {
            let _ = complete_at(&mut buf, start.into(), offset.into());
        }
        Ok(VnetRequest::None) | Err(_) => {}
    }
    let mut f = frame.to_vec();
    if complete_if_partial(&mut f) {
        assert_eq!(checksum_ok(&f), Some(true), "a completed checksum that does not verify");
    }
    headers(frame);
}

/// What the engine reads and changes in every frame's headers ([`pathem_model::frame`]): the
/// one-parse ECN codepoint and flow hash agree with the two alone; a CE mark is made exactly
/// on ECN-capable frames, keeps the frame in its flow (FQ-CoDel's queue) and an IPv4 header's
/// checksum as valid as it was (the one's complement sum of the header unchanged, checked
/// here by a parse of its own).
fn headers(frame: &[u8]) {
    use pathem_model::frame::{ecn_and_flow, ecn_capable, ecn_codepoint, flow_hash, mark_ce};
    let (ecn, flow) = (ecn_codepoint(frame), flow_hash(frame));
    assert_eq!(ecn_and_flow(frame), (ecn, flow));
    // The IPv4 header's first 20 bytes behind up to two VLAN tags, as the engine finds it.
    let mut at = 12;
    while matches!(frame.get(at..at + 2), Some([0x81, 0x00] | [0x88, 0xa8])) && at < 20 {
        at += 4;
    }
    let v4 = (frame.get(at..at + 2) == Some(&[0x08, 0x00][..]) && frame.len() >= at + 22).then_some(at + 2);
    let sum = |f: &[u8], ip: usize| {
        let mut s: u32 = f[ip..ip + 20].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s % 0xffff
    };
    let mut marked = frame.to_vec();
    let capable = ecn_capable(frame);
    assert_eq!(mark_ce(&mut marked), capable);
    if !capable {
        assert_eq!(marked, frame, "a frame that is not ECN-capable was changed");
        return;
    }
    assert_eq!(ecn_codepoint(&marked), 0b11);
    assert_eq!(flow_hash(&marked), flow, "a CE mark moved the frame to another flow");
    if let Some(ip) = v4 {
        assert_eq!(sum(&marked, ip), sum(frame, ip), "a CE mark broke the IPv4 header checksum");
    }
}

/// A tcpdump filter: the text up to the first NUL byte is compiled, and what follows is run
/// through the compiled filter as an Ethernet frame (cut at every length, so loads beyond the
/// end are exercised too).
pub fn filter(data: &[u8]) {
    let (text, frame) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let Ok(f) = pathem_filter::Filter::compile(text) else { return };
    assert_eq!(f.to_string(), text);
    if f.is_match_all() {
        assert!(f.matches(frame, 0), "a filter that matches all refused a frame");
    }
    // Compiled together with others, it classifies as trying each in turn does.
    let others = ["host 10.0.0.1", "udp dst port 53", "host 10.0.0.2", "udp dst port 80", "vlan"];
    let mut set: Vec<pathem_filter::Filter> =
        others.iter().map(|t| pathem_filter::Filter::compile(t).expect("a valid filter")).collect();
    set.insert(data.len() % (set.len() + 1), f.clone());
    set.push(f.clone());
    let classifier = pathem_filter::Classifier::new(&set);
    for n in 0..=frame.len().min(200) {
        let len = (frame.len() as u32).wrapping_mul(7);
        let _ = f.matches(&frame[..n], len);
        let first = set.iter().position(|g| g.matches(&frame[..n], len)).map_or(0, |i| i + 1);
        assert_eq!(classifier.classify(&frame[..n], len), first, "{text}");
    }
    let _ = f.matches(frame, u32::MAX);
}

/// Datagrams as the probe's receiver takes them off the wire, 30 bytes each: 20 of datagram
/// (decoded as the receiver does: not the probe's, a sample, or the end marker with the count
/// sent, of any run), 8 of receive stamp, 2 of length; two bytes left over name a run wanted
/// (`recv --run`). Collected as the receiver does, what keeps it waiting, when the run measured has
/// ended and which run that is are the rules' (checked against a plain model of them here),
/// its samples and count kept, the others' foreign. Whatever runs, numbers and stamps they
/// carry, the analysis accounts for every sample once (received, duplicate, a stray numbered
/// past the count sent, or another run's), never counts more lost than sent, and gives rates
/// from 0 to 1.
pub fn probe(data: &[u8]) {
    use pathem_probe::{net::Collector, net::BEGAN_BELOW, packet::decode, session};
    let rest = data.chunks_exact(30).remainder();
    let want = (rest.len() >= 2).then(|| u16::from_be_bytes([rest[0], rest[1]]));
    let mut collector = Collector::new(want, 42);
    // The model: each run as (run, datagrams, seen begin, first end marker's count and place).
    type Model = (Option<u16>, u64, bool, Option<(u64, usize)>);
    let mut runs: Vec<Model> = Vec::new();
    let (mut n, mut ends) = (0u64, 0usize);
    for c in data.chunks_exact(30) {
        let Some(h) = decode(&c[..20]) else { continue };
        let received = Nanos(u64::from_le_bytes(c[20..28].try_into().expect("eight bytes")));
        let len = usize::from(u16::from_le_bytes([c[28], c[29]]));
        let waits = collector.take(h, received, len);
        let i = runs.iter().position(|r| r.0 == h.run).unwrap_or_else(|| {
            runs.push((h.run, 0, false, None));
            runs.len() - 1
        });
        let any_began = runs.iter().any(|r| r.2) || (!h.end && h.seq < BEGAN_BELOW);
        let began = runs[i].2 || (!h.end && h.seq < BEGAN_BELOW);
        let unended = runs[i].3.is_none();
        assert_eq!(waits, want.map_or(unended && (began || !any_began), |w| h.run == Some(w)), "{h:?}");
        if h.end {
            if runs[i].3.is_none() {
                runs[i].3 = Some((h.seq, ends));
                ends += 1;
            }
        } else {
            n += 1;
            runs[i].1 += 1;
            runs[i].2 |= h.seq < BEGAN_BELOW;
        }
    }
    let first_end = |began: bool| {
        runs.iter().filter(|r| r.3.is_some() && (r.2 || !began)).min_by_key(|r| r.3.map(|e| e.1)).map(|r| r.0)
    };
    let ended = match want {
        Some(w) => runs.iter().any(|r| r.0 == Some(w) && r.3.is_some()),
        None => first_end(true).is_some(),
    };
    assert_eq!(collector.ended().is_some(), ended);
    // Most datagrams; of those tied, the first seen (`max_by_key` keeps the last of equals).
    let most = |began: bool| runs.iter().rev().filter(|r| r.2 || !began).max_by_key(|r| r.1).map(|r| r.0);
    let first_end_of_some = runs.iter().filter(|r| r.3.is_some() && r.1 > 0).min_by_key(|r| r.3.map(|e| e.1));
    let measured = match want {
        Some(w) => Some(Some(w)),
        None => {
            first_end(true).or_else(|| most(true)).or(first_end_of_some.map(|r| r.0)).or_else(|| most(false))
        }
    };
    let model = measured.and_then(|m| runs.iter().find(|r| r.0 == m));
    let got = collector.finish();
    assert_eq!(got.run, measured.flatten());
    assert_eq!(got.samples.len() as u64, model.map_or(0, |r| r.1));
    assert_eq!(got.total, model.and_then(|r| r.3).map(|e| e.0));
    assert_eq!(got.foreign, n - got.samples.len() as u64);
    let (sent, expect) = (got.total, Nanos(data.len() as u64 * 1_000));
    match session::conclude(&got, expect, Nanos::from_secs(1), session::Outputs::default()) {
        Err(_) => {
            assert!(got.samples.is_empty(), "an analysis refused {} samples", got.samples.len())
        }
        Ok((s, _)) => {
            assert_eq!(s.received + s.duplicates + s.strays + s.foreign, n);
            assert!(s.lost <= s.sent && s.reordered <= s.received, "{s:?}");
            // A share of gaps kept where there was a pair of consecutive numbers, else unknown.
            let kept = s.gaps_kept_within_2us;
            assert!(
                (0.0..=1.0).contains(&s.loss_rate) && (kept.is_nan() || (0.0..=1.0).contains(&kept)),
                "{s:?}"
            );
            // Delays are known exactly when no datagram arrived before its stamp, never cut.
            let mut seen = std::collections::HashSet::new();
            let firsts = got.samples.iter().filter(|x| x.seq < s.sent && seen.insert(x.seq));
            let early = firsts.filter(|x| x.received < x.sent).count() > 0;
            assert_eq!(s.one_clock, !early, "{s:?}");
            assert_eq!(s.delay_us.min.is_nan(), early || s.received == 0, "{s:?}");
            assert_eq!(s.sent_known, sent.is_some());
        }
    }
}
