//! `pathem attach IF`: emulate in place on an existing interface, as `tc qdisc add dev IF root
//! netem` does, and on its ingress too. The steering is `pathem_io::attach`; the link is the
//! one `run` runs.

use crate::usage;
use clap::Args;
use pathem_io::attach::{AttachSpec, DEFAULT_MARK};
use pathem_io::live::PortSpec;
use pathem_runtime::{LinkSpec, Session};
use pathem_spec::{link, PathSpec};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The interface: eth0, a veth, a container's host-side veth. Nothing on it changes.
    #[arg(value_name = "IF")]
    pub iface: String,
    /// Impairments of the frames the host sends (egress), as `tc ... root netem` has them.
    #[command(flatten)]
    pub path: PathSpec,
    /// Egress flags in one string, on top of the bare ones: --egress "--rate 10mbit".
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub egress: Option<String>,
    /// Impair the frames the host receives too, with these flags: --ingress "--delay 10ms".
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub ingress: Option<String>,
    /// TOML file with [egress] and [ingress] tables; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of the random models; printed when not given.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Change egress at set times after the start (lines `TIME FLAGS`, optional `repeat TIME`).
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// CPUs: one runs both directions on one thread pinned there, two a thread each.
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,
    /// Mark of the frames pathem sends back through IF, 1 to 0xffffffff (decimal or 0x…),
    /// where the host's own marks use the default [default: 0x70617468].
    #[arg(long, value_name = "MARK", value_parser = pathem_io::attach::parse_mark)]
    pub mark: Option<u32>,
    /// Delay line size per direction, up to 1TiB [default: rate × max delay (+ queue for drop-tail), at least 4 MiB].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub buffer: Option<pathem_model::units::Size>,
    /// Packet ring of each direction's TAP device, 64KiB to 1GiB, as `run`'s ports have:
    /// frames beyond it are dropped by the kernel and counted as port drops.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub rx_buffer: pathem_model::units::Size,
    #[command(flatten)]
    pub serve: pathem_runtime::session::Serving,
}

pub fn main(args: AttachArgs) -> anyhow::Result<()> {
    pathem_io::iface::check_exists(&args.iface).map_err(usage)?;
    let (name, metrics) = args.serve.check(args.iface.clone()).map_err(crate::runtime_error)?;
    let file = link::config(args.config.as_deref()).map_err(usage)?;
    let (egress, ingress, egress_on, ingress_on) = link::attach_directions(
        &file,
        &args.path,
        args.egress.as_deref(),
        args.ingress.as_deref(),
        args.schedule.as_deref(),
    )
    .map_err(usage)?;
    let notes = link::notes(&[&egress, &ingress]);
    let cores = pathem_runtime::session::parse_cores(args.cores.as_deref()).map_err(usage)?;
    anyhow::ensure!(cores.len() <= 2, usage("--cores for attach takes one or two CPUs"));
    let rx_buffer = pathem_runtime::session::rx_buffer(args.rx_buffer).map_err(usage)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let (iface, mark) = (args.iface.clone(), args.mark.unwrap_or(DEFAULT_MARK));
    let attach = AttachSpec { iface, egress: egress_on, ingress: ingress_on, mark };
    pathem_io::attach::check(&attach.iface, attach.egress, attach.ingress).map_err(usage)?;
    let (port, buffer) = (PortSpec::Auto(args.iface.clone()), args.buffer.or(file.buffer));
    let mut spec =
        LinkSpec { cores, keep_offloads: true, ..LinkSpec::of(port.clone(), port, &egress, &ingress, seed) };
    spec.engine.buffer = buffer.map(|b| usize::try_from(b.0).unwrap_or(usize::MAX));
    spec.ports.rx_buffer = rx_buffer;
    spec.attach = Some(attach);
    let session = Session::start(spec, name, [&egress, &ingress], metrics).map_err(crate::runtime_error)?;
    let lines = [notes, session.link.started.describe(&egress.path, &ingress.path, false, seed)].concat();
    crate::run::serve(&args.serve, session, lines)
}
