//! The offline runtime: one direction of a path replayed over a capture in virtual time.
//!
//! Frame i arrives at its capture timestamp; the virtual clock jumps from event to event
//! (arrivals, releases, scheduled changes), so the result is exact and independent of the
//! machine's speed. `pathem replay` writes the frames to a capture stamped with their release
//! times ([`replay_file`]); the fuzz harness and the tests run the same loop into any port
//! ([`replay`]).

use crate::control::ClassState;
use crate::Error;
use pathem_engine::{run, ClassConfig, EngineConfig, Pipeline, Schedule, Stats, VirtualClock};
use pathem_io::pcap::{PcapSink, PcapSource};
use pathem_io::TxPort;
use pathem_model::rng::direction_seed;
use pathem_model::{Nanos, PathConfig};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What a replay did.
pub struct Replayed<T> {
    pub stats: Stats,
    /// With classes: each path's own counters, the default path first.
    pub classes: Vec<(String, Stats)>,
    /// Most bytes the delay line may hold (it grows with what is in flight, up to this).
    pub delay_line_bytes: usize,
    /// Input frames whose timestamp went back; they arrived with their predecessor.
    pub input_backwards_timestamps: u64,
    /// The port the frames went to.
    pub sink: T,
}

/// Replays `src` through `path` and its `classes` (and their schedules, counted from the
/// first frame's arrival) into `sink`, with the a→b direction's seed of `seed`, unless `stop`
/// is set before the end ([`Error::Stopped`]).
#[allow(clippy::too_many_arguments)]
pub fn replay<T: TxPort>(
    src: PcapSource,
    sink: T,
    path: &PathConfig,
    classes: &[ClassConfig],
    schedule: Option<Schedule>,
    seed: u64,
    engine: &EngineConfig,
    stop: &AtomicBool,
) -> Result<Replayed<T>, Error> {
    let engine = EngineConfig { offline: true, ..engine.clone() };
    let start = src.peek_arrival().unwrap_or(Nanos::ZERO);
    let mut pipe = Pipeline::with_classes(src, sink, path, classes, direction_seed(seed, 0), &engine)?;
    if let Some(s) = schedule {
        pipe.schedule(s)?;
    }
    pipe.follow_schedules(start);
    let mut clock = VirtualClock::starting_at(start);
    run(&mut [&mut pipe], &mut clock, stop)?;
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Error::Stopped);
    }
    pipe.read_gauges(pathem_engine::Clock::now(&mut clock));
    let stats = pipe.counters().snapshot();
    let classes = pipe.counters().classes();
    let delay_line_bytes = pipe.delay_line_capacity();
    let (src, sink) = pipe.into_ports();
    Ok(Replayed {
        stats,
        classes,
        delay_line_bytes,
        input_backwards_timestamps: src.backwards_timestamps(),
        sink,
    })
}

/// A change a schedule made to a path: `at_ns` after the first frame's arrival (in the first
/// round of a repeating schedule), `class` the path's class (`default` without one).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ScheduledChange {
    pub at_ns: u64,
    pub class: String,
    pub path: String,
}

/// What `pathem replay` did, as `--stats` writes it.
#[derive(Serialize, Debug, Clone)]
pub struct ReplayReport {
    pub seed: u64,
    /// The path at the start (a schedule changes it: `schedule`).
    pub path: String,
    /// The schedule's changes, every class's, in time order; empty without one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<ScheduledChange>,
    /// How often the schedule starts again, if it repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_repeat_ns: Option<u64>,
    /// Most bytes the delay line may hold (it grows with what is in flight, up to this).
    pub delay_line_bytes: usize,
    /// How a `--buffer` became that size, where it is not what was asked (rounded up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_line_note: Option<String>,
    pub input_backwards_timestamps: u64,
    /// The process's peak resident memory (VmHWM), where the system reports it.
    pub peak_memory_bytes: Option<u64>,
    #[serde(flatten)]
    pub stats: Stats,
    /// With classes: each path's own counters, the default path first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassState>,
}

impl ReplayReport {
    /// The one-screen summary of a replay of `input` into `output`.
    pub fn summary(&self, input: &Path, output: &Path) -> String {
        use pathem_model::units::binary_bytes as bytes;
        use std::fmt::Write;
        let (s, d) = (&self.stats, &self.stats.dropped);
        let pct = |n: u64| 100.0 * n as f64 / s.rx_packets.max(1) as f64;
        let mut out = String::new();
        let _ =
            writeln!(out, "pathem replay {} -> {} (seed {})", input.display(), output.display(), self.seed);
        let start = if self.schedule.is_empty() { "" } else { " (at the start)" };
        let _ = writeln!(out, "  path       {}{start}", self.path);
        for (i, c) in self.schedule.iter().enumerate() {
            let head = if i == 0 { "  schedule " } else { "           " };
            let class = if c.class == pathem_engine::DEFAULT_CLASS {
                String::new()
            } else {
                format!("class {}: ", c.class)
            };
            let at = if c.at_ns == 0 { "0s".to_string() } else { Nanos(c.at_ns).to_string() };
            let _ = writeln!(out, "{head} +{at}  {class}{}", c.path);
        }
        if let Some(p) = self.schedule_repeat_ns {
            let _ = writeln!(out, "            repeat every {}", Nanos(p));
        }
        let _ = writeln!(out, "  received   {:>10} frames  {:>12}", s.rx_packets, bytes(s.rx_bytes));
        let _ = writeln!(out, "  forwarded  {:>10} frames  {:>12}", s.tx_packets, bytes(s.tx_bytes));
        let _ = writeln!(
            out,
            "  dropped    {:>10} frames  ({:.3}%): {}",
            d.total(),
            pct(d.total()),
            d.describe()
        );
        if let Some(aqm) = s.aqm_line() {
            let _ = writeln!(out, "  aqm        {aqm}");
        }
        let _ = writeln!(
            out,
            "  duplicated {}, corrupted {}, ecn-marked {}, reordered {}",
            s.duplicated, s.corrupted, s.ecn_marked, s.reordered
        );
        if s.reorder_clamped > 0 {
            let _ = writeln!(
                out,
                "  held back  {} frames so that none overtook another, by {:.1} us on average",
                s.reorder_clamped,
                s.reorder_clamp_mean_ns / 1e3
            );
        }
        let note = self.delay_line_note.as_ref().map(|n| format!("; {n}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  delay line up to {} (grows with what is in flight{note})",
            bytes(self.delay_line_bytes as u64)
        );
        for c in &self.classes {
            let _ = writeln!(out, "  {}", c.heading());
            let (cs, cd) = (&c.stats, &c.stats.dropped);
            let _ = writeln!(
                out,
                "    received {} forwarded {} dropped {} ({})",
                cs.rx_packets,
                cs.tx_packets,
                cd.total(),
                cd.describe()
            );
        }
        if let Some(peak) = self.peak_memory_bytes {
            let _ = writeln!(out, "  peak memory {}", bytes(peak));
        }
        if self.input_backwards_timestamps > 0 {
            let _ = writeln!(
                out,
                "  note: {} input frames had timestamps earlier than their predecessor; they arrived with it",
                self.input_backwards_timestamps
            );
        }
        out
    }
}

/// Every change the default path's `schedule` and the classes' make, in time order (the
/// default path first at equal times), and the period they repeat with.
fn scheduled_changes(
    schedule: Option<&Schedule>,
    classes: &[ClassConfig],
) -> (Vec<ScheduledChange>, Option<Nanos>) {
    let named = std::iter::once((pathem_engine::DEFAULT_CLASS, schedule))
        .chain(classes.iter().map(|c| (c.name.as_str(), c.schedule.as_ref())));
    let mut changes = Vec::new();
    let mut repeat = None;
    for (class, s) in named {
        let Some(s) = s else { continue };
        repeat = repeat.or(s.period());
        changes.extend(s.steps().iter().map(|(at, path)| ScheduledChange {
            at_ns: at.as_nanos(),
            class: class.to_string(),
            path: path.to_string(),
        }));
    }
    changes.sort_by_key(|c| c.at_ns);
    (changes, repeat)
}

/// While one lives, SIGINT and SIGTERM set the flag it gives (and a second one ends the
/// process, exit 1); with none, they act as by default (signal-hook cannot give the default
/// action back, so it is emulated). The handlers are the process's, made once.
struct Watch(&'static Handlers);

struct Handlers {
    /// Set by a signal while a replay runs.
    stop: Arc<AtomicBool>,
    /// Set while no replay runs: a signal then acts as by default.
    idle: Arc<AtomicBool>,
    /// Replays running.
    running: std::sync::atomic::AtomicUsize,
}

impl Watch {
    fn signals() -> Result<Watch, Error> {
        use signal_hook::flag::{register, register_conditional_default, register_conditional_shutdown};
        use std::sync::atomic::Ordering;
        static HANDLERS: std::sync::OnceLock<Handlers> = std::sync::OnceLock::new();
        static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = MADE.lock().unwrap_or_else(|e| e.into_inner());
        let h = match HANDLERS.get() {
            Some(h) => h,
            None => {
                let (stop, idle) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
                let fail = |source| Error::Io { what: "cannot watch for signals".into(), source };
                for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                    register_conditional_default(sig, idle.clone()).map_err(fail)?;
                    register_conditional_shutdown(sig, 1, stop.clone()).map_err(fail)?;
                    register(sig, stop.clone()).map_err(fail)?;
                }
                HANDLERS.get_or_init(|| Handlers { stop, idle, running: Default::default() })
            }
        };
        if h.running.fetch_add(1, Ordering::AcqRel) == 0 {
            h.stop.store(false, Ordering::Relaxed);
            h.idle.store(false, Ordering::Relaxed);
        }
        Ok(Watch(h))
    }

    fn flag(&self) -> &AtomicBool {
        &self.0.stop
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.store(true, Ordering::Relaxed);
        }
    }
}

/// Replays capture `input` into capture `output`, and writes the report as JSON into `stats`
/// if given; the two exist only if this returns `Ok`. A `stats` that cannot be written is
/// found before the run (a temporary file is made beside it then).
#[allow(clippy::too_many_arguments)]
pub fn replay_file(
    input: &Path,
    output: &Path,
    path: &PathConfig,
    classes: &[ClassConfig],
    schedule: Option<Schedule>,
    seed: u64,
    engine: &EngineConfig,
    stats: Option<&Path>,
) -> Result<ReplayReport, Error> {
    engine.validate().map_err(pathem_engine::Error::from)?;
    let write_err = |p: &Path, e: &dyn std::fmt::Display| {
        Error::Port(pathem_io::Error::Write { path: p.into(), reason: e.to_string() })
    };
    // Ctrl-C or SIGTERM end the replay without its output, its temporary files removed as the
    // run returns (killed outright, it left them beside the output): watched for before any is
    // made, and no longer once this returns. A second one ends the process at once (exit 1),
    // should the run not reach its next round soon (a long stretch of schedule steps).
    let watch = Watch::signals()?;
    // Nothing written may take the place of the capture read, nor the report the capture's.
    if pathem_io::same_file(output, input) {
        return Err(Error::SameFile { path: output.into(), what: "the input capture" });
    }
    // The report's file and the temporary it is written into until the capture is in place.
    let stats = match stats {
        Some(p) if pathem_io::same_file(p, input) || pathem_io::same_file(p, output) => {
            return Err(Error::SameFile { path: p.into(), what: "the input or the output capture" });
        }
        Some(p) => Some((p, pathem_io::temp_beside(p, ".pathem-stats", "").map_err(|e| write_err(p, &e))?)),
        None => None,
    };
    let (changes, repeat) = scheduled_changes(schedule.as_ref(), classes);
    let src = PcapSource::open(input)?;
    let sink = PcapSink::create(output, src.snaplen())?;
    let r = replay(src, sink, path, classes, schedule, seed, engine, watch.flag())?;
    let paths = std::iter::once((String::new(), path.to_string()))
        .chain(classes.iter().map(|c| (c.filter.to_string(), c.path.to_string())));
    let classes = r
        .classes
        .into_iter()
        .zip(paths)
        .map(|((class, stats), (filter, path))| ClassState { class, filter, path, stats })
        .collect();
    let report = ReplayReport {
        seed,
        path: path.to_string(),
        schedule: changes,
        schedule_repeat_ns: repeat.map(Nanos::as_nanos),
        delay_line_bytes: r.delay_line_bytes,
        delay_line_note: engine.buffer.and_then(|b| pathem_engine::buffer_rounding(b, engine.max_frame)),
        input_backwards_timestamps: r.input_backwards_timestamps,
        peak_memory_bytes: pathem_io::proc_kb("/proc/self/status", "VmHWM"),
        stats: r.stats,
        classes,
    };
    // The report first, then the capture into place, then the report: a failure on the way
    // leaves neither (a capture already moved is removed again).
    if let Some((p, tmp)) = &stats {
        use std::io::Write;
        let json = serde_json::to_string_pretty(&report).map_err(|e| write_err(p, &e))? + "\n";
        tmp.as_file().write_all(json.as_bytes()).map_err(|e| write_err(p, &e))?;
        tmp.as_file().sync_all().map_err(|e| write_err(p, &e))?;
    }
    r.sink.commit()?;
    if let Some((p, tmp)) = stats {
        if let Err(e) = tmp.persist(p) {
            let _ = std::fs::remove_file(output);
            return Err(write_err(p, &e.error));
        }
    }
    Ok(report)
}
