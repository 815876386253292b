//! A live link between two ports, both directions, from start to stop.
//!
//! [`Link::start`] does everything in a worker thread (which first enters the namespace the
//! ports live in, if asked): it turns off receive aggregation on the ports (GRO and LRO merge
//! frames, so one emulated loss would drop a burst), opens both ports, builds one pipeline per
//! direction and places its stages on threads by the CPUs given: none, one thread; one CPU,
//! one thread pinned there; two, a thread per direction (one way: the direction's input and
//! output on a CPU each); four, each direction's input and output on a CPU of its own (TLEM's
//! pipeline: the delay line is all they share). Every thread is pinned to its own CPU, so
//! there are never more busy-polling threads than CPUs given. It returns once the ports are open, with what was opened in [`Started`], so errors
//! come back at once. [`Link::stop`] (or a stop flag set from elsewhere, such as a signal
//! handler, then [`Link::wait`]) stops receiving, sends what is due, gives the transmit ports
//! a moment to hand over what they hold, puts the offloads back and returns the final counters.

use crate::netns::enter;
use crate::Error;
use pathem_engine::{
    delay_line_sizing, run, ClassConfig, Control, DirectionCounters, EngineConfig, MonotonicClock, Pipeline,
    Schedule, Stats, Task,
};
use pathem_io::iface::{self, SavedOffloads};
use pathem_io::live::{self, LiveRx, LiveTx, PortOptions, PortSpec};
use pathem_io::TxPort;
use pathem_model::rng::direction_seed;
use pathem_model::{Nanos, PathConfig};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Everything a live link is made of.
#[derive(Clone, Debug)]
pub struct LinkSpec {
    /// Port A and port B.
    pub a: PortSpec,
    pub b: PortSpec,
    /// The path of frames from A to B, and from B to A.
    pub ab: PathConfig,
    pub ba: PathConfig,
    /// Each direction's classes (`--class`), tried in order; frames none takes follow `ab`/`ba`.
    pub classes_ab: Vec<ClassConfig>,
    pub classes_ba: Vec<ClassConfig>,
    /// Forward from A to B only.
    pub one_way: bool,
    /// The run's seed; each direction's is derived from it.
    pub seed: u64,
    pub engine: EngineConfig,
    pub ports: PortOptions,
    /// No CPU: one unpinned thread; one: one thread pinned there; two: a thread per direction.
    pub cores: Vec<usize>,
    /// Open the ports in this network namespace (the ports live there; pathem need not).
    pub netns: Option<String>,
    /// Leave GRO/LRO as they are.
    pub keep_offloads: bool,
    /// Changes at set times after the start, per direction.
    pub schedule_ab: Option<Schedule>,
    pub schedule_ba: Option<Schedule>,
    /// In place on an interface (`attach`): a→b is its egress, b→a its ingress, and `a`, `b`
    /// only name it; nothing on the interface changes (offloads neither).
    pub attach: Option<pathem_io::attach::AttachSpec>,
}

impl LinkSpec {
    /// A link between ports `a` and `b` with paths `ab` and `ba`, both ways, seeded with
    /// `seed`, and everything else as users get it by default: the engine's defaults (with the
    /// live busy-poll), the ports' defaults, one unpinned thread, this namespace, receive
    /// aggregation turned off on the ports, no schedule.
    pub fn between(a: PortSpec, b: PortSpec, ab: PathConfig, ba: PathConfig, seed: u64) -> LinkSpec {
        LinkSpec {
            a,
            b,
            ab,
            ba,
            classes_ab: Vec::new(),
            classes_ba: Vec::new(),
            one_way: false,
            seed,
            engine: EngineConfig { busy_poll: pathem_engine::DEFAULT_BUSY_POLL, ..EngineConfig::default() },
            ports: PortOptions::default(),
            cores: Vec::new(),
            netns: None,
            keep_offloads: false,
            schedule_ab: None,
            schedule_ba: None,
            attach: None,
        }
    }
}

impl LinkSpec {
    /// [`LinkSpec::between`] with the directions as the spec resolved them: their paths, their
    /// classes and their schedules.
    pub fn of(
        a: PortSpec,
        b: PortSpec,
        ab: &pathem_spec::link::Direction,
        ba: &pathem_spec::link::Direction,
        seed: u64,
    ) -> LinkSpec {
        LinkSpec {
            classes_ab: ab.class_configs(),
            classes_ba: ba.class_configs(),
            schedule_ab: ab.schedule.clone(),
            schedule_ba: ba.schedule.clone(),
            ..LinkSpec::between(a, b, ab.path.clone(), ba.path.clone(), seed)
        }
    }
}

/// What [`Link::start`] opened, in words for a startup message.
#[derive(Clone, Debug)]
pub struct Started {
    pub name_a: String,
    pub name_b: String,
    /// How each port was opened (`AF_XDP (native XDP, copy, receive stamps from XDP)`).
    pub how_a: String,
    pub how_b: String,
    /// Each direction's delay line: its size and why.
    pub delay_line_ab: String,
    pub delay_line_ba: Option<String>,
    /// Offloads turned off for the run, per interface.
    pub offloads_off: Vec<(String, Vec<&'static str>)>,
    /// DPDK's EAL arguments pathem chose, in words (empty without DPDK ports).
    pub eal: Vec<String>,
    /// On an attached interface, which of egress and ingress take their path.
    pub attached: Option<(bool, bool)>,
    /// Each direction's classes, a line each (`class1 "host 10.0.0.3": delay 300ms`).
    pub classes: [Vec<String>; 2],
}

/// A class in words, for the startup lines.
fn class_line(c: &ClassConfig) -> String {
    format!("class {} {:?}: {}", c.name, c.filter.to_string(), c.path)
}

/// What a link did, when it stopped.
#[derive(Clone, Debug)]
pub struct Final {
    pub ab: Stats,
    pub ba: Option<Stats>,
    /// Each class's own counters (the default path first; empty without classes).
    pub classes_ab: Vec<(String, Stats)>,
    pub classes_ba: Vec<(String, Stats)>,
    /// Receive errors (an interface that was down for a while).
    pub rx_errors: u64,
    /// Frames each transmitting port refused, by class, with its name and MTU (a line each
    /// class from [`pathem_io::TxRefused::describe`]).
    pub tx_refused: Vec<(String, Option<u32>, pathem_io::TxRefused)>,
    /// DPDK ports closed at the end, with the mbufs their pools still had in use (zero).
    pub closed: Vec<pathem_io::dpdk::Closed>,
}

impl Started {
    /// What a command says when the link is up: the ports, how they were opened, each
    /// direction's path (`ab`, `ba`) and delay line; a line each.
    pub fn describe(&self, ab: &PathConfig, ba: &PathConfig, one_way: bool, seed: u64) -> Vec<String> {
        let (a, b) = (&self.name_a, &self.name_b);
        let mut out = Vec::new();
        if let Some((egress, ingress)) = self.attached {
            out.push(format!("attached to {b} (seed {seed})"));
            for (on, way, from, to, path) in [(egress, "egress", a, b, ab), (ingress, "ingress", b, a, ba)] {
                out.push(match on {
                    true => format!("  {way} ({from} -> {to}): {path}"),
                    false => format!("  {way}: left alone (start with --{way} to impair it)"),
                });
                let classes = if way == "egress" { &self.classes[0] } else { &self.classes[1] };
                out.extend(classes.iter().filter(|_| on).map(|c| format!("    {c}")));
            }
            out.extend(self.how_a.split("; ").map(|h| format!("  {h}")));
            return out;
        }
        if !self.eal.is_empty() {
            out.push(format!("DPDK EAL defaults: {}", self.eal.join("; ")));
        }
        for (name, off) in &self.offloads_off {
            out.push(format!("{name}: turned off {} for the run", off.join(", ")));
        }
        out.push(format!("port A {a}: {}", self.how_a));
        out.push(format!("port B {b}: {}", self.how_b));
        out.push(format!("forwarding {a} <-> {b} (seed {seed})"));
        out.push(format!("  {a} -> {b}: {ab}"));
        out.extend(self.classes[0].iter().map(|c| format!("    {c}")));
        out.push(match one_way {
            false => format!("  {b} -> {a}: {ba}"),
            true => format!("  {b} -> {a}: not forwarded (--one-way)"),
        });
        out.extend(self.classes[1].iter().filter(|_| !one_way).map(|c| format!("    {c}")));
        out.push(format!("  delay line {a} -> {b}: {}", self.delay_line_ab));
        if let Some(d) = &self.delay_line_ba {
            out.push(format!("  delay line {b} -> {a}: {d}"));
        }
        out
    }
}

impl Final {
    /// What a command says when the link has stopped: errors, refusals, and what was left in
    /// flight; a line each.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.rx_errors > 0 {
            out.push(format!("{} receive errors (an interface was down for a while)", self.rx_errors));
        }
        for (name, mtu, refused) in &self.tx_refused {
            out.extend(refused.describe(name, *mtu));
        }
        let in_flight = self.ab.in_flight + self.ba.as_ref().map_or(0, |s| s.in_flight);
        let queued = self.ab.port_tx_queued + self.ba.as_ref().map_or(0, |s| s.port_tx_queued);
        out.push(match (in_flight, queued) {
            (0, 0) => "stopped; every frame taken was forwarded or dropped as counted".to_string(),
            (f, 0) => format!("stopped; {f} frames still in the delay line were not sent (in-flight above)"),
            (f, q) => format!(
                "stopped; {f} frames still in the delay line were not sent, {q} handed to a port it never took (in port above)"
            ),
        });
        out.extend(self.closed.iter().map(|c| c.describe()));
        out
    }
}

/// A running link.
pub struct Link {
    stop: Arc<AtomicBool>,
    worker: JoinHandle<Result<Final, Error>>,
    counters_ab: DirectionCounters,
    counters_ba: Option<DirectionCounters>,
    /// Each direction's controls: the default path's, then each class's.
    control_ab: Vec<Control>,
    control_ba: Option<Vec<Control>>,
    pub started: Started,
    /// When the link started forwarding (CLOCK_MONOTONIC): schedules count from here.
    pub since: Nanos,
}

type LivePipe = Pipeline<LiveRx, LiveTx>;

/// Runs `task` on this thread until `stop`, pinned to `cpu` if given; an input waits for its
/// port's socket (a DPDK port has none: it is polled), anything else spins (it has the CPU to
/// itself). Stops the others when it fails.
fn drive(
    task: &mut dyn Task,
    cpu: Option<usize>,
    fds: Vec<Option<RawFd>>,
    stop: &AtomicBool,
) -> Result<(), Error> {
    if let Some(c) = cpu {
        pin(c)?;
    }
    let mut clock = if fds.is_empty() { MonotonicClock::new() } else { MonotonicClock::for_ports(fds) };
    let result = run(&mut [task], &mut clock, stop);
    if result.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    Ok(result?)
}

/// Places the directions' stages on threads as `cores` says (see the module doc) and runs
/// them until `stop`; gives the pipelines back, whole, to be finished.
fn place(
    mut ab: LivePipe,
    mut ba: Option<LivePipe>,
    cores: &[usize],
    stop: &AtomicBool,
) -> Result<(LivePipe, Option<LivePipe>), Error> {
    let joined = |r: std::thread::Result<Result<(), Error>>| r.map_err(|_| Error::Panicked("forwarding"))?;
    match (ba.take(), cores) {
        // Each direction on a CPU of its own.
        (Some(mut b), &[c0, c1]) => {
            let fds_b = b.input.rx.raw_fds();
            let fds_a = ab.input.rx.raw_fds();
            std::thread::scope(|s| -> Result<(), Error> {
                let other = s.spawn(|| drive(&mut b, Some(c1), fds_b, stop));
                let mine = drive(&mut ab, Some(c0), fds_a, stop);
                joined(other.join())?;
                mine
            })?;
            Ok((ab, Some(b)))
        }
        // One way: the direction's input and output on a CPU each.
        (None, &[c0, c1]) => {
            let fds = ab.input.rx.raw_fds();
            let (mut input, mut output) = ab.split();
            std::thread::scope(|s| -> Result<(), Error> {
                let out = s.spawn(|| drive(&mut output, Some(c1), Vec::new(), stop));
                let mine = drive(&mut input, Some(c0), fds, stop);
                joined(out.join())?;
                mine
            })?;
            Ok((Pipeline::join(input, output), None))
        }
        // Four stages on four CPUs.
        (Some(b), &[c0, c1, c2, c3]) => {
            let (fds_a, fds_b) = (ab.input.rx.raw_fds(), b.input.rx.raw_fds());
            let (mut ia, mut oa) = ab.split();
            let (mut ib, mut ob) = b.split();
            std::thread::scope(|s| -> Result<(), Error> {
                let t1 = s.spawn(|| drive(&mut oa, Some(c1), Vec::new(), stop));
                let t2 = s.spawn(|| drive(&mut ib, Some(c2), fds_b, stop));
                let t3 = s.spawn(|| drive(&mut ob, Some(c3), Vec::new(), stop));
                let mine = drive(&mut ia, Some(c0), fds_a, stop);
                joined(t1.join())?;
                joined(t2.join())?;
                joined(t3.join())?;
                mine
            })?;
            Ok((Pipeline::join(ia, oa), Some(Pipeline::join(ib, ob))))
        }
        (None, &[_, _, _, _]) => Err(Error::Cores {
            list: "of four CPUs".into(),
            accepted: "one or two CPUs with --one-way".into(),
        }),
        // Everything on one thread, pinned if a CPU is given.
        (b, cores) => {
            let mut fds = ab.input.rx.raw_fds();
            fds.extend(b.iter().flat_map(|p| p.input.rx.raw_fds()));
            let mut b = b;
            if let Some(&c) = cores.first() {
                pin(c)?;
            }
            let mut clock = MonotonicClock::for_ports(fds);
            match b.as_mut() {
                Some(p) => run(&mut [&mut ab, p], &mut clock, stop)?,
                None => run(&mut [&mut ab], &mut clock, stop)?,
            }
            Ok((ab, b))
        }
    }
}

/// How long a transmit port gets at stop to hand over what it still holds.
const DRAIN: Duration = Duration::from_millis(200);

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> Result<(), Error> {
    Ok(pathem_io::host::pin_to_cpu(cpu)?)
}

/// Offloads turned off for a run, put back when dropped (also when opening a port failed).
struct Offloads(Vec<SavedOffloads>);

impl Drop for Offloads {
    fn drop(&mut self) {
        for s in &self.0 {
            let _ = s.restore();
        }
    }
}

impl Link {
    /// Opens the ports and starts forwarding; see the module doc.
    pub fn start(spec: LinkSpec) -> Result<Link, Error> {
        if !matches!(spec.cores.len(), 0 | 1 | 2 | 4) {
            let list = spec.cores.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
            return Err(Error::Cores { list, accepted: "one, two or four CPUs".into() });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let worker_stop = stop.clone();
        let worker = std::thread::Builder::new()
            .name("pathem-link".into())
            .spawn(move || worker(spec, worker_stop, ready_tx))
            .map_err(|source| Error::Io { what: "cannot start the link's thread".into(), source })?;
        match ready_rx.recv() {
            Ok(r) => Ok(Link {
                stop,
                worker,
                counters_ab: r.counters.0,
                counters_ba: r.counters.1,
                control_ab: r.controls.0,
                control_ba: r.controls.1,
                started: r.started,
                since: r.since,
            }),
            // The worker failed before it was ready: its error says why.
            Err(_) => Err(worker
                .join()
                .map_err(|_| Error::Panicked("link"))?
                .err()
                .unwrap_or(Error::Panicked("link"))),
        }
    }

    /// The flag that stops the link (for signal handlers and timers).
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Each direction's counters (b→a is `None` one way).
    pub fn counters(&self) -> (&DirectionCounters, Option<&DirectionCounters>) {
        (&self.counters_ab, self.counters_ba.as_ref())
    }

    /// Each direction's controls of every path: the default path's, then each class's in order.
    pub fn path_controls(&self) -> (&[Control], Option<&[Control]>) {
        (&self.control_ab, self.control_ba.as_deref())
    }

    /// Stops the link and returns its final counters.
    pub fn stop(self) -> Result<Final, Error> {
        self.stop.store(true, Ordering::Relaxed);
        self.wait()
    }

    /// Waits until the link stops (its stop flag was set elsewhere), then returns its final
    /// counters.
    pub fn wait(self) -> Result<Final, Error> {
        self.worker.join().map_err(|_| Error::Panicked("link"))?
    }
}

/// What the worker hands back once the ports are open.
struct Ready {
    started: Started,
    counters: (DirectionCounters, Option<DirectionCounters>),
    controls: (Vec<Control>, Option<Vec<Control>>),
    since: Nanos,
}

fn worker(spec: LinkSpec, stop: Arc<AtomicBool>, ready: mpsc::Sender<Ready>) -> Result<Final, Error> {
    if let Some(ns) = &spec.netns {
        enter(ns)?;
    }
    let mut offloads = Offloads(Vec::new());
    let mut offloads_off = Vec::new();
    let (eal, port_a, port_b, steering) = match &spec.attach {
        Some(attach) => {
            let at = pathem_io::attach::open(attach, spec.ports.max_frame)?;
            let a = live::Opened {
                rx: at.egress.0,
                tx: at.ingress.1,
                ifname: "stack".into(),
                how: at.how.join("; "),
            };
            let b = live::Opened {
                rx: at.ingress.0,
                tx: at.egress.1,
                ifname: attach.iface.clone(),
                how: String::new(),
            };
            (Vec::new(), a, b, Some(at.steering))
        }
        None => {
            if !spec.keep_offloads {
                for name in [spec.a.kernel_iface(), spec.b.kernel_iface()].into_iter().flatten() {
                    let saved = iface::disable_offloads(name)?;
                    if !saved.changed().is_empty() {
                        offloads_off.push((name.to_string(), saved.changed()));
                    }
                    offloads.0.push(saved);
                }
            }
            let eal = live::prepare(&[&spec.a, &spec.b], &spec.ports)?;
            (eal, live::open(&spec.a, &spec.ports)?, live::open(&spec.b, &spec.ports)?, None)
        }
    };
    let (name_a, name_b, how_a, how_b) = (port_a.ifname, port_b.ifname, port_a.how, port_b.how);
    // Each direction carries no frame longer than its transmitting port sends.
    let towards = |tx: &LiveTx| EngineConfig {
        max_frame: tx.max_frame().map_or(spec.engine.max_frame, |m| m.min(spec.engine.max_frame)),
        ..spec.engine.clone()
    };
    let (engine_ab, engine_ba) = (towards(&port_b.tx), towards(&port_a.tx));
    let seed_ab = direction_seed(spec.seed, 0);
    let mut ab: LivePipe =
        Pipeline::with_classes(port_a.rx, port_b.tx, &spec.ab, &spec.classes_ab, seed_ab, &engine_ab)?;
    let mut ba: Option<LivePipe> = match spec.one_way {
        true => None,
        false => {
            let seed_ba = direction_seed(spec.seed, 1);
            Some(Pipeline::with_classes(
                port_b.rx,
                port_a.tx,
                &spec.ba,
                &spec.classes_ba,
                seed_ba,
                &engine_ba,
            )?)
        }
    };
    let sizing = |p: &LivePipe, cfg: &PathConfig, engine: &EngineConfig| {
        let why = delay_line_sizing(cfg, engine).why;
        let classes = p.controls().len() - 1;
        match classes {
            0 => format!("{} B ({why})", p.delay_line_capacity()),
            n => format!(
                "{} B in all: the default path's ({why}) and a line per class ({n})",
                p.delay_line_capacity()
            ),
        }
    };
    let started = Started {
        delay_line_ab: sizing(&ab, &spec.ab, &engine_ab),
        delay_line_ba: ba.as_ref().map(|p| sizing(p, &spec.ba, &engine_ba)),
        name_a,
        name_b,
        how_a,
        how_b,
        offloads_off,
        eal,
        attached: spec.attach.as_ref().map(|a| (a.egress, a.ingress)),
        classes: [
            spec.classes_ab.iter().map(class_line).collect(),
            spec.classes_ba.iter().map(class_line).collect(),
        ],
    };
    let since = pathem_engine::monotonic_now();
    if let Some(s) = spec.schedule_ab.clone() {
        ab.follow(s, since);
    }
    if let (Some(p), Some(s)) = (ba.as_mut(), spec.schedule_ba.clone()) {
        p.follow(s, since);
    }
    ab.follow_classes(since);
    if let Some(p) = ba.as_mut() {
        p.follow_classes(since);
    }
    let _ = ready.send(Ready {
        started,
        counters: (ab.counters().clone(), ba.as_ref().map(|p| p.counters().clone())),
        controls: (ab.controls(), ba.as_ref().map(|p| p.controls())),
        since,
    });

    let (mut ab, mut ba) = place(ab, ba, &spec.cores, &stop)?;
    // An attached interface is given back first: its frames go the plain way from now on.
    drop(steering);
    let now = pathem_engine::monotonic_now();
    let final_ab = ab.finish(now, DRAIN)?;
    let final_ba = match ba.as_mut() {
        Some(p) => Some(p.finish(now, DRAIN)?),
        None => None,
    };
    let classes_ab = ab.counters().classes();
    let classes_ba = ba.as_ref().map(|p| p.counters().classes()).unwrap_or_default();
    let rx_errors = ab.input.rx.errors() + ba.as_ref().map_or(0, |p| p.input.rx.errors());
    let mut tx_refused = Vec::new();
    let outputs = [(&spec.b, Some(&mut ab)), (&spec.a, ba.as_mut())];
    for (port, pipe) in outputs {
        if let Some(p) = pipe {
            let mtu = port.kernel_iface().and_then(pathem_io::iface::mtu);
            tx_refused.push((port.name().to_string(), mtu, p.output.tx.refused(true)));
        }
    }
    // Closing the ports (a DPDK port closes when both its halves are gone) before the offloads
    // are put back.
    drop((ab, ba));
    drop(offloads);
    Ok(Final {
        ab: final_ab,
        ba: final_ba,
        classes_ab,
        classes_ba,
        rx_errors,
        tx_refused,
        closed: pathem_io::dpdk::closed(),
    })
}
