//! `pathem replay`: offline emulation of one direction, in virtual time.
//!
//! Frame i of IN arrives at its capture timestamp; the virtual clock jumps from event to event
//! (arrivals and releases), so the result is exact and independent of the machine's speed.

use crate::config::{self, ConfigFile};
use crate::report;
use crate::spec::PathSpec;
use crate::usage;
use anyhow::Context;
use clap::Args;
use pathem_engine::{run, EngineConfig, Pipeline, Schedule, Stats, VirtualClock};
use pathem_io::pcap::{PcapSink, PcapSource};
use pathem_model::rng::direction_seed;
use pathem_model::units::Size;
use pathem_model::{Nanos, PathConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// Input capture (classic pcap, Ethernet, micro- or nanosecond timestamps).
    #[arg(value_name = "IN.pcap")]
    pub input: PathBuf,
    /// Output capture (nanosecond pcap; each frame stamped with its release time).
    #[arg(value_name = "OUT.pcap")]
    pub output: PathBuf,
    #[command(flatten)]
    pub path: PathSpec,
    /// TOML file with [a_to_b] / [b_to_a] tables (replay uses a_to_b); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of the random models; printed when not given.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Write the counters as JSON to FILE instead of a summary on stderr.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Delay line size (e.g. 64MiB) [default: rate × max delay + queue, at least 4 MiB].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub buffer: Option<Size>,
    /// Change the path at set times (lines `TIME FLAGS`, optional `repeat TIME`), counted from
    /// the first frame's arrival, exactly.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// Longest frame carried, 1 to 65536 bytes; longer ones are dropped and counted as `oversize`.
    #[arg(long, value_name = "BYTES", default_value_t = 65_535)]
    pub max_frame: usize,
}

/// What a replay did, as written by `--stats`.
#[derive(Serialize, Debug, Clone)]
pub struct ReplayReport {
    pub seed: u64,
    pub path: String,
    /// Most bytes the delay line may hold (it grows with what is in flight, up to this).
    pub delay_line_bytes: usize,
    pub input_backwards_timestamps: u64,
    /// The process's peak resident memory (VmHWM), where the system reports it.
    pub peak_memory_bytes: Option<u64>,
    #[serde(flatten)]
    pub stats: Stats,
}

/// A seed for runs that did not ask for one.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    h.finish()
}

/// The a→b path of a replay: the config file's table with the flags on top, and the schedule
/// of changes to it, if any.
pub fn resolve(args: &ReplayArgs) -> anyhow::Result<(ConfigFile, PathConfig, Option<Schedule>)> {
    let file = match &args.config {
        Some(p) => config::load(p).map_err(usage)?,
        None => ConfigFile::default(),
    };
    let spec = file.a_to_b.overridden_by(&args.path);
    let path = spec.to_config().map_err(usage)?;
    let schedule = match &args.schedule {
        Some(f) => {
            let s = pathem::schedule::load(f, &spec).map_err(usage)?;
            Some(pathem::schedule::to_schedule(&s, f).map_err(usage)?)
        }
        None => None,
    };
    Ok((file, path, schedule))
}

/// Runs a replay and returns its report; OUT exists only if this returns `Ok`.
pub fn replay(args: &ReplayArgs) -> anyhow::Result<ReplayReport> {
    let (file, path, schedule) = resolve(args)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(random_seed);
    let engine = EngineConfig {
        buffer: args.buffer.or(file.buffer).map(|s| usize::try_from(s.0).unwrap_or(usize::MAX)),
        max_frame: args.max_frame,
        offline: true,
        ..EngineConfig::default()
    };
    engine.validate().map_err(usage)?;
    let src = PcapSource::open(&args.input)?;
    let start = src.peek_arrival().unwrap_or(Nanos::ZERO);
    let sink = PcapSink::create(&args.output, src.snaplen())?;
    let mut pipe =
        Pipeline::new(src, sink, &path, direction_seed(seed, 0), &engine).map_err(crate::engine_error)?;
    if let Some(s) = schedule {
        pipe.follow(s, start);
    }
    let mut clock = VirtualClock::starting_at(start);
    run(&mut [&mut pipe], &mut clock, &AtomicBool::new(false))?;
    let stats = pipe.counters().snapshot();
    let delay_line_bytes = pipe.delay_line_capacity();
    let (src, sink) = pipe.into_ports();
    sink.commit()?;
    Ok(ReplayReport {
        seed,
        path: path.to_string(),
        delay_line_bytes,
        input_backwards_timestamps: src.backwards_timestamps(),
        peak_memory_bytes: pathem_io::proc_kb("/proc/self/status", "VmHWM"),
        stats,
    })
}

pub fn main(args: ReplayArgs) -> anyhow::Result<()> {
    let report = replay(&args)?;
    if args.seed.is_none() {
        eprintln!("pathem: seed {} (pass --seed {} to repeat this run)", report.seed, report.seed);
    }
    match &args.stats {
        Some(p) => {
            let json = serde_json::to_string_pretty(&report)?;
            std::fs::write(p, json + "\n").with_context(|| format!("cannot write {}", p.display()))?;
        }
        None => eprint!("{}", report::summary(&args.input, &args.output, &report)),
    }
    Ok(())
}
