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
//! - `table:FILE`: the inverse CDF of the recorded samples, interpolated linearly;
//! - `custom` (tc's distribution tables, `tc:NAME`): Z is one of the table's values / 8192,
//!   each entry equally likely (NetEm's `delay + jitter · table[i] / 8192`).

use crate::rng::Rng;
use crate::spec::error;
use crate::time::Nanos;
use crate::units::{parse_duration, UnitError};
use rand_distr::{Distribution, StandardNormal};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

const DIST_ACCEPTED: &str = "uniform, normal, pareto, paretonormal, exponential, table:FILE, tc:NAME";

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
    /// A table in tc's format (values in units of jitter / 8192).
    Custom(Arc<CustomTable>),
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
            t if t.starts_with("table:") || t.starts_with("tc:") => {
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
            Dist::Custom(t) => write!(f, "custom table of {} values", t.values.len()),
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

/// Scale of tc's distribution tables: a value of 8192 is one jitter.
pub const CUSTOM_SCALE: f64 = 8192.0;
/// Most values a tc distribution table holds (what NetEm takes).
pub const CUSTOM_MAX_VALUES: usize = 16_384;

/// A distribution table in tc's format (`/usr/lib/tc/normal.dist`, or one made by tc's
/// `maketable`): signed 16-bit values, a value of 8192 meaning one jitter. A draw takes one
/// entry, each equally likely; a correlated draw takes the entry at the draw's position in
/// the table's own order (tc's tables are sorted, so near draws give near values).
#[derive(Clone, Debug, PartialEq)]
pub struct CustomTable {
    values: Vec<i16>,
}

impl CustomTable {
    /// Parses tc's table text: whole numbers (decimal, `0x` hex or `0` octal, as tc reads
    /// them) separated by white space, from −32768 to 32767, 1 to 16384 of them; a line that
    /// starts with `#` is a comment, and `#` ends a line's numbers.
    pub fn parse(text: &str) -> Result<CustomTable, crate::trace::TraceError> {
        use crate::trace::TraceError;
        let mut values = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            for word in line.split_whitespace() {
                let v = parse_c_integer(word).filter(|v| i16::try_from(*v).is_ok()).ok_or_else(|| {
                    TraceError::line(
                        n,
                        format!("`{}` is not a whole number from -32768 to 32767", crate::units::shown(word)),
                    )
                })?;
                if values.len() == CUSTOM_MAX_VALUES {
                    return Err(TraceError::line(n, format!("holds more than {CUSTOM_MAX_VALUES} values")));
                }
                values.push(v as i16);
            }
        }
        if values.is_empty() {
            return Err(TraceError::Whole("holds no value".into()));
        }
        Ok(CustomTable { values })
    }

    /// From values already scaled (tests, generated tables); `None` when empty or too long.
    pub fn from_values(values: Vec<i16>) -> Option<CustomTable> {
        (!values.is_empty() && values.len() <= CUSTOM_MAX_VALUES).then_some(CustomTable { values })
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The entry at fraction `u` ∈ [0, 1) of the table, in units of jitter.
    #[inline]
    fn at(&self, u: f64) -> f64 {
        let i = ((u * self.values.len() as f64) as usize).min(self.values.len() - 1);
        f64::from(self.values[i]) / CUSTOM_SCALE
    }

    fn max(&self) -> f64 {
        f64::from(self.values.iter().copied().max().unwrap_or(0)) / CUSTOM_SCALE
    }

    /// The values in units of jitter, sorted: the inverse CDF.
    fn sorted(&self) -> DelayTable {
        DelayTable::from_samples(self.values.iter().map(|&v| f64::from(v) / CUSTOM_SCALE).collect())
    }
}

/// A whole number as C's `strtol` with base 0 reads it (tc's rule for values without a unit):
/// decimal, `0x` hexadecimal or `0` octal, optionally signed.
pub fn parse_c_integer(word: &str) -> Option<i64> {
    let (neg, body) = match word.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, word.strip_prefix('+').unwrap_or(word)),
    };
    let (digits, radix) = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        (hex, 16)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Φ, the standard normal CDF.
#[inline]
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// Φ⁻¹, the standard normal quantile of `p` ∈ (0, 1): Acklam's rational approximation
/// (relative error 1.2·10⁻⁹), refined by one Halley step against [`normal_cdf`].
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    const LOW: f64 = 0.024_25;
    let x = if p < LOW {
        tail(p)
    } else if p > 1.0 - LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    let e = normal_cdf(x) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

/// A uniform `u64` draw as a fraction strictly inside (0, 1).
#[inline]
pub fn unit_inside(u: u64) -> f64 {
    ((u >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
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
            Dist::Custom(t) => f64::from(t.values[rng.below(t.values.len() as u64) as usize]) / CUSTOM_SCALE,
        }
    }

    /// The value at quantile `u` ∈ (0, 1): how NetEm's correlated uniform draw
    /// ([`crate::corr::Correlated`]) becomes a delay. `quantiles` is the tabulated inverse
    /// CDF for distributions without a closed form. A custom table is read in its own order.
    #[inline]
    pub fn from_uniform(&self, u: f64, quantiles: Option<&DelayTable>) -> f64 {
        match self {
            Dist::Uniform => 2.0 * u - 1.0,
            Dist::Normal => normal_quantile(u),
            Dist::Pareto => std_pareto_upper(1.0 - u),
            Dist::ParetoNormal => quantiles.map_or_else(|| normal_quantile(u), |q| q.quantile(u)),
            Dist::Exponential => -(1.0 - u).ln(),
            Dist::Table(t) => t.quantile(u),
            Dist::Custom(t) => t.at(u),
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
            Dist::ParetoNormal | Dist::Custom(_) => quantiles.map_or(x, |q| q.quantile(normal_cdf(x))),
        }
    }

    /// A tabulated inverse CDF for distributions that need one for `from_normal`.
    pub fn quantile_table(&self) -> Option<DelayTable> {
        match self {
            Dist::ParetoNormal => {
                let mut rng = Rng::seeded(0x7061_7468_656d);
                Some(DelayTable::from_samples((0..1 << 18).map(|_| self.sample(&mut rng)).collect()))
            }
            Dist::Custom(t) => Some(t.sorted()),
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
            Dist::Custom(t) => {
                let (m, s) = Dist::Table(Arc::new(t.sorted())).moments(Nanos::ZERO, Nanos::ZERO);
                (b + j * m, j * s)
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
            Dist::Custom(t) => b + j * t.max().max(0.0),
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
    fn normal_quantile_inverts_the_cdf() {
        for &p in &[1e-12, 1e-6, 0.001, 0.02425, 0.1, 0.3, 0.5, 0.77, 0.97575, 0.999, 1.0 - 1e-9] {
            let x = normal_quantile(p);
            assert!((normal_cdf(x) / p - 1.0).abs() < 1e-9, "p {p}: Φ({x}) = {}", normal_cdf(x));
        }
        assert_eq!(normal_quantile(0.5), 0.0);
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-12);
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
    }

    #[test]
    fn from_uniform_draws_the_same_distribution_as_sample() {
        let n = 200_000;
        let mut rng = Rng::seeded(21);
        let us: Vec<f64> = (0..n).map(|_| unit_inside(rng.next_u64())).collect();
        let custom =
            Dist::Custom(Arc::new(CustomTable::from_values((-2000..2000).map(|v| v * 4).collect()).unwrap()));
        for d in [Dist::Uniform, Dist::Normal, Dist::Pareto, Dist::ParetoNormal, Dist::Exponential, custom] {
            let q = d.quantile_table();
            let mut v: Vec<f64> = us.iter().map(|&u| d.from_uniform(u, q.as_ref())).collect();
            v.sort_by(f64::total_cmp);
            let reference = draws(&d, n, 78);
            let ecdf = |x: f64| reference.partition_point(|&r| r <= x) as f64 / n as f64;
            assert!(ks(&v, ecdf) < 2.0 * ks_critical(n), "{d}");
        }
        // Monotone in u for the closed forms: a correlated draw gives correlated values.
        for d in [Dist::Uniform, Dist::Normal, Dist::Pareto, Dist::Exponential] {
            assert!(d.from_uniform(0.2, None) < d.from_uniform(0.8, None), "{d}");
        }
    }

    #[test]
    fn tc_tables_parse_as_tc_reads_them() {
        let t = CustomTable::parse("# The normal table\n -8192 0 8192\n0x10 010 # hex, octal\n\n").unwrap();
        assert_eq!(t.values, [-8192, 0, 8192, 16, 8]);
        let d = Dist::Custom(Arc::new(t));
        assert_eq!(d.from_uniform(0.0, None), -1.0);
        assert_eq!(d.from_uniform(0.5, None), 1.0);
        assert_eq!(d.from_uniform(0.999, None), 8.0 / 8192.0);
        assert_eq!(d.typical_max(Nanos(100), Nanos(8192)), Nanos(100 + 8192));
        for (bad, says) in
            [("", "no value"), ("1 2 x", "line 1"), ("1\n40000", "line 2"), ("# only\n", "no value")]
        {
            let e = CustomTable::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let long = "1 ".repeat(CUSTOM_MAX_VALUES + 1);
        assert!(CustomTable::parse(&long).unwrap_err().to_string().contains("more than 16384"));
        assert_eq!(parse_c_integer("-0x1f"), Some(-31));
        assert_eq!(parse_c_integer("017"), Some(15));
        assert_eq!(parse_c_integer("08"), None, "not octal");
        assert_eq!(parse_c_integer("0"), Some(0));
        assert_eq!(parse_c_integer(""), None);
        assert_eq!(parse_c_integer("-"), None);
        assert_eq!(parse_c_integer("+-1"), None);
        assert_eq!(parse_c_integer("0x-1"), None);
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
