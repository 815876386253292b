//! `pathem replay`: offline emulation of one direction, in virtual time
//! ([`pathem_runtime::replay`]); this file reads the flags and prints the summary.

use crate::usage;
use clap::Args;
use pathem_engine::EngineConfig;
use pathem_model::units::Size;
pub use pathem_runtime::replay::ReplayReport;
use pathem_spec::link::{self, Direction};
use pathem_spec::PathSpec;
use std::path::PathBuf;

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
    /// Delay line size (e.g. 64MiB) [default: rate × max delay (+ queue for drop-tail), at least 4 MiB].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub buffer: Option<Size>,
    /// Change the path at set times (lines `TIME FLAGS`, optional `repeat TIME`), counted from
    /// the first frame's arrival, exactly.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// Longest frame carried (its original length in the capture), 1 to 65536 bytes; longer ones
    /// are dropped and counted as `oversize`.
    #[arg(long, value_name = "BYTES", default_value_t = 65_535)]
    pub max_frame: usize,
}

/// Runs a replay and returns its report; OUT exists only if this returns `Ok`.
pub fn replay(args: &ReplayArgs) -> anyhow::Result<ReplayReport> {
    let file = link::config(args.config.as_deref()).map_err(usage)?;
    let layers = [&file.a_to_b, &file.common(), &args.path];
    let ab = Direction::resolve(&layers, args.schedule.as_deref()).map_err(usage)?;
    link::replay_notes(&file, &ab).iter().for_each(|n| errln!("pathem: {n}"));
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let engine = EngineConfig {
        buffer: args.buffer.or(file.buffer).map(|s| usize::try_from(s.0).unwrap_or(usize::MAX)),
        max_frame: args.max_frame,
        offline: true,
        ..EngineConfig::default()
    };
    let classes = ab.class_configs();
    pathem_runtime::replay::replay_file(
        &args.input,
        &args.output,
        &ab.path,
        &classes,
        ab.schedule,
        seed,
        &engine,
        args.stats.as_deref(),
    )
    .map_err(crate::runtime_error)
}

pub fn main(args: ReplayArgs) -> anyhow::Result<()> {
    let report = replay(&args)?;
    if args.seed.is_none() {
        errln!("pathem: seed {} (pass --seed {} to repeat this run)", report.seed, report.seed);
    }
    if args.stats.is_none() {
        err!("{}", report.summary(&args.input, &args.output));
    }
    Ok(())
}
