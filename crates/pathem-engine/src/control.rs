//! Changing a running path: [`Control`] hands a new configuration to a pipeline, and a
//! [`Schedule`] applies configurations at set times.
//!
//! The pipeline's thread waits on no lock and makes no system call for control: a change is
//! sent through a channel whose receiving end the pipeline checks once per round (`try_recv`
//! on an empty std channel is a few atomic loads), and applied between two frames, all of it
//! at once (`Path::reconfigure`). What it applied goes back through a one-place slot it only
//! ever tries to lock (the last configuration is all the control side reads, so a schedule
//! stepping for days holds one, not one per step). Frames already in the delay line keep their release times; a
//! delay decrease makes later frames due before earlier ones, which the ingress clamps and
//! counts as usual (unless the path reorders).
//!
//! A schedule is part of the pipeline: each change falls due at its time exactly, also in
//! virtual time, where frames that arrived before it are taken under the old path first.

use crate::delay_line::{ring_capacity, AllocError, Ring};
use crate::pipeline::{delay_line_size, held_size, EngineConfig};
use pathem_model::limits::RangeError;
use pathem_model::{Nanos, PathConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// A change that could not be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChangeError {
    /// A value outside its range (the same checks as at start).
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The path would keep more in flight than its delay line holds (or its queue discipline
    /// more than its store), and one that large cannot be made.
    #[error("the delay line cannot grow for this path: {0}")]
    DelayLine(#[from] AllocError),
    /// The pipeline has stopped.
    #[error("the path is no longer running")]
    Stopped,
}

/// A change on its way to the pipeline: the new configuration, and a larger ring for the
/// delay line when the path will keep more in flight than the line holds.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) config: Arc<PathConfig>,
    pub(crate) ring: Option<Ring>,
    /// A larger store for the frames a queue discipline holds, its pages touched.
    pub(crate) held: Option<Vec<u8>>,
    /// New configurations for the path's schedule's steps, in order: the change holds over
    /// the schedule. The path then takes the step in effect's new configuration (`config`
    /// before the first step).
    pub(crate) steps: Option<Vec<PathConfig>>,
}

/// The control side: any thread may hold one (it is cheap to clone).
#[derive(Clone, Debug)]
pub struct Control {
    tx: Sender<Change>,
    /// Changes sent, and changes the pipeline has taken (it stores the count).
    counts: Arc<(AtomicU64, AtomicU64)>,
    /// The configuration in effect, as the pipeline last reported it (only the control side
    /// locks this).
    view: Arc<Mutex<View>>,
}

#[derive(Debug)]
struct View {
    current: PathConfig,
    applied: Arc<Mutex<Option<Arc<PathConfig>>>>,
    /// A live path's delay line: how it is sized, and the capacity it has or has been sent.
    line: Option<Line>,
}

/// What the control side knows of a fixed (live) delay line.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) engine: EngineConfig,
    pub(crate) capacity: usize,
    /// Bytes of the store of the frames a queue discipline holds, made or sent.
    pub(crate) held: usize,
}

impl Line {
    /// The bytes of frames in flight `configs` need at most, with this line, where that is
    /// more than the line holds (a larger one is to be made); `None` when it holds them.
    fn to_grow<'a>(&self, configs: impl Iterator<Item = &'a PathConfig>) -> Option<(usize, &Self)> {
        let need = configs.map(|c| delay_line_size(c, &self.engine)).max().unwrap_or(0);
        match ring_capacity(need, self.engine.max_frame) {
            Some(want) if want <= self.capacity => None,
            _ => Some((need, self)),
        }
    }

    /// The bytes of the larger store of held frames `configs` need, where that is more than
    /// the one made.
    fn held_to_grow<'a>(&self, configs: impl Iterator<Item = &'a PathConfig>) -> Option<usize> {
        let need = configs.map(|c| held_size(c, &self.engine)).max().unwrap_or(0);
        (need > self.held).then_some(need)
    }
}

/// The pipeline's side: changes in, what it applied out. Neither end locks or blocks.
#[derive(Debug)]
pub(crate) struct Inbox {
    rx: Receiver<Change>,
    counts: Arc<(AtomicU64, AtomicU64)>,
    /// Changes taken in all (the count the control side sees rises to it once they apply).
    received: std::cell::Cell<u64>,
    /// The last configuration applied, for the control side.
    applied: Arc<Mutex<Option<Arc<PathConfig>>>>,
    /// One applied while the control side held the slot: published on a later round.
    unpublished: std::cell::RefCell<Option<Arc<PathConfig>>>,
}

/// A control and its inbox for a path that starts as `initial`, with the fixed delay line
/// `line` (`None`: a line that grows on its own, or none to size).
pub(crate) fn channel(initial: &PathConfig, line: Option<Line>) -> (Control, Inbox) {
    let (tx, rx) = std::sync::mpsc::channel();
    let applied = Arc::new(Mutex::new(None));
    let view = View { current: initial.clone(), applied: applied.clone(), line };
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    (
        Control { tx, counts: counts.clone(), view: Arc::new(Mutex::new(view)) },
        Inbox { rx, counts, received: Default::default(), applied, unpublished: Default::default() },
    )
}

/// A change [`Control::prepare`] made ready: nothing reaches the path until
/// [`commit`](Self::commit); dropped, it changes nothing (its delay line is freed).
pub struct Prepared<'a> {
    control: &'a Control,
    change: Change,
}

impl Prepared<'_> {
    /// Hands the change to the pipeline, which applies it before its next frame. Fails only
    /// when the link has stopped.
    pub fn commit(self) -> Result<(), ChangeError> {
        let Prepared { control, change } = self;
        let mut view = control.view.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(line), Some(ring)) = (view.line.as_mut(), change.ring.as_ref()) {
            line.capacity = line.capacity.max(ring.capacity());
        }
        if let (Some(line), Some(held)) = (view.line.as_mut(), change.held.as_ref()) {
            line.held = line.held.max(held.len());
        }
        control.tx.send(change).map_err(|_| ChangeError::Stopped)?;
        control.counts.0.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

impl Control {
    /// A control that reports `config` and steers no pipeline (its changes are refused): what
    /// a renderer of reports needs where there is no running path, as in tests.
    pub fn detached(config: &PathConfig) -> Control {
        channel(config, None).0
    }

    /// Hands `config` to the pipeline, which applies it before its next frame. Nothing changes
    /// when it is refused. A path that will keep more in flight than its delay line holds
    /// (a longer delay, a faster rate, a larger drop-tail queue) gets a larger line, and one
    /// whose queue discipline may hold more a larger store, made here, on the caller's
    /// thread, so the pipeline only moves on to them; the records already in the line leave
    /// from the old one first, the frames held move to the new store.
    pub fn set(&self, config: PathConfig) -> Result<(), ChangeError> {
        self.send(config, None)
    }

    /// As [`set`](Self::set) for a path that follows a schedule: `steps` are the schedule's
    /// steps with the change applied to each (in the schedule's order), so the change holds
    /// when later steps fall due. The path takes the new configuration of the step in effect
    /// (`config` before the first).
    pub fn set_over_schedule(&self, config: PathConfig, steps: Vec<PathConfig>) -> Result<(), ChangeError> {
        self.send(config, Some(steps))
    }

    fn send(&self, config: PathConfig, steps: Option<Vec<PathConfig>>) -> Result<(), ChangeError> {
        self.prepare(config, steps)?.commit()
    }

    /// Bytes of the delay line this path holds now (0 offline, where lines grow as used).
    pub fn line_bytes(&self) -> usize {
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        view.line.as_ref().map_or(0, |l| l.capacity)
    }

    /// Bytes of the larger delay line a change to `config` (and `steps`) would make for this
    /// path: 0 when the line it has holds it.
    pub fn new_line_bytes(&self, config: &PathConfig, steps: &[PathConfig]) -> usize {
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let need = view.line.as_ref().and_then(|l| l.to_grow(std::iter::once(config).chain(steps)));
        need.map_or(0, |(need, line)| ring_capacity(need, line.engine.max_frame).unwrap_or(usize::MAX))
    }

    /// Readies a change without sending it: checked, and the larger delay line it needs (if
    /// any) made. Several paths changed at once are all prepared before any is committed, so
    /// one that cannot be made changes none. `steps` as for
    /// [`set_over_schedule`](Self::set_over_schedule).
    pub fn prepare(
        &self,
        config: PathConfig,
        steps: Option<Vec<PathConfig>>,
    ) -> Result<Prepared<'_>, ChangeError> {
        let all = std::iter::once(&config).chain(steps.iter().flatten());
        for c in all.clone() {
            self.check(c)?;
        }
        // The sizes under the lock, the memory made without it: touching a line of gigabytes
        // takes seconds, through which `show` and a metrics scrape (`current`) would wait.
        let (grow, held_need) = {
            let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
            let line = view.line.as_ref();
            (
                line.and_then(|l| l.to_grow(all.clone())).map(|(need, l)| (need, l.engine.max_frame)),
                line.and_then(|l| l.held_to_grow(all)),
            )
        };
        let ring = match grow {
            Some((need, max_frame)) => Some(Ring::new(need, max_frame)?),
            None => None,
        };
        let held = match held_need {
            Some(need) => Some(crate::held::buffer(need)?),
            None => None,
        };
        Ok(Prepared { control: self, change: Change { config: Arc::new(config), ring, held, steps } })
    }

    /// Waits until the pipeline has taken every change sent through this control (it does
    /// between two rounds), for at most `limit`; true once it has.
    pub fn taken(&self, limit: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        while self.counts.1.load(Ordering::Acquire) < self.counts.0.load(Ordering::Acquire) {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }

    /// Notes that the pipeline's store of held frames is now `bytes` large (it took one
    /// before it ran).
    pub(crate) fn held_grew(&self, bytes: usize) {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = view.line.as_mut() {
            line.held = line.held.max(bytes);
        }
    }

    /// Notes that the pipeline's line now holds `capacity` bytes (it took a ring before it
    /// ran).
    pub(crate) fn line_grew(&self, capacity: usize) {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = view.line.as_mut() {
            line.capacity = line.capacity.max(capacity);
        }
    }

    /// Whether `set` would take `config` (to check several directions before changing any):
    /// its values in range, and the delay line it needs no larger than the machine's memory.
    pub fn check(&self, config: &PathConfig) -> Result<(), ChangeError> {
        config.validate()?;
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = view.line.as_ref() {
            let need = delay_line_size(config, &line.engine);
            if ring_capacity(need, line.engine.max_frame).is_none_or(|want| want > line.capacity) {
                crate::delay_line::can_touch(need, line.engine.max_frame)?;
            }
            let held = held_size(config, &line.engine);
            if held > line.held {
                crate::delay_line::fits_memory(held)?;
            }
        }
        Ok(())
    }

    /// The configuration in effect (the last one the pipeline applied).
    pub fn current(&self) -> PathConfig {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let last = view.applied.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(c) = last {
            view.current = (*c).clone();
        }
        view.current.clone()
    }
}

impl Inbox {
    /// The latest change sent, if any (earlier ones are superseded), with the largest ring
    /// and store sent since the last take.
    #[inline]
    pub(crate) fn take(&self) -> Option<Change> {
        // One load while nothing was sent (every round), not the channel's several: a change
        // is counted after it is in the channel, so a count seen means a change to take.
        if self.counts.0.load(Ordering::Acquire) == self.received.get() {
            if self.unpublished.borrow().is_some() {
                self.publish();
            }
            return None;
        }
        let mut last: Option<Change> = None;
        let mut n = 0;
        while let Ok(mut c) = self.rx.try_recv() {
            n += 1;
            if let Some(earlier) = last {
                if let Some(ring) = earlier.ring {
                    if c.ring.as_ref().is_none_or(|r| r.capacity() < ring.capacity()) {
                        c.ring = Some(ring);
                    }
                }
                if let Some(held) = earlier.held {
                    if c.held.as_ref().is_none_or(|h| h.len() < held.len()) {
                        c.held = Some(held);
                    }
                }
            }
            last = Some(c);
        }
        self.received.set(self.received.get() + n);
        last
    }

    /// Tells the control side that `config` is now in effect.
    pub(crate) fn applied(&self, config: Arc<PathConfig>) {
        *self.unpublished.borrow_mut() = Some(config);
        self.publish();
    }

    /// Puts the last configuration applied in the slot, unless the control side holds it
    /// this instant (then a later round does). Counted once there: a `show` after `taken`
    /// sees the change.
    fn publish(&self) {
        let mut slot = match self.applied.try_lock() {
            Ok(slot) => slot,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let config = self.unpublished.borrow_mut().take();
        let superseded = std::mem::replace(&mut *slot, config);
        drop(slot);
        drop(superseded);
        self.counts.1.store(self.received.get(), Ordering::Release);
    }
}

/// Configurations to apply at times after a start, optionally repeating.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// `(offset from the start, configuration)`, offsets increasing.
    steps: Vec<(Nanos, PathConfig)>,
    /// Start again from the first step this long after each start.
    period: Option<Nanos>,
}

impl Schedule {
    /// A schedule of `steps` (offsets increasing, each configuration valid), repeating every
    /// `period` if given (longer than the last offset).
    pub fn new(steps: Vec<(Nanos, PathConfig)>, period: Option<Nanos>) -> Schedule {
        debug_assert!(steps.windows(2).all(|w| w[0].0 < w[1].0));
        Schedule { steps, period }
    }

    /// Gives the steps new configurations, in order; false, changing nothing, for another
    /// count.
    pub(crate) fn replace(&mut self, configs: Vec<PathConfig>) -> bool {
        if configs.len() != self.steps.len() {
            return false;
        }
        for (step, c) in self.steps.iter_mut().zip(configs) {
            step.1 = c;
        }
        true
    }

    pub fn steps(&self) -> &[(Nanos, PathConfig)] {
        &self.steps
    }

    /// How long after each start the schedule starts again, if it repeats.
    pub fn period(&self) -> Option<Nanos> {
        self.period
    }
}

/// A schedule being followed: where it started and which step comes next.
#[derive(Debug)]
pub(crate) struct Timeline {
    schedule: Schedule,
    origin: Nanos,
    next: usize,
    lap: u64,
}

impl Timeline {
    pub(crate) fn new(schedule: Schedule, origin: Nanos) -> Timeline {
        Timeline { schedule, origin, next: 0, lap: 0 }
    }

    /// When the next step falls due, if one is left.
    #[inline]
    pub(crate) fn next_at(&self) -> Option<Nanos> {
        let (offset, _) = self.schedule.steps.get(self.next)?;
        let lap = self.schedule.period.map_or(Nanos::ZERO, |p| Nanos(p.as_nanos().saturating_mul(self.lap)));
        Some(self.origin + lap + *offset)
    }

    /// The configuration of the step last applied, if one was.
    pub(crate) fn in_effect(&self) -> Option<&PathConfig> {
        let n = self.schedule.steps.len();
        match (self.next, self.lap) {
            (0, 0) => None,
            (0, _) => self.schedule.steps.get(n.checked_sub(1)?).map(|s| &s.1),
            (i, _) => self.schedule.steps.get(i - 1).map(|s| &s.1),
        }
    }

    /// Gives the steps new configurations, in order (a change that holds over them); the
    /// times and the place in the schedule stay. False, changing nothing, for another count.
    pub(crate) fn replace(&mut self, configs: Vec<PathConfig>) -> bool {
        self.schedule.replace(configs)
    }

    /// Passes over the whole laps of a repeating schedule that fall due before `until`,
    /// without their steps: for a path that holds no frame, where every step of such a lap
    /// would meet an idle path and the lap after it sets the path again (frames a year
    /// apart under a 2 ms schedule are 10^10 steps). The steps of the last lap before `until`
    /// are left to be taken.
    pub(crate) fn skip_laps(&mut self, until: Nanos) {
        let (Some(at), Some(period)) = (self.next_at(), self.schedule.period) else { return };
        let laps = until.saturating_sub(at).as_nanos() / period.as_nanos().max(1);
        if laps > 1 {
            self.lap = self.lap.saturating_add(laps - 1);
        }
    }

    /// The step due now; moves on to the next one (wrapping round with a period).
    pub(crate) fn advance(&mut self) -> Option<(Nanos, PathConfig)> {
        let at = self.next_at()?;
        let config = self.schedule.steps[self.next].1.clone();
        self.next += 1;
        if self.next == self.schedule.steps.len() && self.schedule.period.is_some() {
            self.next = 0;
            self.lap += 1;
        }
        Some((at, config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::delay::DelayConfig;

    fn delayed(ms: u64) -> PathConfig {
        PathConfig { delay: DelayConfig::constant(Nanos::from_millis(ms)), ..PathConfig::default() }
    }

    #[test]
    fn a_superseded_change_keeps_the_larger_ring_it_brought() {
        // 100 Mbit/s: 1 s of delay needs 12.5 MB, 10 ms fits the 4 MiB line.
        let engine =
            EngineConfig { line_rate: pathem_model::units::Rate(100_000_000), ..EngineConfig::default() };
        let line = Line { engine, capacity: crate::pipeline::MIN_DELAY_LINE, held: 0 };
        let (control, inbox) = channel(&PathConfig::default(), Some(line));
        control.set(delayed(1000)).unwrap();
        control.set(delayed(10)).unwrap();
        let change = inbox.take().unwrap();
        assert_eq!(*change.config, delayed(10));
        assert_eq!(change.ring.map(|r| r.capacity()), Some(16 << 20));
        // Sent once: a later change that fits the promised line brings none.
        control.set(delayed(900)).unwrap();
        assert!(inbox.take().unwrap().ring.is_none());
    }

    #[test]
    fn a_change_over_a_schedule_replaces_its_steps_in_place() {
        let schedule = Schedule::new(vec![(Nanos(0), delayed(1)), (Nanos(10), delayed(2))], Some(Nanos(20)));
        let mut t = Timeline::new(schedule, Nanos(100));
        assert_eq!(t.in_effect(), None);
        assert_eq!(t.advance(), Some((Nanos(100), delayed(1))));
        assert_eq!(t.in_effect(), Some(&delayed(1)));
        assert!(!t.replace(vec![delayed(5)]), "another count changes nothing");
        assert!(t.replace(vec![delayed(5), delayed(6)]));
        assert_eq!(t.in_effect(), Some(&delayed(5)), "the step in effect, replaced");
        assert_eq!(t.advance(), Some((Nanos(110), delayed(6))));
        // A lap on: the last step is in effect until the first falls due again.
        assert_eq!(t.in_effect(), Some(&delayed(6)));
        assert_eq!(t.advance(), Some((Nanos(120), delayed(5))));
    }

    #[test]
    fn idle_laps_are_passed_over_to_the_last_before_the_next_frame() {
        let schedule = Schedule::new(vec![(Nanos(0), delayed(1)), (Nanos(10), delayed(2))], Some(Nanos(20)));
        let mut t = Timeline::new(schedule, Nanos(100));
        assert_eq!(t.advance(), Some((Nanos(100), delayed(1))));
        t.skip_laps(Nanos(125));
        assert_eq!(t.next_at(), Some(Nanos(110)), "less than a lap and a step ahead: nothing passed");
        t.skip_laps(Nanos(1_000_015));
        // 110 + 49 994 laps of 20 = 999 990: that step and the next two lie before 1 000 015.
        assert_eq!(t.next_at(), Some(Nanos(999_990)));
        assert_eq!(t.advance(), Some((Nanos(999_990), delayed(2))));
        assert_eq!(t.advance(), Some((Nanos(1_000_000), delayed(1))));
        assert_eq!(t.advance(), Some((Nanos(1_000_010), delayed(2))));
        t.skip_laps(Nanos::MAX);
        assert!(t.next_at().is_some(), "the lap count saturates");
    }

    #[test]
    fn the_control_side_holds_the_last_configuration_applied_not_every_one() {
        let (control, inbox) = channel(&PathConfig::default(), None);
        for ms in 1..=10_000 {
            inbox.applied(Arc::new(delayed(ms)));
        }
        assert_eq!(Arc::strong_count(inbox.applied.lock().unwrap().as_ref().unwrap()), 1);
        assert_eq!(control.current(), delayed(10_000));
        // While the control side holds the slot, the pipeline keeps the configuration and
        // publishes it on a later round.
        let held = inbox.applied.lock().unwrap();
        inbox.applied(Arc::new(delayed(7)));
        drop(held);
        assert_eq!(control.current(), delayed(10_000));
        assert!(inbox.take().is_none());
        assert_eq!(control.current(), delayed(7));
    }
}
