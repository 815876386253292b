//! The benchmarks' measuring loops (`pathem bench`): the engine alone on synthetic frames,
//! on one thread or split over two, and live forwarding on a veth bed.
//!
//! The engine runs are what `run` runs, minus the ports: in-memory frames through the real
//! stages with the real clock. The live runs go through [`pathem_runtime::Link`], the very link `run`
//! starts, next to pathem's raw port loop (no engine) and DPDK's own forwarder
//! (`dpdk-testpmd --forward-mode=io`) on the same veths, as references, fed by the kernel's XDP
//! generator (or, where the kernel refuses it, the fastest sender it allows), which is
//! measured in its own row.

use crate::testbed::{bed_ports, exited_within, rx_packets, Bed, Group};
use crate::Error;
use pathem_engine::{
    monotonic_now, run, Clock, EngineConfig, MonotonicClock, Next, Pipeline, QueueReader, Stats, Task,
    DEFAULT_BUSY_POLL,
};
use pathem_io::afpacket::AfPacketTx;
use pathem_io::afxdp::FixedVerdict;
use pathem_io::copygen::{CopyGenerator, COPIES};
use pathem_io::live::{self, LiveRx, LiveTx, PortOptions, PortSpec};
use pathem_io::mem::{udp_frame, MemSink, MemSource, Pace};
use pathem_io::xdpgen::XdpGenerator;
use pathem_io::{RxPort, TxPort};
use pathem_model::rng::direction_seed;
use pathem_model::units::Rate;
use pathem_model::{Nanos, PathConfig};
use pathem_runtime::link::pin;
use pathem_runtime::netns::{enter, ip};
use pathem_runtime::{Link, LinkSpec};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One run with the input and output stages on two pinned threads: wall nanoseconds per frame
/// (both threads spin all the time, so wall time is busy time).
pub fn engine_split(path: &PathConfig, packets: u64, size: usize, seed: u64) -> Result<(f64, Stats), Error> {
    let src = MemSource::new(packets, size, Pace::AsFastAsPossible);
    on_two_cpus(src, Vec::<QueueReader<MemSource>>::new(), path, packets, seed)
}

/// One run as `run --one-way --cores 0,1` on a port with two receive queues: the input on CPU
/// 0 reads half the frames, a queue reader on CPU 1 (beside the output) reads the other half
/// and hands them over ([`pathem_engine::fanin`]). Wall nanoseconds per frame.
pub fn engine_fanned(path: &PathConfig, packets: u64, size: usize, seed: u64) -> Result<(f64, Stats), Error> {
    let own = MemSource::new(packets.div_ceil(2), size, Pace::AsFastAsPossible);
    let other = MemSource::new(packets / 2, size, Pace::AsFastAsPossible);
    let (fanin, readers) = pathem_engine::fan_in(own, vec![other]).map_err(pathem_engine::Error::from)?;
    on_two_cpus(fanin, readers, path, packets, seed)
}

/// `path` from `src` to a sink, its input on CPU 0, its output with `readers` on CPU 1, until
/// the `packets` frames are through: the busier CPU's busy nanoseconds per frame (the two
/// work side by side, so the busier sets the rate; time spent waiting for frames to fall due
/// is left out, as [`engine_alone`] leaves it out), and the counters.
fn on_two_cpus<R: RxPort + Send>(
    src: R,
    mut readers: Vec<impl Task + Send>,
    path: &PathConfig,
    packets: u64,
    seed: u64,
) -> Result<(f64, Stats), Error> {
    let engine = EngineConfig { line_rate: Rate(100_000_000_000), ..EngineConfig::default() };
    let pipe = Pipeline::new(src, MemSink::default(), path, direction_seed(seed, 0), &engine)?;
    let counters = pipe.counters().clone();
    let (mut input, mut output) = pipe.split();
    let stop = AtomicBool::new(false);
    let busy = |clock: &mut MonotonicClock, t0: Nanos| (clock.now() - t0).saturating_sub(clock.idle());
    let (busy_in, busy_out) = std::thread::scope(|s| -> Result<(Nanos, Nanos), Error> {
        let out = s.spawn(|| -> Result<Nanos, Error> {
            pin(1)?;
            let mut tasks: Vec<&mut dyn Task> = readers.iter_mut().map(|r| r as &mut dyn Task).collect();
            tasks.push(&mut output);
            let mut clock = MonotonicClock::new();
            let t0 = clock.now();
            run(&mut tasks, &mut clock, &stop)?;
            Ok(busy(&mut clock, t0))
        });
        pin(0)?;
        let mut clock = MonotonicClock::new();
        let t0 = clock.now();
        run(&mut [&mut input], &mut clock, &stop)?;
        let busy_in = busy(&mut clock, t0);
        Ok((busy_in, out.join().map_err(|_| Error::Panicked("output"))??))
    })?;
    Ok((busy_in.max(busy_out).as_nanos() as f64 / packets as f64, counters.snapshot()))
}

/// One run: busy nanoseconds per offered frame, and the counters.
pub fn engine_alone(path: &PathConfig, packets: u64, size: usize, seed: u64) -> Result<(f64, Stats), Error> {
    engine_with_classes(path, &[], packets, size, seed)
}

/// One run of `path` offered `load` times its bottleneck's mean rate (frames of `size` bytes,
/// on the wire with the link's overhead), in virtual time: arrivals are exactly spaced and
/// come in bursts of 32, and the clock jumps to each next event instead of waiting, so the
/// wall time per frame is the engine's work alone while the queue holds what that load makes
/// it hold (at a load above 1, its limit). Wall nanoseconds per offered frame, and the
/// counters (the same for every run with the same seed).
pub fn engine_offered(
    path: &PathConfig,
    load: f64,
    packets: u64,
    size: usize,
    seed: u64,
) -> Result<(f64, Stats), Error> {
    let link =
        path.link.as_ref().ok_or_else(|| Error::Measure("an offered load needs a bottleneck rate".into()))?;
    let wire_bits = link.wire_len(size as u32).max(1) * 8;
    let pps = (link.mean_rate().bits_per_sec() as f64 * load / wire_bits as f64).round();
    if !(1.0..=1e12).contains(&pps) {
        return Err(Error::Range(pathem_model::limits::RangeError {
            key: "rate",
            value: link.mean_rate().to_string(),
            accepted: format!(
                "a rate that offers 1 to 10^12 frames a second at load {load} (it offers {pps})"
            ),
        }));
    }
    // The run's virtual time must fit the clock (which starts at 1 s), or arrivals would pin
    // at its end: at most 584 years of it.
    let most = u128::from(u64::MAX - 1_000_000_000) * (pps as u128) / 1_000_000_000;
    if u128::from(packets) > most {
        return Err(Error::Range(pathem_model::limits::RangeError {
            key: "packets",
            value: packets.to_string(),
            accepted: format!("at most {most} frames at {pps} frames a second (584 years of virtual time)"),
        }));
    }
    let engine = EngineConfig { line_rate: link.mean_rate(), ..EngineConfig::default() };
    let src = MemSource::new(packets, size, Pace::PerSecond(pps as u64)).in_bursts(32);
    let mut pipe = Pipeline::new(src, MemSink::default(), path, direction_seed(seed, 0), &engine)?;
    let mut clock = pathem_engine::VirtualClock::starting_at(Nanos(1_000_000_000));
    let t0 = std::time::Instant::now();
    run(&mut [&mut pipe], &mut clock, &AtomicBool::new(false))?;
    let wall = t0.elapsed();
    Ok((wall.as_nanos() as f64 / packets as f64, pipe.counters().snapshot()))
}

/// [`engine_alone`] with classes in front of the default path (`bench --classes`).
pub fn engine_with_classes(
    path: &PathConfig,
    classes: &[pathem_engine::ClassConfig],
    packets: u64,
    size: usize,
    seed: u64,
) -> Result<(f64, Stats), Error> {
    // The in-memory source is as fast as the engine: size the delay line for a fast line.
    let engine = EngineConfig { line_rate: Rate(100_000_000_000), ..EngineConfig::default() };
    let src = MemSource::new(packets, size, Pace::AsFastAsPossible);
    let mut pipe =
        Pipeline::with_classes(src, MemSink::default(), path, classes, direction_seed(seed, 0), &engine)?;
    let mut clock = MonotonicClock::new();
    let t0 = clock.now();
    run(&mut [&mut pipe], &mut clock, &AtomicBool::new(false))?;
    let busy = (clock.now() - t0).saturating_sub(clock.idle());
    Ok((busy.as_nanos() as f64 / packets as f64, pipe.counters().snapshot()))
}

/// The median (the mean of the middle two for an even count).
/// What the ports' offload work costs per frame, in ns (see [`offload_costs`]).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct OffloadCosts {
    /// Frame size (Ethernet header to the end of the payload).
    pub size: usize,
    /// The copy every frame costs anyway (into the delay line): the old path.
    pub copy_ns: f64,
    /// The copy plus the pseudo-header rule on a frame whose checksum is complete: what every
    /// AF_XDP and DPDK frame pays now.
    pub check_ns: f64,
    /// The copy plus completing a partial checksum (AF_XDP, DPDK, AF_PACKET outside GSO).
    pub complete_ns: f64,
    /// The copy plus cutting a 64 KB TCP super-frame into frames of this size, per frame.
    pub segment_ns: f64,
}

/// Times the per-frame work of [`pathem_io::offload`] on frames of `size` bytes, `frames`
/// times each, next to the copy every frame costs anyway.
pub fn offload_costs(size: usize, frames: u64) -> OffloadCosts {
    use pathem_io::offload::{example_tcp4, leave_partial, segment, Gso, GsoKind};
    use std::hint::black_box;
    let payload = size.saturating_sub(54).max(1);
    let complete = example_tcp4(payload, false);
    let mut partial = complete.clone();
    leave_partial(&mut partial);
    let mut line = vec![0u8; complete.len()];
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        for _ in 0..frames {
            f();
        }
        start.elapsed().as_nanos() as f64 / frames as f64
    };
    let copy_ns = time(&mut || line.copy_from_slice(black_box(&complete)));
    let mut frame = complete.clone();
    let check_ns = time(&mut || {
        black_box(pathem_io::offload::complete_if_partial(black_box(&mut frame)));
        line.copy_from_slice(&frame);
    });
    let mut frame = partial.clone();
    let complete_ns = time(&mut || {
        frame.copy_from_slice(&partial);
        black_box(pathem_io::offload::complete_if_partial(black_box(&mut frame)));
        line.copy_from_slice(&frame);
    });
    // A super-frame as large as a GSO frame gets, cut into frames of `size`.
    let mss = payload as u16;
    let big = example_tcp4((65_535 - 40) / payload * payload, false);
    let mut buf = big.clone();
    let per_super = big.len().div_ceil(payload) as u64;
    let rounds = (frames / per_super).max(1);
    let start = std::time::Instant::now();
    let mut cut = 0u64;
    for _ in 0..rounds {
        buf.copy_from_slice(&big);
        let gso = Gso { kind: GsoKind::TcpV4, size: mss };
        cut += segment(black_box(&mut buf), gso, |s| line[..s.len()].copy_from_slice(s)).unwrap_or(0) as u64;
    }
    let segment_ns = start.elapsed().as_nanos() as f64 / cut.max(1) as f64;
    OffloadCosts { size, copy_ns, check_ns, complete_ns, segment_ns }
}

/// The median of `v` (NaN for none: a median of no rounds is no figure, not a zero).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

// ---- live ---------------------------------------------------------------------------------

/// pathem's port loop without the engine: what the port type alone can forward.
struct Bypass {
    rx: LiveRx,
    tx: LiveTx,
}

impl Task for Bypass {
    fn poll(&mut self, now: Nanos) -> Result<Next, pathem_engine::Error> {
        let tx = &mut self.tx;
        self.rx.recv_burst(now, 64, |f| {
            if !tx.send(now, f.wire_len, f.data) {
                let _ = tx.flush();
                tx.send(now, f.wire_len, f.data);
            }
        })?;
        self.tx.flush()?;
        Ok(match self.rx.poll_at() {
            pathem_io::PollAt::Now => Next::Now,
            _ => Next::Soon,
        })
    }
}

/// Where the live runs place the generator and the forwarder (pathem's thread, testpmd's
/// forwarding lcore), so that every run of a round shares the machine the same way.
const GENERATOR_CPU: usize = 0;
const FORWARDER_CPU: usize = 1;

/// The forwarder of one run: pathem's raw port loop, the runtime's link, or testpmd.
enum Forwarder {
    /// Nothing: the plain interface, an attach's floor.
    None,
    /// Nothing but a program dropping every frame on `pa`: the generator's own row.
    Sink {
        _drops: FixedVerdict,
    },
    Raw(std::thread::JoinHandle<Result<(), Error>>, Arc<AtomicBool>),
    Link(Box<Link>),
    /// Stopped (and its group killed) when dropped, also on an error's way out.
    Testpmd(Group),
}

/// Starts `dpdk-testpmd` in `ns`, forwarding between the virtual devices `a` and `b` (DPDK
/// device strings, `net_af_packet0,iface=pa`) in io mode (no copy, no change), on two lcores:
/// its main one, mostly asleep, and one forwarding lcore that polls, as pathem's one thread
/// does. Returns once it forwards.
fn testpmd(ns: &str, a: &str, b: &str) -> Result<Group, Error> {
    let mut group = Group::spawn(
        Command::new("ip")
            // Line-buffered: to a pipe, testpmd's C stdio holds the line that says it forwards
            // until 4 KiB have gathered or it exits (coreutils' stdbuf sets the mode at exec).
            .args(["netns", "exec", ns, "stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "1024"])
            .args(["--no-shconf", "--no-pci"])
            .args(["-l", "0-1", "--log-level=warning", "--no-telemetry", "--vdev", a, "--vdev", b])
            .args([
                "--",
                "--forward-mode=io",
                "--auto-start",
                "--stats-period",
                "3600",
                "--total-num-mbufs",
                "8192",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|source| Error::Tool { tool: "dpdk-testpmd", package: "dpdk", source })?;
    let child = &mut group.0;
    let out = child.stdout.take().ok_or_else(|| Error::Measure("dpdk-testpmd: no output".into()))?;
    let err = child.stderr.take().ok_or_else(|| Error::Measure("dpdk-testpmd: no output".into()))?;
    // Its last complaint, for the error if it never forwards (DPDK logs to stderr).
    let said = std::thread::spawn(move || {
        let mut last = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if !line.trim().is_empty() {
                last = line;
            }
        }
        last
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("packet forwarding - ports=") {
                let _ = tx.send(());
            }
        }
    });
    if let Err(e) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
        // Its output closed: it ended (or is ending) without forwarding.
        let status = match e {
            std::sync::mpsc::RecvTimeoutError::Disconnected => exited_within(child, 40),
            std::sync::mpsc::RecvTimeoutError::Timeout => None,
        };
        group.stop();
        // Stopped, its stderr is closed: the thread has its last line.
        let last = said.join().unwrap_or_default();
        let last = if last.is_empty() { "nothing on stderr".to_string() } else { format!("it said: {last}") };
        return Err(Error::Measure(match status {
            Some(status) => format!("dpdk-testpmd ended ({status}) before it forwarded; {last}"),
            None => format!("dpdk-testpmd did not start forwarding within 20 s; {last}"),
        }));
    }
    Ok(group)
}

/// Whether `dpdk-testpmd` is on the PATH.
pub fn testpmd_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("dpdk-testpmd").is_file()))
}

impl Forwarder {
    fn start(bed: &Bed, kind: &str, mode: &str, path: &PathConfig) -> Result<Forwarder, Error> {
        let split = mode == "split";
        let ports = PortOptions { max_frame: 2048, ..PortOptions::default() };
        let engine =
            EngineConfig { max_frame: 2048, busy_poll: DEFAULT_BUSY_POLL, ..EngineConfig::default() };
        if kind == "attach" {
            if mode == "plain" {
                return Ok(Forwarder::None);
            }
            // `pathem attach g0` in the generator's namespace, egress only, on the forwarder's CPU.
            let spec = LinkSpec {
                a: PortSpec::Auto("g0".into()),
                b: PortSpec::Auto("g0".into()),
                ab: path.clone(),
                ba: PathConfig::default(),
                classes_ab: Vec::new(),
                classes_ba: Vec::new(),
                one_way: false,
                seed: 1,
                engine,
                ports,
                cores: vec![FORWARDER_CPU],
                netns: Some(bed.gen.clone()),
                keep_offloads: true,
                schedule_ab: None,
                schedule_ba: None,
                attach: Some(pathem_io::attach::AttachSpec {
                    iface: "g0".into(),
                    egress: true,
                    ingress: false,
                    mark: pathem_io::attach::DEFAULT_MARK,
                }),
            };
            return Ok(Forwarder::Link(Box::new(Link::start(spec)?)));
        }
        let ((a, b), mid) = (bed_ports(kind)?, bed.mid().to_string());
        if mode == "generator" {
            return Ok(Forwarder::Sink { _drops: in_netns(&mid, || pathem_io::afxdp::drop_all("pa"))? });
        }
        if mode == "testpmd" {
            let (a, b) = reference_vdevs(kind);
            return Ok(Forwarder::Testpmd(testpmd(&mid, a, b)?));
        }
        if mode != "bypass" {
            let spec = LinkSpec {
                a,
                b,
                ab: path.clone(),
                ba: PathConfig::default(),
                classes_ab: Vec::new(),
                classes_ba: Vec::new(),
                // Split: a→b's input and output on CPUs 0 and 1, as `run --one-way --cores 0,1`.
                one_way: split,
                seed: 1,
                engine,
                ports,
                // Otherwise one thread on CPU 1, as testpmd's forwarding lcore; the generator has CPU 0.
                cores: if split { vec![0, 1] } else { vec![FORWARDER_CPU] },
                netns: Some(mid),
                keep_offloads: false,
                schedule_ab: None,
                schedule_ba: None,
                attach: None,
            };
            return Ok(Forwarder::Link(Box::new(Link::start(spec)?)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let stop2 = stop.clone();
        let fwd = std::thread::spawn(move || -> Result<(), Error> {
            enter(&mid)?;
            pin(FORWARDER_CPU)?;
            live::prepare(&[&a, &b], &ports)?;
            let a = live::open(&a, &ports, &ports.tx_timing_a)?;
            let b = live::open(&b, &ports, &ports.tx_timing_b)?;
            let mut clock = MonotonicClock::for_ports(a.rx.raw_fds());
            let _ = ready_tx.send(());
            let mut t = Bypass { rx: a.rx, tx: b.tx };
            run(&mut [&mut t], &mut clock, &stop2)?;
            Ok(())
        });
        if ready_rx.recv().is_err() {
            fwd.join().map_err(|_| Error::Panicked("forwarder"))??;
            return Err(Error::Measure("the forwarder ended before it was ready".into()));
        }
        Ok(Forwarder::Raw(fwd, stop))
    }

    fn stop(self) -> Result<(), Error> {
        match self {
            Forwarder::None | Forwarder::Sink { .. } => Ok(()),
            Forwarder::Raw(h, stop) => {
                stop.store(true, Ordering::Relaxed);
                h.join().map_err(|_| Error::Panicked("forwarder"))?
            }
            Forwarder::Link(l) => Ok(l.stop().map(|_| ())?),
            Forwarder::Testpmd(g) => {
                g.stop();
                Ok(())
            }
        }
    }
}

/// testpmd's virtual devices for a kind's reference: DPDK's driver for the same kind of
/// socket on the same veths (`net_af_packet` also for pathem's DPDK port, which uses it).
fn reference_vdevs(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "afxdp" => ("net_af_xdp0,iface=pa", "net_af_xdp1,iface=pb"),
        _ => ("net_af_packet0,iface=pa,framecnt=2048", "net_af_packet1,iface=pb,framecnt=2048"),
    }
}

/// Runs `f` on a thread in the network namespace `ns` (an XDP program attached there stays
/// attached for as long as its handle lives, wherever that goes).
pub(crate) fn in_netns<T: Send>(
    ns: &str,
    f: impl FnOnce() -> Result<T, pathem_io::Error> + Send,
) -> Result<T, Error> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            Ok(f()?)
        })
        .join()
        .map_err(|_| Error::Panicked("namespace helper"))?
    })
}

/// How a kind's runs see the bed: the generator's frames reach `pa` through its peer's
/// `ndo_xdp_xmit`, which a veth takes only where it polls with NAPI, as it does with an XDP
/// program attached. AF_XDP ports (pathem's, testpmd's `net_af_xdp`) attach their own; for
/// the kinds on packet sockets the bench attaches one that passes every frame on (to the
/// stack, where the packet sockets see them, as from a NIC's driver).
fn napi_for(bed: &Bed, kind: &str, mode: &str) -> Result<Option<FixedVerdict>, Error> {
    match (kind, mode) {
        ("afpacket" | "dpdk", m) if m != "generator" => {
            Ok(Some(in_netns(bed.mid(), || pathem_io::afxdp::pass_through("pa"))?))
        }
        _ => Ok(None),
    }
}

/// What one run of the live benchmark measured, in Mpps.
#[derive(Clone, Copy, Debug)]
pub struct LiveRun {
    /// Frames that reached the forwarder's receiving interface (`pa`), or for an attach those
    /// the sender handed to `g0`.
    pub offered: f64,
    /// Frames that reached the sink.
    pub forwarded: f64,
}

/// What floods g0 in `bench --live` (an attach aside, which forwards what g0's own stack
/// sends), fastest first: [`choose_sender`] takes the first this kernel allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Sender {
    /// The kernel's own generator ([`XdpGenerator`]): an XDP program sending one frame again
    /// and again from g0, without a socket buffer, socket or system call per frame.
    #[serde(rename = "xdp-live-frames")]
    XdpLiveFrames,
    /// A packet socket on f0, a veth in the generator's namespace, whose every frame an XDP
    /// program on its peer f1 sends out of g0 [`COPIES`] times ([`CopyGenerator`]): no socket
    /// buffer or system call per copy, a page and a copy of the frame each.
    #[serde(rename = "xdp-copies")]
    XdpCopies,
    /// A packet socket on g0 handing the kernel UDP super-frames ([`pathem_io::mem::udp_gso_super_frame`]),
    /// which it cuts into the frames: a system call and a socket's path per 64 frames, a
    /// socket buffer per frame. Their checksums are completed on g0 (its transmit checksum
    /// offload off while it sends), so they reach pa complete, as the XDP generator's do.
    #[serde(rename = "udp-gso")]
    UdpGso,
    /// An AF_XDP socket's transmit ring on g0: on a veth (copy mode) the kernel builds a
    /// socket buffer for each frame, one system call a burst.
    #[serde(rename = "af_xdp")]
    AfXdp,
    /// A packet socket on g0 sending straight to the driver (`PACKET_QDISC_BYPASS`), one
    /// system call a burst.
    #[serde(rename = "af_packet")]
    AfPacket,
}

impl Sender {
    /// How the notes of `bench --live` describe it.
    pub fn describe(self) -> &'static str {
        match self {
            Sender::XdpLiveFrames => "the kernel's XDP generator on g0 (BPF_PROG_TEST_RUN, live frames)",
            Sender::XdpCopies => {
                "a packet socket on f0 whose every frame an XDP program on its peer f1 sends out of g0 64 times"
            }
            Sender::UdpGso => {
                "UDP super-frames of up to 64 frames through a packet socket on g0, cut by the kernel"
            }
            Sender::AfXdp => "an AF_XDP socket's transmit ring on g0 (copy mode: a socket buffer a frame)",
            Sender::AfPacket => "a packet socket on g0, past its qdisc (PACKET_QDISC_BYPASS)",
        }
    }
}

/// The sender `bench --live` uses on a bed, and why each faster one was passed over.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SenderChoice {
    pub sender: Sender,
    /// One line for each faster sender this kernel refused, with its error.
    pub passed_over: Vec<String>,
}

/// Tries each [`Sender`], fastest first, in the bed's generator namespace, and keeps the first
/// that sends: the XDP generator's live-frames mode is refused by some kernels (EPERM from
/// `BPF_PROG_TEST_RUN` on some 6.18 builds, where the same call without live frames runs).
/// To try, the XDP generator sends one frame, the copies are put in place (on a kernel with
/// XDP broadcast: an older one would load the program and abort every frame) and the
/// super-frames send one super-frame (what reaches `pa` does so before any run counts there).
pub fn choose_sender(bed: &Bed) -> Result<SenderChoice, Error> {
    let g = bed.gen.clone();
    std::thread::spawn(move || -> Result<SenderChoice, Error> {
        enter(&g)?;
        let frame = udp_frame(64, 0);
        let mut passed_over = Vec::new();
        let xdp = XdpGenerator::open("g0", &frame)
            .map_err(|e| e.to_string())
            .and_then(|mut x| x.send(1).map_err(|e| format!("BPF_PROG_TEST_RUN with live frames: {e}")));
        match xdp {
            Ok(()) => return Ok(SenderChoice { sender: Sender::XdpLiveFrames, passed_over }),
            Err(e) => passed_over.push(format!("the kernel's XDP generator: {e}")),
        }
        match copies() {
            Ok(_) => return Ok(SenderChoice { sender: Sender::XdpCopies, passed_over }),
            Err(e) => passed_over.push(format!("XDP copies: {e}")),
        }
        match send_super_frames("g0", 64, None) {
            Ok(()) => return Ok(SenderChoice { sender: Sender::UdpGso, passed_over }),
            Err(e) => passed_over.push(format!("UDP super-frames: {e}")),
        }
        match pathem_io::afxdp::open("g0") {
            Ok(_) => return Ok(SenderChoice { sender: Sender::AfXdp, passed_over }),
            Err(e) => passed_over.push(format!("an AF_XDP socket: {e}")),
        }
        match AfPacketTx::open("g0", 2048) {
            Ok(_) => Ok(SenderChoice { sender: Sender::AfPacket, passed_over }),
            Err(e) => {
                passed_over.push(format!("a packet socket: {e}"));
                Err(Error::Measure(format!("no sender works on g0: {}", passed_over.join("; "))))
            }
        }
    })
    .join()
    .map_err(|_| Error::Panicked("sender choice"))?
}

// The copying sender's description gives the number.
const _: () = assert!(COPIES == 64);

/// The interface a copying sender writes into, in the generator's namespace ([`feed`]).
pub const FEED: &str = "f0";
/// Its peer, whose XDP program sends each frame out of g0 [`COPIES`] times.
pub const FEED_PEER: &str = "f1";

/// Makes the veth pair [`FEED`] — [`FEED_PEER`] in the calling thread's network namespace (the
/// generator's) unless it is there, and brings both ends up; the pair goes with the
/// namespace. IPv6 is off on both ends (where the kernel has it), so nothing but the sender's
/// frames crosses: no neighbour discovery of their own to be copied 64 times onto the path.
/// Each step is done again on a second call, so one that failed halfway is finished then.
pub fn feed() -> Result<(), pathem_io::Error> {
    let fail = |reason: String| pathem_io::Error::Interface { name: FEED.into(), reason };
    let run = |args: &[&str]| ip(args).map_err(|e| fail(e.to_string()));
    if pathem_io::iface::check_exists(FEED).is_err() {
        run(&["link", "add", FEED, "type", "veth", "peer", "name", FEED_PEER])?;
    }
    for dev in [FEED, FEED_PEER] {
        match std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1") {
            // No such entry: a kernel without IPv6 (`ipv6.disable=1`), nothing to turn off.
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(format!("cannot turn IPv6 off on {dev}: {e}"))),
        }
        run(&["link", "set", dev, "up"])?;
    }
    Ok(())
}

/// The copying sender in place in the calling thread's namespace (the generator's): the pair
/// ([`feed`]) and the program on [`FEED_PEER`] sending to g0.
fn copies() -> Result<CopyGenerator, pathem_io::Error> {
    feed()?;
    CopyGenerator::attach(FEED_PEER, "g0")
}

/// Frames in one UDP super-frame: 64, the most every kernel with UDP GSO takes (128 from 6.x).
const SUPER_FRAME: usize = 64;

/// Sends UDP super-frames of [`SUPER_FRAME`] frames of `size` bytes (fewer where 64 would pass
/// 65 535 bytes) out of `ifname` until `end`, or one if `end` is `None`, with the interface's
/// transmit checksum offload off meanwhile (on again after, as the kernel's default is).
fn send_super_frames(ifname: &str, size: usize, end: Option<Nanos>) -> Result<(), Error> {
    let payload = size.saturating_sub(42).max(1);
    let segments = SUPER_FRAME.min(65_000 / payload);
    let sup = pathem_io::mem::udp_gso_super_frame(size, segments)
        .ok_or_else(|| Error::Measure(format!("no UDP super-frame of {size}-byte frames")))?;
    let sock = pathem_io::afpacket::RawSocket::open(ifname, true)?;
    let offload = |on| {
        pathem_io::iface::set_tx_checksum(ifname, on)
            .map_err(|e| Error::Measure(format!("{ifname}: transmit checksum offload: {e}")))
    };
    offload(false)?;
    let sent = (|| loop {
        use nix::errno::Errno;
        match sock.send(&sup).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0))) {
            // The socket's send buffer or the device's queue is full: the socket works and the
            // flood goes on (a try sends once, so a queue that stays full cannot hold it).
            Ok(()) | Err(Errno::EAGAIN | Errno::ENOBUFS | Errno::EINTR) => {}
            Err(e) => return Err(Error::Measure(format!("a UDP super-frame on {ifname}: {e}"))),
        }
        if end.is_none_or(|end| monotonic_now() >= end) {
            return Ok(());
        }
    })();
    offload(true)?;
    sent
}

/// Sends `frame` through `tx` until `end`, in bursts of 64; returns the frames it took.
fn flood(tx: &mut impl TxPort, frame: &[u8], end: Nanos) -> Result<u64, Error> {
    let len = frame.len() as u32;
    let mut taken = 0u64;
    while monotonic_now() < end {
        for _ in 0..64 {
            if !tx.send(Nanos::ZERO, len, frame) {
                break;
            }
            taken += 1;
        }
        tx.flush()?;
    }
    Ok(taken)
}

/// One run of the live benchmark: `sender` floods g0 with frames of `size` for `secs`,
/// pathem forwards pa → pb in `mode` (`generator`: nothing forwards, a program drops every
/// frame on pa, what the generator offers; `bypass`: pathem's port loop without the engine,
/// the raw rate of the port type; `engine`/`impaired`: the runtime's link, as `run`; `split`:
/// one way, its input and output stages on CPUs 0 and 1; `testpmd`: DPDK's own forwarder on
/// the same veths through DPDK's driver for the same kind of socket).
///
/// An attach forwards what g0's own stack sends, so for it the sender is always a packet
/// socket on g0 going through g0's queueing discipline and tc programs, where pathem attaches.
pub fn live_run(
    bed: &Bed,
    kind: &str,
    size: usize,
    mode: &'static str,
    path: &PathConfig,
    secs: f64,
    sender: Sender,
) -> Result<LiveRun, Error> {
    let napi = napi_for(bed, kind, mode)?;
    let fwd = Forwarder::start(bed, kind, mode, path)?;
    // An attach forwards g0's egress: its frames are counted where they arrive, on pa.
    let attach = kind == "attach";
    let (ns, dev) = if attach { (bed.mid(), "pa") } else { (bed.sink.as_str(), "s0") };
    let (before, offered_before) = (rx_packets(ns, dev)?, rx_packets(bed.mid(), "pa")?);
    let g = bed.gen.clone();
    let gen = std::thread::spawn(move || -> Result<(u64, f64), Error> {
        enter(&g)?;
        pin(GENERATOR_CPU)?;
        let frame = udp_frame(size, 0);
        // The copies' pair and program are made before the clock starts: what they take to
        // set up is not the sender's time.
        let mut copies = match sender {
            Sender::XdpCopies => Some((copies()?, AfPacketTx::open(FEED, 2048)?)),
            _ => None,
        };
        let start = monotonic_now();
        let end = start + Nanos((secs * 1e9) as u64);
        let took = || (monotonic_now() - start).as_secs_f64();
        if attach {
            // Through g0's qdisc and tc programs, as the stack's frames go, where pathem attaches.
            let mut tx = AfPacketTx::open_marked("g0", 2048, 0)?;
            let taken = flood(&mut tx, &frame, end)?;
            return Ok((taken.saturating_sub(tx.refused(true).total() + tx.queued() as u64), took()));
        }
        match sender {
            Sender::XdpLiveFrames => {
                let mut xdp = XdpGenerator::open("g0", &frame)?;
                // A call sets up a page pool (tens of milliseconds here): a million frames each.
                while monotonic_now() < end {
                    xdp.send(1 << 20).map_err(|e| Error::Measure(format!("the XDP generator: {e}")))?;
                }
            }
            Sender::XdpCopies => {
                if let Some((_program, tx)) = copies.as_mut() {
                    _ = flood(tx, &frame, end)?;
                }
            }
            Sender::UdpGso => send_super_frames("g0", size, Some(end))?,
            Sender::AfXdp => _ = flood(&mut pathem_io::afxdp::open("g0")?.1, &frame, end)?,
            Sender::AfPacket => _ = flood(&mut AfPacketTx::open("g0", 2048)?, &frame, end)?,
        }
        Ok((0, took()))
    });
    let (sent, took) = gen.join().map_err(|_| Error::Panicked("generator"))??;
    std::thread::sleep(std::time::Duration::from_millis(50));
    let got = rx_packets(ns, dev)? - before;
    let offered = if attach { sent } else { rx_packets(bed.mid(), "pa")? - offered_before };
    fwd.stop()?;
    drop(napi);
    Ok(LiveRun { offered: offered as f64 / took / 1e6, forwarded: got as f64 / took / 1e6 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_offered_load_fills_the_queue_as_it_should_and_is_repeatable() {
        let path = |aqm: &str| {
            crate::rounds::with_one_limit(&pathem_model::PathConfig {
                link: Some(pathem_model::link::LinkConfig::rate(pathem_model::units::Rate(1_000_000_000))),
                aqm: aqm.parse().unwrap(),
                ..Default::default()
            })
        };
        let n = 30_000;
        for aqm in ["droptail", "drophead", "codel", "fq-codel"] {
            let (_, under) = super::engine_offered(&path(aqm), 0.95, n, 64, 1).unwrap();
            assert_eq!((under.tx_packets, under.dropped.total()), (n, 0), "{aqm} at 95%");
            let (_, over) = super::engine_offered(&path(aqm), 1.5, n, 64, 1).unwrap();
            let dropped = over.dropped.total();
            assert_eq!(over.tx_packets + dropped, n, "{aqm}: every frame sent or dropped");
            // A third of what is offered above the rate, less the 1000 frames the queue holds.
            let want = (n as f64 / 3.0 - 1000.0) as u64;
            assert!(dropped.abs_diff(want) < 100, "{aqm} at 150% dropped {dropped}, not about {want}");
            let (_, again) = super::engine_offered(&path(aqm), 1.5, n, 64, 1).unwrap();
            assert_eq!(
                (again.tx_packets, again.dropped.total()),
                (over.tx_packets, dropped),
                "{aqm} repeats"
            );
        }
        assert!(super::engine_offered(&pathem_model::PathConfig::default(), 1.0, 10, 64, 1).is_err());
    }

    #[test]
    fn an_offered_load_the_clock_cannot_hold_is_refused_as_out_of_range() {
        let at = |bits| pathem_model::PathConfig {
            link: Some(pathem_model::link::LinkConfig::rate(pathem_model::units::Rate(bits))),
            ..Default::default()
        };
        // 64-byte frames at 1000 bit/s: one frame a second, so 10^12 of them span 31 700 years.
        let e = super::engine_offered(&at(1000), 0.95, 1_000_000_000_000, 64, 1).unwrap_err();
        assert!(e.is_usage() && e.to_string().starts_with("--packets 1000000000000 is out of range"), "{e}");
        // Less than a frame a second.
        let e = super::engine_offered(&at(100), 0.95, 10, 64, 1).unwrap_err();
        assert!(e.is_usage() && e.to_string().starts_with("--rate "), "{e}");
    }

    #[test]
    fn median_odd_even() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&[]).is_nan(), "no rounds, no figure");
    }
}
