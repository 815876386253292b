//! A live link between two ports, both directions, from start to stop.
//!
//! [`Link::start`] does everything in a worker thread (which first enters the namespace the
//! ports live in, if asked): it turns off receive aggregation on the ports (GRO and LRO merge
//! frames, so one emulated loss would drop a burst), opens both ports, builds one pipeline per
//! direction and places its stages on threads by the CPUs given: none, one thread; one CPU,
//! one thread pinned there; else each direction gets its CPUs ([`direction_cores`]: one way
//! all of them, both ways half each). A direction with one CPU runs on one thread; with two
//! or more, its input runs on the first and its output on the second (TLEM's pipeline: the
//! delay line is all they share), and a port with several receive queues has them dealt out
//! over all the direction's CPUs: queue `i` is read on CPU `i % k`, the first CPU's by the
//! input itself, the others' by [`QueueReader`]s that hand their frames to the input
//! (`pathem_engine::fanin`), so the path stays one bottleneck on one thread. Every thread is
//! pinned to its own CPU, so there are never more busy-polling threads than CPUs given. It
//! returns once the ports are open, with what was opened in [`Started`], so errors come back
//! at once. [`Link::stop`] (or a stop flag set from elsewhere, such as a signal
//! handler, then [`Link::wait`]) stops receiving, sends what is due, gives the transmit ports
//! a moment to hand over what they hold, puts the offloads back and returns the final counters.

use crate::netns::enter;
use crate::Error;
use pathem_engine::pipeline::{Input, Output};
use pathem_engine::{
    delay_line_sizing, fan_in, run, ClassConfig, Control, DirectionCounters, EngineConfig, Fanin,
    MonotonicClock, Pipeline, QueueReader, Schedule, Stats, Task,
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
    /// No CPU: one unpinned thread; one: one thread pinned there; more: each direction's
    /// stages and receive queues on its share (see the module doc).
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
    /// How each port was opened (`AF_XDP (native XDP, copy, kernel receive stamps from XDP (bpf_ktime_get_ns))`).
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
    /// Each direction's receive queues, where they are read on several CPUs (`receive queues
    /// 0,2 on CPU 0; 1,3 on CPU 1`).
    pub queues: [Option<String>; 2],
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
    /// What reading an attachment's TAP devices at stop left unread.
    pub drained: Drained,
}

/// How reading an attachment's TAP devices at stop ended.
#[derive(Clone, Debug, Default)]
pub struct Drained {
    /// A device still gave frames when the time ran out.
    pub timed_out: bool,
    /// A device's ring held a frame after the paths had finished (one steered before the stop
    /// that reached the ring later than the drain's reads): not read, in no counter.
    pub late: bool,
    /// Why reading a device failed (deleted or set down meanwhile), one each.
    pub errors: Vec<String>,
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
                let line =
                    if way == "egress" { Some(&self.delay_line_ab) } else { self.delay_line_ba.as_ref() };
                out.extend(line.filter(|_| on).map(|d| format!("    delay line: {d}")));
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
        for (q, from) in self.queues.iter().zip([a, b]) {
            if let Some(q) = q {
                out.push(format!("  {from}: {q}"));
            }
        }
        out
    }
}

impl Final {
    /// Frames an attachment's TAP devices held at stop may be in no counter: they still gave
    /// frames when the time to read them ran out, or one failed while it was read.
    pub fn taps_unread(&self) -> bool {
        self.drained.timed_out || self.drained.late || !self.drained.errors.is_empty()
    }

    /// What a command says when the link has stopped: errors, refusals, and what was left in
    /// flight; a line each.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.rx_errors > 0 {
            out.push(format!("{} receive errors (an interface was down for a while)", self.rx_errors));
        }
        for e in &self.drained.errors {
            out.push(format!("reading the TAP devices at stop: {e}"));
        }
        if self.drained.timed_out && self.drained.errors.is_empty() {
            out.push(format!(
                "the TAP devices' rings still gave frames after {} ms of reading them at stop: what they held then was not read or counted",
                DRAIN.as_millis()
            ));
        }
        if self.drained.late && !self.drained.timed_out && self.drained.errors.is_empty() {
            out.push(
                "a TAP device's ring got frames after pathem had read it to the end at stop: they were not read or counted".into(),
            );
        }
        for (name, mtu, refused) in &self.tx_refused {
            out.extend(refused.describe(name, *mtu));
        }
        let in_flight = self.ab.in_flight + self.ba.as_ref().map_or(0, |s| s.in_flight);
        let queued = self.ab.port_tx_queued + self.ba.as_ref().map_or(0, |s| s.port_tx_queued);
        out.push(match (in_flight, queued) {
            (0, 0) => "stopped; every frame taken was forwarded, dropped or refused by a port, as counted".to_string(),
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

type LivePipe = Pipeline<Fanin<LiveRx>, LiveTx>;
type LiveReader = QueueReader<LiveRx>;

/// A direction's receiving side as [`fan`] dealt it: the input's, a reader per other CPU
/// (`None` where a CPU got no queue), and which CPU reads which queues, in words.
struct Fanned {
    input: Fanin<LiveRx>,
    readers: Vec<Option<LiveReader>>,
    words: Option<String>,
}

/// Each direction's CPUs as `cores` gives them (see the module doc): none (one unpinned thread
/// for everything), one (one pinned thread), with `--one-way` all of them for the one
/// direction, else half each (A→B the first half). Refuses an odd count above one both ways.
pub fn direction_cores(cores: &[usize], one_way: bool) -> Result<[&[usize]; 2], Error> {
    match cores.len() {
        0 | 1 => Ok([cores, &[]]),
        _ if one_way => Ok([cores, &[]]),
        n if n % 2 == 0 => Ok([&cores[..n / 2], &cores[n / 2..]]),
        _ => Err(Error::Cores {
            list: cores.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
            accepted:
                "one CPU, an even number both ways (half for each direction), or any number with --one-way"
                    .into(),
        }),
    }
}

/// Deals a direction's receive queues out over its `cpus`: queue `i` to CPU `i % k`; the
/// first CPU's share stays with the input, each other CPU's goes to a reader (`None` where a
/// CPU got no queue). Also says which queues each CPU reads, when they are spread at all.
fn fan(mut rx: LiveRx, cpus: &[usize]) -> Result<Fanned, Error> {
    if cpus.len() < 2 || rx.queue_ids().len() < 2 {
        return Ok(Fanned { input: Fanin::alone(rx), readers: Vec::new(), words: None });
    }
    let parts = rx.split(cpus.len());
    let mut words = vec![format!("{} on CPU {}", list(&rx.queue_ids()), cpus[0])];
    let mut at = Vec::new();
    let mut ports = Vec::new();
    for (i, part) in parts.into_iter().enumerate() {
        if let Some(p) = part {
            words.push(format!("{} on CPU {}", list(&p.queue_ids()), cpus[i + 1]));
            at.push(i);
            ports.push(p);
        }
    }
    let (fanin, readers) = fan_in(rx, ports).map_err(pathem_engine::Error::from)?;
    let mut placed: Vec<Option<LiveReader>> = (1..cpus.len()).map(|_| None).collect();
    for (i, r) in at.into_iter().zip(readers) {
        placed[i] = Some(r);
    }
    Ok(Fanned { input: fanin, readers: placed, words: Some(format!("receive queues {}", words.join("; "))) })
}

fn list(ids: &[usize]) -> String {
    ids.iter().map(|q| q.to_string()).collect::<Vec<_>>().join(",")
}

/// Tasks to run on one thread, pinned to `cpu` if given. With `fds` it sleeps on them between
/// frames (a DPDK port's `None` is polled without rest); without, it spins: it has its CPU to
/// itself, and what it waits for (a delay line, a hand-off line) cannot wake it.
struct Job<'a> {
    cpu: Option<usize>,
    tasks: Vec<&'a mut (dyn Task + Send)>,
    fds: Vec<Option<RawFd>>,
}

/// Runs `job` on this thread until `stop`. Stops the others when it ends in any way (an
/// error, a CPU it cannot be pinned to, a panic): a stage or reader gone would otherwise
/// leave the rest waiting on it.
fn drive(job: Job<'_>, stop: &AtomicBool) -> Result<(), Error> {
    struct StopAll<'a>(&'a AtomicBool);
    impl Drop for StopAll<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop_all = StopAll(stop);
    if let Some(c) = job.cpu {
        pin(c)?;
    }
    let mut clock =
        if job.fds.is_empty() { MonotonicClock::new() } else { MonotonicClock::for_ports(job.fds) };
    let mut tasks: Vec<&mut dyn Task> = job.tasks.into_iter().map(|t| t as &mut dyn Task).collect();
    Ok(run(&mut tasks, &mut clock, stop)?)
}

/// What a direction's input may sleep on: its port's sockets; with queue readers on other
/// CPUs, nothing (`None`: it never sleeps, as a poll-mode port, since their frames cannot
/// wake it).
fn wake_fds(rx: &Fanin<LiveRx>) -> Vec<Option<RawFd>> {
    match rx.readers() {
        0 => rx.port.raw_fds(),
        _ => vec![None],
    }
}

/// A direction's stages as placed: whole on one thread, or input and output apart.
enum Staged {
    Whole(LivePipe),
    Split(Input<Fanin<LiveRx>>, Output<LiveTx>),
}

/// Places the directions' stages and queue readers on threads as their CPUs say (see the
/// module doc) and runs them until `stop`; gives the pipelines back, whole, to be finished
/// (the readers stay with the caller, to be dropped once their last frames are taken).
fn place(
    ab: LivePipe,
    ba: Option<LivePipe>,
    readers: &mut [Vec<Option<LiveReader>>; 2],
    cores: [&[usize]; 2],
    stop: &AtomicBool,
) -> Result<(LivePipe, Option<LivePipe>), Error> {
    let joined = |r: std::thread::Result<Result<(), Error>>| r.map_err(|_| Error::Panicked("forwarding"))?;
    // No CPU or one: everything on one thread.
    if cores[0].len() < 2 && cores[1].is_empty() {
        let (mut ab, mut ba) = (ab, ba);
        let mut fds = wake_fds(&ab.input.rx);
        fds.extend(ba.iter().flat_map(|p| wake_fds(&p.input.rx)));
        let mut tasks: Vec<&mut (dyn Task + Send)> = vec![&mut ab];
        tasks.extend(ba.as_mut().map(|p| p as &mut (dyn Task + Send)));
        drive(Job { cpu: cores[0].first().copied(), tasks, fds }, stop)?;
        return Ok((ab, ba));
    }
    let stage = |p: LivePipe, cpus: &[usize]| match cpus.len() {
        1 => Staged::Whole(p),
        _ => {
            let (i, o) = p.split();
            Staged::Split(i, o)
        }
    };
    let mut staged = [Some(stage(ab, cores[0])), ba.map(|p| stage(p, cores[1]))];
    let mut jobs = Vec::new();
    for ((st, rs), cpus) in staged.iter_mut().zip(readers.iter_mut()).zip(cores) {
        match st {
            None => {}
            Some(Staged::Whole(p)) => {
                let fds = wake_fds(&p.input.rx);
                jobs.push(Job { cpu: Some(cpus[0]), tasks: vec![p], fds });
            }
            Some(Staged::Split(input, output)) => {
                // Readers spin (a sleeping reader would hold back every frame;
                // `pathem_engine::fanin`).
                let fds = wake_fds(&input.rx);
                jobs.push(Job { cpu: Some(cpus[0]), tasks: vec![input], fds });
                let mut out = Job { cpu: Some(cpus[1]), tasks: vec![output], fds: Vec::new() };
                for (k, r) in rs.iter_mut().enumerate() {
                    let Some(r) = r else { continue };
                    match k {
                        // The output's CPU also reads its share; it spins already.
                        0 => out.tasks.push(r),
                        _ => jobs.push(Job { cpu: Some(cpus[k + 1]), tasks: vec![r], fds: Vec::new() }),
                    }
                }
                jobs.push(out);
            }
        }
    }
    std::thread::scope(|s| -> Result<(), Error> {
        let mut jobs = jobs.into_iter();
        let mine = jobs.next();
        let others: Vec<_> = jobs.map(|j| s.spawn(move || drive(j, stop))).collect();
        let mine = mine.map_or(Ok(()), |j| drive(j, stop));
        for t in others {
            joined(t.join())?;
        }
        mine
    })?;
    let whole = |st: Option<Staged>| {
        st.map(|st| match st {
            Staged::Whole(p) => p,
            Staged::Split(i, o) => Pipeline::join(i, o),
        })
    };
    let [ab, ba] = staged;
    Ok((whole(ab).ok_or(Error::Panicked("forwarding"))?, whole(ba)))
}

/// How long a transmit port gets at stop to hand over what it still holds, and how long an
/// attachment's TAP devices are read at stop for what they still hold.
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
        direction_cores(&spec.cores, spec.one_way)?;
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
    let (eal, port_a, port_b, mut steering) = match &spec.attach {
        Some(attach) => {
            // Claimed beside any other attachment (each of a direction): a `run` on it meanwhile
            // is refused, and it is refused while one runs. Its offloads stay as they are.
            offloads.0.push(iface::claim_attached(&attach.iface)?);
            let at = pathem_io::attach::open(attach, spec.ports.max_frame, spec.ports.rx_buffer)?;
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
            // Each interface is claimed (a second pathem on it is refused) and, unless kept,
            // its receive aggregation turned off.
            for name in [spec.a.kernel_iface(), spec.b.kernel_iface()].into_iter().flatten() {
                let saved = iface::claim(name, !spec.keep_offloads)?;
                if !saved.changed().is_empty() {
                    offloads_off.push((name.to_string(), saved.changed()));
                }
                offloads.0.push(saved);
            }
            let eal = live::prepare(&[&spec.a, &spec.b], &spec.ports)?;
            (
                eal,
                live::open(&spec.a, &spec.ports, &spec.ports.tx_timing_a)?,
                live::open(&spec.b, &spec.ports, &spec.ports.tx_timing_b)?,
                None,
            )
        }
    };
    let (name_a, name_b, how_a, how_b) = (port_a.ifname, port_b.ifname, port_a.how, port_b.how);
    // Each direction carries no frame longer than its transmitting port sends.
    let towards = |tx: &LiveTx| EngineConfig {
        max_frame: tx.max_frame().map_or(spec.engine.max_frame, |m| m.min(spec.engine.max_frame)),
        ..spec.engine.clone()
    };
    let (engine_ab, engine_ba) = (towards(&port_b.tx), towards(&port_a.tx));
    let cores = direction_cores(&spec.cores, spec.one_way)?;
    let fan_a = fan(port_a.rx, cores[0])?;
    let fan_b = match spec.one_way {
        true => Fanned { input: Fanin::alone(port_b.rx), readers: Vec::new(), words: None },
        false => fan(port_b.rx, cores[1])?,
    };
    let (rx_a, rx_b) = (fan_a.input, fan_b.input);
    let mut readers = [fan_a.readers, fan_b.readers];
    // Every line of both directions is made with its pages touched: together, not one by one,
    // they must fit the memory the process may use.
    let lines = pathem_engine::pipeline::lines_bytes;
    let mut total = lines(&spec.ab, &spec.classes_ab, &engine_ab).map_err(pathem_engine::Error::from)?;
    if !spec.one_way {
        let ba = lines(&spec.ba, &spec.classes_ba, &engine_ba).map_err(pathem_engine::Error::from)?;
        total = total.saturating_add(ba);
    }
    pathem_engine::delay_line::can_touch_all(total).map_err(pathem_engine::Error::from)?;
    let seed_ab = direction_seed(spec.seed, 0);
    let mut ab: LivePipe =
        Pipeline::with_classes(rx_a, port_b.tx, &spec.ab, &spec.classes_ab, seed_ab, &engine_ab)?;
    let mut ba: Option<LivePipe> = match spec.one_way {
        true => None,
        false => {
            let seed_ba = direction_seed(spec.seed, 1);
            Some(Pipeline::with_classes(rx_b, port_a.tx, &spec.ba, &spec.classes_ba, seed_ba, &engine_ba)?)
        }
    };
    // A schedule's steps may keep more in flight than the start: the lines are made for them.
    if let Some(s) = spec.schedule_ab.clone() {
        ab.schedule(s)?;
    }
    if let (Some(p), Some(s)) = (ba.as_mut(), spec.schedule_ba.clone()) {
        p.schedule(s)?;
    }
    let sizing = |p: &LivePipe, cfg: &PathConfig, engine: &EngineConfig| {
        let sized = delay_line_sizing(cfg, engine);
        let made = pathem_engine::delay_line::ring_capacity(sized.bytes, engine.max_frame);
        let why = match p.controls().len() == 1 && made.is_some_and(|m| p.delay_line_capacity() > m) {
            true => format!("{}; larger for the schedule's steps", sized.why),
            false => sized.why,
        };
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
        queues: [fan_a.words, fan_b.words],
        classes: [
            spec.classes_ab.iter().map(class_line).collect(),
            spec.classes_ba.iter().map(class_line).collect(),
        ],
    };
    // The interface's frames come now that the paths are made and their pages touched: none
    // waits in a TAP device meanwhile.
    if let Some(s) = steering.as_mut() {
        s.engage()?;
    }
    // Counted from now: the delay lines the schedules need were made above.
    let since = pathem_engine::monotonic_now();
    ab.follow_schedules(since);
    if let Some(p) = ba.as_mut() {
        p.follow_schedules(since);
    }
    let _ = ready.send(Ready {
        started,
        counters: (ab.counters().clone(), ba.as_ref().map(|p| p.counters().clone())),
        controls: (ab.controls(), ba.as_ref().map(|p| p.controls())),
        since,
    });

    let (mut ab, mut ba) = place(ab, ba, &mut readers, cores, &stop)?;
    // An attached interface is given back first: its frames go the plain way from now on.
    // What its TAP devices hold then (steered before, not read yet) is the path's. The
    // ingress device's way back to the stack stays until the last frame is sent on it.
    let mut drained = Drained::default();
    if let Some(s) = steering.as_mut() {
        s.close_ways_in();
        drained = drain_taps(&mut ab, ba.as_mut());
    }
    let now = pathem_engine::monotonic_now();
    // Frames the queue readers took from the kernel and handed over are the path's: taken
    // before the final counts (forwarded if due, else in flight), as are the readers' last
    // drop counts.
    drop(readers);
    for p in std::iter::once(&mut ab).chain(ba.as_mut()) {
        p.input.rx.stop();
        while p.input.rx.holds_frames() {
            p.input.poll(now)?;
        }
    }
    let final_ab = ab.finish(now, DRAIN)?;
    let final_ba = match ba.as_mut() {
        Some(p) => Some(p.finish(now, DRAIN)?),
        None => None,
    };
    // The ingress TAP device runs its way back within each send (its egress program hands a
    // frame to IF's receive, which runs as the send's softirq); a moment more for a host that
    // spreads a device's receive over CPUs (RPS), then the way back (and every program) may go.
    if let Some(programs) = steering.take() {
        std::thread::sleep(Duration::from_millis(10));
        // Said, not hidden: a frame that reached a ring after the drain's reads is in no count.
        drained.late = std::iter::once(&ab).chain(ba.as_ref()).any(|p| p.input.rx.port.holds_unread());
        drop(programs);
    }
    let classes_ab = ab.counters().classes();
    let classes_ba = ba.as_ref().map(|p| p.counters().classes()).unwrap_or_default();
    let rx_errors = ab.input.rx.port.errors() + ba.as_ref().map_or(0, |p| p.input.rx.port.errors());
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
        drained,
    })
}

/// A frame steered just before the ways in closed may still be on its way into a TAP device's
/// ring (in a CPU's backlog, or steered by a program that ran on as it was replaced): the
/// drain reads the devices for at least this long.
const SETTLE: Duration = Duration::from_millis(10);

/// Reads what an attachment's TAP devices still hold into the paths, to the last frame (as
/// nothing more is steered to them), both directions in turn until a read finds each device's
/// ring empty after [`SETTLE`], for at most [`DRAIN`]. A device
/// deleted or set down meanwhile (a host taking its links down as it shuts down) ends its
/// own drain, not the stop: what was read is counted.
fn drain_taps(ab: &mut LivePipe, ba: Option<&mut LivePipe>) -> Drained {
    let start = std::time::Instant::now();
    let (settled, deadline) = (start + SETTLE, start + DRAIN);
    let mut drained = Drained::default();
    let mut left: Vec<&mut LivePipe> = std::iter::once(ab).chain(ba).collect();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        left.retain_mut(|p| match p.poll(pathem_engine::monotonic_now()) {
            Ok(_) => {
                pathem_io::RxPort::poll_at(&p.input.rx) == pathem_io::PollAt::Now
                    || std::time::Instant::now() < settled
            }
            Err(e) => {
                drained.errors.push(e.to_string());
                false
            }
        });
    }
    drained.timed_out = !left.is_empty();
    drained
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_are_shared_out_between_the_directions() {
        let empty: &[usize] = &[];
        assert_eq!(direction_cores(&[], false).unwrap(), [empty, empty]);
        assert_eq!(direction_cores(&[3], false).unwrap(), [&[3][..], empty]);
        assert_eq!(direction_cores(&[0, 1], false).unwrap(), [&[0][..], &[1][..]]);
        assert_eq!(direction_cores(&[0, 1, 2, 3], false).unwrap(), [&[0, 1][..], &[2, 3][..]]);
        assert_eq!(direction_cores(&[0, 1, 2], true).unwrap(), [&[0, 1, 2][..], empty]);
        let e = direction_cores(&[0, 1, 2], false).unwrap_err().to_string();
        assert!(e.contains("0,1,2") && e.contains("even"), "{e}");
    }
}
