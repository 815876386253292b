//! Delay models: how long the path holds a frame after it leaves the link.
//!
//! - constant: `delay`;
//! - random: `delay + jitter · Z` with Z from a [`Dist`], drawn independently per frame;
//! - correlated (`half_life` H, after DPDS's adaptive delay correlation): Z is driven by a
//!   Gaussian process sampled at each frame's time, `x ← a·x + √(1−a²)·n` with
//!   `a = 2^(−Δt/H)` for the time Δt since the previous frame. The weight adapts to each
//!   inter-arrival time, so the correlation of two frames Δt apart is `2^(−Δt/H)` whatever
//!   the packet rate, and x stays standard normal, so the marginal mean and std are those
//!   configured. Non-normal distributions take x through their quantile function;
//! - correlated per frame (`correlation` ρ, NetEm's CORRELATION): Z is the distribution's
//!   quantile at NetEm's correlated uniform draw `u = (1−ρ)·fresh + ρ·previous`
//!   ([`crate::corr`]). Successive frames are correlated whatever their spacing, and, as in
//!   NetEm, the spread shrinks (the draw gathers around its median). Exclusive with
//!   `half_life`;
//! - trace: the base delay follows a `time delay` schedule that repeats.
//!
//! Draws never go below zero: a negative value is taken as zero (no wrap-around to a huge
//! delay, DEMU's bug).

use crate::corr::Correlated;
use crate::dist::{std_normal, unit_inside, DelayTable, Dist};
use crate::rng::Rng;
use crate::time::Nanos;
use crate::units::{parse_duration, Probability};
use std::sync::Arc;

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DelayConfig {
    /// One-way delay (the distribution's location; the minimum for `exponential`).
    pub base: Nanos,
    /// Spread: std for normal/pareto/paretonormal, half-width for uniform, mean excess for
    /// exponential. Zero means constant delay.
    pub jitter: Nanos,
    pub dist: Dist,
    /// Correlation half-life: frames this far apart have delays correlated 0.5.
    pub half_life: Option<Nanos>,
    /// NetEm's per-frame correlation of the variation's draw (exclusive with `half_life`).
    pub correlation: Option<Probability>,
    /// Base delay over time; replaces `base`.
    pub trace: Option<Arc<DelayTrace>>,
}

impl DelayConfig {
    /// A constant delay.
    pub fn constant(base: Nanos) -> DelayConfig {
        DelayConfig { base, ..DelayConfig::default() }
    }

    /// True when the delay varies from frame to frame.
    pub fn is_random(&self) -> bool {
        self.jitter > Nanos::ZERO || matches!(self.dist, Dist::Table(_))
    }

    /// The largest delay this model normally gives a frame; sizes the delay line.
    pub fn max_delay(&self) -> Nanos {
        let base = self.trace.as_ref().map_or(self.base, |t| t.max());
        if self.is_random() {
            self.dist.typical_max(base, self.jitter)
        } else {
            base
        }
    }

    /// Mean and standard deviation of the delay (before the clamp at zero; base from `base`).
    pub fn moments(&self) -> (f64, f64) {
        if self.is_random() {
            self.dist.moments(self.base, self.jitter)
        } else {
            (self.base.as_nanos() as f64, 0.0)
        }
    }
}

impl std::fmt::Display for DelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.trace {
            Some(t) => write!(f, "delay trace of {} steps over {}", t.points.len(), t.period)?,
            None => write!(f, "delay {}", self.base)?,
        }
        if self.is_random() {
            write!(f, " jitter {} {}", self.jitter, self.dist)?;
            if let Some(h) = self.half_life {
                write!(f, " correlated (half-life {h})")?;
            }
            if let Some(c) = self.correlation {
                write!(f, " correlated {c} per frame")?;
            }
        }
        Ok(())
    }
}

/// A step-wise delay schedule that repeats.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayTrace {
    /// `(offset in the period, delay)`, offsets increasing.
    points: Vec<(Nanos, Nanos)>,
    period: Nanos,
}

impl DelayTrace {
    /// Parses lines of `TIME DELAY` (both with units, e.g. `1.5s 40ms`), times increasing.
    /// Each delay holds from its time until the next line's. The schedule repeats with the
    /// period given by a `period TIME` line, or else the last time plus the last step's length
    /// (the gap between the last two times). `#` starts a comment.
    pub fn parse(text: &str) -> Result<DelayTrace, crate::trace::TraceError> {
        use crate::trace::TraceError;
        let mut points: Vec<(Nanos, Nanos)> = Vec::new();
        let mut period = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: crate::units::UnitError| TraceError::line(n, e);
            let mut words = line.split_whitespace();
            let (a, b) = (words.next().unwrap_or(""), words.next());
            if words.next().is_some() {
                return Err(TraceError::line(
                    n,
                    format!("`{}` has more than two fields (TIME DELAY)", crate::units::shown(line)),
                ));
            }
            if a == "period" {
                if period.is_some() {
                    return Err(TraceError::line(n, "a second `period` line (a trace has one)"));
                }
                let p = parse_duration(b.unwrap_or("")).map_err(at)?;
                if p > crate::limits::MAX_TRACE_SPAN {
                    return Err(TraceError::line(
                        n,
                        format!("period {p} is longer than the longest trace, 1 day"),
                    ));
                }
                period = Some(p);
                continue;
            }
            let Some(b) = b else {
                return Err(TraceError::line(n, format!("`{}` needs TIME DELAY", crate::units::shown(line))));
            };
            let t = parse_duration(a).map_err(at)?;
            let d = parse_duration(b).map_err(at)?;
            if t > crate::limits::MAX_TRACE_SPAN {
                return Err(TraceError::line(n, format!("time {t} is past the longest trace, 1 day")));
            }
            crate::limits::delay("delay-trace", d).map_err(|e| TraceError::line(n, e))?;
            if let Some(&(last, _)) = points.last() {
                if t <= last {
                    return Err(TraceError::line(
                        n,
                        format!("time {t} is not after the previous line's {last}"),
                    ));
                }
            }
            points.push((t, d));
        }
        let Some(&(last, _)) = points.last() else {
            return Err(TraceError::Whole("holds no TIME DELAY line".into()));
        };
        let period = match period {
            Some(p) if p <= last => {
                return Err(TraceError::Whole(format!("period {p} is not after the last time {last}")))
            }
            Some(p) => p,
            None if points.len() >= 2 => last + (last - points[points.len() - 2].0),
            None => last + Nanos::from_secs(1),
        };
        if period > crate::limits::MAX_TRACE_SPAN {
            return Err(TraceError::Whole(format!(
                "repeats every {period} (the last time and the last step's length), past the longest \
                 trace, 1 day: give a `period` line"
            )));
        }
        Ok(DelayTrace { points, period })
    }

    /// The delay at `t` (time since the schedule started).
    pub fn at(&self, t: Nanos) -> Nanos {
        let phase = Nanos(t.as_nanos() % self.period.as_nanos());
        match self.points.partition_point(|&(start, _)| start <= phase) {
            // Before the first step of a loop: the last step of the previous loop still holds.
            0 => self.points[self.points.len() - 1].1,
            i => self.points[i - 1].1,
        }
    }

    pub fn max(&self) -> Nanos {
        self.points.iter().map(|p| p.1).max().unwrap_or_default()
    }

    pub fn period(&self) -> Nanos {
        self.period
    }
}

/// The correlated process's state.
#[derive(Clone, Debug)]
struct Correlation {
    /// ln 2 / H, per nanosecond.
    decay: f64,
    x: f64,
    last: Option<Nanos>,
    /// Weights `(a, √(1−a²))` of recent gaps, direct-mapped by gap: frames arrive at a few
    /// steady spacings (a rate's transmission times alternate between two values).
    weights: [(u64, f64, f64); 4],
    /// Inverse CDF for distributions without a closed form.
    quantiles: Option<Arc<DelayTable>>,
}

/// NetEm's per-frame correlated draw and the inverse CDF it reads, for distributions
/// without a closed form.
#[derive(Clone, Debug)]
struct PerFrame {
    draw: Correlated,
    quantiles: Option<Arc<DelayTable>>,
}

/// A delay model with its state.
#[derive(Clone, Debug)]
pub struct Delay(Kind);

#[derive(Clone, Debug)]
enum Kind {
    Constant(Nanos),
    Random {
        base: f64,
        jitter: f64,
        dist: Dist,
        corr: Option<Box<Correlation>>,
        per_frame: Option<Box<PerFrame>>,
        trace: Option<(Arc<DelayTrace>, Option<Nanos>)>,
    },
}

impl Delay {
    pub fn new(config: &DelayConfig) -> Delay {
        if !config.is_random() && config.trace.is_none() {
            return Delay(Kind::Constant(config.base));
        }
        let corr = config.half_life.filter(|_| config.is_random()).map(|h| {
            Box::new(Correlation {
                decay: std::f64::consts::LN_2 / h.as_nanos().max(1) as f64,
                x: 0.0,
                last: None,
                weights: [(u64::MAX, 0.0, 1.0); 4],
                quantiles: config.dist.quantile_table().map(Arc::new),
            })
        });
        let per_frame = config.correlation.filter(|_| config.is_random() && corr.is_none()).map(|rho| {
            Box::new(PerFrame {
                draw: Correlated::new(rho),
                quantiles: match config.dist {
                    Dist::ParetoNormal => config.dist.quantile_table().map(Arc::new),
                    _ => None,
                },
            })
        });
        Delay(Kind::Random {
            base: config.base.as_nanos() as f64,
            jitter: if config.is_random() { config.jitter.as_nanos() as f64 } else { 0.0 },
            dist: if config.is_random() { config.dist.clone() } else { Dist::Uniform },
            corr,
            per_frame,
            trace: config.trace.clone().map(|t| (t, None)),
        })
    }

    /// Takes over the state of the delay this one replaces: the correlated process's value
    /// and time, or the last per-frame draw (so delays stay correlated across the change, now
    /// around the new mean and spread), and a delay trace's origin when the trace is the same.
    pub fn inherit(&mut self, old: Delay) {
        let Kind::Random { corr, per_frame, trace, .. } = &mut self.0 else { return };
        let Kind::Random { corr: old_corr, per_frame: old_per_frame, trace: old_trace, .. } = old.0 else {
            return;
        };
        if let (Some(c), Some(o)) = (corr.as_mut(), old_corr) {
            c.x = o.x;
            c.last = o.last;
        }
        if let (Some(p), Some(o)) = (per_frame.as_mut(), old_per_frame) {
            p.draw.inherit(&o.draw);
        }
        if let (Some((t, origin)), Some((ot, oo))) = (trace.as_mut(), old_trace) {
            if Arc::ptr_eq(t, &ot) {
                *origin = oo;
            }
        }
    }

    /// The delay of a frame leaving the link at `now`.
    #[inline(always)]
    pub fn sample(&mut self, now: Nanos, rng: &mut Rng) -> Nanos {
        match &mut self.0 {
            Kind::Constant(d) => *d,
            random => Self::sample_random(random, now, rng),
        }
    }

    #[inline(never)]
    fn sample_random(kind: &mut Kind, now: Nanos, rng: &mut Rng) -> Nanos {
        let Kind::Random { base, jitter, dist, corr, per_frame, trace } = kind else {
            unreachable!("constant is handled inline")
        };
        let base = match trace {
            Some((t, origin)) => {
                let o = *origin.get_or_insert(now);
                t.at(now.saturating_sub(o)).as_nanos() as f64
            }
            None => *base,
        };
        if *jitter == 0.0 && !matches!(dist, Dist::Table(_)) {
            return Nanos(base as u64);
        }
        let z = match corr {
            None => match per_frame {
                None => dist.sample(rng),
                Some(p) => dist.from_uniform(unit_inside(p.draw.next(rng)), p.quantiles.as_deref()),
            },
            Some(c) => {
                let n = std_normal(rng);
                c.x = match c.last {
                    None => n,
                    Some(last) => {
                        let dt = now.saturating_sub(last).as_nanos();
                        let w = &mut c.weights[(dt % 4) as usize];
                        if w.0 != dt {
                            let a = (-c.decay * dt as f64).exp();
                            *w = (dt, a, (1.0 - a * a).sqrt());
                        }
                        w.1 * c.x + w.2 * n
                    }
                };
                c.last = Some(now);
                dist.from_normal(c.x, c.quantiles.as_deref())
            }
        };
        let d = match dist {
            Dist::Table(_) => base + z,
            _ => base + *jitter * z,
        };
        Nanos(if d > 0.0 { d as u64 } else { 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::normal_cdf;

    fn delays(cfg: &DelayConfig, gap: Nanos, n: usize, seed: u64) -> Vec<f64> {
        let mut d = Delay::new(cfg);
        let mut rng = Rng::seeded(seed);
        (0..n).map(|i| d.sample(Nanos(gap.as_nanos() * i as u64), &mut rng).as_nanos() as f64).collect()
    }

    fn mean_std(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt())
    }

    fn correlation(v: &[f64], lag: usize) -> f64 {
        let (m, s) = mean_std(v);
        let n = v.len() - lag;
        (0..n).map(|i| (v[i] - m) * (v[i + lag] - m)).sum::<f64>() / n as f64 / (s * s)
    }

    #[test]
    fn independent_delays_follow_their_distribution() {
        let cfg = DelayConfig {
            base: Nanos::from_millis(10),
            jitter: Nanos::from_millis(2),
            dist: Dist::Normal,
            ..Default::default()
        };
        let mut v = delays(&cfg, Nanos::from_micros(10), 200_000, 1);
        let (m, s) = mean_std(&v);
        assert!((m / 10e6 - 1.0).abs() < 0.002 && (s / 2e6 - 1.0).abs() < 0.01, "{m} {s}");
        v.sort_by(f64::total_cmp);
        let ks = crate::dist::tests::ks(&v, |x| normal_cdf((x - 10e6) / 2e6));
        assert!(ks < crate::dist::tests::ks_critical(v.len()), "KS {ks}");
        assert!(correlation(&delays(&cfg, Nanos::from_micros(10), 100_000, 2), 1).abs() < 0.02);
    }

    #[test]
    fn draws_are_never_negative() {
        let cfg = DelayConfig {
            base: Nanos::from_millis(1),
            jitter: Nanos::from_millis(5),
            dist: Dist::Normal,
            ..Default::default()
        };
        let v = delays(&cfg, Nanos(1000), 100_000, 3);
        let zeros = v.iter().filter(|&&d| d == 0.0).count() as f64 / v.len() as f64;
        // P(N(1, 5²) < 0) = Φ(−0.2) ≈ 0.42: those become 0, never a wrapped huge value.
        assert!((zeros - normal_cdf(-0.2)).abs() < 0.01, "{zeros}");
        assert!(v.iter().all(|&d| d <= 1e6 + 6.0 * 5e6));
    }

    #[test]
    fn correlated_delay_is_rate_independent() {
        // Mean 10 ms, std 3 ms, H = 1 ms, at 10 kpps and 200 kpps (20× apart).
        let h = Nanos::from_millis(1);
        let cfg = DelayConfig {
            base: Nanos::from_millis(10),
            jitter: Nanos::from_millis(3),
            dist: Dist::Normal,
            half_life: Some(h),
            ..Default::default()
        };
        for (gap, n, seed) in
            [(Nanos::from_micros(100), 400_000usize, 5u64), (Nanos::from_micros(5), 4_000_000, 6)]
        {
            let v = delays(&cfg, gap, n, seed);
            let (m, s) = mean_std(&v);
            assert!((m / 10e6 - 1.0).abs() < 0.02, "gap {gap}: mean {m}");
            assert!((s / 3e6 - 1.0).abs() < 0.02, "gap {gap}: std {s}");
            let lag = (h.as_nanos() / gap.as_nanos()) as usize;
            let c = correlation(&v, lag);
            assert!((c - 0.5).abs() < 0.1, "gap {gap}: correlation at H = {c}");
            let c2 = correlation(&v, 2 * lag);
            assert!((c2 - 0.25).abs() < 0.1, "gap {gap}: correlation at 2H = {c2}");
        }
    }

    #[test]
    fn per_frame_correlation_is_netems_draw_whatever_the_spacing() {
        // Uniform 10 ms ± 4 ms with 50% correlation: NetEm's draw u has mean 1/2, variance
        // (1−ρ)/(1+ρ)/12 and lag-k correlation ρ^k, and the delay is 10 ms + 4 ms·(2u−1).
        let rho = 0.5;
        let cfg = DelayConfig {
            base: Nanos::from_millis(10),
            jitter: Nanos::from_millis(4),
            correlation: Some(Probability::new(rho).unwrap()),
            ..Default::default()
        };
        let want_std = 4e6 * 2.0 * ((1.0 - rho) / (1.0 + rho) / 12.0).sqrt();
        for (gap, seed) in [(Nanos::from_micros(1), 31u64), (Nanos::from_secs(1), 32)] {
            let v = delays(&cfg, gap, 1_000_000, seed);
            let (m, s) = mean_std(&v);
            assert!((m / 10e6 - 1.0).abs() < 0.001, "gap {gap}: mean {m}");
            assert!((s / want_std - 1.0).abs() < 0.01, "gap {gap}: std {s} vs {want_std}");
            assert!((correlation(&v, 1) - rho).abs() < 0.01, "gap {gap}: lag 1");
            assert!((correlation(&v, 2) - rho * rho).abs() < 0.01, "gap {gap}: lag 2");
            assert!(v.iter().all(|&d| (6e6..=14e6).contains(&d)));
        }
        // Other distributions read the same draw through their quantile: correlated too.
        let normal = DelayConfig { dist: Dist::Normal, ..cfg.clone() };
        let v = delays(&normal, Nanos(1000), 400_000, 33);
        assert!(correlation(&v, 1) > 0.4, "{}", correlation(&v, 1));
        // A change keeps the last draw: the next delay follows the old one.
        let mut d = Delay::new(&DelayConfig { correlation: Some(Probability::ONE), ..cfg.clone() });
        let mut rng = Rng::seeded(1);
        let first = d.sample(Nanos(0), &mut rng);
        let mut next = Delay::new(&DelayConfig { correlation: Some(Probability::ONE), ..cfg });
        next.inherit(d);
        assert_eq!(next.sample(Nanos(1), &mut rng), first, "full correlation repeats the draw");
    }

    #[test]
    fn correlated_non_normal_keeps_its_marginal() {
        let cfg = DelayConfig {
            base: Nanos::from_millis(5),
            jitter: Nanos::from_millis(2),
            dist: Dist::Uniform,
            half_life: Some(Nanos::from_millis(1)),
            ..Default::default()
        };
        let v = delays(&cfg, Nanos::from_micros(20), 2_000_000, 8);
        let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(lo >= 3e6 && hi <= 7e6, "{lo} {hi}");
        let (m, s) = mean_std(&v);
        assert!((m / 5e6 - 1.0).abs() < 0.02 && (s / (2e6 / 3f64.sqrt()) - 1.0).abs() < 0.03, "{m} {s}");
        let c = correlation(&v, 50);
        assert!((c - 0.5).abs() < 0.1, "{c}");
    }

    #[test]
    fn trace_steps_and_loops() {
        let t = DelayTrace::parse("0s 10ms\n1s 50ms # busy hour\n2s 20ms\nperiod 3s\n").unwrap();
        assert_eq!(t.at(Nanos(0)), Nanos::from_millis(10));
        assert_eq!(t.at(Nanos::from_millis(999)), Nanos::from_millis(10));
        assert_eq!(t.at(Nanos::from_secs(1)), Nanos::from_millis(50));
        assert_eq!(t.at(Nanos::from_millis(2500)), Nanos::from_millis(20));
        assert_eq!(t.at(Nanos::from_millis(3500)), Nanos::from_millis(10));
        let cfg = DelayConfig { trace: Some(Arc::new(t)), ..Default::default() };
        let mut d = Delay::new(&cfg);
        let mut rng = Rng::seeded(1);
        let origin = Nanos::from_secs(100);
        assert_eq!(d.sample(origin, &mut rng), Nanos::from_millis(10));
        assert_eq!(d.sample(origin + Nanos::from_millis(1500), &mut rng), Nanos::from_millis(50));
        // Default period: last time + last step.
        let t2 = DelayTrace::parse("1s 5ms\n2s 7ms\n").unwrap();
        assert_eq!(t2.period(), Nanos::from_secs(3));
        assert_eq!(t2.at(Nanos::from_millis(500)), Nanos::from_millis(7), "before the first step");
        for (bad, says) in [
            ("", "no TIME DELAY"),
            ("1s\n", "needs TIME DELAY"),
            ("1s 2ms\n1s 3ms\n", "not after"),
            ("1s 2q\n", "unknown unit"),
            ("0s 1ms\nperiod 0s\n", "period"),
            ("0s 2h\n", "out of range"),
            ("2days 1ms\n", "unknown unit"),
            ("90000s 1ms\n", "longest trace"),
            ("0s 1ms\nperiod 90000s\n", "longest trace"),
            ("0s 10ms\nperiod 2s\nperiod 3s\n", "a second `period`"),
            ("0s 10ms\n86400s 20ms\n", "give a `period` line"),
        ] {
            let e = DelayTrace::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
