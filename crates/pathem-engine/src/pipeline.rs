//! A direction as a task: [`Pipeline`] joins a receive port, the two stages and a transmit
//! port, and [`crate::scheduler::run`] polls it, offline and live alike.

use crate::control::{Control, Inbox, Schedule, Timeline};
use crate::delay_line::{delay_line, growing_delay_line, record_size};
use crate::held::Held;
use crate::stage::{Egress, Ingress, EGRESS_BURST};
use crate::stats::{Counters, DirectionCounters, DEFAULT_CLASS};
use crate::task::{Error, Next, Task};
use pathem_filter::{Classifier, Filter};
use pathem_io::{PollAt, RxFrame, RxPort, TxPort};
use pathem_model::aqm::AqmConfig;
use pathem_model::link::ETHERNET_OVERHEAD;
use pathem_model::units::{QueueLimit, Rate};
use pathem_model::{Nanos, Path, PathConfig, Rng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Frames taken from a receive port in one poll.
pub const RX_BURST: usize = 32;

/// How the engine sizes and bounds a direction.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Delay line size in bytes; `None` sizes it from the path.
    pub buffer: Option<usize>,
    /// Longest frame carried; longer ones are dropped as `oversize`.
    pub max_frame: usize,
    /// Rate assumed for the incoming line when the path has no rate of its own.
    pub line_rate: Rate,
    /// Live runs: keep polling the receive port, never sleeping, for this long after a frame
    /// arrived (zero: sleep whenever nothing is due). Waking from a sleep takes tens of
    /// microseconds on a virtual machine, which a frame arriving then would wait.
    pub busy_poll: Nanos,
    /// Offline runs (virtual time): the delay line starts small and grows with what is in
    /// flight, pages touched as used. Live runs allocate it whole and touch every page up
    /// front, so the data path never takes a page fault.
    pub offline: bool,
}

impl EngineConfig {
    /// Checks the settings against their documented ranges.
    pub fn validate(&self) -> Result<(), pathem_model::limits::RangeError> {
        use pathem_model::limits::{at_most, MAX_BUFFER, MAX_FRAME};
        at_most("max-frame", self.max_frame, MAX_FRAME, self.max_frame, "1 to 65536 bytes")?;
        at_most("max-frame", 1, self.max_frame, self.max_frame, "1 to 65536 bytes")?;
        if let Some(b) = self.buffer {
            at_most("buffer", b as u64, MAX_BUFFER, format!("{b}B"), "up to 1TiB per direction")?;
        }
        Ok(())
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            buffer: None,
            max_frame: 65_535,
            line_rate: pathem_model::units::DEFAULT_LINE_RATE,
            busy_poll: Nanos::ZERO,
            offline: false,
        }
    }
}

/// Smallest delay line the engine makes on its own.
pub const MIN_DELAY_LINE: usize = 4 << 20;
/// Largest delay line the engine makes on its own (larger ones need `--buffer`).
pub const MAX_DELAY_LINE: usize = 4 << 30;

/// How large a delay line is and why, in words for the startup line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    pub bytes: usize,
    pub why: String,
}

/// Bytes of delay line a path needs: everything that can be in flight at the bottleneck rate
/// (or the line rate) for the longest delay, plus a full drop-tail queue (TLEM §4.6; a queue
/// discipline's frames wait apart, [`held_size`]).
pub fn delay_line_size(path: &PathConfig, engine: &EngineConfig) -> usize {
    line_sizing(path, engine).bytes
}

/// The bytes of the delay lines [`Pipeline::with_classes`] makes for `path` and `classes` with
/// `engine` (each a ring rounded up from [`delay_line_size`], and the store of the frames a
/// queue discipline holds, [`held_size`]), once `engine` is within its ranges: what a live
/// link touches up front, to check against memory before any is made.
pub fn lines_bytes(
    path: &PathConfig,
    classes: &[ClassConfig],
    engine: &EngineConfig,
) -> Result<usize, pathem_model::limits::RangeError> {
    engine.validate()?;
    let ring = |p: &PathConfig| {
        crate::delay_line::ring_capacity(delay_line_size(p, engine), engine.max_frame)
            .unwrap_or(usize::MAX)
            .saturating_add(held_size(p, engine))
    };
    Ok(std::iter::once(path).chain(classes.iter().map(|c| &c.path)).map(ring).fold(0, usize::saturating_add))
}

/// [`delay_line_size`] with the reason, e.g. `rate 100mbit × max delay 10ms + queue 64000 B`;
/// with a queue discipline, the size of the store its frames wait in is said too.
pub fn delay_line_sizing(path: &PathConfig, engine: &EngineConfig) -> Sizing {
    let mut sized = line_sizing(path, engine);
    let held = held_size(path, engine);
    if held > 0 {
        sized.why.push_str(&format!("; the queue discipline's frames held apart ({held} B)"));
    }
    sized
}

/// What `--buffer b` became where the line made for it is larger: its size is a power of two
/// holding at least two of the longest records. Said at the start of a live run
/// ([`delay_line_sizing`]) and in a replay's report.
pub fn buffer_rounding(b: usize, max_frame: usize) -> Option<String> {
    match crate::delay_line::ring_capacity(b, max_frame) {
        Some(made) if made != b => Some(format!(
            "--buffer {b} B, rounded up to a power of two of at least two {max_frame}-byte frames"
        )),
        _ => None,
    }
}

/// [`delay_line_sizing`] of the line alone.
fn line_sizing(path: &PathConfig, engine: &EngineConfig) -> Sizing {
    if let Some(b) = engine.buffer {
        let why = buffer_rounding(b, engine.max_frame).unwrap_or_else(|| "--buffer".into());
        return Sizing { bytes: b, why };
    }
    // Offline a line takes memory only as frames pile up in it, so it may hold what any path
    // keeps in flight (an unbounded queue, a slot's or a trace's waits, which no estimate
    // from the rate and the delay covers): the path decides what is dropped, not the line.
    if engine.offline {
        return Sizing {
            bytes: MAX_DELAY_LINE,
            why: "offline: grows with what is in flight, up to 4 GiB (--buffer sets the bound)".into(),
        };
    }
    let rate = path.link.as_ref().map_or(engine.line_rate, |l| l.mean_rate());
    let bytes_per_sec = rate.bits_per_sec() as f64 / 8.0;
    let in_delay = bytes_per_sec * path.delay.max_delay().as_secs_f64() * inflate(path);
    // Drop-tail's queued frames are records in the line already, with their release times; a
    // queue discipline's wait apart until it decides ([`held_size`]).
    let in_queue = match path.aqm {
        AqmConfig::DropTail => queue_bytes(path, engine),
        _ => 0.0,
    };
    let want = in_delay + in_queue;
    let bytes = (want as usize).clamp(MIN_DELAY_LINE, MAX_DELAY_LINE);
    let what = if path.link.is_some() { "rate" } else { "line rate" };
    let mut why = format!("{what} {rate} × max delay {}", path.delay.max_delay());
    if in_queue > 0.0 {
        why.push_str(&format!(" + queue ({:.0} B)", in_queue));
    }
    why.push_str(&format!(" = {:.0} B", want));
    if bytes == MIN_DELAY_LINE && want < MIN_DELAY_LINE as f64 {
        why.push_str(", raised to the 4 MiB minimum");
    } else if bytes == MAX_DELAY_LINE && want > MAX_DELAY_LINE as f64 {
        why.push_str(", capped at 4 GiB (--buffer sets more, up to 1 TiB)");
    }
    Sizing { bytes, why }
}

/// How much larger a frame's record is than its size on the wire, at most: 1 once the link's
/// overhead is at least the descriptor and its padding.
fn inflate(path: &PathConfig) -> f64 {
    let overhead = path.link.as_ref().map_or(ETHERNET_OVERHEAD, |l| l.overhead);
    (record_size(64) as f64 / (64.0 + f64::from(overhead)).max(1.0)).max(1.0)
}

/// The bytes of the frames a path's queue holds at most: its hard limit in bytes, or in
/// frames of the longest size (a queue discipline without `--queue` holds up to its own
/// default limit); 0 for drop-tail without a limit.
fn queue_bytes(path: &PathConfig, engine: &EngineConfig) -> f64 {
    match path.link.as_ref().and_then(|l| path.aqm.limit(l)) {
        Some(QueueLimit::Bytes(b)) => b as f64 * inflate(path),
        Some(QueueLimit::Packets(n)) => n as f64 * record_size(engine.max_frame) as f64,
        None => 0.0,
    }
}

/// The bytes ingress keeps for the frames a path's queue discipline holds ([`crate::held`]),
/// from the delay line's 4 MiB minimum to its 4 GiB cap; 0 for drop-tail. (`--buffer` sizes
/// the delay line alone: this is the same with it as without.) Its hard limit and two
/// longest frames: one that joins a full queue before the discipline drops from its head
/// (drop-head, FQ-CoDel), and the end of the ring a frame did not fit before it went on from
/// the start. The disciplines that send out of arrival order (FQ-CoDel's flows, DualPI2's
/// two queues) leave holes behind a frame that waits long, which the ring gets back only once
/// that frame leaves: twice their limit, and the minimum, which a small queue of many flows
/// needs (FQ-CoDel with a 30 kB limit at 150% of its rate, a flow a frame, dropped a third of
/// what it admitted for want of room in a store of twice its limit).
pub fn held_size(path: &PathConfig, engine: &EngineConfig) -> usize {
    let (queue, slack) = (queue_bytes(path, engine), 2.0 * engine.max_frame as f64);
    let bytes = match path.aqm {
        AqmConfig::DropTail => return 0,
        AqmConfig::FqCodel(_) | AqmConfig::DualPi2(_) => 2.0 * queue + slack,
        _ => queue + slack,
    };
    (bytes as usize).clamp(MIN_DELAY_LINE, MAX_DELAY_LINE)
}

/// A class of a direction: frames its filter matches (the first class that matches takes a
/// frame) follow its own path.
#[derive(Clone, Debug)]
pub struct ClassConfig {
    /// Its name, for counters, control and schedules.
    pub name: String,
    pub filter: Filter,
    pub path: PathConfig,
    /// Its changes at set times, followed from [`Pipeline::follow_schedules`]'s origin.
    pub schedule: Option<Schedule>,
}

/// The seed of a direction's `lane`-th path: the direction's own for the default path (lane
/// 0), so a link without classes draws as it always has; a stream of its own for each class.
pub fn class_seed(seed: u64, lane: usize) -> u64 {
    if lane == 0 {
        seed
    } else {
        pathem_model::rng::direction_seed(seed, 0x636c_6173_7300 + lane as u64)
    }
}

/// One direction: receive port → classifier → ingress → delay line → egress → transmit port.
///
/// Its two halves share only the delay lines (and the counters, each written by one side):
/// run together on one thread, or apart on two ([`Pipeline::split`]), TLEM's pipeline.
///
/// A direction has a path per class (`lane` 0 is the default path, for frames no class takes):
/// each with its own models, queue, seed, counters and delay line, so frames of a class keep
/// their order and one class's delay never holds another's frames back. Egress merges the
/// lanes by release time.
pub struct Pipeline<R, T> {
    pub input: Input<R>,
    pub output: Output<T>,
}

/// The receiving half: port, classifier, ingress stages, and what changes the paths.
pub struct Input<R> {
    pub rx: R,
    lanes: Vec<InLane>,
    /// The classes' filters compiled together: the first that matches a frame names its lane.
    classifier: Option<Classifier>,
    /// The port's own counters (kernel drops, offload).
    port: Arc<Counters>,
    counters: DirectionCounters,
    rx_ended: bool,
    /// How the delay lines are sized (a schedule may need them larger).
    engine: EngineConfig,
    busy_poll: Nanos,
    /// Until when to keep polling without sleeping (the last arrival + `busy_poll`).
    busy_until: Nanos,
    /// When the port's kernel drops were last read.
    drops_read: Nanos,
    /// Frames the last receive took: more than a burst's slots when the port cuts a local
    /// sender's super-frames into wire frames. The output's release budget follows it.
    received: usize,
    /// Set once the receiving port has ended (for an output running apart).
    done: Arc<AtomicBool>,
}

/// One path's ingress and what changes it.
struct InLane {
    ingress: Ingress,
    /// Changes sent from other threads ([`Pipeline::control`]).
    inbox: Inbox,
    control: Control,
    /// Changes due at set times.
    timeline: Option<Timeline>,
    /// The path's schedule, until it is followed.
    schedule: Option<Schedule>,
}

/// The transmitting half: egress stages and port.
pub struct Output<T> {
    pub tx: T,
    lanes: Vec<Egress>,
    /// The port's own counters (what waits in it, what it refused).
    port: Arc<Counters>,
    done: Arc<AtomicBool>,
    /// How far ahead of their release frames go to the port ([`TxPort::lead`]; zero unless it
    /// times them on the wire itself).
    lead: Nanos,
    /// Most frames one release hands the port: [`EGRESS_BURST`], or what the last receive on
    /// the same thread took if that was more (see [`Pipeline::poll`]).
    budget: usize,
}

/// How often the receive port's kernel drop count and the occupancy gauges are read.
const DROPS_EVERY: Nanos = Nanos::from_millis(10);
/// While frames wait in a transmit port that took none of them, flush it again this often.
const TX_RETRY: Nanos = Nanos::from_micros(100);

/// Most classes a direction may have.
pub const MAX_CLASSES: usize = 64;

/// Gives a received frame to its lane's ingress: the first class whose filter matches it, else
/// the default path.
#[inline(always)]
fn classify(lanes: &mut [InLane], classifier: &Option<Classifier>, frame: RxFrame<'_>) {
    match classifier {
        None => lanes[0].ingress.push(frame),
        Some(c) => {
            let lane = c.classify(frame.data, frame.wire_len);
            lanes[lane].ingress.push(frame)
        }
    }
}

impl<R: RxPort, T: TxPort> Pipeline<R, T> {
    /// Builds a direction; fails on a setting outside its range or a delay line that cannot
    /// be allocated.
    pub fn new(
        rx: R,
        tx: T,
        path: &PathConfig,
        seed: u64,
        engine: &EngineConfig,
    ) -> Result<Pipeline<R, T>, Error> {
        Pipeline::with_classes(rx, tx, path, &[], seed, engine)
    }

    /// Builds a direction with `classes` (tried in order; frames none takes follow `path`).
    /// Each class gets a delay line sized for its own path (`--buffer` sizes each).
    pub fn with_classes(
        rx: R,
        tx: T,
        path: &PathConfig,
        classes: &[ClassConfig],
        seed: u64,
        engine: &EngineConfig,
    ) -> Result<Pipeline<R, T>, Error> {
        engine.validate()?;
        let n = classes.len();
        pathem_model::limits::at_most(
            "class",
            n,
            MAX_CLASSES,
            format!("{n} classes"),
            "at most 64 per direction",
        )?;
        let default = (DEFAULT_CLASS.to_string(), path, None);
        let paths = std::iter::once(default)
            .chain(classes.iter().map(|c| (c.name.clone(), &c.path, c.schedule.clone())));
        let (mut lanes, mut egress, mut named) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (name, path, schedule)) in paths.enumerate() {
            path.validate()?;
            let counters = Arc::new(Counters::default());
            let size = delay_line_size(path, engine);
            let (writer, reader) = if engine.offline {
                growing_delay_line(size, engine.max_frame)?
            } else {
                delay_line(size, engine.max_frame)?
            };
            let line = (!engine.offline).then(|| crate::control::Line {
                engine: engine.clone(),
                capacity: writer.limit(),
                held: held_size(path, engine),
            });
            let (control, inbox) = crate::control::channel(path, line);
            counters.delay_line_capacity.set(writer.limit() as u64);
            let held = match engine.offline {
                true => Held::new(held_size(path, engine)),
                false => Held::touched(held_size(path, engine)),
            };
            // Set by the ingress's options, which decide it, before the egress reads it below.
            let reorder_on = Arc::new(AtomicBool::new(false));
            let ingress = Ingress::new(
                Path::new(path),
                Rng::seeded(class_seed(seed, i)),
                writer,
                held,
                counters.clone(),
                engine.max_frame,
            )
            .with_options(path, reorder_on.clone());
            let mut lane = InLane { ingress, inbox, control, timeline: None, schedule: None };
            if let Some(s) = schedule {
                size_for_schedule(&mut lane, &s, engine)?;
                lane.schedule = Some(s);
            }
            lanes.push(lane);
            egress.push(Egress::new(reader, counters.clone(), reorder_on));
            named.push((name, counters));
        }
        let port = Arc::new(Counters::default());
        let done = Arc::new(AtomicBool::new(false));
        Ok(Pipeline {
            input: Input {
                rx,
                lanes,
                classifier: (!classes.is_empty())
                    .then(|| Classifier::new(&classes.iter().map(|c| c.filter.clone()).collect::<Vec<_>>())),
                port: port.clone(),
                counters: DirectionCounters::new(port.clone(), named),
                rx_ended: false,
                engine: engine.clone(),
                busy_poll: engine.busy_poll,
                busy_until: Nanos::ZERO,
                drops_read: Nanos::ZERO,
                received: 0,
                done: done.clone(),
            },
            output: Output { lead: tx.lead(), tx, lanes: egress, port, done, budget: EGRESS_BURST },
        })
    }

    /// A handle that changes this direction's default path from any thread.
    pub fn control(&self) -> Control {
        self.input.lanes[0].control.clone()
    }

    /// Handles for every path, the default first then each class in order.
    pub fn controls(&self) -> Vec<Control> {
        self.input.lanes.iter().map(|l| l.control.clone()).collect()
    }

    /// Gives the default path `schedule`, to follow from [`follow_schedules`]'s origin. The
    /// path's delay line is made large enough for every step now (a live line is made again,
    /// larger, before the run; an offline one may grow further). Fails when that line cannot
    /// be made.
    ///
    /// [`follow_schedules`]: Self::follow_schedules
    pub fn schedule(&mut self, schedule: Schedule) -> Result<(), Error> {
        let l = &mut self.input.lanes[0];
        size_for_schedule(l, &schedule, &self.input.engine)?;
        l.schedule = Some(schedule);
        Ok(())
    }

    /// Follows every path's schedule (the default path's from [`schedule`](Self::schedule),
    /// each class's from [`ClassConfig::schedule`]) from `origin` (the first frame's arrival
    /// offline, the start live): each step's configuration applies from its time on, exactly.
    pub fn follow_schedules(&mut self, origin: Nanos) {
        for l in &mut self.input.lanes {
            if let Some(s) = l.schedule.take() {
                l.timeline = Some(Timeline::new(s, origin));
            }
        }
    }

    /// The counters, shareable with a reporting thread.
    pub fn counters(&self) -> &DirectionCounters {
        &self.input.counters
    }

    /// The delay lines' capacity in bytes, all paths together (their limits, for lines that
    /// grow).
    pub fn delay_line_capacity(&self) -> usize {
        self.input.counters.paths().map(|(_, c)| c.delay_line_capacity.get() as usize).sum()
    }

    /// The halves, to run on two threads: [`Input`] and [`Output`] are tasks of their own.
    /// An output running apart busy-polls its delay line (it has a CPU to itself).
    pub fn split(self) -> (Input<R>, Output<T>) {
        (self.input, self.output)
    }

    /// The halves back together (after a split run), to finish.
    pub fn join(input: Input<R>, output: Output<T>) -> Pipeline<R, T> {
        Pipeline { input, output }
    }

    /// Reads the occupancy gauges (queue, delay line) now: they are read every 10 ms while
    /// running, and a report at the end should not show what was held 10 ms before.
    pub fn read_gauges(&mut self, now: Nanos) {
        for l in &mut self.input.lanes {
            l.ingress.gauges(now);
        }
    }

    /// After a stop: sends what is due at `now`, gives the transmit port up to `drain` to
    /// hand over what it holds, reads the port's drop count a last time, and returns the final
    /// counters (frames still in the delay line or a queue discipline are `in_flight`; they
    /// are not sent).
    pub fn finish(&mut self, now: Nanos, drain: std::time::Duration) -> Result<crate::Stats, Error> {
        let out = &mut self.output;
        while out.release(now)? > 0 {}
        let deadline = std::time::Instant::now() + drain;
        while out.tx.queued() > 0 && std::time::Instant::now() < deadline {
            out.tx.flush()?;
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        out.port.port_tx_queued.set(out.tx.queued() as u64);
        out.take_refused(true);
        self.read_gauges(now);
        self.input.port.port_rx_dropped.set(self.input.rx.kernel_drops());
        self.input.port.port_rx_rolled_over.set(self.input.rx.rolled_over());
        self.input.port.port_rx_foreign.set(self.input.rx.foreign());
        self.input.take_offload();
        Ok(self.input.counters.snapshot())
    }

    /// Gives the ports back (to commit an output capture, read a sink's counts).
    pub fn into_ports(self) -> (R, T) {
        (self.input.rx, self.output.tx)
    }
}

/// Makes lane `l`'s delay line large enough for every step of `schedule`: a fixed (live) line
/// moves on to a ring as large as the largest step needs.
fn size_for_schedule(l: &mut InLane, schedule: &Schedule, engine: &EngineConfig) -> Result<(), Error> {
    let held = schedule.steps().iter().map(|(_, c)| held_size(c, engine)).max().unwrap_or(0);
    if held > l.ingress.held_capacity() {
        if engine.offline {
            l.ingress.grow_held(held);
        } else {
            l.ingress.take_held(crate::held::buffer(held)?);
            l.control.held_grew(held);
        }
    }
    // Offline a line's limit is already the most a step can ask (4 GiB, or --buffer).
    if engine.offline {
        return Ok(());
    }
    let need = schedule.steps().iter().map(|(_, c)| delay_line_size(c, engine)).max().unwrap_or(0);
    if l.ingress.line_holds(need) {
        return Ok(());
    }
    let ring = crate::delay_line::Ring::new(need, engine.max_frame)?;
    l.control.line_grew(ring.capacity());
    l.ingress.take_ring(ring);
    Ok(())
}

impl<R: RxPort> Input<R> {
    /// Applies the changes due at `now`: scheduled ones at their own times (frames a port
    /// knows arrived before such a time are taken under the old path first), then the latest
    /// one sent through [`Control`], path by path.
    #[inline]
    fn apply_changes(&mut self, now: Nanos) -> Result<(), Error> {
        // Whole laps of a schedule that pass before the next frame arrives, while the path
        // holds none undecided, are passed over: where that arrival is known (offline),
        // nothing sees the path until then (frames in the delay line keep their release
        // times). Once the source has ended, no frame comes again: every lap is passed over
        // (a 1 ms schedule under frames held for hours took a step at a time, for minutes).
        // A live path takes every step at its time.
        let until = match self.rx.poll_at() {
            PollAt::At(until) => Some(until),
            PollAt::Ended => Some(Nanos::MAX),
            PollAt::Now | PollAt::Unknown => None,
        };
        if let Some(until) = until {
            for l in &mut self.lanes {
                if let Some(t) = l.timeline.as_mut().filter(|_| !l.ingress.holds_frames()) {
                    t.skip_laps(until);
                }
            }
        }
        loop {
            // The earliest step due by now, of any path.
            let due = self
                .lanes
                .iter()
                .enumerate()
                .filter_map(|(i, l)| Some((l.timeline.as_ref()?.next_at()?, i)))
                .filter(|&(t, _)| t <= now)
                .min();
            let Some((at, lane)) = due else { break };
            while let PollAt::At(a) = self.rx.poll_at() {
                if a >= at {
                    break;
                }
                let (lanes, classifier) = (&mut self.lanes, &self.classifier);
                self.rx.recv_burst(at - Nanos(1), RX_BURST, |f| classify(lanes, classifier, f))?;
            }
            let l = &mut self.lanes[lane];
            if let Some((at, config)) = l.timeline.as_mut().and_then(Timeline::advance) {
                if self.engine.offline {
                    l.ingress.grow_held(held_size(&config, &self.engine));
                }
                l.ingress.reconfigure(&config, at);
                l.inbox.applied(Arc::new(config));
            }
        }
        for l in &mut self.lanes {
            if let Some(change) = l.inbox.take() {
                if let Some(ring) = change.ring {
                    l.ingress.take_ring(ring);
                }
                if let Some(held) = change.held {
                    l.ingress.take_held(held);
                }
                // A change over a schedule: its steps take the change, and the path the step
                // in effect's new configuration.
                let mut config = change.config;
                match (change.steps, l.timeline.as_mut(), l.schedule.as_mut()) {
                    (Some(steps), Some(t), _) => {
                        if let Some(c) = t.replace(steps).then(|| t.in_effect()).flatten() {
                            config = Arc::new(c.clone());
                        }
                    }
                    (Some(steps), None, Some(s)) => {
                        s.replace(steps);
                    }
                    _ => {}
                }
                if self.engine.offline {
                    l.ingress.grow_held(held_size(&config, &self.engine));
                }
                l.ingress.reconfigure(&config, now);
                l.inbox.applied(config);
            }
        }
        Ok(())
    }

    /// After the port ended: serves what the queue disciplines still hold, then ends.
    fn drain_queue(&mut self, now: Nanos) -> Next {
        let mut next = Next::Ended;
        for l in &mut self.lanes {
            l.ingress.advance(now);
            if l.ingress.holds_frames() {
                next = next.earliest(l.ingress.next_event().map_or(Next::At(now + TX_RETRY), Next::At));
            }
        }
        if next == Next::Ended {
            self.done.store(true, Ordering::Release);
        }
        next
    }

    /// Reads what the port did to frames a local sender left to the hardware. Frames it could
    /// not make wire frames of were taken from the port: they count as received and dropped
    /// (`offload`), so every frame that reached the port stays accounted for.
    fn take_offload(&mut self) {
        let o = self.rx.offload();
        let c = &self.port;
        c.gso_frames.set(o.gso_frames);
        c.gso_segments.set(o.gso_segments);
        c.csum_completed.set(o.csum_completed);
        let refused = &c.dropped[pathem_model::DropReason::Offload as usize];
        let new = o.refused.saturating_sub(refused.get());
        if new > 0 {
            c.rx_packets.add(new);
            refused.add(new);
        }
    }

    /// Takes the frames that have arrived; says when to come back (`Ended` once the port has).
    #[inline(always)]
    fn receive(&mut self, now: Nanos) -> Result<Next, Error> {
        self.received = 0;
        self.apply_changes(now)?;
        if self.rx_ended {
            return Ok(self.drain_queue(now));
        }
        let (lanes, classifier) = (&mut self.lanes, &self.classifier);
        // One path with a rate link: its moving state (the last exit, the carried remainder)
        // lives in a local for the burst, which no other store of the frame can touch, not in
        // the link's fields behind the path's pointers: each frame's exit depends on the one
        // before, and through the fields that chain cost the path 0.6–1.2 ns a frame (a third
        // of what it costs above no impairment; docs/performance.md).
        let received = match (classifier, lanes[0].ingress.take_hot()) {
            (None, Some(mut hot)) => {
                let ingress = &mut lanes[0].ingress;
                let got = self.rx.recv_burst(
                    now,
                    RX_BURST,
                    #[inline(always)]
                    |f| ingress.push_with(f, Some(&mut hot)),
                );
                ingress.put_hot(hot);
                got
            }
            _ => self.rx.recv_burst(
                now,
                RX_BURST,
                #[inline(always)]
                |f| classify(lanes, classifier, f),
            ),
        }?;
        self.received = received;
        if received > 0 && self.busy_poll > Nanos::ZERO {
            self.busy_until = now + self.busy_poll;
        }
        let (mut next, waiting) = match self.rx.poll_at() {
            PollAt::Now => (Next::Now, true),
            PollAt::At(t) => (Next::At(t), t <= now),
            PollAt::Unknown => (Next::Soon, false),
            PollAt::Ended => {
                self.rx_ended = true;
                return Ok(self.drain_queue(now));
            }
        };
        // How far the queue disciplines may be served: to `now`, or only as far as the port has
        // handed over every frame that arrived (frames still waiting after a full burst, or held
        // back by a fan-in): served past their arrival, a discipline would send a frame before
        // one that came earlier had joined. Every lane goes that far, also one that got no frame
        // in the burst (a class whose queue still holds frames).
        let horizon = match waiting {
            // The latest arrival a discipline took: every frame before it has been handed over
            // (a port hands frames over in arrival order).
            true => self.lanes.iter().filter_map(|l| l.ingress.last_queued()).max(),
            false => Some(self.rx.delivered_until(now)),
        };
        for l in &mut self.lanes {
            if l.ingress.has_aqm() {
                // Decide what leaves the queue discipline by then, and wake for its next service.
                if let Some(h) = horizon {
                    l.ingress.advance(h);
                }
                if let Some(t) = l.ingress.next_event() {
                    next = next.earliest(Next::At(t));
                }
            }
        }
        // Kernel drops and occupancy are read every 10 ms, not per round: a system call on
        // live ports, and nobody reads them faster.
        if now >= self.drops_read + DROPS_EVERY {
            self.drops_read = now;
            self.port.port_rx_dropped.set(self.rx.kernel_drops());
            self.port.port_rx_rolled_over.set(self.rx.rolled_over());
            self.port.port_rx_foreign.set(self.rx.foreign());
            self.take_offload();
            for l in &mut self.lanes {
                l.ingress.gauges(now);
            }
        }
        // Wake for the next change, so an idle link still changes on time.
        for l in &self.lanes {
            if let Some(t) = l.timeline.as_ref().and_then(Timeline::next_at) {
                next = next.earliest(Next::At(t));
            }
        }
        if now < self.busy_until {
            // Traffic is flowing: look again right away instead of sleeping.
            next = next.earliest(Next::Busy(None));
        }
        Ok(next)
    }
}

impl<T: TxPort> Output<T> {
    /// Hands every frame due at `now` (up to the budget: [`EGRESS_BURST`], or more after a
    /// larger receive) to the port, the paths' frames merged in release order, then flushes it
    /// (also when only frames from an earlier round still wait in the port). Returns how many
    /// left.
    #[inline(always)]
    fn release(&mut self, now: Nanos) -> Result<usize, pathem_io::Error> {
        let upto = now.saturating_add(self.lead);
        let n = match &mut self.lanes[..] {
            [one] => one.hand(now, upto, self.budget, &mut self.tx),
            lanes => merge(lanes, now, upto, self.budget, &mut self.tx),
        };
        // Also when no frame went but the port holds some, or fillers it queued ahead of a
        // frame still to go (a long gap filled over several rounds).
        if n > 0 || self.tx.queued() > 0 {
            self.tx.flush()?;
            self.port.port_tx_queued.set(self.tx.queued() as u64);
            self.take_refused(false);
            if self.lead > Nanos::ZERO {
                let f = self.tx.fillers();
                self.port.tx_filler_frames.set(f.frames);
                self.port.tx_filler_bytes.set(f.bytes);
                self.port.tx_filler_late.set(f.late);
                self.port.tx_filler_errors.set(f.errors);
            }
        }
        Ok(n)
    }

    /// Takes frames the port refused (see [`TxPort::refused`]) into the port's counters: out
    /// of what the direction counts as sent, by class.
    #[inline]
    fn take_refused(&mut self, fresh: bool) {
        let r = self.tx.refused(fresh);
        let c = &self.port;
        if r.total() == c.tx_refused() {
            return;
        }
        for (counter, &frames) in c.port_tx_errors.iter().zip(&r.frames) {
            counter.set(frames);
        }
        c.port_tx_refused_bytes.set(r.bytes);
    }

    /// Sends what is due; says when the next frame falls due (`Ended` when none waits).
    #[inline]
    fn send(&mut self, now: Nanos) -> Result<Next, Error> {
        self.release(now)?;
        let mut next = Next::Ended;
        let upto = now.saturating_add(self.lead);
        for e in &mut self.lanes {
            next = next.earliest(match e.next_release() {
                Some(t) if t <= upto => Next::Now,
                Some(t) => Next::At(t - self.lead),
                None => Next::Ended,
            });
        }
        if self.port.port_tx_queued.get() > 0 {
            // The port still holds frames the kernel did not take: come back to flush them
            // even if nothing new is due. (Backing off while frames are due cost TCP through
            // DPDK's af_xdp driver a tenth of its throughput: a full port is retried at once.)
            next = next.earliest(Next::At(now + TX_RETRY));
        }
        Ok(next)
    }
}

/// Of several sources' next instants, the one that comes first, if no later than `upto`, and
/// until when it may go on alone: the next instant of the others, or `upto` if none comes
/// sooner. Ties go to the source listed first. How egress merges its paths and the fan-in
/// its receive queues' lines.
#[inline]
pub(crate) fn earliest(next: impl Iterator<Item = Option<Nanos>>, upto: Nanos) -> Option<(usize, Nanos)> {
    let (mut first, mut second): (Option<(Nanos, usize)>, Nanos) = (None, upto);
    for (i, t) in next.enumerate() {
        let Some(t) = t.filter(|&t| t <= upto) else { continue };
        match first {
            Some((f, _)) if t >= f => second = second.min(t),
            _ => {
                if let Some((f, _)) = first {
                    second = second.min(f);
                }
                first = Some((t, i));
            }
        }
    }
    first.map(|(_, i)| (i, second))
}

/// Hands the frames of several paths due by `upto` (`now`, or a lead later) to `tx` in
/// release order: each time, the path whose next frame is due first sends up to the next
/// path's next release.
fn merge<T: TxPort>(lanes: &mut [Egress], now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
    let mut n = 0;
    while n < budget {
        let Some((i, second)) = earliest(lanes.iter_mut().map(Egress::next_release), upto) else { break };
        let sent = lanes[i].hand(now, second, budget - n, tx);
        if sent == 0 {
            break;
        }
        n += sent;
    }
    n
}

impl<R: RxPort, T: TxPort> Task for Pipeline<R, T> {
    #[inline]
    fn poll(&mut self, now: Nanos) -> Result<Next, Error> {
        // Release what is due before taking new frames, so the delay line has its room back.
        self.output.release(now)?;
        let input = self.input.receive(now)?;
        // Output keeps pace with input: each release may hand over as many frames as this
        // receive took (a port cutting super-frames delivers up to 64 KB / MSS frames a slot).
        self.output.budget = self.input.received.max(EGRESS_BURST);
        // Frames with no delay are due at once.
        let output = self.output.send(now)?;
        Ok(input.earliest(output))
    }
}

/// The input half on a thread of its own.
impl<R: RxPort> Task for Input<R> {
    #[inline]
    fn poll(&mut self, now: Nanos) -> Result<Next, Error> {
        self.receive(now)
    }
}

/// The output half on a thread (and CPU) of its own: it spins on its delay line, since frames
/// come from another thread that cannot wake it, and ends once the input has ended and every
/// frame has left.
impl<T: TxPort> Task for Output<T> {
    #[inline]
    fn poll(&mut self, now: Nanos) -> Result<Next, Error> {
        let done = self.done.load(Ordering::Acquire);
        match self.send(now)? {
            Next::Ended if done => Ok(Next::Ended),
            Next::Now => Ok(Next::Now),
            Next::At(t) => Ok(Next::Busy(Some(t))),
            _ => Ok(Next::Busy(None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::run;
    use crate::testing::Frames;
    use pathem_io::mem::MemSink;
    use pathem_io::RxFrame;

    /// A live-like port: one frame at the first poll, then nothing, and it cannot say when.
    struct OneFrame(bool);

    impl RxPort for OneFrame {
        fn recv_burst<F: FnMut(RxFrame<'_>)>(
            &mut self,
            now: Nanos,
            _max: usize,
            mut f: F,
        ) -> Result<usize, pathem_io::Error> {
            if std::mem::replace(&mut self.0, false) {
                f(RxFrame { arrival: now, wire_len: 64, data: &[0u8; 64] });
                return Ok(1);
            }
            Ok(0)
        }
        fn poll_at(&self) -> PollAt {
            PollAt::Unknown
        }
    }

    fn pipeline(busy_poll: Nanos) -> Pipeline<OneFrame, MemSink> {
        let engine = EngineConfig { busy_poll, ..EngineConfig::default() };
        Pipeline::new(OneFrame(true), MemSink::default(), &PathConfig::default(), 1, &engine).unwrap()
    }

    #[test]
    fn a_buffer_rounded_up_says_so() {
        let engine = |b| EngineConfig { buffer: Some(b), max_frame: 1514, ..EngineConfig::default() };
        let s = delay_line_sizing(&PathConfig::default(), &engine(300 << 10));
        assert!(s.why.contains("rounded up"), "{}", s.why);
        assert_eq!(delay_line_sizing(&PathConfig::default(), &engine(1 << 20)).why, "--buffer");
        assert!(delay_line_sizing(&PathConfig::default(), &engine(1)).why.contains("two 1514-byte frames"));
    }

    #[test]
    fn a_busy_pipeline_asks_to_be_polled_again_right_away() {
        let mut p = pipeline(Nanos::from_millis(1));
        assert_eq!(p.poll(Nanos(1_000)).unwrap(), Next::Busy(None));
        // Still within a millisecond of the frame: keep polling.
        assert_eq!(p.poll(Nanos(900_000)).unwrap(), Next::Busy(None));
        // Past it, with nothing in flight: the port cannot say when, so the loop may sleep.
        assert_eq!(p.poll(Nanos(1_002_000)).unwrap(), Next::Soon);
    }

    #[test]
    fn busy_keeps_the_earliest_release_it_is_combined_with() {
        let t = |n| Nanos(n);
        assert_eq!(Next::Busy(None).earliest(Next::At(t(5))), Next::Busy(Some(t(5))));
        assert_eq!(Next::At(t(5)).earliest(Next::Busy(Some(t(3)))), Next::Busy(Some(t(3))));
        assert_eq!(Next::Busy(Some(t(7))).earliest(Next::Busy(Some(t(4)))), Next::Busy(Some(t(4))));
        assert_eq!(Next::Busy(None).earliest(Next::Soon), Next::Busy(None));
        assert_eq!(Next::Busy(None).earliest(Next::Ended), Next::Busy(None));
        assert_eq!(Next::Busy(None).earliest(Next::Now), Next::Now);
    }

    /// A port that records what each flush hands its kernel, and when; the kernel takes at
    /// most `take` frames a flush (16: half a release's burst, as AF_XDP copy mode's kick
    /// takes a bounded batch), the rest waits in the port.
    struct SlowPort {
        take: usize,
        waiting: usize,
        now: Nanos,
        flushed: Vec<(Nanos, usize)>,
    }

    impl SlowPort {
        fn taking(take: usize) -> SlowPort {
            SlowPort { take, waiting: 0, now: Nanos::ZERO, flushed: Vec::new() }
        }

        /// Each frame's time of leaving, in order.
        fn sent(&self) -> Vec<Nanos> {
            self.flushed.iter().flat_map(|&(t, n)| std::iter::repeat_n(t, n)).collect()
        }
    }

    impl pathem_io::TxPort for SlowPort {
        fn send(&mut self, _release: Nanos, _wire_len: u32, _data: &[u8]) -> bool {
            self.waiting += 1;
            true
        }
        fn flush(&mut self) -> Result<(), pathem_io::Error> {
            let n = self.waiting.min(self.take);
            self.waiting -= n;
            self.flushed.push((self.now, n));
            Ok(())
        }
        fn queued(&self) -> usize {
            self.waiting
        }
    }

    /// The engine as a replay runs it (virtual time, memory touched as used).
    fn offline() -> EngineConfig {
        EngineConfig { offline: true, ..EngineConfig::default() }
    }

    /// A path of a constant delay and nothing else.
    fn delayed(delay: Nanos) -> PathConfig {
        PathConfig { delay: pathem_model::delay::DelayConfig::constant(delay), ..PathConfig::default() }
    }

    /// Runs `p` offline by hand until it ends, telling the port the time before each round
    /// (so that it knows when it flushes).
    fn drive<R: RxPort>(p: &mut Pipeline<R, SlowPort>) {
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        loop {
            let now = crate::Clock::now(&mut clock);
            p.output.tx.now = now;
            match p.poll(now).unwrap() {
                Next::Ended => break,
                Next::At(t) | Next::Busy(Some(t)) => {
                    crate::Clock::wait_until(&mut clock, t);
                }
                _ => {}
            }
            assert!(now < Nanos::from_secs(1), "never drained");
        }
    }

    /// Loss after a discipline and a jittered delay.
    fn steps_with_jitter() -> PathConfig {
        PathConfig {
            loss: Some("2%".parse().unwrap()),
            delay: pathem_model::delay::DelayConfig {
                base: Nanos::from_millis(2),
                jitter: Nanos::from_millis(1),
                ..Default::default()
            },
            ..PathConfig::default()
        }
    }

    /// What left, in order: (release, frame number).
    #[derive(Default)]
    struct Sent(Vec<(Nanos, u32)>);

    impl pathem_io::TxPort for Sent {
        fn send(&mut self, release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
            self.0.push((release, Frames::tag(data)));
            true
        }
        fn flush(&mut self) -> Result<(), pathem_io::Error> {
            Ok(())
        }
    }

    #[test]
    fn a_discipline_at_its_limit_finds_room_for_every_frame_it_admits() {
        // Frames of 64 to 1500 bytes at 150% of the rate, the longest frame 1514: the store of
        // held frames is the limit (twice it for FQ-CoDel and DualPI2) and two longest frames
        // (a frame joins a full queue before drop-head or FQ-CoDel drops from its head; the
        // ring's end a frame did not fit). No frame is dropped for want of room, every frame
        // is accounted for.
        let mut arrivals = Vec::new();
        let mut t = Nanos::from_millis(1);
        for i in 0..6_000u32 {
            arrivals.push((t, i.wrapping_mul(2_654_435_761) >> 8));
            // 782 B on average at 10 Mbit/s is 0.63 ms: a frame every 0.42 ms is 150%.
            t += Nanos(417_000);
        }
        let engine = EngineConfig { offline: true, max_frame: 1514, ..EngineConfig::default() };
        for queue in ["30kB", "20pkt"] {
            for aqm in ["drophead", "red", "codel", "fq-codel", "pie", "dualpi2"] {
                let path = PathConfig {
                    link: Some(pathem_model::link::LinkConfig {
                        queue: Some(queue.parse().unwrap()),
                        ..pathem_model::link::LinkConfig::rate("10mbit".parse().unwrap())
                    }),
                    aqm: aqm.parse().unwrap(),
                    ..PathConfig::default()
                };
                let port = Frames { sized_by_tag: true, ..Frames::tagged(arrivals.iter().copied()) };
                let mut p = Pipeline::new(port, Sent::default(), &path, 7, &engine).unwrap();
                let mut clock = crate::VirtualClock::starting_at(Nanos(0));
                run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
                let s = p.counters().snapshot();
                let what = format!("{aqm} with a {queue} queue: {:?}", s.dropped);
                assert_eq!(s.dropped.get(pathem_model::DropReason::DelayLine), 0, "{what}");
                assert!(s.dropped.total() > 1_000, "{what}");
                assert_eq!((s.tx_packets + s.dropped.total(), s.in_flight), (6_000, 0), "{what}");
                assert!(s.balances(), "{what}");
            }
        }
    }

    /// Each queue discipline, with random steps after it (loss and jitter; duplicates and
    /// corruption; reordering), sends the same frames at the same instants whether the frames
    /// come one by one or in batches of 100 us or 2 ms (40 frames, more than a burst): the
    /// discipline draws from a stream of its own, so it does not matter whether a frame is
    /// decided at the next arrival or at a poll, and it is never served past frames still
    /// waiting in the port.
    #[test]
    fn disciplines_decide_the_same_however_frames_are_batched() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut t = Nanos::from_millis(1);
        let mut arrivals = Vec::new();
        for i in 0..20_000u32 {
            // Exponential gaps, phases of overload and of less (frames of 782 B on average).
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let load = if (i / 2_000) % 2 == 0 { 1.3 } else { 0.8 };
            let gap = -((x >> 11) as f64 / (1u64 << 53) as f64).max(1e-9).ln() * 8_000.0 * 6.0 / load;
            t += Nanos(if x % 50 == 0 { 0 } else { gap as u64 });
            arrivals.push((t, i));
        }
        let engine = offline();
        let steps = [
            steps_with_jitter(),
            PathConfig {
                duplicate: Some("2%".parse().unwrap()),
                corrupt: Some("2%".parse().unwrap()),
                ..PathConfig::default()
            },
            PathConfig { reorder: true, ..steps_with_jitter() },
        ];
        for (aqm, after) in ["drophead", "red", "codel", "fq-codel", "pie", "dualpi2"]
            .into_iter()
            .flat_map(|a| steps.iter().map(move |s| (a, s)))
        {
            let path = PathConfig {
                link: Some(pathem_model::link::LinkConfig {
                    queue: Some("100pkt".parse().unwrap()),
                    ..pathem_model::link::LinkConfig::rate("100mbit".parse().unwrap())
                }),
                aqm: aqm.parse().unwrap(),
                ..after.clone()
            };
            let outcome = |batch: Nanos| {
                let port = Frames { batch, sized_by_tag: true, ..Frames::tagged(arrivals.iter().copied()) };
                let mut p = Pipeline::new(port, Sent::default(), &path, 7, &engine).unwrap();
                let mut clock = crate::VirtualClock::starting_at(Nanos(0));
                run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
                let s = p.counters().snapshot();
                (p.into_ports().1 .0, s.dropped.total(), s.tx_packets)
            };
            let one_by_one = outcome(Nanos::ZERO);
            assert!(
                one_by_one.1 > 500 && one_by_one.2 > 10_000,
                "{aqm}: the queue filled and sent: {} dropped, {} sent",
                one_by_one.1,
                one_by_one.2
            );
            for batch in [Nanos::from_micros(100), Nanos::from_millis(2)] {
                assert!(outcome(batch) == one_by_one, "{aqm} {after}: batches of {batch:?} decide otherwise");
            }
        }
    }

    /// NetEm's `delay 10ms 5ms rate 10mbit reorder 5%`: frames sent at once overtake the
    /// delayed ones, which keep their order (the rate makes each wait for the one before)
    /// unless `reorder` lets them overtake too.
    #[test]
    fn frames_sent_at_once_overtake_and_delayed_ones_keep_order_unless_reordering() {
        let arrivals: Vec<(Nanos, u32)> =
            (0..20_000u32).map(|i| (Nanos::from_micros(200 * u64::from(i)), i)).collect();
        // Through drop-tail and through a discipline (frames decided at dequeue take another
        // way to the line), and with duplicates (a copy of a frame sent at once goes at once).
        let sent = |reorder: bool, aqm: &str, duplicate: Option<&str>| {
            let path = PathConfig {
                aqm: aqm.parse().unwrap(),
                duplicate: duplicate.map(|d| d.parse().unwrap()),
                link: Some(pathem_model::link::LinkConfig {
                    queue: Some("1000pkt".parse().unwrap()),
                    ..pathem_model::link::LinkConfig::rate("10mbit".parse().unwrap())
                }),
                delay: pathem_model::delay::DelayConfig {
                    base: Nanos::from_millis(10),
                    jitter: Nanos::from_millis(5),
                    ..Default::default()
                },
                skip_delay: Some("5%".parse().unwrap()),
                reorder,
                ..PathConfig::default()
            };
            let mut p = Pipeline::new(
                Frames::tagged(arrivals.iter().copied()),
                Sent::default(),
                &path,
                7,
                &offline(),
            )
            .unwrap();
            run(&mut [&mut p], &mut crate::VirtualClock::starting_at(Nanos(0)), &AtomicBool::new(false))
                .unwrap();
            let s = p.counters().snapshot();
            assert_eq!((s.tx_packets, s.dropped.total()), (20_000 + s.duplicated, 0));
            assert_eq!(s.duplicated > 0, duplicate.is_some());
            let sent = p.into_ports().1 .0;
            // At once: within a millisecond of arriving; delayed: at least 5 ms after.
            let (at_once, delayed): (Vec<_>, Vec<_>) = sent
                .iter()
                .partition(|&&(release, tag)| release < arrivals[tag as usize].0 + Nanos::from_millis(1));
            let frames = 20_000 + s.duplicated as usize;
            assert!(
                (frames / 25..frames * 3 / 50).contains(&at_once.len()),
                "{} sent at once",
                at_once.len()
            );
            let inversions = |v: &[&(Nanos, u32)]| v.windows(2).filter(|w| w[1].1 < w[0].1).count();
            let overtaken = sent.windows(2).filter(|w| w[1].1 < w[0].1).count();
            (inversions(&delayed), overtaken, s.reordered, s.reorder_clamped)
        };
        for (aqm, duplicate) in
            [("droptail", None), ("codel", None), ("droptail", Some("10%")), ("fq-codel", Some("10%"))]
        {
            let what = format!("{aqm} {duplicate:?}");
            let (delayed_out_of_order, overtaken, reordered, clamped) = sent(false, aqm, duplicate);
            assert_eq!(delayed_out_of_order, 0, "{what}");
            assert!(clamped > 1_000, "{what}: jittered frames held back behind the one before: {clamped}");
            assert!(overtaken > 500 && reordered > 10_000, "{what}: {overtaken} {reordered}");
            let (delayed_out_of_order, _, _, clamped) = sent(true, aqm, duplicate);
            assert!(delayed_out_of_order > 1_000 && clamped == 0, "{what}: {delayed_out_of_order} {clamped}");
        }
    }

    /// NetEm's `limit 50` on a 10 ms delay with a frame every 100 µs (100 in flight unbounded):
    /// never more than 50 held, arrivals beyond are queue drops, and it fills to 50. With a
    /// rate the frames waiting for it count too; a duplicate is held as a frame.
    #[test]
    fn a_limit_bounds_the_frames_held_in_delay_and_queue() {
        let arrivals: Vec<(Nanos, u32)> =
            (0..20_000u32).map(|i| (Nanos::from_micros(100 * u64::from(i)), i)).collect();
        let delay = pathem_model::delay::DelayConfig::constant(Nanos::from_millis(10));
        for (what, link, duplicate) in [
            ("delay", None, None),
            ("rate and delay", Some(pathem_model::link::LinkConfig::rate("4mbit".parse().unwrap())), None),
            ("delay and duplicates", None, Some("10%".parse().unwrap())),
        ] {
            let path = PathConfig {
                delay: delay.clone(),
                link,
                duplicate,
                limit: Some(50),
                ..PathConfig::default()
            };
            let port = Frames::tagged(arrivals.iter().copied());
            let mut p = Pipeline::new(port, Sent::default(), &path, 7, &offline()).unwrap();
            run(&mut [&mut p], &mut crate::VirtualClock::starting_at(Nanos(0)), &AtomicBool::new(false))
                .unwrap();
            let s = p.counters().snapshot();
            let sent = p.into_ports().1 .0;
            let queue = s.dropped.get(pathem_model::DropReason::Queue);
            assert!(queue > 5_000 && s.balances(), "{what}: {queue} dropped, {:?}", s.dropped);
            // Frames held at each arrival: sent ones that arrived before it and leave after it.
            let mut held_at = vec![0u32; arrivals.len()];
            let mut sent_by_tag = vec![None; arrivals.len()];
            for &(release, tag) in &sent {
                sent_by_tag[tag as usize] = Some(release);
                for (a, _) in arrivals.iter().skip(tag as usize + 1).take_while(|(a, _)| *a < release) {
                    held_at[(a.as_nanos() / 100_000) as usize] += 1;
                }
            }
            let most = arrivals.iter().map(|&(_, i)| held_at[i as usize]).max().unwrap();
            assert_eq!(most, 50, "{what}: held at most");
            // An arrival dropped found 50 held; one taken found fewer.
            for (&(_, i), r) in arrivals.iter().zip(&sent_by_tag).skip(1) {
                assert_eq!(r.is_none(), held_at[i as usize] >= 50, "{what}: frame {i}");
            }
        }
    }

    #[test]
    fn virtual_time_runs_a_year_gap_in_a_few_rounds() {
        let year = Nanos::from_secs(365 * 86_400);
        let engine = offline();
        let path = PathConfig::default();
        let mut p =
            Pipeline::new(Frames::at([Nanos(1), year]), MemSink::default(), &path, 1, &engine).unwrap();
        let mut clock = crate::VirtualClock::starting_at(Nanos(1));
        run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
        let (rx, sink) = p.into_ports();
        assert_eq!((sink.frames, sink.last_release), (2, year));
        // Stepping through the idle year in 10 ms waits would take 3 · 10^9 rounds.
        assert!(rx.polls < 10, "{} rounds", rx.polls);
    }

    #[test]
    fn frames_a_port_did_not_take_leave_without_waiting_for_more_traffic() {
        let path = delayed(Nanos::from_millis(10));
        let engine = offline();
        let mut p =
            Pipeline::new(Frames::at(vec![Nanos(1_000); 1000]), SlowPort::taking(16), &path, 1, &engine)
                .unwrap();
        drive(&mut p);
        let s = p.counters().snapshot();
        assert_eq!((s.tx_packets, s.port_tx_queued, s.in_flight), (1000, 0, 0));
        assert!(s.balances());
        let sent = &p.output.tx.sent();
        assert_eq!(sent.len(), 1000);
        // 1000 frames, 32 handed over per release and 16 taken per flush: the port holds 488
        // once the line is empty, taken 32 a round, one round every 100 us while it holds
        // some. All within 4 ms of the release, most after it.
        let due = Nanos(1_000) + Nanos::from_millis(10);
        assert!(sent.iter().all(|&t| t >= due && t <= due + Nanos::from_millis(4)), "{:?}", sent.last());
        assert!(sent.iter().filter(|&&t| t > due).count() >= 400, "the port held frames past their release");
    }

    #[test]
    fn frames_due_together_leave_a_receive_burst_at_a_time_without_waiting() {
        // 300 frames arriving at one instant, due together 1 ms later: each release hands
        // the port at most a receive burst (a long transmit would leave the receive ring
        // unread meanwhile), and the rounds that follow at once send them all at their time.
        let path = delayed(Nanos::from_millis(1));
        let engine = offline();
        let port = SlowPort::taking(usize::MAX);
        let mut p = Pipeline::new(Frames::at(vec![Nanos(1_000); 300]), port, &path, 1, &engine).unwrap();
        drive(&mut p);
        let flushed = &p.output.tx.flushed;
        let due = Nanos(1_000) + Nanos::from_millis(1);
        assert_eq!(flushed.iter().map(|f| f.1).sum::<usize>(), 300);
        assert!(flushed.iter().all(|&(_, n)| n <= RX_BURST), "{flushed:?}");
        assert!(flushed.iter().all(|&(t, _)| t == due), "{flushed:?}");
        assert_eq!(flushed.len(), 300usize.div_ceil(RX_BURST));
    }

    #[test]
    fn output_keeps_pace_with_a_receive_larger_than_a_burst() {
        // 90 frames a call (segments of super-frames), no delay: each round sends what it
        // took in one flush, rather than a burst's worth while the rest waits a round.
        let engine = offline();
        let arrivals = (1..=5).flat_map(|i| std::iter::repeat_n(Nanos(i * 1_000), 90));
        let port = Frames { per_slot: 3, ..Frames::at(arrivals) };
        let mut p =
            Pipeline::new(port, SlowPort::taking(usize::MAX), &PathConfig::default(), 1, &engine).unwrap();
        drive(&mut p);
        let flushed = &p.output.tx.flushed;
        let expected: Vec<_> = (1..=5).map(|i| (Nanos(i * 1_000), 90)).collect();
        assert_eq!(flushed, &expected);
    }

    /// A port timing frames with fillers (a lead of 1 ms) whose queue holds two: each frame
    /// needs five fillers first, so it goes only after the fillers went over several flushes.
    struct Filling {
        queued: usize,
        left: usize,
        flushes: u32,
        sent: Vec<Nanos>,
    }

    impl pathem_io::TxPort for Filling {
        fn send(&mut self, release: Nanos, _wire_len: u32, _data: &[u8]) -> bool {
            let k = (2 - self.queued).min(self.left);
            (self.queued, self.left) = (self.queued + k, self.left - k);
            if self.left > 0 || self.queued == 2 {
                return false;
            }
            self.left = 5;
            self.queued += 1;
            self.sent.push(release);
            true
        }
        fn flush(&mut self) -> Result<(), pathem_io::Error> {
            self.queued = 0;
            self.flushes += 1;
            Ok(())
        }
        fn queued(&self) -> usize {
            self.queued
        }
        fn lead(&self) -> Nanos {
            Nanos::from_millis(1)
        }
    }

    #[test]
    fn a_port_with_a_lead_gets_frames_early_and_is_flushed_while_it_fills() {
        let path = delayed(Nanos::from_millis(10));
        let engine = offline();
        let arrivals: Vec<Nanos> = (0..20).map(|i| Nanos::from_micros(100 * i)).collect();
        let port = Filling { queued: 0, left: 5, flushes: 0, sent: Vec::new() };
        let mut p = Pipeline::new(Frames::at(arrivals.clone()), port, &path, 1, &engine).unwrap();
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        let mut handed = Vec::new();
        for round in 0.. {
            let now = crate::Clock::now(&mut clock);
            let before = p.output.tx.sent.len();
            match p.poll(now).unwrap() {
                Next::Ended => break,
                Next::At(t) | Next::Busy(Some(t)) => {
                    crate::Clock::wait_until(&mut clock, t);
                }
                _ => {}
            }
            handed.extend(std::iter::repeat_n(now, p.output.tx.sent.len() - before));
            assert!(round < 100_000 && now < Nanos::from_secs(1), "stuck with fillers in the port");
        }
        let out = &p.output.tx;
        assert_eq!(out.sent.len(), 20);
        for ((&release, &at), &arrival) in out.sent.iter().zip(&handed).zip(&arrivals) {
            assert_eq!(release, arrival + Nanos::from_millis(10));
            // Handed a lead (1 ms) ahead of its release, not when due.
            assert!(at + Nanos::from_millis(1) >= release && at < release, "{at:?} for {release:?}");
        }
        assert!(out.flushes >= 3 * 20, "{} flushes: the fillers went in rounds", out.flushes);
    }

    #[test]
    fn a_frame_the_full_line_refuses_takes_no_time_on_the_link() {
        // A fixed 64 KiB line behind 1 Gbit/s with drop-tail's unbounded queue, offered four
        // times the rate for 20 ms: the line holds the backlog, and what it cannot hold is
        // dropped before the link, so the link still sends at its rate. (Were the dropped
        // frames given link time, the kept ones would leave four times too late.)
        let path = PathConfig {
            link: Some(pathem_model::link::LinkConfig::rate("1gbit".parse().unwrap())),
            ..PathConfig::default()
        };
        let engine = EngineConfig { buffer: Some(64 << 10), ..EngineConfig::default() };
        // 64 B frames take 88 B on the wire with the overhead: 704 ns at 1 Gbit/s.
        let (gap, n) = (176, 113_636u64);
        let arrivals = Frames::at((1..=n).map(|i| Nanos(i * gap)));
        let mut p = Pipeline::new(arrivals, MemSink::default(), &path, 1, &engine).unwrap();
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
        let s = p.counters().snapshot();
        assert!(s.balances());
        assert_eq!(s.tx_packets + s.dropped.total(), n);
        assert_eq!(s.dropped.total(), s.dropped.get(pathem_model::DropReason::DelayLine));
        let (_, sink) = p.into_ports();
        // The link was busy from the first arrival on: it sent one frame per 704 ns, and the
        // last one left once the line's backlog (at most its capacity in 80-byte records) had
        // gone.
        let last_arrival = n * gap;
        let backlog = s.delay_line_capacity / 80 * 704;
        assert_eq!(sink.frames, s.tx_packets);
        assert!(sink.last_release.as_nanos() <= last_arrival + backlog + 1_000, "{:?}", sink.last_release);
        let busy = sink.last_release.as_nanos() - sink.first_release.unwrap().as_nanos();
        assert!(s.tx_packets.abs_diff(busy / 704) <= 2, "{} frames in {busy} ns", s.tx_packets);
    }

    /// A path that starts transparent (live, a 4 MiB line at 100 Mbit/s) and is changed to hold
    /// 1 s: 125 000 frames of 64 B, 10 MB of records, arrive within that second.
    fn held_a_second(offline: bool, how: &str) -> (crate::Stats, usize) {
        let engine = EngineConfig { line_rate: Rate(100_000_000), offline, ..EngineConfig::default() };
        let second = delayed(Nanos::from_secs(1));
        let n = 125_000u64;
        let arrivals = Frames::at((1..=n).map(|i| Nanos(i * 8_000)));
        let mut p = Pipeline::new(arrivals, MemSink::default(), &PathConfig::default(), 1, &engine).unwrap();
        let before = p.delay_line_capacity();
        // Offline a line takes memory as frames come, up to 4 GiB from the start.
        assert_eq!(before, if offline { MAX_DELAY_LINE } else { MIN_DELAY_LINE });
        match how {
            "control" => p.control().set(second.clone()).unwrap(),
            _ => p.schedule(Schedule::new(vec![(Nanos::ZERO, second.clone())], None)).unwrap(),
        }
        p.follow_schedules(Nanos(0));
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
        assert_eq!(p.control().current(), second);
        let s = p.counters().snapshot();
        assert!(s.balances());
        let (_, sink) = p.into_ports();
        assert_eq!(sink.frames, n, "{how}: {:?}", s.dropped);
        assert_eq!(sink.first_release, Some(Nanos(8_000) + Nanos::from_secs(1)));
        (s, before)
    }

    #[test]
    fn a_change_that_holds_more_in_flight_gets_a_larger_line() {
        // Live (a fixed line): `set` makes the larger ring, the pipeline moves on to it.
        let (s, before) = held_a_second(false, "control");
        assert_eq!(s.dropped.total(), 0);
        assert!(s.delay_line_capacity >= 12_500_000 && s.delay_line_capacity as usize > before);
    }

    #[test]
    fn a_schedule_sizes_the_line_for_its_steps() {
        for offline in [false, true] {
            let (s, _) = held_a_second(offline, "schedule");
            assert_eq!(s.dropped.total(), 0, "offline {offline}");
            assert!(s.delay_line_capacity >= 12_500_000, "offline {offline}: {}", s.delay_line_capacity);
        }
    }

    /// A port whose kernel refuses every third frame at flush (too large, say).
    #[derive(Default)]
    struct RefusingPort {
        waiting: usize,
        handed: u64,
        refused: pathem_io::TxRefused,
        sent: u64,
    }

    impl pathem_io::TxPort for RefusingPort {
        fn send(&mut self, _release: Nanos, _wire_len: u32, _data: &[u8]) -> bool {
            self.waiting += 1;
            true
        }
        fn flush(&mut self) -> Result<(), pathem_io::Error> {
            for _ in 0..std::mem::take(&mut self.waiting) {
                self.handed += 1;
                if self.handed % 3 == 0 {
                    self.refused.add(pathem_io::TxErrorClass::TooLarge, 90, 64);
                } else {
                    self.sent += 1;
                }
            }
            Ok(())
        }
        fn refused(&mut self, _fresh: bool) -> pathem_io::TxRefused {
            self.refused
        }
    }

    #[test]
    fn frames_the_port_refused_are_not_counted_as_sent() {
        let engine = offline();
        let arrivals = Frames::at((1..=300).map(|i| Nanos(i * 1_000)));
        let mut p =
            Pipeline::new(arrivals, RefusingPort::default(), &PathConfig::default(), 1, &engine).unwrap();
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
        let s = p.finish(Nanos::from_secs(1), std::time::Duration::ZERO).unwrap();
        let (_, port) = p.into_ports();
        assert_eq!(
            (s.rx_packets, s.tx_packets, s.port_tx_errors.get(pathem_io::TxErrorClass::TooLarge)),
            (300, 200, 100)
        );
        assert_eq!(s.tx_packets, port.sent);
        assert_eq!(s.tx_bytes, 200 * 64);
        assert!(s.balances() && s.in_flight == 0, "{s:?}");
    }

    /// Arrivals whose port also refused some frames it could not make wire frames of.
    struct Refusing(Frames, u64);

    impl RxPort for Refusing {
        fn recv_burst<F: FnMut(RxFrame<'_>)>(
            &mut self,
            now: Nanos,
            max: usize,
            f: F,
        ) -> Result<usize, pathem_io::Error> {
            self.0.recv_burst(now, max, f)
        }
        fn poll_at(&self) -> PollAt {
            self.0.poll_at()
        }
        fn offload(&self) -> pathem_io::offload::OffloadCounts {
            pathem_io::offload::OffloadCounts {
                gso_frames: 2,
                gso_segments: 9,
                csum_completed: 4,
                refused: self.1,
            }
        }
    }

    #[test]
    fn frames_a_port_could_not_cut_count_as_received_and_dropped() {
        let engine = offline();
        let port = Refusing(Frames::at((1..=10).map(|i| Nanos(i * 1_000))), 3);
        let mut p = Pipeline::new(port, MemSink::default(), &PathConfig::default(), 1, &engine).unwrap();
        let mut clock = crate::VirtualClock::starting_at(Nanos(0));
        run(&mut [&mut p], &mut clock, &AtomicBool::new(false)).unwrap();
        let s = p.finish(Nanos::from_secs(1), std::time::Duration::ZERO).unwrap();
        assert_eq!(
            (s.rx_packets, s.tx_packets, s.dropped.get(pathem_model::DropReason::Offload)),
            (13, 10, 3)
        );
        assert_eq!((s.offload.gso_frames, s.offload.gso_segments, s.offload.csum_completed), (2, 9, 4));
        assert!(s.balances(), "{s:?}");
        // Read again: nothing counted twice.
        let s = p.finish(Nanos::from_secs(2), std::time::Duration::ZERO).unwrap();
        assert_eq!((s.rx_packets, s.dropped.get(pathem_model::DropReason::Offload)), (13, 3));
    }

    #[test]
    fn without_busy_polling_an_idle_pipeline_may_sleep() {
        let mut p = pipeline(Nanos::ZERO);
        assert_eq!(p.poll(Nanos(1_000)).unwrap(), Next::Soon);
        assert_eq!(p.counters().snapshot().tx_packets, 1);
    }
}
