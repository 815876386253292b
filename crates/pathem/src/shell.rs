//! `pathem shell`: run a command behind an emulated link, the Mahimahi way, in the bed
//! [`pathem_runtime::netns::ShellBed`] builds (its documentation draws it); pathem exits with
//! the command's status.

use crate::usage;
use anyhow::Context;
use clap::Args;
use pathem_io::live::PortSpec;
use pathem_runtime::netns::ShellBed;
use pathem_runtime::{LinkSpec, Session};
use pathem_spec::{link, PathSpec};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Impairments for both directions; --uplink/--downlink override them per direction.
    #[command(flatten)]
    pub path: PathSpec,
    /// Flags for frames leaving the shell (a→b), in one string: --uplink "--rate 10mbit".
    #[arg(long, alias = "a-to-b", value_name = "FLAGS", allow_hyphen_values = true)]
    pub uplink: Option<String>,
    /// Flags for frames entering the shell (b→a).
    #[arg(long, alias = "b-to-a", value_name = "FLAGS", allow_hyphen_values = true)]
    pub downlink: Option<String>,
    /// TOML file with [a_to_b] (uplink) and [b_to_a] (downlink) tables; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of the random models.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Name of the link for `pathem ctl NAME` [default: shell-PID].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Serve Prometheus metrics on PORT (loopback) or ADDR:PORT [default: off].
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub metrics: Option<String>,
    /// Print what the link is and, at the end, its counters.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run inside, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn main(args: ShellArgs) -> anyhow::Result<()> {
    let file = link::config(args.config.as_deref()).map_err(usage)?;
    let own = [("uplink", args.uplink.as_deref()), ("downlink", args.downlink.as_deref())];
    let (up, down) = link::directions(&file, &args.path, own, None).map_err(usage)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let name = args.name.clone().unwrap_or_else(|| format!("shell-{}", std::process::id()));
    let metrics_addr =
        args.metrics.as_deref().map(pathem_runtime::metrics::parse_addr).transpose().map_err(usage)?;
    pathem_runtime::netns::leave_signals_to_the_command()?;
    let bed = ShellBed::build(std::process::id()).map_err(usage)?;
    link::notes(&[&up, &down]).iter().chain(&bed.warning).for_each(|l| errln!("pathem: {l}"));
    if args.verbose {
        let (ns, gateway, up, down) = (&bed.ns, &bed.gateway, &up.path, &down.path);
        errln!("pathem shell: {ns} behind uplink [{up}] downlink [{down}], gateway {gateway}, seed {seed}");
    }
    // pathem's ports and sockets live in the link namespace; Link::start bounds the frames.
    let (a, b) = (PortSpec::Auto("pa".into()), PortSpec::Auto("pb".into()));
    let spec = LinkSpec { netns: Some(bed.link_ns.clone()), ..LinkSpec::of(a, b, &up, &down, seed) };
    let session = Session::start(spec, name, [&up, &down], metrics_addr).map_err(crate::runtime_error)?;
    let status =
        bed.run(&args.command, &session.name).with_context(|| format!("cannot run {}", args.command[0]));
    let end = session.stop().map_err(crate::runtime_error)?;
    if args.verbose {
        errln!("pathem shell: uplink {}", serde_json::to_string(&end.ab)?);
        if let Some(d) = &end.ba {
            errln!("pathem shell: downlink {}", serde_json::to_string(d)?);
        }
    }
    let code = status?;
    drop(bed);
    std::process::exit(code);
}
