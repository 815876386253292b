//! `pathem run`: live emulation between two interfaces, both directions.
//!
//! Frames received on A leave on B through the a→b path, and back through the b→a path.
//! This module parses the flags and prints; the link itself is `pathem_runtime::Link`, the
//! same one `shell`, `validate` and `bench --live` run. SIGINT or SIGTERM stops it.

use crate::usage;
use anyhow::Context;
use clap::Args;
use pathem_engine::{Counters, EngineConfig, Stats};
use pathem_io::iface;
use pathem_io::live::{self, PortOptions};
use pathem_model::units::{Duration, Size};
use pathem_model::PathConfig;
use pathem_runtime::{Final, LinkSpec, Session, Started};
use pathem_spec::file::{self as config, ConfigFile};
use pathem_spec::PathSpec;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// First port: afxdp:IF, afpacket:IF, a bare interface name (AF_XDP where it works), or
    /// dpdk:PCI / dpdk:PORT_ID / dpdk:VDEV (built with --features dpdk).
    #[arg(value_name = "PORT_A")]
    pub port_a: String,
    /// Second port, the same kinds.
    #[arg(value_name = "PORT_B")]
    pub port_b: String,
    /// DPDK's EAL arguments for dpdk: ports, separated by spaces (cores, memory, --no-huge,
    /// -a allow list, file prefix); they override pathem's defaults.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub eal: Option<String>,
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
    /// CPUs to run on: one runs everything on one thread pinned there; two give each direction
    /// a thread (with --one-way: its input and its output); four give each direction's input
    /// and output a CPU each [default: one unpinned thread].
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
    /// Name of this link for `pathem ctl NAME` (its socket is /run/pathem/NAME.sock)
    /// [default: the two interfaces, e.g. pa-pb].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Serve Prometheus metrics on PORT (loopback) or ADDR:PORT, e.g. 9100 [default: off].
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub metrics: Option<String>,
    /// Change the path at set times after the start (lines `TIME FLAGS`, optional `repeat
    /// TIME`); each line's flags apply to both directions, on top of what they had.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
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

pub fn direction_spec(flag: &str, text: &Option<String>) -> anyhow::Result<PathSpec> {
    pathem_spec::change::direction(flag, text.as_deref()).map_err(usage)
}

#[derive(Serialize)]
struct Report<'a> {
    event: &'a str,
    seconds: f64,
    a_to_b: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    b_to_a: Option<Stats>,
}

pub fn line(name: &str, s: &Stats) -> String {
    let d = &s.dropped;
    let mut text = format!(
        "{name}: port drops {} rx {} tx {} (in port {}) dropped {} ({}) dup {} corrupt {} ecn {} clamped {} in-flight {}; late p50 {:.1} p99.9 {:.1} max {:.1} us",
        s.port_rx_dropped,
        s.rx_packets,
        s.tx_packets,
        s.port_tx_queued,
        d.total(),
        d.describe(),
        s.duplicated,
        s.corrupted,
        s.ecn_marked,
        s.reorder_clamped,
        s.in_flight,
        s.late.p50_ns as f64 / 1e3,
        s.late.p99_9_ns as f64 / 1e3,
        s.late.max_ns as f64 / 1e3
    );
    if let Some(aqm) = crate::report::aqm_summary(s) {
        text.push_str(&format!("; aqm {aqm}"));
    }
    let e = &s.port_tx_errors;
    if e.total() > 0 {
        text.push_str(&format!("; tx errors {}", e.describe()));
    }
    let o = &s.offload;
    if o.gso_frames + o.csum_completed > 0 {
        text.push_str(&format!(
            "; offload: {} super-frames cut into {}, {} checksums completed",
            o.gso_frames, o.gso_segments, o.csum_completed
        ));
    }
    text
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

/// One direction: its flags, its path and the schedule of changes to it.
type Direction = (PathSpec, PathConfig, Option<pathem_engine::Schedule>);

/// The two directions' paths: the config file's tables, the common flags, then the
/// per-direction flags; and their schedules, built on each.
fn paths(args: &RunArgs, file: &ConfigFile) -> anyhow::Result<(Direction, Direction)> {
    let ab = file.a_to_b.overridden_by(&args.path).overridden_by(&direction_spec("a-to-b", &args.a_to_b)?);
    let ba = file.b_to_a.overridden_by(&args.path).overridden_by(&direction_spec("b-to-a", &args.b_to_a)?);
    let schedule = |spec: &PathSpec| -> anyhow::Result<Option<pathem_engine::Schedule>> {
        let Some(f) = &args.schedule else { return Ok(None) };
        let s = pathem_spec::schedule::load(f, spec).map_err(usage)?;
        Ok(Some(pathem_spec::schedule::to_schedule(&s, f).map_err(usage)?))
    };
    let (ab_cfg, ab_sched) = (ab.to_config().map_err(usage)?, schedule(&ab)?);
    let (ba_cfg, ba_sched) = (ba.to_config().map_err(usage)?, schedule(&ba)?);
    Ok(((ab, ab_cfg, ab_sched), (ba, ba_cfg, ba_sched)))
}

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    check_ranges(&args)?;
    let metrics_addr =
        args.metrics.as_deref().map(pathem_runtime::metrics::parse_addr).transpose().map_err(usage)?;
    if let Some(name) = &args.name {
        pathem_runtime::control::check_name(name).map_err(usage)?;
    }
    let file = match &args.config {
        Some(p) => config::load(p).map_err(usage)?,
        None => ConfigFile::default(),
    };
    let ((ab_spec, ab, schedule_ab), (ba_spec, ba, schedule_ba)) = paths(&args, &file)?;
    let cores = pathem_runtime::session::parse_cores(args.cores.as_deref()).map_err(usage)?;
    if let Some(eal) = args.eal.as_ref().or(file.eal.as_ref()) {
        pathem_io::dpdk::split_eal(eal).map_err(usage)?;
    }
    let engine = EngineConfig {
        buffer: args.buffer.or(file.buffer).map(|s| usize::try_from(s.0).unwrap_or(usize::MAX)),
        max_frame: args.max_frame,
        line_rate: pathem_model::units::Rate(
            live::kernel_iface(&args.port_a).and_then(|i| iface::speed_bps(&i)).unwrap_or(10_000_000_000),
        ),
        busy_poll: args.busy_poll.0,
        offline: false,
    };
    engine.validate().map_err(usage)?;
    pathem_runtime::session::check_ports(&args.port_a, &args.port_b).map_err(usage)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let spec = LinkSpec {
        a: args.port_a.clone(),
        b: args.port_b.clone(),
        ab: ab.clone(),
        ba: ba.clone(),
        one_way: args.one_way,
        seed,
        ports: PortOptions {
            max_frame: engine.max_frame,
            rx_buffer: args.rx_buffer.0 as usize,
            eal: args.eal.clone().or(file.eal.clone()),
        },
        engine,
        cores,
        netns: None,
        keep_offloads: args.keep_offloads,
        schedule_ab,
        schedule_ba,
    };
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| pathem_runtime::session::default_name(&args.port_a, &args.port_b));
    let session =
        Session::start(spec, name, (ab_spec, ba_spec), metrics_addr).map_err(crate::runtime_error)?;
    announce(&session.link.started, &ab, &ba, args.one_way, seed);
    eprintln!(
        "pathem:   control: pathem ctl {} show|set (socket {})",
        session.name,
        session.control_path().display()
    );
    if let Some(addr) = session.metrics_addr() {
        eprintln!("pathem:   metrics: http://{addr}/metrics");
    }
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, session.link.stopper()).context("cannot install signal handlers")?;
    }
    if let Some(d) = args.duration {
        session.stop_after(d.0);
    }
    let (ab_counters, ba_counters) = session.link.counters();
    let reporter = Reporter {
        json: args.json,
        a: session.link.started.name_a.clone(),
        b: session.link.started.name_b.clone(),
        counters: (ab_counters.clone(), ba_counters.cloned()),
    };
    if let Some(every) = args.stats_interval {
        let reporter = reporter.clone();
        session.every(every.0, move |seconds| reporter.live("interval", seconds));
    }
    let (end, seconds) = session.wait().map_err(crate::runtime_error)?;
    reporter.print("final", seconds, end.ab.clone(), end.ba.clone());
    report_end(&end);
    Ok(())
}

/// What `run` says when the link is up.
fn announce(s: &Started, ab: &PathConfig, ba: &PathConfig, one_way: bool, seed: u64) {
    if !s.eal.is_empty() {
        eprintln!("pathem: DPDK EAL defaults: {}", s.eal.join("; "));
    }
    for (name, off) in &s.offloads_off {
        eprintln!("pathem: {name}: turned off {} for the run", off.join(", "));
    }
    eprintln!("pathem: port A {}: {}", s.name_a, s.how_a);
    eprintln!("pathem: port B {}: {}", s.name_b, s.how_b);
    let (a, b) = (&s.name_a, &s.name_b);
    eprintln!("pathem: forwarding {a} <-> {b} (seed {seed})");
    eprintln!("pathem:   {a} -> {b}: {ab}");
    match one_way {
        false => eprintln!("pathem:   {b} -> {a}: {ba}"),
        true => eprintln!("pathem:   {b} -> {a}: not forwarded (--one-way)"),
    }
    eprintln!("pathem:   delay line {a} -> {b}: {}", s.delay_line_ab);
    if let Some(d) = &s.delay_line_ba {
        eprintln!("pathem:   delay line {b} -> {a}: {d}");
    }
}

/// What `run` says when the link has stopped.
fn report_end(end: &Final) {
    if end.rx_errors > 0 {
        eprintln!("pathem: {} receive errors (an interface was down for a while)", end.rx_errors);
    }
    for (name, mtu, refused) in &end.tx_refused {
        for line in refused.describe(name, *mtu) {
            eprintln!("pathem: {line}");
        }
    }
    let in_flight = end.ab.in_flight + end.ba.as_ref().map_or(0, |s| s.in_flight);
    let queued = end.ab.port_tx_queued + end.ba.as_ref().map_or(0, |s| s.port_tx_queued);
    match (in_flight, queued) {
        (0, 0) => eprintln!("pathem: stopped; every frame taken was forwarded or dropped as counted"),
        (f, 0) => eprintln!("pathem: stopped; {f} frames still in the delay line were not sent (in-flight above)"),
        (f, q) => eprintln!(
            "pathem: stopped; {f} frames still in the delay line were not sent, {q} handed to a port it never took (in port above)"
        ),
    }
    for c in &end.closed {
        eprintln!("pathem: {}", c.describe());
    }
}

/// Prints the counters, as text on stderr or JSON lines on stdout.
#[derive(Clone)]
struct Reporter {
    json: bool,
    a: String,
    b: String,
    counters: (Arc<Counters>, Option<Arc<Counters>>),
}

impl Reporter {
    fn live(&self, event: &str, seconds: f64) {
        self.print(
            event,
            seconds,
            self.counters.0.snapshot(),
            self.counters.1.as_ref().map(|c| c.snapshot()),
        );
    }

    fn print(&self, event: &str, seconds: f64, a_to_b: Stats, b_to_a: Option<Stats>) {
        let r = Report { event, seconds, a_to_b, b_to_a };
        if self.json {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
        } else {
            let (a, b) = (&self.a, &self.b);
            eprintln!("pathem: [{seconds:.1}s] {}", line(&format!("{a}->{b}"), &r.a_to_b));
            if let Some(s) = &r.b_to_a {
                eprintln!("pathem: [{seconds:.1}s] {}", line(&format!("{b}->{a}"), s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn busy_poll_default_is_the_one_other_live_loops_use() {
        let cli = <Cli as clap::Parser>::try_parse_from(["pathem", "a", "b"]).unwrap();
        assert_eq!(cli.run.busy_poll.0, pathem_engine::DEFAULT_BUSY_POLL);
    }
}
