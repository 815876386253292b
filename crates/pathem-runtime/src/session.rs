//! A link as users run it (`pathem run`, `pathem shell`): the [`Link`], its control socket
//! (`pathem ctl NAME`), its metrics endpoint if asked, a stop after a set time, and a report
//! every so often; and the checks of what the command line names before anything opens (the
//! two ports, the CPUs).

use crate::control::{self, Server};
use crate::metrics::{self, Metrics};
use crate::{Error, Final, Link, LinkSpec};
use pathem_engine::{monotonic_now, DirectionCounters, EngineConfig, Stats};
use pathem_io::filler::TxTiming;
use pathem_io::iface;
use pathem_io::live::{PortOptions, PortSpec};
use pathem_model::units::Size;
use pathem_model::units::{Rate, DEFAULT_LINE_RATE};
use pathem_model::Nanos;
use pathem_spec::file::ConfigFile;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

/// How a live link is watched and ended, as `run` and `attach` take it on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct Serving {
    /// Name of this link for `pathem ctl NAME` (its socket is /run/pathem/NAME.sock)
    /// [default: run: the two interfaces, e.g. pa-pb; attach: the interface].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Serve Prometheus metrics on PORT (loopback) or ADDR:PORT, e.g. 9100 [default: off].
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub metrics: Option<String>,
    /// Print the counters every DUR on stderr (e.g. 1s).
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub stats_interval: Option<pathem_model::units::Duration>,
    /// Counters as JSON lines (periodic and final) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Stop by itself after DUR.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub duration: Option<pathem_model::units::Duration>,
}

impl Serving {
    /// The settings against their ranges: the link's name (`default` when not given) and the
    /// metrics address.
    pub fn check(&self, default: String) -> Result<(String, Option<SocketAddr>), Error> {
        use pathem_model::limits::within;
        if let Some(d) = self.stats_interval {
            within("stats-interval", d.0, Nanos::from_millis(1)..=Nanos::from_secs(86_400), "1ms to 1 day")?;
        }
        if let Some(d) = self.duration {
            within("duration", d.0, Nanos(1)..=Nanos::from_secs(365 * 86_400), "above 0, up to 1 year")?;
        }
        let name = self.name.clone().unwrap_or(default);
        control::check_name(&name).map_err(|e| match self.name {
            Some(_) => e,
            None => Error::DefaultName(name.clone()),
        })?;
        Ok((name, self.metrics.as_deref().map(metrics::parse_addr).transpose()?))
    }
}

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
        directions: [&pathem_spec::link::Direction; 2],
        metrics: Option<SocketAddr>,
    ) -> Result<Session, Error> {
        // From the moment its ports change their interfaces, a closed output must not kill
        // the run before its cleanup: a write fails instead (the lines said at the start are
        // lost; a report that cannot be written stops the run, as SIGTERM does).
        pathem_io::ignore_sigpipe();
        control::check_free(&name)?;
        let seed = spec.seed;
        let link = Link::start(spec)?;
        let specs = directions.map(control::DirectionSpecs::from);
        let served = control::serve(&link, name.clone(), seed, specs)
            .and_then(|control| Ok((control, metrics.map(|addr| metrics::serve(&link, addr)).transpose()?)));
        match served {
            Ok((control, metrics)) => Ok(Session { link, name, control, metrics, started: monotonic_now() }),
            // Stopped as at the end of a run: the interfaces get their offloads back, an
            // attached one its plain path.
            Err(e) => {
                let _ = link.stop();
                Err(e)
            }
        }
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

    /// Where to reach it: its control socket and its metrics, a line each.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!(
            "  control: pathem ctl {} show|set (socket {})",
            self.name,
            self.control_path().display()
        )];
        out.extend(self.metrics_addr().map(|addr| format!("  metrics: http://{addr}/metrics")));
        out
    }

    /// Runs until SIGINT, SIGTERM or SIGHUP (its terminal closed), or for `duration` if given;
    /// hands `report` the counters every `every` (event `interval`) and at the end (event
    /// `final`). Returns the final counters.
    /// `report` says whether its output took the report: a closed one (`run --json | head -1`)
    /// stops the link as SIGTERM does, with its cleanup, instead of SIGPIPE killing it.
    pub fn serve(
        self,
        every: Option<Nanos>,
        duration: Option<Nanos>,
        report: impl Fn(&Report) -> bool + Clone + Send + 'static,
    ) -> Result<Final, Error> {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
            signal_hook::flag::register(sig, self.link.stopper())
                .map_err(|source| Error::Io { what: "cannot install signal handlers".into(), source })?;
        }
        if let Some(d) = duration {
            self.stop_after(d);
        }
        if let Some(every) = every {
            let (counters, report, stop) = (self.link.counters(), report.clone(), self.link.stopper());
            let counters = (counters.0.clone(), counters.1.cloned());
            self.every(every, move |seconds| {
                if !report(&Report::now("interval", seconds, &counters)) {
                    stop.store(true, Ordering::Relaxed);
                }
            });
        }
        let (end, seconds) = self.wait()?;
        let classes = Report::class_list(&end.classes_ab, &end.classes_ba);
        report(&Report {
            event: "final",
            seconds,
            a_to_b: end.ab.clone(),
            b_to_a: end.ba.clone(),
            classes,
            taps_unread: end.taps_unread(),
        });
        Ok(end)
    }

    /// Stops the link now and returns its final counters.
    pub fn stop(self) -> Result<Final, Error> {
        let Session { link, control, metrics, .. } = self;
        drop((control, metrics));
        link.stop()
    }
}

/// Writes `r` as `run` does: a JSON line on stdout, or a line per direction on stderr (the
/// ports named `a` and `b`). False when the output is closed.
pub fn write_report(r: &Report, json: bool, a: &str, b: &str) -> bool {
    use std::io::Write;
    match json {
        true => {
            writeln!(std::io::stdout().lock(), "{}", serde_json::to_string(r).unwrap_or_default()).is_ok()
        }
        false => say(&r.lines(a, b)),
    }
}

/// Writes `lines` on stderr, each after `pathem: `; false when stderr is closed (no panic).
pub fn say(lines: &[String]) -> bool {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    lines.iter().all(|l| writeln!(err, "pathem: {l}").is_ok())
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
    /// With classes: each path's own counters, a→b's then b→a's (the default path first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassReport>,
    /// In the final report of an attachment, only when true: its TAP devices still gave
    /// frames when the time to read them at stop ran out (a host that kept sending on one),
    /// or one failed while it was read then ([`Final::taps_unread`]), so what they held then
    /// may be in no counter.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub taps_unread: bool,
}

/// One class's counters in a [`Report`].
#[derive(Clone, Debug, Serialize)]
pub struct ClassReport {
    pub direction: &'static str,
    pub class: String,
    pub stats: Stats,
}

impl Report {
    /// The counters now.
    pub fn now(
        event: &'static str,
        seconds: f64,
        counters: &(DirectionCounters, Option<DirectionCounters>),
    ) -> Report {
        let (a_to_b, ab) = counters.0.read();
        let (b_to_a, ba) = match counters.1.as_ref().map(DirectionCounters::read) {
            Some((total, classes)) => (Some(total), classes),
            None => (None, Vec::new()),
        };
        Report { event, seconds, a_to_b, b_to_a, classes: Report::class_list(&ab, &ba), taps_unread: false }
    }

    /// Both directions' class counters as a list.
    pub fn class_list(ab: &[(String, Stats)], ba: &[(String, Stats)]) -> Vec<ClassReport> {
        let mut out = Vec::new();
        for (direction, list) in [("a_to_b", ab), ("b_to_a", ba)] {
            out.extend(list.iter().map(|(class, stats)| ClassReport {
                direction,
                class: class.clone(),
                stats: stats.clone(),
            }));
        }
        out
    }

    /// The report's text lines: a line per direction, then one per class.
    pub fn lines(&self, a: &str, b: &str) -> Vec<String> {
        let at = |s: &Stats, name: String| format!("[{:.1}s] {}", self.seconds, s.line(&name));
        let mut out = vec![at(&self.a_to_b, format!("{a}->{b}"))];
        out.extend(self.b_to_a.as_ref().map(|s| at(s, format!("{b}->{a}"))));
        for c in &self.classes {
            let (from, to) = if c.direction == "a_to_b" { (a, b) } else { (b, a) };
            out.push(at(&c.stats, format!("{from}->{to} class {}", c.class)));
        }
        out
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Tuning {
    /// DPDK's EAL arguments for dpdk: ports, separated by spaces (cores, memory, --no-huge,
    /// -a allow list, file prefix); they override pathem's defaults.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub eal: Option<String>,
    /// Leave GRO/LRO/TSO/GSO as they are (frames may then be aggregated before pathem sees them).
    #[arg(long)]
    pub keep_offloads: bool,
    /// Delay line size per direction [default: rate × max delay (+ queue for drop-tail), at least 4 MiB].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub buffer: Option<Size>,
    /// Keep polling, without sleeping, for this long after each frame (0ms: sleep whenever
    /// nothing is due). Waking from a sleep delays the frame that woke pathem by the host's
    /// wake-up latency (tens of µs on a virtual machine); polling costs CPU while traffic flows.
    #[arg(long, value_name = "DUR", default_value = "1ms", allow_hyphen_values = true)]
    pub busy_poll: pathem_model::units::Duration,
    /// Longest frame carried, 1 to 65536 bytes; longer ones are dropped and counted as `oversize`.
    #[arg(long, value_name = "BYTES", default_value_t = 9216)]
    pub max_frame: usize,
    /// Receive buffer of each AF_PACKET port, 64KiB to 1GiB: frames beyond it are dropped by
    /// the kernel and counted as port drops, rather than waiting unseen in a long buffer.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub rx_buffer: Size,
    /// How transmitting ports time frames: software (each frame handed to the port when due)
    /// or filler, optionally with mac=MAC, ethertype=0xNNNN, lead=DUR after commas (dpdk:
    /// ports: filler frames the next hop discards fill the wire up to each frame's time, so
    /// the NIC starts it then; frames are handed a lead, default 50us, ahead). For both
    /// directions, or one with a-to-b: or b-to-a: before it (repeatable).
    #[arg(long, value_name = "[DIR:]MODE")]
    pub tx_timing: Vec<String>,
    /// Line rate the NIC sends fillers at, 1mbit to 1tbit (--tx-timing filler) [default: the
    /// port's link speed; needed where it reports none].
    #[arg(long, value_name = "RATE")]
    pub line_rate: Option<Rate>,
}

/// `--rx-buffer` (a packet-socket port's ring, an attachment's TAP devices' rings), checked
/// against its range: 64 KiB to 1 GiB.
pub fn rx_buffer(size: Size) -> Result<usize, pathem_model::limits::RangeError> {
    use pathem_io::afpacket::{MAX_RX_BUFFER, MIN_RX_BUFFER};
    pathem_model::limits::within(
        "rx-buffer",
        size.0,
        MIN_RX_BUFFER as u64..=MAX_RX_BUFFER as u64,
        "64KiB to 1GiB",
    )?;
    Ok(size.0 as usize)
}

impl Tuning {
    /// The engine's and the ports' settings for a link whose port A is `port_a`, with the
    /// config file's `buffer` and `eal` where the flags give none, checked against their
    /// ranges. The line rate is the interface's speed where the kernel knows it,
    /// [`DEFAULT_LINE_RATE`] otherwise.
    ///
    /// [`DEFAULT_LINE_RATE`]: pathem_model::units::DEFAULT_LINE_RATE
    pub fn settings(
        &self,
        port_a: &PortSpec,
        port_b: &PortSpec,
        file: &ConfigFile,
    ) -> Result<(EngineConfig, PortOptions), Error> {
        use pathem_model::limits::within;
        let rx_buffer = rx_buffer(self.rx_buffer)?;
        within("busy-poll", self.busy_poll.0, Nanos::ZERO..=Nanos::from_secs(1), "0ms to 1s")?;
        let eal = self.eal.clone().or(file.eal.clone());
        if let Some(eal) = &eal {
            pathem_io::dpdk::split_eal(eal).map_err(Error::Eal)?;
        }
        let engine = EngineConfig {
            buffer: self.buffer.or(file.buffer).map(|b| usize::try_from(b.0).unwrap_or(usize::MAX)),
            max_frame: self.max_frame,
            line_rate: port_a.kernel_iface().map_or(DEFAULT_LINE_RATE, |i| Rate(iface::line_rate_bps(i))),
            busy_poll: self.busy_poll.0,
            offline: false,
        };
        engine.validate()?;
        let (tx_timing_a, tx_timing_b) = self.tx_timings(port_a, port_b)?;
        let ports = PortOptions { max_frame: engine.max_frame, rx_buffer, eal, tx_timing_a, tx_timing_b };
        Ok((engine, ports))
    }

    /// `--tx-timing` and `--line-rate`: how port A's transmitting half times frames (the b→a
    /// direction's) and port B's (a→b), each checked against what the port can do.
    fn tx_timings(&self, port_a: &PortSpec, port_b: &PortSpec) -> Result<(TxTiming, TxTiming), Error> {
        use pathem_io::filler::LINE_RATE_RANGE;
        let (mut a, mut b) = (TxTiming::Software, TxTiming::Software);
        for given in &self.tx_timing {
            let bad = |why: String| Error::TxTiming(format!("--tx-timing {given}: {why}"));
            // A direction is a word before the first colon and before any comma (a MAC
            // address after `mac=` has colons of its own).
            let (dirs, mode) = match given.split_once(':') {
                Some(("a-to-b", m)) => ((false, true), m),
                Some(("b-to-a", m)) => ((true, false), m),
                Some((d, _)) if !d.contains(',') => {
                    return Err(bad(format!("unknown direction `{d}`; accepted: a-to-b, b-to-a")))
                }
                _ => ((true, true), given.as_str()),
            };
            let mut timing: TxTiming = mode.parse().map_err(bad)?;
            if let (TxTiming::Filler(f), Some(rate)) = (&mut timing, self.line_rate) {
                f.line_rate = Some(rate);
            }
            for (on, port, slot) in [(dirs.0, port_a, &mut a), (dirs.1, port_b, &mut b)] {
                if on {
                    if let Some(why) = pathem_io::live::timing_refused(port, &timing, self.max_frame) {
                        return Err(bad(why));
                    }
                    *slot = timing.clone();
                }
            }
        }
        if let Some(rate) = self.line_rate {
            pathem_model::limits::within(
                "line-rate",
                rate.bits_per_sec(),
                LINE_RATE_RANGE,
                "1mbit to 1tbit",
            )?;
            if a == TxTiming::Software && b == TxTiming::Software {
                return Err(Error::TxTiming(format!("--line-rate {rate}: only --tx-timing filler uses it")));
            }
        }
        Ok((a, b))
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

/// `--cores LIST`: different CPUs of the machine's, comma-separated, at most as many as it has
/// (none: one unpinned thread). How a link places its stages and receive queues on them is
/// [`crate::link::direction_cores`]'s; pathem never runs more busy threads than CPUs given.
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
    if cores.is_empty() || distinct.len() != cores.len() || cores.iter().any(|&c| c >= online) {
        return Err(Error::Cores {
            list: t.into(),
            accepted: format!(
                "different CPUs of the {online} (0..{}); pathem never runs more busy threads than CPUs",
                online - 1
            ),
        });
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// `--rx-buffer` takes 64 KiB to 1 GiB, the bounds included, and refuses the rest
        /// with a line naming the flag, the value and the range.
        #[test]
        fn rx_buffer_takes_its_range_and_refuses_the_rest(v in proptest::prop_oneof![
            0u64..=u64::MAX,
            (64u64 << 10) - 2..=(64 << 10) + 2,
            (1u64 << 30) - 2..=(1 << 30) + 2,
        ]) {
            let inside = (64 << 10..=1 << 30).contains(&v);
            match rx_buffer(Size(v)) {
                Ok(n) => proptest::prop_assert!(inside && n as u64 == v),
                Err(e) => {
                    let e = e.to_string();
                    proptest::prop_assert!(!inside && e.contains("--rx-buffer") && e.contains("64KiB to 1GiB"), "{}", e);
                }
            }
        }
    }

    #[test]
    fn busy_poll_default_is_the_one_other_live_loops_use() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            tuning: Tuning,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["pathem"]).unwrap();
        assert_eq!(cli.tuning.busy_poll.0, pathem_engine::DEFAULT_BUSY_POLL);
    }

    #[test]
    fn tx_timing_is_given_per_transmitting_port_and_refused_where_a_port_cannot() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            tuning: Tuning,
        }
        let tuning = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(std::iter::once("pathem").chain(args.iter().copied()))
                .unwrap()
                .tuning
        };
        let (dpdk, packet): (PortSpec, PortSpec) =
            ("dpdk:net_pcap0,tx_pcap=/dev/null".parse().unwrap(), "afpacket:lo".parse().unwrap());
        let filler = |rate: Option<u64>| {
            TxTiming::Filler(pathem_io::filler::FillerSpec {
                line_rate: rate.map(Rate),
                ..Default::default()
            })
        };
        // A MAC address's colons are no direction.
        let t = tuning(&["--tx-timing", "filler,mac=01:80:c2:00:00:05"]);
        let TxTiming::Filler(f) = t.tx_timings(&dpdk, &dpdk).unwrap().1 else { panic!("filler") };
        assert_eq!(f.dst, [0x01, 0x80, 0xc2, 0, 0, 5]);
        let t = tuning(&["--tx-timing", "b-to-a:filler,mac=01:80:c2:00:00:05"]);
        assert!(matches!(t.tx_timings(&dpdk, &packet).unwrap(), (TxTiming::Filler(_), TxTiming::Software)));
        let t = tuning(&["--tx-timing", "filler", "--line-rate", "1gbit"]);
        assert_eq!(
            t.tx_timings(&dpdk, &dpdk).unwrap(),
            (filler(Some(1_000_000_000)), filler(Some(1_000_000_000)))
        );
        // a-to-b is port B's transmitting half: A may be any port.
        let t = tuning(&["--tx-timing", "a-to-b:filler"]);
        assert_eq!(t.tx_timings(&packet, &dpdk).unwrap(), (TxTiming::Software, filler(None)));
        assert_eq!(
            tuning(&[]).tx_timings(&packet, &packet).unwrap(),
            (TxTiming::Software, TxTiming::Software)
        );
        for (args, a, b, says) in [
            (&["--tx-timing", "filler"][..], &packet, &dpdk, "only dpdk: ports can"),
            (&["--tx-timing", "b-to-a:filler"], &packet, &dpdk, "only dpdk: ports can"),
            (&["--tx-timing", "sideways:filler"], &dpdk, &dpdk, "accepted: a-to-b, b-to-a"),
            (&["--tx-timing", "filler,lead=2s"], &dpdk, &dpdk, "accepted:"),
            (&["--line-rate", "1gbit"], &dpdk, &dpdk, "only --tx-timing filler uses it"),
            (&["--tx-timing", "filler", "--line-rate", "999kbit"], &dpdk, &dpdk, "1mbit to 1tbit"),
            (&["--tx-timing", "filler,max=9500"], &dpdk, &dpdk, "longer than dpdk:net_pcap0"),
            (&["--tx-timing", "filler,max=1600", "--max-frame", "1518"], &dpdk, &dpdk, "1514 B"),
        ] {
            let e = tuning(args).tx_timings(a, b).unwrap_err();
            assert!(
                e.is_usage() && e.to_string().contains(says) && !e.to_string().contains('\n'),
                "{args:?}: {e}"
            );
        }
    }

    #[test]
    fn cores_are_distinct_cpus_of_the_machine() {
        assert_eq!(parse_cores(None).unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cores(Some("0")).unwrap(), [0]);
        for bad in ["0,0", "x", "0,1,0", "99999", "", "0,"] {
            assert!(parse_cores(Some(bad)).unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }

    proptest::proptest! {
        /// Any `--cores` text: refused in one line naming what is accepted, or a list of
        /// different CPUs of this machine; never a panic. A list both ways is shared out or
        /// refused the same way.
        #[test]
        fn any_cores_text_is_a_list_of_distinct_cpus_or_one_refusal(text in "[0-9, x]{0,12}", one_way: bool) {
            let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            match parse_cores(Some(&text)) {
                Ok(cores) => {
                    let mut distinct = cores.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    proptest::prop_assert!(!cores.is_empty() && distinct.len() == cores.len());
                    proptest::prop_assert!(cores.iter().all(|&c| c < online));
                    if let Ok([a, b]) = crate::link::direction_cores(&cores, one_way) {
                        proptest::prop_assert_eq!(a.len() + b.len(), cores.len());
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    proptest::prop_assert!(e.contains("accepted") && !e.contains('\n'), "{}", e);
                }
            }
        }
    }

    #[test]
    fn names_come_from_the_interfaces() {
        let name = |a: &str, b: &str| default_name(&a.parse().unwrap(), &b.parse().unwrap());
        assert_eq!(name("afxdp:pa", "pb"), "pa-pb");
        assert_eq!(name("dpdk:0000:3b:00.0", "dpdk:1"), "0000_3b_00.0-dpdk1");
    }
}
