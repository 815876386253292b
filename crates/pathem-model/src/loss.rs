//! Loss models: decide, frame by frame, whether the path loses a frame.
//!
//! - `random`: each frame lost independently with probability P (Bernoulli); with a
//!   correlation (`random:P,corr=C`, NetEm's `loss random P C`), tested against NetEm's
//!   correlated draw ([`crate::corr`]), which loses fewer frames than P below 50%.
//! - `ge`: Gilbert-Elliott (DEMU §3.1). Two states, Good and Bad; each frame is lost with the
//!   current state's loss probability (1−k in Good, 1−h in Bad), then the state moves
//!   Good→Bad with p or Bad→Good with r. Stationary loss rate
//!   `P = r/(p+r)·(1−k) + p/(p+r)·(1−h)`; with k = 1, h = 0 a loss burst is a stay in Bad, so
//!   burst lengths are geometric, `P(B = n) = r(1−r)^(n−1)`, with mean 1/r.
//! - `gi`: NetEm's 4-state Markov model (`loss state p13 p31 p32 p23 p14`): states 1 (frames
//!   received in a gap), 2 (received in a burst), 3 (lost in a burst), 4 (isolated loss). The
//!   chain moves first; the frame is lost when the new state is 3 or 4.
//! - `trace`: a recorded pattern of lost (1) and delivered (0) frames, replayed in a loop.
//!
//! And the bit error rate, applied after the loss model: a frame of `len` bytes survives only
//! if all its `8·len` bits do, so it is dropped with probability `1 − (1 − ber)^(8·len)`.

use crate::corr::{Chance, Correlated};
use crate::limits::MIN_LEAVE;
use crate::rng::Rng;
use crate::spec::{error, KeyValues};
use crate::units::{Probability, UnitError};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

const LOSS_ACCEPTED: &str = "P (1% or 0.01), random:P[,corr=C], ge:p=P,r=R[,loss-bad=X][,loss-good=Y], \
ge:loss=P,burst=B, gi:p13=P[,p31=..,p32=..,p23=..,p14=..], trace:FILE";
/// What a model (not a trace, which only `--loss` reads) may be.
const MODEL_ACCEPTED: &str = "P (1% or 0.01), random:P[,corr=C], ge:p=P,r=R[,loss-bad=X][,loss-good=Y], \
ge:loss=P,burst=B, gi:p13=P[,p31=..,p32=..,p23=..,p14=..]";

/// What the user asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum LossConfig {
    /// Each frame is lost independently with this probability (Bernoulli).
    Random(Probability),
    /// Lost when NetEm's correlated draw falls below `p` (correlation `corr`, above 0).
    Correlated { p: Probability, corr: Probability },
    /// Gilbert-Elliott: transitions p (Good→Bad) and r (Bad→Good); loss in Bad = 1−h, in
    /// Good = 1−k.
    GilbertElliott { p: Probability, r: Probability, loss_bad: Probability, loss_good: Probability },
    /// NetEm's 4-state model.
    FourState { p13: Probability, p31: Probability, p32: Probability, p23: Probability, p14: Probability },
    /// A recorded pattern, replayed in a loop.
    Trace(Arc<LossTrace>),
}

/// A loss pattern: `lost[i]` says whether frame i (modulo the length) is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct LossTrace {
    lost: Vec<bool>,
}

impl LossTrace {
    /// Parses the trace format: `0` (delivered) and `1` (lost), one per frame, in any layout
    /// (whitespace is ignored); `#` starts a comment that runs to the end of the line.
    pub fn parse(text: &str) -> Result<LossTrace, crate::trace::TraceError> {
        use crate::trace::TraceError;
        let mut lost = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            for c in line.chars().filter(|c| !c.is_whitespace()) {
                match c {
                    '0' => lost.push(false),
                    '1' => lost.push(true),
                    ',' | ';' => {}
                    _ => return Err(TraceError::line(n, format!("`{c}` is not 0 (delivered) or 1 (lost)"))),
                }
            }
        }
        if lost.is_empty() {
            return Err(TraceError::Whole("holds no 0/1 entry".into()));
        }
        Ok(LossTrace { lost })
    }

    pub fn len(&self) -> usize {
        self.lost.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lost.is_empty()
    }

    /// Fraction of the pattern that is lost.
    pub fn loss_rate(&self) -> f64 {
        self.lost.iter().filter(|&&l| l).count() as f64 / self.lost.len() as f64
    }
}

impl LossConfig {
    /// Gilbert-Elliott from a target loss rate and mean burst length (k = 1, h = 0):
    /// r = 1/B, p = r·P/(1−P) (DEMU §3.1).
    pub fn ge_from_rate(loss: f64, burst: f64) -> Option<LossConfig> {
        if !(loss > 0.0 && loss < 1.0 && burst >= 1.0) {
            return None;
        }
        let r = 1.0 / burst;
        let p = r * loss / (1.0 - loss);
        Some(LossConfig::GilbertElliott {
            p: Probability::new(p)?,
            r: Probability::new(r)?,
            loss_bad: Probability::ONE,
            loss_good: Probability::ZERO,
        })
    }

    /// The long-run fraction of frames this model loses (for a correlated random loss, from
    /// a few million steps of its process: milliseconds).
    pub fn loss_rate(&self) -> f64 {
        match self {
            LossConfig::Random(p) => p.get(),
            LossConfig::Correlated { p, corr } => Correlated::hit_rate(p.get(), corr.get()),
            LossConfig::GilbertElliott { p, r, loss_bad, loss_good } => {
                let (p, r) = (p.get(), r.get());
                (r * loss_good.get() + p * loss_bad.get()) / (p + r)
            }
            LossConfig::FourState { p13, p31, p32, p23, p14 } => {
                let (p13, p31, p32, p23, p14) = (p13.get(), p31.get(), p32.get(), p23.get(), p14.get());
                // Balance equations: π4 = π1·p14, π3·p31 = π1·p13, π2·p23 = π3·p32.
                // From state 1 (where the chain starts) without p13, states 2 and 3 are never
                // reached; without p31, state 1 is left for good and the chain cycles between 3
                // and 2; without p23 (and with p32), state 2 once reached is never left and
                // loses nothing.
                if p13 == 0.0 {
                    return p14 / (1.0 + p14);
                }
                if p32 > 0.0 && p23 == 0.0 {
                    return 0.0;
                }
                if p31 == 0.0 {
                    return p23 / (p23 + p32);
                }
                let pi3 = p13 / p31;
                let pi2 = if p32 == 0.0 { 0.0 } else { pi3 * p32 / p23 };
                (pi3 + p14) / (1.0 + p14 + pi3 + pi2)
            }
            LossConfig::Trace(t) => t.loss_rate(),
        }
    }

    /// The spec text that parses back to this config (`--loss`'s syntax); `None` for a trace,
    /// whose file the caller names.
    pub fn spec(&self) -> Option<String> {
        Some(match self {
            LossConfig::Random(p) => p.spec(),
            LossConfig::Correlated { p, corr } => format!("random:{},corr={}", p.spec(), corr.spec()),
            LossConfig::GilbertElliott { p, r, loss_bad, loss_good } => format!(
                "ge:p={},r={},loss-bad={},loss-good={}",
                p.spec(),
                r.spec(),
                loss_bad.spec(),
                loss_good.spec()
            ),
            LossConfig::FourState { p13, p31, p32, p23, p14 } => format!(
                "gi:p13={},p31={},p32={},p23={},p14={}",
                p13.spec(),
                p31.spec(),
                p32.spec(),
                p23.spec(),
                p14.spec()
            ),
            LossConfig::Trace(_) => return None,
        })
    }

    /// The long-run mean number of consecutive lost frames.
    pub fn mean_burst(&self) -> f64 {
        match self {
            LossConfig::Random(p) => 1.0 / (1.0 - p.get()),
            LossConfig::GilbertElliott { p, r, loss_bad, loss_good } => {
                // Loss is decided in the current state, then the state moves. A burst starts
                // at frame n when n is lost and n−1 was not:
                // P(start) = Σ_s,s' π_s (1−l_s) T(s,s') l_s'.
                let (p, r, lb, lg) = (p.get(), r.get(), loss_bad.get(), loss_good.get());
                let (pg, pb) = (r / (p + r), p / (p + r));
                let start =
                    pg * (1.0 - lg) * ((1.0 - p) * lg + p * lb) + pb * (1.0 - lb) * (r * lg + (1.0 - r) * lb);
                self.loss_rate() / start
            }
            LossConfig::Correlated { .. } | LossConfig::FourState { .. } | LossConfig::Trace(_) => f64::NAN,
        }
    }
}

impl FromStr for LossConfig {
    type Err = UnitError;
    /// Parses every loss spec except `trace:FILE`, whose file the caller reads
    /// (see [`LossTrace::parse`]); a `trace:` spec is refused here.
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let (name, body) = t.split_once(':').unwrap_or(("", t));
        match name {
            "random" if body.contains(',') => {
                let (p, rest) = body.split_once(',').unwrap_or((body, ""));
                let p = p.parse::<Probability>().map_err(|e| error(s, e.reason, LOSS_ACCEPTED))?;
                let mut kv = KeyValues::parse(s, rest, LOSS_ACCEPTED)?;
                let corr = kv.get::<Probability>("corr")?;
                kv.finish()?;
                // No correlation is the plain draw (the same decisions as `random:P`).
                Ok(match corr {
                    Some(corr) if corr.get() > 0.0 => LossConfig::Correlated { p, corr },
                    _ => LossConfig::Random(p),
                })
            }
            "" | "random" => body.parse::<Probability>().map(LossConfig::Random).map_err(|e| {
                if name.is_empty() && body.chars().any(|c| c.is_ascii_alphabetic()) {
                    error(s, "is not a probability or a known loss model", LOSS_ACCEPTED)
                } else {
                    e
                }
            }),
            "ge" => {
                let mut kv = KeyValues::parse(s, body, LOSS_ACCEPTED)?;
                if let Some(loss) = kv.get::<Probability>("loss")? {
                    let burst = kv.require::<crate::spec::Number>("burst")?.0;
                    kv.finish()?;
                    if loss.get() <= 0.0 || loss.get() >= 1.0 {
                        return Err(error(s, "needs 0 < loss < 100%", LOSS_ACCEPTED));
                    }
                    if !(1.0..=crate::limits::MAX_BURST).contains(&burst) {
                        return Err(error(
                            s,
                            "needs 1 ≤ burst ≤ 1e9 (a burst has at least one frame)",
                            LOSS_ACCEPTED,
                        ));
                    }
                    return LossConfig::ge_from_rate(loss.get(), burst).ok_or_else(|| {
                        error(s, "gives p above 100%: lower loss or raise burst", LOSS_ACCEPTED)
                    });
                }
                let p = kv.require::<Probability>("p")?;
                let r = kv.require::<Probability>("r")?;
                let loss_bad = kv.get::<Probability>("loss-bad")?.unwrap_or(Probability::ONE);
                let loss_good = kv.get::<Probability>("loss-good")?.unwrap_or(Probability::ZERO);
                kv.finish()?;
                if p.get() + r.get() == 0.0 {
                    return Err(error(
                        s,
                        "has p + r = 0: the chain would never leave its first state",
                        LOSS_ACCEPTED,
                    ));
                }
                if r.get() < MIN_LEAVE && p.get() > 0.0 {
                    return Err(error(
                        s,
                        "has r below 1e-9: the chain would not leave the bad state (a burst would never end; at most 1e9 frames on average)",
                        LOSS_ACCEPTED,
                    ));
                }
                Ok(LossConfig::GilbertElliott { p, r, loss_bad, loss_good })
            }
            "gi" => {
                let mut kv = KeyValues::parse(s, body, LOSS_ACCEPTED)?;
                let p13 = kv.require::<Probability>("p13")?;
                let p31 = kv
                    .get::<Probability>("p31")?
                    .unwrap_or(Probability::new(1.0 - p13.get()).unwrap_or(Probability::ZERO));
                let p32 = kv.get::<Probability>("p32")?.unwrap_or(Probability::ZERO);
                let p23 = kv.get::<Probability>("p23")?.unwrap_or(Probability::ONE);
                let p14 = kv.get::<Probability>("p14")?.unwrap_or(Probability::ZERO);
                kv.finish()?;
                if p13.get() + p14.get() > 1.0 {
                    return Err(error(s, "has p13 + p14 above 100%", LOSS_ACCEPTED));
                }
                if p31.get() + p32.get() > 1.0 {
                    return Err(error(s, "has p31 + p32 above 100%", LOSS_ACCEPTED));
                }
                if p13.get() > 0.0 && p31.get() + p32.get() < MIN_LEAVE {
                    return Err(error(
                        s,
                        "has p31 + p32 below 1e-9: a burst would never end (at most 1e9 frames on average)",
                        LOSS_ACCEPTED,
                    ));
                }
                if p13.get() > 0.0 && p32.get() > 0.0 && p23.get() < MIN_LEAVE {
                    return Err(error(
                        s,
                        "has p32 above 0 and p23 below 1e-9: the chain would be stuck in state 2 (only p23 leaves it)",
                        LOSS_ACCEPTED,
                    ));
                }
                Ok(LossConfig::FourState { p13, p31, p32, p23, p14 })
            }
            // `--loss` and the config read a trace before they come here.
            "trace" => Err(error(
                s,
                "names a trace file, which only --loss reads; a model is expected here",
                MODEL_ACCEPTED,
            )),
            _ => Err(error(s, format!("names unknown loss model `{name}`"), LOSS_ACCEPTED)),
        }
    }
}

impl fmt::Display for LossConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossConfig::Random(p) => write!(f, "random {p}"),
            // Its rate takes a simulation (`loss_rate`): not worth it for every printout.
            LossConfig::Correlated { p, corr } => write!(f, "random {p} correlated {corr} (NetEm's draw)"),
            LossConfig::GilbertElliott { p, r, loss_bad, loss_good } => {
                write!(f, "gilbert-elliott p={p} r={r} loss-bad={loss_bad} loss-good={loss_good} ")?;
                match self.loss_rate() {
                    // No loss, no bursts: a mean burst would read NaN.
                    0.0 => write!(f, "(rate 0%: no frame is lost)"),
                    rate => write!(f, "(rate {:.4}%, mean burst {:.2})", rate * 100.0, self.mean_burst()),
                }
            }
            LossConfig::FourState { p13, p31, p32, p23, p14 } => write!(
                f,
                "4-state p13={p13} p31={p31} p32={p32} p23={p23} p14={p14} (rate {:.4}%)",
                self.loss_rate() * 100.0
            ),
            LossConfig::Trace(t) => {
                write!(f, "trace of {} frames ({:.4}% lost)", t.len(), t.loss_rate() * 100.0)
            }
        }
    }
}

/// A loss model with its state.
#[derive(Clone, Debug)]
pub enum Loss {
    /// Independent losses, drawn a gap at a time: `left` frames are kept before the next
    /// loss, each gap geometric with the loss probability (`ln_keep` is ln(1 − p)), so a
    /// frame costs a decrement and a loss one draw, not a draw per frame. `primed`: the
    /// first gap has been drawn.
    Random {
        left: u64,
        ln_keep: f64,
        primed: bool,
    },
    Correlated(Chance),
    GilbertElliott {
        bad: bool,
        to_bad: u64,
        to_good: u64,
        loss_bad: u64,
        loss_good: u64,
    },
    FourState {
        state: u8,
        p13: u64,
        p14: u64,
        p31: u64,
        p32: u64,
        p23: u64,
    },
    Trace {
        trace: Arc<LossTrace>,
        next: usize,
    },
}

/// True with the probability behind `threshold`; a probability of 1 always hits.
#[inline(always)]
fn hit(rng: &mut Rng, threshold: u64) -> bool {
    // Certain outcomes draw nothing: the common k = 1, h = 0 setting costs one draw per frame.
    threshold == u64::MAX || (threshold != 0 && rng.chance(threshold))
}

impl Loss {
    pub fn new(config: &LossConfig) -> Loss {
        match config {
            LossConfig::Random(p) => Loss::Random { left: 0, ln_keep: (-p.get()).ln_1p(), primed: false },
            LossConfig::Correlated { p, corr } => Loss::Correlated(Chance::new(*p, Some(*corr))),
            LossConfig::GilbertElliott { p, r, loss_bad, loss_good } => Loss::GilbertElliott {
                // Start in the stationary distribution's likelier state: Good unless p > r.
                bad: p.get() > r.get(),
                to_bad: p.threshold(),
                to_good: r.threshold(),
                loss_bad: loss_bad.threshold(),
                loss_good: loss_good.threshold(),
            },
            LossConfig::FourState { p13, p31, p32, p23, p14 } => Loss::FourState {
                state: 1,
                p13: p13.threshold(),
                p14: p14.threshold(),
                p31: p31.threshold(),
                p32: p32.threshold(),
                p23: p23.threshold(),
            },
            LossConfig::Trace(trace) => Loss::Trace { trace: trace.clone(), next: 0 },
        }
    }

    /// Takes over the state of the model this one replaces, where it means the same: the
    /// Gilbert-Elliott chain's state (Good or Bad), the 4-state chain's state, the last
    /// correlated draw, a trace's position when the trace is the same. A different kind of
    /// model starts afresh.
    pub fn inherit(&mut self, old: Loss) {
        match (self, old) {
            (Loss::Correlated(c), Loss::Correlated(was)) => c.inherit(&was),
            (Loss::GilbertElliott { bad, .. }, Loss::GilbertElliott { bad: was, .. }) => *bad = was,
            (Loss::FourState { state, .. }, Loss::FourState { state: was, .. }) => *state = was,
            (Loss::Trace { trace, next }, Loss::Trace { trace: old, next: was })
                if Arc::ptr_eq(trace, &old) =>
            {
                *next = was
            }
            _ => {}
        }
    }

    /// True when this frame is lost.
    #[inline(always)]
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self {
            Loss::Random { left, .. } if *left > 0 => {
                *left -= 1;
                false
            }
            model => model.lose_stateful(rng),
        }
    }

    /// Frames kept before the next independent loss: geometric, P(k) = (1 − p)^k · p, drawn
    /// by inversion (⌊ln U / ln(1 − p)⌋ with U uniform in (0, 1]). A probability of 0 gives
    /// the longest gap (2^64 − 1 frames, after which another is drawn: never a loss); 1 gives 0.
    fn gap(rng: &mut Rng, ln_keep: f64) -> u64 {
        if ln_keep == 0.0 {
            return u64::MAX;
        }
        let k = rng.unit_open0().ln() / ln_keep;
        // `as` saturates: a gap beyond 2^64 frames is 2^64 − 1.
        k.floor() as u64
    }

    /// The models with state, kept out of line so random loss stays a compare.
    #[inline(never)]
    fn lose_stateful(&mut self, rng: &mut Rng) -> bool {
        match self {
            Loss::Random { left, ln_keep, primed } => {
                if !*primed {
                    *primed = true;
                    *left = Loss::gap(rng, *ln_keep);
                    return self.lose(rng);
                }
                if *ln_keep == 0.0 {
                    // p = 0 after 2^64 − 1 frames kept: still no loss.
                    *left = u64::MAX;
                    return false;
                }
                *left = Loss::gap(rng, *ln_keep);
                true
            }
            Loss::Correlated(c) => c.hit(rng),
            Loss::GilbertElliott { bad, to_bad, to_good, loss_bad, loss_good } => {
                let lost = if *bad { hit(rng, *loss_bad) } else { hit(rng, *loss_good) };
                if *bad {
                    *bad = !hit(rng, *to_good);
                } else {
                    *bad = hit(rng, *to_bad);
                }
                lost
            }
            Loss::FourState { state, p13, p14, p31, p32, p23 } => {
                // One uniform draw split into the state's outgoing probabilities (NetEm's order).
                let u = rng.next_u64();
                *state = match *state {
                    1 if u < *p14 => 4,
                    1 if u - *p14 < *p13 => 3,
                    1 => 1,
                    2 if u < *p23 || *p23 == u64::MAX => 3,
                    2 => 2,
                    3 if u < *p32 => 2,
                    3 if u - *p32 < *p31 || (*p31 == u64::MAX) => 1,
                    3 => 3,
                    _ => 1,
                };
                *state >= 3
            }
            Loss::Trace { trace, next } => {
                let lost = trace.lost[*next];
                *next += 1;
                if *next == trace.lost.len() {
                    *next = 0;
                }
                lost
            }
        }
    }
}

/// Bit errors: a frame is dropped when any of its bits is hit.
#[derive(Clone, Debug)]
pub struct BitErrors {
    ber: f64,
    /// Drop thresholds of recently seen lengths, direct-mapped by length.
    cache: [(u32, u64); 16],
}

impl BitErrors {
    pub fn new(ber: Probability) -> BitErrors {
        BitErrors { ber: ber.get(), cache: [(u32::MAX, 0); 16] }
    }

    /// The probability that a frame of `len` bytes has at least one bit error.
    pub fn frame_error_rate(ber: f64, len: u32) -> f64 {
        // A frame without bits has none to hit (and 0 × ln 0 would be NaN at ber 1).
        if len == 0 {
            return 0.0;
        }
        // 1 − (1 − ber)^(8 len), computed without cancellation for tiny ber.
        -f64::exp_m1(8.0 * f64::from(len) * f64::ln_1p(-ber))
    }

    /// True when the frame is hit.
    #[inline]
    pub fn hit(&mut self, len: u32, rng: &mut Rng) -> bool {
        let slot = &mut self.cache[len as usize % 16];
        if slot.0 != len {
            let p = Self::frame_error_rate(self.ber, len).clamp(0.0, 1.0);
            *slot = (len, Probability::new(p).unwrap_or(Probability::ONE).threshold());
        }
        hit(rng, slot.1)
    }
}

/// Lengths of the runs of consecutive losses in a loss pattern (`true` = lost), a run still
/// open at the end included: what burst statistics are computed from.
pub fn burst_lengths(lost: &[bool]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut run = 0;
    for &l in lost.iter().chain([false].iter()) {
        if l {
            run += 1;
        } else if run > 0 {
            out.push(run);
            run = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_without_bytes_takes_no_bit_error() {
        assert_eq!(BitErrors::frame_error_rate(1.0, 0), 0.0);
        let mut b = BitErrors::new(Probability::ONE);
        let mut rng = Rng::seeded(1);
        assert!(!b.hit(0, &mut rng), "no bit to hit, even at a bit error rate of 1");
        assert!(b.hit(1, &mut rng));
    }

    fn run(config: &LossConfig, n: usize, seed: u64) -> Vec<bool> {
        let mut loss = Loss::new(config);
        let mut rng = Rng::seeded(seed);
        (0..n).map(|_| loss.lose(&mut rng)).collect()
    }

    fn rate(lost: &[bool]) -> f64 {
        lost.iter().filter(|&&l| l).count() as f64 / lost.len() as f64
    }

    #[test]
    fn random_loss_rate_within_four_sigma() {
        for (p, seed) in [(0.01, 1), (0.2, 2), (0.5, 3)] {
            let lost = run(&LossConfig::Random(Probability::new(p).unwrap()), 1_000_000, seed);
            let n = lost.len() as f64;
            let sigma = (n * p * (1.0 - p)).sqrt();
            assert!((rate(&lost) * n - n * p).abs() < 4.0 * sigma, "p={p}");
        }
    }

    #[test]
    fn random_losses_are_independent_with_geometric_gaps() {
        // Drawn a gap at a time, the losses must still be a Bernoulli process: a loss after a
        // loss as often as after a kept frame, and gaps of k frames with (1 − p)^k · p.
        for (p, seed) in [(0.01, 11u64), (0.2, 12), (0.7, 13)] {
            let lost = run(&LossConfig::Random(Probability::new(p).unwrap()), 2_000_000, seed);
            let losses = lost.iter().filter(|&&l| l).count() as f64;
            let after_loss = lost.windows(2).filter(|w| w[0] && w[1]).count() as f64;
            let sigma = (losses * p * (1.0 - p)).sqrt();
            assert!((after_loss - losses * p).abs() < 4.0 * sigma, "p={p}: {after_loss} of {losses}");
            let mut gaps = vec![0f64; 40];
            let mut since = 0usize;
            for &l in &lost {
                if l {
                    gaps[since.min(39)] += 1.0;
                    since = 0;
                } else {
                    since += 1;
                }
            }
            // Chi-square over the gap lengths whose expected count is at least 20 (the rest
            // pooled): under 3 × the degrees of freedom + 30 for the right shape.
            let n: f64 = gaps.iter().sum();
            let (mut chi2, mut cells, mut rest_seen, mut rest_want) = (0.0, 0, 0.0, 0.0);
            for (k, &seen) in gaps.iter().enumerate() {
                let want = n * (1.0 - p).powi(k as i32) * if k == 39 { 1.0 } else { p };
                if want >= 20.0 && k < 39 {
                    chi2 += (seen - want).powi(2) / want;
                    cells += 1;
                } else {
                    (rest_seen, rest_want) = (rest_seen + seen, rest_want + want);
                }
            }
            if rest_want > 0.0 {
                chi2 += (rest_seen - rest_want).powi(2) / rest_want.max(1.0);
                cells += 1;
            }
            assert!(chi2 < 3.0 * cells as f64 + 30.0, "p={p}: chi-square {chi2} over {cells} cells");
        }
    }

    #[test]
    fn correlated_random_loss_follows_netems_draw() {
        let cfg: LossConfig = "random:30%,corr=25%".parse().unwrap();
        assert!(matches!(cfg, LossConfig::Correlated { .. }));
        let want = cfg.loss_rate();
        assert!((want - 0.2334).abs() < 0.001, "NetEm's draw loses about 23%, not 30%: {want}");
        let lost = run(&cfg, 2_000_000, 5);
        assert!((rate(&lost) / want - 1.0).abs() < 0.01, "{} vs {want}", rate(&lost));
        // Losses cluster: a loss follows a loss a third of the time, not 23%.
        let after_loss = lost.windows(2).filter(|w| w[0] && w[1]).count() as f64
            / lost.iter().filter(|&&l| l).count() as f64;
        assert!((after_loss - 0.333).abs() < 0.01, "{after_loss}");
        // No correlation is the plain draw, decision for decision.
        assert_eq!("random:10%,corr=0%".parse::<LossConfig>(), "random:10%".parse());
        assert!("random:10%,corr=2".parse::<LossConfig>().is_err());
        assert!("random:10%,rho=2%"
            .parse::<LossConfig>()
            .unwrap_err()
            .to_string()
            .contains("unknown key `rho`"));
    }

    #[test]
    fn extremes() {
        assert!(run(&LossConfig::Random(Probability::ZERO), 10_000, 9).iter().all(|&l| !l));
        assert!(run(&LossConfig::Random(Probability::ONE), 10_000, 9).iter().all(|&l| l));
    }

    #[test]
    fn gilbert_elliott_rate_burst_mean_and_histogram() {
        // The DEMU paper's settings: P = 1%, r from 0.1 to 0.9.
        for (r, seed) in [(0.1, 1u64), (0.2, 2), (0.5, 3), (0.9, 4)] {
            let burst = 1.0 / r;
            let cfg = LossConfig::ge_from_rate(0.01, burst).unwrap();
            assert!((cfg.loss_rate() - 0.01).abs() < 1e-12);
            assert!((cfg.mean_burst() - burst).abs() < 1e-9, "closed forms agree: {}", cfg.mean_burst());
            let lost = run(&cfg, 20_000_000, seed);
            let got = rate(&lost);
            assert!((got / 0.01 - 1.0).abs() < 0.02, "r={r}: loss rate {got}");
            let b = burst_lengths(&lost);
            let mean = b.iter().sum::<usize>() as f64 / b.len() as f64;
            assert!((mean / burst - 1.0).abs() < 0.02, "r={r}: mean burst {mean} vs {burst}");
            // Histogram against r(1−r)^(n−1): each of the first bins within 4σ (binomial).
            let total = b.len() as f64;
            for n in 1..=8usize {
                let expect = r * (1.0 - r).powi(n as i32 - 1);
                let count = b.iter().filter(|&&x| x == n).count() as f64;
                let sigma = (total * expect * (1.0 - expect)).sqrt().max(1.0);
                assert!(
                    (count - total * expect).abs() < 4.0 * sigma,
                    "r={r} n={n}: {count} vs {}",
                    total * expect
                );
            }
        }
    }

    #[test]
    fn gilbert_elliott_general_h_and_k() {
        let cfg = LossConfig::GilbertElliott {
            p: Probability::new(0.05).unwrap(),
            r: Probability::new(0.3).unwrap(),
            loss_bad: Probability::new(0.7).unwrap(),
            loss_good: Probability::new(0.02).unwrap(),
        };
        // r/(p+r)(1−k) + p/(p+r)(1−h) = 0.3/0.35·0.02 + 0.05/0.35·0.7
        let want = 0.3 / 0.35 * 0.02 + 0.05 / 0.35 * 0.7;
        assert!((cfg.loss_rate() - want).abs() < 1e-12);
        let lost = run(&cfg, 10_000_000, 11);
        assert!((rate(&lost) / want - 1.0).abs() < 0.02, "rate {}", rate(&lost));
        let b = burst_lengths(&lost);
        let mean = b.iter().sum::<usize>() as f64 / b.len() as f64;
        assert!((mean / cfg.mean_burst() - 1.0).abs() < 0.02, "mean burst {mean} vs {}", cfg.mean_burst());
    }

    #[test]
    fn four_state_rate_against_stationary_distribution() {
        let p = |x: f64| Probability::new(x).unwrap();
        for (cfg, seed) in [
            (
                LossConfig::FourState { p13: p(0.01), p31: p(0.3), p32: p(0.2), p23: p(0.4), p14: p(0.005) },
                1u64,
            ),
            (LossConfig::FourState { p13: p(0.05), p31: p(0.95), p32: p(0.0), p23: p(1.0), p14: p(0.0) }, 2),
            (LossConfig::FourState { p13: p(0.0), p31: p(1.0), p32: p(0.0), p23: p(1.0), p14: p(0.02) }, 3),
            // Without p31 state 1 is left for good: the chain cycles between 3 and 2.
            (LossConfig::FourState { p13: p(0.01), p31: p(0.0), p32: p(0.5), p23: p(1.0), p14: p(0.0) }, 4),
            (LossConfig::FourState { p13: p(0.2), p31: p(0.0), p32: p(0.3), p23: p(0.1), p14: p(0.1) }, 5),
        ] {
            let want = cfg.loss_rate();
            // Cross-check the closed form with the chain's stationary vector by power iteration.
            let LossConfig::FourState { p13, p31, p32, p23, p14 } = &cfg else { unreachable!() };
            let (p13, p31, p32, p23, p14) = (p13.get(), p31.get(), p32.get(), p23.get(), p14.get());
            let t = [
                [1.0 - p13 - p14, 0.0, p13, p14],
                [0.0, 1.0 - p23, p23, 0.0],
                [p31, p32, 1.0 - p31 - p32, 0.0],
                [1.0, 0.0, 0.0, 0.0],
            ];
            let mut pi = [0.25; 4];
            for _ in 0..100_000 {
                let mut next = [0.0; 4];
                for (i, row) in t.iter().enumerate() {
                    for (j, &pij) in row.iter().enumerate() {
                        next[j] += pi[i] * pij;
                    }
                }
                pi = next;
            }
            assert!((pi[2] + pi[3] - want).abs() < 1e-9, "closed form {want} vs chain {}", pi[2] + pi[3]);
            let lost = run(&cfg, 5_000_000, seed);
            assert!((rate(&lost) / want - 1.0).abs() < 0.03, "{cfg}: {}", rate(&lost));
        }
    }

    #[test]
    fn trace_replays_in_a_loop() {
        let t = Arc::new(LossTrace::parse("# a comment\n0 0 1\n1 0 # trailing\n").unwrap());
        let lost = run(&LossConfig::Trace(t), 10, 1);
        assert_eq!(lost, [false, false, true, true, false, false, false, true, true, false]);
        assert!(LossTrace::parse("0 0 2").unwrap_err().to_string().contains("line 1"));
        assert!(LossTrace::parse("# nothing\n").is_err());
    }

    #[test]
    fn bit_errors_per_length() {
        let ber = 1e-5;
        for (len, seed) in [(64u32, 1u64), (1500, 2)] {
            let mut be = BitErrors::new(Probability::new(ber).unwrap());
            let mut rng = Rng::seeded(seed);
            let n = 2_000_000;
            let hits = (0..n).filter(|_| be.hit(len, &mut rng)).count() as f64;
            let p = 1.0 - (1.0 - ber).powf(8.0 * f64::from(len));
            let sigma = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((hits - n as f64 * p).abs() < 4.0 * sigma, "len {len}: {hits} vs {}", n as f64 * p);
        }
    }

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert!(matches!("1%".parse::<LossConfig>(), Ok(LossConfig::Random(_))));
        assert!(matches!("random:0.02".parse::<LossConfig>(), Ok(LossConfig::Random(_))));
        let ge: LossConfig = "ge:p=0.2%,r=20%".parse().unwrap();
        assert!(matches!(ge, LossConfig::GilbertElliott { loss_bad, .. } if loss_bad == Probability::ONE));
        // A chain that never goes bad loses nothing and has no bursts to count.
        let never: LossConfig = "ge:p=0,r=1%".parse().unwrap();
        assert_eq!(never.loss_rate(), 0.0);
        assert!(never.to_string().ends_with("(rate 0%: no frame is lost)"), "{never}");
        let ge: LossConfig = "ge:loss=1%,burst=5".parse().unwrap();
        assert!((ge.loss_rate() - 0.01).abs() < 1e-12 && (ge.mean_burst() - 5.0).abs() < 1e-9);
        for text in [
            "1%",
            "random:2%,corr=30%",
            "ge:p=0.2%,r=20%,loss-bad=70%,loss-good=0.1%",
            "gi:p13=5%,p32=3%,p14=1%",
        ] {
            let cfg: LossConfig = text.parse().unwrap();
            assert_eq!(cfg.spec().unwrap().parse::<LossConfig>(), Ok(cfg.clone()), "{text}");
        }
        // The least chance of leaving a state that must be left: a mean stay of 1e9 frames.
        for edge in ["ge:p=50%,r=1e-9", "gi:p13=50%,p31=1e-9", "gi:p13=1%,p31=0,p32=5%,p23=1e-9"] {
            assert!(edge.parse::<LossConfig>().is_ok(), "{edge}");
        }
        let gi: LossConfig = "gi:p13=5%".parse().unwrap();
        assert!(
            matches!(gi, LossConfig::FourState { p31, p23, .. } if (p31.get() - 0.95).abs() < 1e-12 && p23 == Probability::ONE)
        );
        for (bad, says) in [
            ("gx:p=1", "unknown loss model `gx`"),
            ("ge:p=1%", "missing `r`"),
            ("ge:p=0,r=0", "p + r = 0"),
            ("ge:p=1%,r=0", "r below 1e-9"),
            // Below 2^-64 a chance draws as never: as stuck as r = 0.
            ("ge:p=50%,r=1e-300", "r below 1e-9"),
            ("ge:p=50%,r=0.99e-9", "a burst would never end"),
            ("gi:p13=50%,p31=0,p32=0", "p31 + p32 below 1e-9"),
            ("gi:p13=50%,p31=1e-300", "p31 + p32 below 1e-9"),
            ("gi:p13=50%,p31=0,p32=5%,p23=1e-20", "p23 below 1e-9"),
            ("gi:p13=10%,p31=50%,p32=50%,p23=0", "p23 below 1e-9"),
            ("ge:p=150%,r=1%", "above 100%"),
            ("ge:p=1%,r=1%,q=3", "unknown key `q`"),
            ("ge:p=1%,r", "key=value"),
            ("ge:loss=1%,burst=0.5", "1 ≤ burst"),
            ("ge:loss=60%,burst=1", "p above 100%"),
            ("ge:loss=1%,burst=2e9", "burst ≤ 1e9"),
            ("gi:p31=1", "missing `p13`"),
            ("gi:p13=60%,p14=50%", "p13 + p14"),
            ("lots", "not a probability or a known loss model"),
        ] {
            let e = bad.parse::<LossConfig>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("accepted"), "{bad}: {e}");
        }
    }
}
