//! Changing a running path: [`Control`] hands a new configuration to a pipeline, and a
//! [`Schedule`] applies configurations at set times.
//!
//! The pipeline's thread takes no lock and makes no system call for control: a change is sent
//! through a channel whose receiving end the pipeline checks once per round (`try_recv` on an
//! empty std channel is a few atomic loads), and applied between two frames, all of it at
//! once (`Path::reconfigure`). Frames already in the delay line keep their release times; a
//! delay decrease makes later frames due before earlier ones, which the ingress clamps and
//! counts as usual (unless the path reorders).
//!
//! A schedule is part of the pipeline: each change falls due at its time exactly, also in
//! virtual time, where frames that arrived before it are taken under the old path first.

use pathem_model::limits::RangeError;
use pathem_model::{Nanos, PathConfig};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// A change that could not be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChangeError {
    /// A value outside its range (the same checks as at start).
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The pipeline has stopped.
    #[error("the path is no longer running")]
    Stopped,
}

/// The control side: any thread may hold one (it is cheap to clone).
#[derive(Clone, Debug)]
pub struct Control {
    tx: Sender<Arc<PathConfig>>,
    /// The configuration in effect, as the pipeline last reported it (only the control side
    /// locks this).
    view: Arc<Mutex<View>>,
}

#[derive(Debug)]
struct View {
    current: PathConfig,
    applied: Receiver<Arc<PathConfig>>,
}

/// The pipeline's side: changes in, what it applied out. Neither end locks or blocks.
#[derive(Debug)]
pub(crate) struct Inbox {
    rx: Receiver<Arc<PathConfig>>,
    applied: Sender<Arc<PathConfig>>,
}

pub(crate) fn channel(initial: &PathConfig) -> (Control, Inbox) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (applied_tx, applied_rx) = std::sync::mpsc::channel();
    let view = View { current: initial.clone(), applied: applied_rx };
    (Control { tx, view: Arc::new(Mutex::new(view)) }, Inbox { rx, applied: applied_tx })
}

impl Control {
    /// A control that reports `config` and steers no pipeline (its changes are refused): what
    /// a renderer of reports needs where there is no running path, as in tests.
    pub fn detached(config: &PathConfig) -> Control {
        channel(config).0
    }

    /// Hands `config` to the pipeline, which applies it before its next frame. Nothing changes
    /// when it is refused.
    pub fn set(&self, config: PathConfig) -> Result<(), ChangeError> {
        self.check(&config)?;
        self.tx.send(Arc::new(config)).map_err(|_| ChangeError::Stopped)
    }

    /// Waits until the pipeline has applied `config` (it does between two rounds, within
    /// [`crate::wait::MAX_IDLE_WAIT`] when idle), for at most `limit`; true once it has.
    pub fn applied(&self, config: &PathConfig, limit: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        loop {
            if self.current() == *config {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Whether `set` would take `config` (to check several directions before changing any).
    pub fn check(&self, config: &PathConfig) -> Result<(), ChangeError> {
        config.validate()?;
        Ok(())
    }

    /// The configuration in effect (the last one the pipeline applied).
    pub fn current(&self) -> PathConfig {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        while let Ok(c) = view.applied.try_recv() {
            view.current = (*c).clone();
        }
        view.current.clone()
    }
}

impl Inbox {
    /// The latest change sent, if any (earlier ones are superseded).
    #[inline]
    pub(crate) fn take(&self) -> Option<Arc<PathConfig>> {
        let mut last = None;
        while let Ok(c) = self.rx.try_recv() {
            last = Some(c);
        }
        last
    }

    /// Tells the control side that `config` is now in effect.
    pub(crate) fn applied(&self, config: Arc<PathConfig>) {
        let _ = self.applied.send(config);
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

    pub fn steps(&self) -> &[(Nanos, PathConfig)] {
        &self.steps
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
