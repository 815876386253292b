//! A link as users run it (`pathem run`, `pathem shell`): the [`Link`], its control socket
//! (`pathem ctl NAME`), its metrics endpoint if asked, a stop after a set time, and a report
//! every so often; and the checks of what the command line names before anything opens (the
//! two ports, the CPUs).

use crate::control::{self, Server};
use crate::metrics::{self, Metrics};
use crate::{Error, Final, Link, LinkSpec};
use pathem_engine::{monotonic_now, Counters, EngineConfig, Stats};
use pathem_io::iface;
use pathem_io::live::PortSpec;
use pathem_model::units::{Rate, DEFAULT_LINE_RATE};
use pathem_model::Nanos;
use pathem_spec::PathSpec;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A running link with its control socket and metrics.
pub struct Session {
    pub link: Link,
    pub name: String,
    control: Server,
    metrics: Option<Metrics>,
    started: Nanos,
}

impl Session {
    /// Starts `spec` as link `name`, whose paths were asked as `specs` (what `ctl set` builds
    /// on), with metrics on `metrics` if given.
    pub fn start(
        spec: LinkSpec,
        name: String,
        specs: (PathSpec, PathSpec),
        metrics: Option<SocketAddr>,
    ) -> Result<Session, Error> {
        control::check_free(&name)?;
        let seed = spec.seed;
        let link = Link::start(spec)?;
        let control = control::serve(&link, name.clone(), seed, specs)?;
        let metrics = metrics.map(|addr| metrics::serve(&link, addr)).transpose()?;
        Ok(Session { link, name, control, metrics, started: monotonic_now() })
    }

    /// The control socket's path.
    pub fn control_path(&self) -> &Path {
        self.control.path()
    }

    /// Where the metrics are served, if they are.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// Seconds since the link started.
    pub fn seconds(&self) -> f64 {
        (monotonic_now() - self.started).as_secs_f64()
    }

    /// Stops the link by itself after `after`.
    pub fn stop_after(&self, after: Nanos) {
        let stop = self.link.stopper();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_nanos(after.as_nanos()));
            stop.store(true, Ordering::Relaxed);
        });
    }

    /// Calls `report` with the seconds since the start every `every`, until the link stops.
    pub fn every(&self, every: Nanos, report: impl Fn(f64) + Send + 'static) {
        let (stop, started) = (self.link.stopper(), self.started);
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_nanos(every.as_nanos()));
            if stop.load(Ordering::Relaxed) {
                break;
            }
            report((monotonic_now() - started).as_secs_f64());
        });
    }

    /// Waits until the link stops (a signal, [`stop_after`](Self::stop_after)) and returns its
    /// final counters and the seconds it ran; the control socket and the metrics close with it.
    pub fn wait(self) -> Result<(Final, f64), Error> {
        let Session { link, control, metrics, started, .. } = self;
        let end = link.wait();
        let seconds = (monotonic_now() - started).as_secs_f64();
        drop((control, metrics));
        Ok((end?, seconds))
    }

    /// Stops the link now and returns its final counters.
    pub fn stop(self) -> Result<Final, Error> {
        let Session { link, control, metrics, .. } = self;
        drop((control, metrics));
        link.stop()
    }
}

/// Both directions' counters at an instant, as `run` reports them: a JSON line, or a text line
/// per direction.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub event: &'static str,
    pub seconds: f64,
    pub a_to_b: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_to_a: Option<Stats>,
}

impl Report {
    /// The report of `counters` now.
    pub fn now(
        event: &'static str,
        seconds: f64,
        counters: &(Arc<Counters>, Option<Arc<Counters>>),
    ) -> Report {
        Report {
            event,
            seconds,
            a_to_b: counters.0.snapshot(),
            b_to_a: counters.1.as_ref().map(|c| c.snapshot()),
        }
    }

    /// A line per direction, ports named `a` and `b`.
    pub fn lines(&self, a: &str, b: &str) -> Vec<String> {
        let at = |s: &Stats, from: &str, to: &str| {
            format!("[{:.1}s] {}", self.seconds, s.line(&format!("{from}->{to}")))
        };
        std::iter::once(at(&self.a_to_b, a, b)).chain(self.b_to_a.as_ref().map(|s| at(s, b, a))).collect()
    }
}

/// The engine's settings for a live link whose port A is `port_a`: the line rate is the
/// interface's speed where the kernel knows it, [`DEFAULT_LINE_RATE`] otherwise.
///
/// [`DEFAULT_LINE_RATE`]: pathem_model::units::DEFAULT_LINE_RATE
pub fn live_engine(
    port_a: &PortSpec,
    buffer: Option<u64>,
    max_frame: usize,
    busy_poll: Nanos,
) -> EngineConfig {
    EngineConfig {
        buffer: buffer.map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
        max_frame,
        line_rate: port_a.kernel_iface().map_or(DEFAULT_LINE_RATE, |i| Rate(iface::line_rate_bps(i))),
        busy_poll,
        offline: false,
    }
}

/// Checks the two ports named on the command line before anything opens: that the interfaces
/// they read (a DPDK virtual device's `iface=` too) exist and are up, and that they are two
/// different interfaces.
pub fn check_ports(a: &PortSpec, b: &PortSpec) -> Result<(), Error> {
    for name in [a.kernel_iface(), b.kernel_iface()].into_iter().flatten() {
        iface::check_exists(name)?;
        if !iface::is_up(name) {
            return Err(Error::Down(name.into()));
        }
    }
    let (ia, ib) = (a.kernel_iface(), b.kernel_iface());
    if port_interface(a) == port_interface(b) || (ia.is_some() && ia == ib) {
        return Err(Error::SamePort(ia.map_or_else(|| a.to_string(), str::to_string)));
    }
    Ok(())
}

/// A link's default name: its two interfaces or devices (`pa-pb`, `net_af_xdp0-pb`).
pub fn default_name(a: &PortSpec, b: &PortSpec) -> String {
    format!("{}-{}", port_interface(a), port_interface(b))
}

/// The interface or device a port names, as a control socket's name takes it: a DPDK device
/// by its name (`net_af_xdp0`), PCI address (`0000_3b_00.0`) or port id (`dpdk3`).
fn port_interface(spec: &PortSpec) -> String {
    match spec {
        PortSpec::Dpdk { text, .. } => match text.split(',').next().unwrap_or(text) {
            id if id.bytes().all(|b| b.is_ascii_digit()) => format!("dpdk{id}"),
            name => name.replace(':', "_"),
        },
        other => other.name().to_string(),
    }
}

/// `--cores LIST`: one, two or four different CPUs of the machine's, comma-separated (none:
/// one unpinned thread). pathem never runs more busy threads than CPUs given.
pub fn parse_cores(text: Option<&str>) -> Result<Vec<usize>, Error> {
    let Some(t) = text else { return Ok(Vec::new()) };
    let cores: Result<Vec<usize>, _> = t.split(',').map(|c| c.trim().parse::<usize>()).collect();
    let cores = cores.map_err(|_| Error::Cores {
        list: t.into(),
        accepted: "CPU numbers separated by commas, e.g. 0,1".into(),
    })?;
    let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut distinct = cores.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if !matches!(cores.len(), 1 | 2 | 4)
        || distinct.len() != cores.len()
        || cores.iter().any(|&c| c >= online)
    {
        return Err(Error::Cores {
            list: t.into(),
            accepted: format!(
                "one, two or four different CPUs of the {online} (0..{}); pathem never runs more busy threads than CPUs",
                online - 1
            ),
        });
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_one_two_or_four_distinct_cpus() {
        assert_eq!(parse_cores(None).unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cores(Some("0")).unwrap(), [0]);
        for bad in ["0,0", "x", "0,1,0", "99999"] {
            assert!(parse_cores(Some(bad)).unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }

    #[test]
    fn names_come_from_the_interfaces() {
        let name = |a: &str, b: &str| default_name(&a.parse().unwrap(), &b.parse().unwrap());
        assert_eq!(name("afxdp:pa", "pb"), "pa-pb");
        assert_eq!(name("dpdk:0000:3b:00.0", "dpdk:1"), "0000_3b_00.0-dpdk1");
    }
}
