//! `pathem run`: live emulation between two interfaces, both directions.
//!
//! Frames received on A leave on B through the a→b path, and back through the b→a path.
//! This module parses the flags and prints; the link itself is `pathem_runtime::Link`, the
//! same one `shell`, `validate` and `bench --live` run. SIGINT or SIGTERM stops it.

use crate::usage;
use anyhow::Context;
use clap::Args;
use pathem_io::live::{PortOptions, PortSpec};
use pathem_model::units::{Duration, Size};
use pathem_runtime::session::{self, Report};
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
    #[command(flatten)]
    pub serve: Serve,
    /// Leave GRO/LRO/TSO/GSO as they are (frames may then be aggregated before pathem sees them).
    #[arg(long)]
    pub keep_offloads: bool,
    /// Change the path at set times after the start (lines `TIME FLAGS`, optional `repeat
    /// TIME`); each line's flags apply to both directions, on top of what they had.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
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

/// How a live link is watched and ended: shared by `run` and `attach`.
#[derive(Args, Debug, Clone)]
pub struct Serve {
    /// Name of this link for `pathem ctl NAME` (its socket is /run/pathem/NAME.sock)
    /// [default: run: the two interfaces, e.g. pa-pb; attach: the interface].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Serve Prometheus metrics on PORT (loopback) or ADDR:PORT, e.g. 9100 [default: off].
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub metrics: Option<String>,
    /// Print the counters every DUR on stderr (e.g. 1s).
    #[arg(long, value_name = "DUR")]
    pub stats_interval: Option<Duration>,
    /// Counters as JSON lines (periodic and final) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Stop by itself after DUR.
    #[arg(long, value_name = "DUR")]
    pub duration: Option<Duration>,
}

impl Serve {
    /// The checked name (or `default`) and metrics address.
    pub fn check(&self, default: String) -> anyhow::Result<(String, Option<std::net::SocketAddr>)> {
        use crate::within;
        use pathem_model::Nanos;
        if let Some(d) = self.stats_interval {
            within(
                "--stats-interval",
                d.0,
                Nanos::from_millis(1)..=Nanos::from_secs(86_400),
                "1ms to 1 day",
            )?;
        }
        if let Some(d) = self.duration {
            within("--duration", d.0, Nanos(1)..=Nanos::from_secs(365 * 86_400), "above 0, up to 1 year")?;
        }
        let name = self.name.clone().unwrap_or(default);
        pathem_runtime::control::check_name(&name).map_err(usage)?;
        let metrics =
            self.metrics.as_deref().map(pathem_runtime::metrics::parse_addr).transpose().map_err(usage)?;
        Ok((name, metrics))
    }

    /// Says what `session` is (`lines`, then its control socket and metrics), reports as asked
    /// until SIGINT, SIGTERM or `--duration` stops it, then gives the final report.
    pub fn serve(&self, session: Session, lines: Vec<String>) -> anyhow::Result<()> {
        for line in lines {
            eprintln!("pathem: {line}");
        }
        eprintln!(
            "pathem:   control: pathem ctl {} show|set (socket {})",
            session.name,
            session.control_path().display()
        );
        if let Some(addr) = session.metrics_addr() {
            eprintln!("pathem:   metrics: http://{addr}/metrics");
        }
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, session.link.stopper())
                .context("cannot install signal handlers")?;
        }
        if let Some(d) = self.duration {
            session.stop_after(d.0);
        }
        let (a, b) = (session.link.started.name_a.clone(), session.link.started.name_b.clone());
        let json = self.json;
        let print = move |r: &Report| match json {
            true => println!("{}", serde_json::to_string(r).unwrap_or_default()),
            false => r.lines(&a, &b).iter().for_each(|l| eprintln!("pathem: {l}")),
        };
        if let Some(every) = self.stats_interval {
            let (counters, print) = (session.link.counters(), print.clone());
            let counters = (counters.0.clone(), counters.1.cloned());
            session.every(every.0, move |seconds| print(&Report::now("interval", seconds, &counters)));
        }
        let (end, seconds) = session.wait().map_err(crate::runtime_error)?;
        print(&Report { event: "final", seconds, a_to_b: end.ab.clone(), b_to_a: end.ba.clone() });
        end.describe().iter().for_each(|l| eprintln!("pathem: {l}"));
        Ok(())
    }
}

/// The live-only settings against their documented ranges.
fn check_ranges(args: &RunArgs) -> anyhow::Result<()> {
    use crate::within;
    use pathem_io::afpacket::{MAX_RX_BUFFER, MIN_RX_BUFFER};
    use pathem_model::Nanos;
    within("--rx-buffer", args.rx_buffer.0, MIN_RX_BUFFER as u64..=MAX_RX_BUFFER as u64, "64KiB to 1GiB")?;
    within("--busy-poll", args.busy_poll.0, Nanos::ZERO..=Nanos::from_secs(1), "0ms to 1s")?;
    Ok(())
}

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    check_ranges(&args)?;
    let (name, metrics_addr) = args.serve.check(session::default_name(&args.port_a, &args.port_b))?;
    let file = link::config(args.config.as_deref()).map_err(usage)?;
    let own = [("a-to-b", args.a_to_b.as_deref()), ("b-to-a", args.b_to_a.as_deref())];
    let (ab, ba) = link::directions(&file, &args.path, own, args.schedule.as_deref()).map_err(usage)?;
    let cores = pathem_runtime::session::parse_cores(args.cores.as_deref()).map_err(usage)?;
    let eal = args.eal.clone().or(file.eal.clone());
    if let Some(eal) = &eal {
        pathem_io::dpdk::split_eal(eal).map_err(usage)?;
    }
    let buffer = args.buffer.or(file.buffer).map(|s| s.0);
    let engine = session::live_engine(&args.port_a, buffer, args.max_frame, args.busy_poll.0);
    engine.validate().map_err(usage)?;
    session::check_ports(&args.port_a, &args.port_b).map_err(usage)?;
    let seed = args.seed.or(file.seed).unwrap_or_else(pathem_runtime::random_seed);
    let ports = PortOptions { max_frame: engine.max_frame, rx_buffer: args.rx_buffer.0 as usize, eal };
    let spec = LinkSpec {
        a: args.port_a.clone(),
        b: args.port_b.clone(),
        ab: ab.path.clone(),
        ba: ba.path.clone(),
        one_way: args.one_way,
        seed,
        ports,
        engine,
        cores,
        netns: None,
        keep_offloads: args.keep_offloads,
        schedule_ab: ab.schedule,
        schedule_ba: ba.schedule,
        attach: None,
    };
    let session =
        Session::start(spec, name, (ab.spec, ba.spec), metrics_addr).map_err(crate::runtime_error)?;
    let lines = session.link.started.describe(&ab.path, &ba.path, args.one_way, seed);
    args.serve.serve(session, lines)
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
