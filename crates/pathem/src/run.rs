//! `pathem run`: live emulation between two interfaces, both directions.
//!
//! Frames received on A leave on B through the a→b path, and back through the b→a path.
//! Each direction is a pipeline with its own sockets, seed and counters. On one or two cores
//! one thread runs both directions; with `--cores` naming two CPUs each direction gets its
//! own pinned thread. SIGINT or SIGTERM stops receiving, sends what is due, reports what was
//! still in flight, and puts the interfaces' offloads back.

use crate::config::{self, ConfigFile};
use crate::netns::live_clock;
use crate::spec::PathSpec;
use crate::usage;
use anyhow::Context;
use clap::{Args, Parser};
use pathem_engine::{delay_line_sizing, monotonic_now, run, EngineConfig, Pipeline, Stats};
use pathem_io::iface::{self, SavedOffloads};
use pathem_io::live::{self, LiveRx, LiveTx, PortOptions};
use pathem_model::rng::direction_seed;
use pathem_model::units::{Duration, Size};
use pathem_model::PathConfig;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// First port: afxdp:IF, afpacket:IF, or a bare interface name (AF_XDP where it works).
    #[arg(value_name = "PORT_A")]
    pub port_a: String,
    /// Second port: afxdp:IF, afpacket:IF, or a bare interface name.
    #[arg(value_name = "PORT_B")]
    pub port_b: String,
    /// Impairments for both directions; --a-to-b / --b-to-a override them per direction.
    #[command(flatten)]
    pub path: PathSpec,
    /// Impairment flags for frames from A to B only, in one string: --a-to-b "--delay 10ms --loss 1%".
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub a_to_b: Option<String>,
    /// Impairment flags for frames from B to A only.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub b_to_a: Option<String>,
    /// TOML file with [a_to_b] and [b_to_a] tables; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// CPUs to run on, e.g. 1 or 0,1: one CPU runs both directions on one thread, two give
    /// each direction its own pinned thread [default: one unpinned thread].
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,
    /// Seed of the random models; printed when not given.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Forward only from A to B (frames arriving on B are not forwarded).
    #[arg(long)]
    pub one_way: bool,
    /// Print the counters every DUR on stderr (e.g. 1s).
    #[arg(long, value_name = "DUR")]
    pub stats_interval: Option<Duration>,
    /// Counters as JSON lines (periodic and final) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Leave GRO/LRO/TSO/GSO as they are (frames may then be aggregated before pathem sees them).
    #[arg(long)]
    pub keep_offloads: bool,
    /// Stop by itself after DUR.
    #[arg(long, value_name = "DUR")]
    pub duration: Option<Duration>,
    /// Delay line size per direction [default: rate × max delay + queue, at least 4 MiB].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub buffer: Option<Size>,
    /// Keep polling, without sleeping, for this long after each frame (0ms: sleep whenever
    /// nothing is due). Waking from a sleep delays the frame that woke pathem by the host's
    /// wake-up latency (tens of µs on a virtual machine); polling costs CPU while traffic flows.
    #[arg(long, value_name = "DUR", default_value = "1ms")]
    pub busy_poll: Duration,
    /// Longest frame carried, 1 to 65536 bytes; longer ones are dropped and counted as `oversize`.
    #[arg(long, value_name = "BYTES", default_value_t = 9216)]
    pub max_frame: usize,
    /// Receive buffer of each AF_PACKET port, 64KiB to 1GiB: frames beyond it are dropped by
    /// the kernel and counted as port drops, rather than waiting unseen in a long buffer.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub rx_buffer: Size,
}

/// How long live loops keep polling after a frame, unless told otherwise (`--busy-poll`).
pub const BUSY_POLL: pathem_model::Nanos = pathem_model::Nanos::from_millis(1);

/// One direction's flags given as a single string.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct DirectionFlags {
    #[command(flatten)]
    path: PathSpec,
}

pub fn direction_spec(flag: &str, text: &Option<String>) -> anyhow::Result<PathSpec> {
    let Some(text) = text else { return Ok(PathSpec::default()) };
    let words: Vec<&str> = text.split_whitespace().collect();
    DirectionFlags::try_parse_from(&words).map(|d| d.path).map_err(|e| {
        let rendered = e.render().to_string();
        let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("bad flags");
        usage(format!("--{flag} \"{text}\": {}", line.trim_start_matches("error: ")))
    })
}

/// Checks a port named on the command line: its type, and that the interface exists and is up.
fn port_name(spec: &str) -> anyhow::Result<String> {
    let (_, name) = live::parse(spec).map_err(usage)?;
    iface::check_exists(name).map_err(usage)?;
    if !iface::is_up(name) {
        return Err(usage(format!("interface {name} is down; bring it up with `ip link set {name} up`")));
    }
    Ok(spec.to_string())
}

#[derive(Serialize)]
struct Report<'a> {
    event: &'a str,
    seconds: f64,
    a_to_b: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    b_to_a: Option<Stats>,
}

fn line(name: &str, s: &Stats) -> String {
    let d = &s.dropped;
    format!(
        "{name}: port drops {} rx {} tx {} (in port {}) dropped {} (loss {}, queue {}, police {}, ber {}, delay_line {}, oversize {}) dup {} corrupt {} ecn {} clamped {} in-flight {}; late p50 {:.1} p99.9 {:.1} max {:.1} us",
        s.port_rx_dropped,
        s.rx_packets,
        s.tx_packets,
        s.port_tx_queued,
        d.total(),
        d.loss,
        d.queue,
        d.police,
        d.ber,
        d.delay_line,
        d.oversize,
        s.duplicated,
        s.corrupted,
        s.ecn_marked,
        s.reorder_clamped,
        s.in_flight,
        s.late.p50_ns as f64 / 1e3,
        s.late.p99_9_ns as f64 / 1e3,
        s.late.max_ns as f64 / 1e3
    )
}

type LivePipe = Pipeline<LiveRx, LiveTx>;

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> anyhow::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|_| usage(format!("--cores: no CPU {cpu}")))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| usage(format!("--cores: cannot pin to CPU {cpu} ({e})")))
}

pub fn parse_cores(text: &Option<String>) -> anyhow::Result<Vec<usize>> {
    let Some(t) = text else { return Ok(Vec::new()) };
    let cores: Result<Vec<usize>, _> = t.split(',').map(|c| c.trim().parse::<usize>()).collect();
    let cores = cores
        .map_err(|_| usage(format!("--cores {t}: accepted: CPU numbers separated by commas, e.g. 0,1")))?;
    let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores.is_empty() || cores.len() > 2 || cores.iter().any(|&c| c >= online) {
        return Err(usage(format!(
            "--cores {t}: accepted: one or two of the {online} CPUs (0..{}); pathem never runs more busy threads than CPUs",
            online - 1
        )));
    }
    Ok(cores)
}

/// The live-only settings against their documented ranges.
fn check_ranges(args: &RunArgs) -> anyhow::Result<()> {
    use crate::within;
    use pathem_io::afpacket::{MAX_RX_BUFFER, MIN_RX_BUFFER};
    use pathem_model::Nanos;
    within("--rx-buffer", args.rx_buffer.0, MIN_RX_BUFFER as u64..=MAX_RX_BUFFER as u64, "64KiB to 1GiB")?;
    within("--busy-poll", args.busy_poll.0, Nanos::ZERO..=Nanos::from_secs(1), "0ms to 1s")?;
    if let Some(d) = args.stats_interval {
        within("--stats-interval", d.0, Nanos::from_millis(1)..=Nanos::from_secs(86_400), "1ms to 1 day")?;
    }
    if let Some(d) = args.duration {
        within("--duration", d.0, Nanos(1)..=Nanos::from_secs(365 * 86_400), "above 0, up to 1 year")?;
    }
    Ok(())
}

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    check_ranges(&args)?;
    let file = match &args.config {
        Some(p) => config::load(p).map_err(usage)?,
        None => ConfigFile::default(),
    };
    let ab = file.a_to_b.overridden_by(&args.path).overridden_by(&direction_spec("a-to-b", &args.a_to_b)?);
    let ba = file.b_to_a.overridden_by(&args.path).overridden_by(&direction_spec("b-to-a", &args.b_to_a)?);
    let (ab, ba): (PathConfig, PathConfig) = (ab.to_config().map_err(usage)?, ba.to_config().map_err(usage)?);
    let cores = parse_cores(&args.cores)?;
    let if_name = |s: &str| live::parse(s).map(|p| p.1.to_string()).unwrap_or_default();
    let seed = args.seed.or(file.seed).unwrap_or_else(crate::replay::random_seed);
    let engine = EngineConfig {
        buffer: args.buffer.or(file.buffer).map(|s| usize::try_from(s.0).unwrap_or(usize::MAX)),
        max_frame: args.max_frame,
        line_rate: pathem_model::units::Rate(
            iface::speed_bps(&if_name(&args.port_a)).unwrap_or(10_000_000_000),
        ),
        busy_poll: args.busy_poll.0,
        offline: false,
    };
    engine.validate().map_err(usage)?;
    let a = port_name(&args.port_a)?;
    let b = port_name(&args.port_b)?;
    if if_name(&a) == if_name(&b) {
        return Err(usage(format!(
            "both ports are {}: pathem forwards between two different interfaces",
            if_name(&a)
        )));
    }

    // Frames must reach pathem as they were on the wire: no receive aggregation.
    let mut saved: Vec<SavedOffloads> = Vec::new();
    if !args.keep_offloads {
        for name in [&if_name(&a), &if_name(&b)] {
            let s = iface::disable_offloads(name, false).map_err(usage)?;
            if !s.changed().is_empty() {
                eprintln!("pathem: {name}: turned off {} for the run", s.changed().join(", "));
            }
            saved.push(s);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot install signal handlers")?;
    }
    let live = Live { a: &a, b: &b, ab: &ab, ba: &ba, seed, engine: &engine, cores: &cores, announce: true };
    let result = forward(&args, &live, stop);
    for s in &saved {
        if let Err(e) = s.restore() {
            eprintln!("pathem: could not restore offloads: {e}");
        }
    }
    result
}

/// What a live link forwards between, and how.
pub struct Live<'a> {
    pub a: &'a str,
    pub b: &'a str,
    pub ab: &'a PathConfig,
    pub ba: &'a PathConfig,
    pub seed: u64,
    pub engine: &'a EngineConfig,
    pub cores: &'a [usize],
    /// Say what is forwarded and print the final counters (`pathem run`), or stay quiet
    /// unless asked (`pathem shell`).
    pub announce: bool,
}

/// Forwards between the two interfaces until `stop` is set (or `--duration` passes).
pub fn forward(args: &RunArgs, live: &Live<'_>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let Live { a, b, ab, ba, seed, engine, cores, announce } = *live;
    let options = PortOptions { max_frame: engine.max_frame, rx_buffer: args.rx_buffer.0 as usize };
    let port_a = live::open(a, &options)?;
    let port_b = live::open(b, &options)?;
    let (name_a, name_b) = (port_a.ifname.clone(), port_b.ifname.clone());
    if announce {
        eprintln!("pathem: port A {name_a}: {}", port_a.how);
        eprintln!("pathem: port B {name_b}: {}", port_b.how);
    }
    let mut pipe_ab: LivePipe = Pipeline::new(port_a.rx, port_b.tx, ab, direction_seed(seed, 0), engine)
        .map_err(crate::engine_error)?;
    let mut pipe_ba: Option<LivePipe> = match args.one_way {
        true => None,
        false => Some(
            Pipeline::new(port_b.rx, port_a.tx, ba, direction_seed(seed, 1), engine)
                .map_err(crate::engine_error)?,
        ),
    };
    let (a, b) = (name_a.as_str(), name_b.as_str());
    if announce {
        eprintln!("pathem: forwarding {a} <-> {b} (seed {seed})");
        eprintln!("pathem:   {a} -> {b}: {ab}");
        match &pipe_ba {
            Some(_) => eprintln!("pathem:   {b} -> {a}: {ba}"),
            None => eprintln!("pathem:   {b} -> {a}: not forwarded (--one-way)"),
        }
        let sizing = |p: &LivePipe, cfg: &PathConfig| {
            let why = delay_line_sizing(cfg, engine).why;
            format!("{} ({why})", crate::report::bytes(p.delay_line_capacity() as u64))
        };
        eprintln!("pathem:   delay line {a} -> {b}: {}", sizing(&pipe_ab, ab));
        if let Some(p) = &pipe_ba {
            eprintln!("pathem:   delay line {b} -> {a}: {}", sizing(p, ba));
        }
    }
    let started = monotonic_now();
    if let Some(d) = args.duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_nanos(d.0.as_nanos()));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let counters = (pipe_ab.counters().clone(), pipe_ba.as_ref().map(|p| p.counters().clone()));
    let report = {
        let (json, a, b) = (args.json, a.to_string(), b.to_string());
        move |event: &str, seconds: f64| {
            let r = Report {
                event,
                seconds,
                a_to_b: counters.0.snapshot(),
                b_to_a: counters.1.as_ref().map(|c| c.snapshot()),
            };
            if json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                eprintln!("pathem: [{seconds:.1}s] {}", line(&format!("{a}->{b}"), &r.a_to_b));
                if let Some(s) = &r.b_to_a {
                    eprintln!("pathem: [{seconds:.1}s] {}", line(&format!("{b}->{a}"), s));
                }
            }
        }
    };
    if let Some(every) = args.stats_interval {
        let (stop, report) = (stop.clone(), report.clone());
        std::thread::spawn(move || {
            let every = std::time::Duration::from_nanos(every.0.as_nanos());
            loop {
                std::thread::sleep(every);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                report("interval", (monotonic_now() - started).as_secs_f64());
            }
        });
    }

    match (&mut pipe_ba, cores.len()) {
        (Some(ba_pipe), 2) => {
            let stop2 = stop.clone();
            std::thread::scope(|s| -> anyhow::Result<()> {
                let (c0, c1) = (cores[0], cores[1]);
                let h = s.spawn(move || -> anyhow::Result<()> {
                    pin(c1)?;
                    let mut clock = live_clock(vec![ba_pipe.rx.raw_fd()]);
                    run(&mut [ba_pipe], &mut clock, &stop2)?;
                    Ok(())
                });
                pin(c0)?;
                let mut clock = live_clock(vec![pipe_ab.rx.raw_fd()]);
                run(&mut [&mut pipe_ab], &mut clock, &stop)?;
                h.join().map_err(|_| anyhow::anyhow!("the b->a thread panicked"))??;
                Ok(())
            })?;
        }
        (ba_pipe, _) => {
            if let Some(&c) = cores.first() {
                pin(c)?;
            }
            let mut fds = vec![pipe_ab.rx.raw_fd()];
            if let Some(p) = ba_pipe.as_ref() {
                fds.push(p.rx.raw_fd());
            }
            let mut clock = live_clock(fds);
            match ba_pipe {
                Some(p) => run(&mut [&mut pipe_ab, p], &mut clock, &stop)?,
                None => run(&mut [&mut pipe_ab], &mut clock, &stop)?,
            }
        }
    }
    let now = monotonic_now();
    // A port gets a moment to hand over frames it still holds (a full device queue).
    let drain = std::time::Duration::from_millis(200);
    let mut left = pipe_ab.finish(now, drain)?;
    if let Some(p) = pipe_ba.as_mut() {
        let s = p.finish(now, drain)?;
        left.in_flight += s.in_flight;
        left.port_tx_queued += s.port_tx_queued;
    }
    let tx_errors = pipe_ab.tx.errors() + pipe_ba.as_ref().map_or(0, |p| p.tx.errors());
    let rx_errors = pipe_ab.rx.errors() + pipe_ba.as_ref().map_or(0, |p| p.rx.errors());
    if announce || args.json {
        report("final", (now - started).as_secs_f64());
    }
    if rx_errors + tx_errors > 0 {
        eprintln!(
            "pathem: {rx_errors} receive and {tx_errors} transmit errors (an interface was down for a while)"
        );
    }
    if announce {
        match (left.in_flight, left.port_tx_queued) {
            (0, 0) => eprintln!("pathem: stopped; every frame taken was forwarded or dropped as counted"),
            (f, 0) => eprintln!("pathem: stopped; {f} frames still in the delay line were not sent (in-flight above)"),
            (f, q) => eprintln!(
                "pathem: stopped; {f} frames still in the delay line were not sent, {q} handed to a port it never took (in port above)"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn busy_poll_default_is_the_one_other_live_loops_use() {
        let cli = Cli::try_parse_from(["pathem", "a", "b"]).unwrap();
        assert_eq!(cli.run.busy_poll.0, BUSY_POLL);
    }
}
