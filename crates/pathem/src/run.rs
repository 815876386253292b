//! `pathem run`: live emulation between two interfaces, both directions.
//!
//! Frames received on A leave on B through the a→b path, and back through the b→a path.
//! This module parses the flags and prints; the link itself is `pathem_runtime::Link`, the
//! same one `shell`, `validate` and `bench --live` run. SIGINT, SIGTERM or SIGHUP stops it.

use crate::usage;
use clap::Args;
use pathem_io::live::PortSpec;
use pathem_runtime::session::{self, Report, Serving, Tuning};
use pathem_runtime::{LinkSpec, Session};
use pathem_spec::{link, PathSpec};
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// First port: afxdp:IF, afpacket:IF, a bare interface name (AF_XDP where it works), or
    /// dpdk:PCI / dpdk:PORT_ID / dpdk:VDEV (built with --features dpdk).
    #[arg(value_name = "PORT_A")]
    pub port_a: PortSpec,
    /// Second port, the same kinds.
    #[arg(value_name = "PORT_B")]
    pub port_b: PortSpec,
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
    /// CPUs to run on: one runs everything there; more are shared out (half to each direction,
    /// all to one with --one-way): a direction's first runs its input, the second its output,
    /// and a port's receive queues are read on all of them [default: one unpinned thread].
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,
    /// Seed of the random models; printed when not given.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Forward only from A to B (frames arriving on B are not forwarded).
    #[arg(long)]
    pub one_way: bool,
    #[command(flatten)]
    pub serve: Serving,
    /// Change the path at set times after the start (lines `TIME FLAGS`, optional `repeat
    /// TIME`); each line's flags apply to both directions, on top of what they had.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    #[command(flatten)]
    pub tuning: Tuning,
}

/// Says what `session` is (`lines`, then its control socket and metrics), reports as `how`
/// asks until SIGINT, SIGTERM or `--duration` stops it, then gives the final report.
pub fn serve(how: &Serving, session: Session, mut lines: Vec<String>) -> anyhow::Result<()> {
    lines.extend(session.describe());
    session::say(&lines);
    let (a, b) = (session.link.started.name_a.clone(), session.link.started.name_b.clone());
    let json = how.json;
    let print = move |r: &Report| session::write_report(r, json, &a, &b);
    let (every, duration) = (how.stats_interval.map(|d| d.0), how.duration.map(|d| d.0));
    let end = session.serve(every, duration, print).map_err(crate::runtime_error)?;
    session::say(&end.describe());
    Ok(())
}

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    let (name, metrics_addr) =
        args.serve.check(session::default_name(&args.port_a, &args.port_b)).map_err(crate::runtime_error)?;
    let file = link::config(args.config.as_deref()).map_err(usage)?;
    let own = [("a-to-b", args.a_to_b.as_deref()), ("b-to-a", args.b_to_a.as_deref())];
    let (ab, ba) = link::directions(&file, &args.path, own, args.schedule.as_deref()).map_err(usage)?;
    let notes = link::notes(&[&ab, &ba]);
    let cores = pathem_runtime::session::parse_cores(args.cores.as_deref()).map_err(usage)?;
    let (a, b) = (args.port_a.clone(), args.port_b.clone());
    let (engine, ports) = args.tuning.settings(&a, &b, &file).map_err(crate::runtime_error)?;
    session::check_ports(&a, &b).map_err(usage)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let keep_offloads = args.tuning.keep_offloads;
    let spec = LinkSpec {
        one_way: args.one_way,
        ports,
        engine,
        cores,
        keep_offloads,
        ..LinkSpec::of(a, b, &ab, &ba, seed)
    };
    let session = Session::start(spec, name, [&ab, &ba], metrics_addr).map_err(crate::runtime_error)?;
    let lines = [notes, session.link.started.describe(&ab.path, &ba.path, args.one_way, seed)].concat();
    serve(&args.serve, session, lines)
}
