//! Delay distributions, as NetEm names them, each expressed as a quantile function so the
//! same distribution can be sampled independently or driven by a correlated process.
//!
//! All are written `delay + jitter · Z` where Z has mean 0 and standard deviation 1, except
//! `exponential` (TLEM: minimum = delay, mean = delay + jitter) and `table` (the empirical
//! distribution of recorded delays, added to `delay`).
//! - `uniform`: Z uniform on [−1, 1] (so the delay is uniform on delay ± jitter; std jitter/√3,
//!   as in NetEm, where jitter is the half-width);
//! - `normal`: Z standard normal;
//! - `pareto`: Pareto with shape 3 (NetEm's table), standardized: Z = (U^(−1/3) − 1.5)/(√3/2);
//! - `paretonormal`: NetEm's "¼ normal + ¾ pareto": Z = (N/4 + 3P/4)/√(5/8), standardized;
//! - `exponential`: delay + jitter · E with E exponential of mean 1;
//! - `table:FILE`: the inverse CDF of the recorded samples, interpolated linearly.

use crate::rng::Rng;
use crate::spec::error;
use crate::time::Nanos;
use crate::units::{parse_duration, UnitError};
use rand_distr::{Distribution, StandardNormal};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

const DIST_ACCEPTED: &str = "uniform, normal, pareto, paretonormal, exponential, table:FILE";

/// √3 / 2: the standard deviation of a Pareto(x_m = 1, α = 3) variable.
const PARETO_STD: f64 = 0.866_025_403_784_438_6;
/// √(1/16 + 9/16): the standard deviation of N/4 + 3P/4 for standardized N and P.
const PARETONORMAL_STD: f64 = 0.790_569_415_042_094_8;

/// The shape of the delay's variation.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Dist {
    #[default]
    Uniform,
    Normal,
    Pareto,
    ParetoNormal,
    Exponential,
    Table(Arc<DelayTable>),
}

impl FromStr for Dist {
    type Err = UnitError;
    /// Every distribution but `table:FILE`, whose file the caller reads.
    fn from_str(s: &str) -> Result<Dist, UnitError> {
        match s.trim() {
            "uniform" => Ok(Dist::Uniform),
            "normal" => Ok(Dist::Normal),
            "pareto" => Ok(Dist::Pareto),
            "paretonormal" => Ok(Dist::ParetoNormal),
            "exponential" => Ok(Dist::Exponential),
            t if t.starts_with("table:") => {
                Err(error(s, "names a table file, which is read by the command line", DIST_ACCEPTED))
            }
            _ => Err(error(s, "is not a known distribution", DIST_ACCEPTED)),
        }
    }
}

crate::deserialize_from_str!(Dist);

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Uniform => f.write_str("uniform"),
            Dist::Normal => f.write_str("normal"),
            Dist::Pareto => f.write_str("pareto"),
            Dist::ParetoNormal => f.write_str("paretonormal"),
            Dist::Exponential => f.write_str("exponential"),
            Dist::Table(t) => write!(f, "table of {} samples", t.sorted.len()),
        }
    }
}

/// Recorded delays, sorted: an empirical distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayTable {
    sorted: Vec<f64>,
}

impl DelayTable {
    /// One duration with its unit per line (`12.5ms`); blank lines and `#` comments ignored.
    pub fn parse(text: &str) -> Result<DelayTable, crate::trace::TraceError> {
        use crate::trace::TraceError;
        let mut sorted = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let d = parse_duration(line).map_err(|e| TraceError::line(n, e))?;
            crate::limits::delay("delay-dist table:", d).map_err(|e| TraceError::line(n, e))?;
            sorted.push(d.as_nanos() as f64);
        }
        if sorted.len() < 2 {
            return Err(TraceError::Whole("needs at least two samples".into()));
        }
        sorted.sort_by(f64::total_cmp);
        Ok(DelayTable { sorted })
    }

    /// From samples in nanoseconds (tests, generated tables).
    pub fn from_samples(mut samples: Vec<f64>) -> DelayTable {
        samples.sort_by(f64::total_cmp);
        DelayTable { sorted: samples }
    }

    /// The u-quantile, u in [0, 1], interpolated between neighbouring samples.
    pub fn quantile(&self, u: f64) -> f64 {
        let x = u.clamp(0.0, 1.0) * (self.sorted.len() - 1) as f64;
        let i = x as usize;
        if i + 1 >= self.sorted.len() {
            return self.sorted[self.sorted.len() - 1];
        }
        let f = x - i as f64;
        self.sorted[i] + f * (self.sorted[i + 1] - self.sorted[i])
    }

    pub fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    pub fn mean(&self) -> f64 {
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }
}

/// Φ, the standard normal CDF.
#[inline]
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// A standard normal draw.
#[inline]
pub fn std_normal(rng: &mut Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// The standardized Pareto(α = 3) value whose upper-tail probability is `q` ∈ (0, 1].
#[inline]
fn std_pareto_upper(q: f64) -> f64 {
    (q.powf(-1.0 / 3.0) - 1.5) / PARETO_STD
}

impl Dist {
    /// An independent draw of Z (see the module doc), or of the offset for `exponential` and
    /// `table`.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match self {
            Dist::Uniform => 2.0 * rng.unit() - 1.0,
            Dist::Normal => std_normal(rng),
            Dist::Pareto => std_pareto_upper(rng.unit_open0()),
            Dist::ParetoNormal => {
                (0.25 * std_normal(rng) + 0.75 * std_pareto_upper(rng.unit_open0())) / PARETONORMAL_STD
            }
            Dist::Exponential => -rng.unit_open0().ln(),
            Dist::Table(t) => t.quantile(rng.unit()),
        }
    }

    /// The value at the same quantile as the standard normal value `x`, so a correlated
    /// Gaussian process can drive any distribution (a Gaussian copula). `quantiles` is the
    /// tabulated inverse CDF for distributions without a closed form.
    #[inline]
    pub fn from_normal(&self, x: f64, quantiles: Option<&DelayTable>) -> f64 {
        match self {
            Dist::Normal => x,
            Dist::Uniform => 2.0 * normal_cdf(x) - 1.0,
            Dist::Pareto => std_pareto_upper(normal_cdf(-x).max(f64::MIN_POSITIVE)),
            Dist::Exponential => -normal_cdf(-x).max(f64::MIN_POSITIVE).ln(),
            Dist::Table(t) => t.quantile(normal_cdf(x)),
            Dist::ParetoNormal => quantiles.map_or(x, |q| q.quantile(normal_cdf(x))),
        }
    }

    /// A tabulated inverse CDF for distributions that need one for `from_normal`.
    pub fn quantile_table(&self) -> Option<DelayTable> {
        match self {
            Dist::ParetoNormal => {
                let mut rng = Rng::seeded(0x7061_7468_656d);
                Some(DelayTable::from_samples((0..1 << 18).map(|_| self.sample(&mut rng)).collect()))
            }
            _ => None,
        }
    }

    /// Mean and standard deviation of the delay for `base` and `jitter` (before the clamp at 0).
    pub fn moments(&self, base: Nanos, jitter: Nanos) -> (f64, f64) {
        let (b, j) = (base.as_nanos() as f64, jitter.as_nanos() as f64);
        match self {
            Dist::Uniform => (b, j / 3f64.sqrt()),
            Dist::Normal | Dist::Pareto | Dist::ParetoNormal => (b, j),
            Dist::Exponential => (b + j, j),
            Dist::Table(t) => {
                let m = t.mean();
                let var = t.sorted.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / t.sorted.len() as f64;
                (b + m, var.sqrt())
            }
        }
    }

    /// A delay this distribution rarely exceeds, to size the delay line.
    pub fn typical_max(&self, base: Nanos, jitter: Nanos) -> Nanos {
        let (b, j) = (base.as_nanos() as f64, jitter.as_nanos() as f64);
        let v = match self {
            Dist::Uniform => b + j,
            Dist::Normal => b + 6.0 * j,
            Dist::Pareto | Dist::ParetoNormal | Dist::Exponential => b + 10.0 * j,
            Dist::Table(t) => b + t.max(),
        };
        Nanos(v as u64)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Kolmogorov-Smirnov distance between sorted samples and a CDF.
    pub fn ks(sorted: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
        let n = sorted.len() as f64;
        sorted
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
            })
            .fold(0.0, f64::max)
    }

    /// Critical KS distance at α = 0.001 for n samples.
    pub fn ks_critical(n: usize) -> f64 {
        1.95 / (n as f64).sqrt()
    }

    fn draws(d: &Dist, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::seeded(seed);
        let mut v: Vec<f64> = (0..n).map(|_| d.sample(&mut rng)).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn mean_std(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt())
    }

    #[test]
    fn closed_form_distributions_pass_kolmogorov_smirnov() {
        let n = 200_000;
        let pareto_cdf = |z: f64| {
            let y = z * PARETO_STD + 1.5;
            if y < 1.0 {
                0.0
            } else {
                1.0 - y.powi(-3)
            }
        };
        type Cdf = Box<dyn Fn(f64) -> f64>;
        let cases: Vec<(Dist, Cdf)> = vec![
            (Dist::Uniform, Box::new(|z: f64| ((z + 1.0) / 2.0).clamp(0.0, 1.0))),
            (Dist::Normal, Box::new(normal_cdf)),
            (Dist::Pareto, Box::new(pareto_cdf)),
            (Dist::Exponential, Box::new(|x: f64| 1.0 - (-x).exp())),
        ];
        for (i, (d, cdf)) in cases.into_iter().enumerate() {
            let v = draws(&d, n, 10 + i as u64);
            let dist = ks(&v, &cdf);
            assert!(dist < ks_critical(n), "{d}: KS {dist}");
            // A wrong distribution fails: normal draws against the uniform CDF.
            if d == Dist::Normal {
                assert!(ks(&v, |z| ((z + 1.0) / 2.0).clamp(0.0, 1.0)) > 10.0 * ks_critical(n));
            }
        }
    }

    #[test]
    fn standardized_moments() {
        for (d, want_std) in [
            (Dist::Uniform, 1.0 / 3f64.sqrt()),
            (Dist::Normal, 1.0),
            (Dist::Pareto, 1.0),
            (Dist::ParetoNormal, 1.0),
            (Dist::Exponential, 1.0),
        ] {
            let v = draws(&d, 2_000_000, 3);
            let (m, s) = mean_std(&v);
            let want_mean = if d == Dist::Exponential { 1.0 } else { 0.0 };
            // Pareto(α=3) has an infinite fourth moment: its sample std converges slowly.
            let tol = if matches!(d, Dist::Pareto | Dist::ParetoNormal) { 0.05 } else { 0.01 };
            assert!((m - want_mean).abs() < tol, "{d}: mean {m}");
            assert!((s / want_std - 1.0).abs() < tol, "{d}: std {s}");
        }
    }

    #[test]
    fn paretonormal_is_the_quarter_normal_three_quarter_pareto_mixture() {
        // Built independently: sums of separately drawn normal and Pareto values.
        let mut rng = Rng::seeded(99);
        let mut reference: Vec<f64> = (0..200_000)
            .map(|_| {
                let nrm = std_normal(&mut rng);
                let y = rng.unit_open0().powf(-1.0 / 3.0);
                (0.25 * nrm + 0.75 * (y - 1.5) / PARETO_STD) / PARETONORMAL_STD
            })
            .collect();
        reference.sort_by(f64::total_cmp);
        let table = DelayTable::from_samples(reference.clone());
        let v = draws(&Dist::ParetoNormal, 200_000, 5);
        // Two-sample KS via the reference's empirical CDF.
        let ecdf = |x: f64| reference.partition_point(|&r| r <= x) as f64 / reference.len() as f64;
        assert!(ks(&v, ecdf) < 1.36 * 2.0 / (200_000f64).sqrt() * 1.5);
        assert!((table.quantile(0.5) - v[v.len() / 2]).abs() < 0.02);
    }

    #[test]
    fn copula_keeps_each_marginal() {
        let mut rng = Rng::seeded(4);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| std_normal(&mut rng)).collect();
        for d in [Dist::Uniform, Dist::Pareto, Dist::Exponential, Dist::ParetoNormal] {
            let q = d.quantile_table();
            let mut v: Vec<f64> = xs.iter().map(|&x| d.from_normal(x, q.as_ref())).collect();
            v.sort_by(f64::total_cmp);
            let mut reference = draws(&d, n, 77);
            reference.sort_by(f64::total_cmp);
            let ecdf = |x: f64| reference.partition_point(|&r| r <= x) as f64 / n as f64;
            assert!(ks(&v, ecdf) < 2.0 * ks_critical(n), "{d}");
        }
    }

    #[test]
    fn table_parses_and_interpolates() {
        let t = DelayTable::parse("# ping times\n10ms\n30ms\n\n20ms # middle\n").unwrap();
        assert_eq!(t.quantile(0.0), 10e6);
        assert_eq!(t.quantile(0.5), 20e6);
        assert_eq!(t.quantile(0.75), 25e6);
        assert_eq!(t.quantile(1.0), 30e6);
        assert!(matches!(
            DelayTable::parse("10ms\n12").unwrap_err(),
            crate::trace::TraceError::Line { line: 2, .. }
        ));
        assert!(DelayTable::parse("10ms").is_err());
        assert!(DelayTable::parse("10ms\n2h\n").unwrap_err().to_string().contains("line 2"));
        assert!("table:x".parse::<Dist>().is_err());
        assert!("gamma".parse::<Dist>().unwrap_err().to_string().contains("accepted"));
    }
}
