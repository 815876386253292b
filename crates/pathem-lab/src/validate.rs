//! `pathem validate`'s measurements: pathem between two namespaces, the probe through it,
//! and what was configured against what was observed, with the tolerance used. The command
//! line chooses the cases and prints the reports.

use crate::testbed::{Bed, SINK_IP};
use crate::Error;
use pathem_engine::{EngineConfig, Stats, DEFAULT_BUSY_POLL};
use pathem_io::live::PortOptions;
use pathem_model::loss::LossConfig;
use pathem_model::{Nanos, PathConfig};
use pathem_probe::session::{self, Plan, ProbeRate};
use pathem_probe::{Pattern, Summary};
use pathem_runtime::{Link, LinkSpec};
use serde::Serialize;
use std::path::Path;

/// One observed quantity against what was configured.
#[derive(Serialize, Debug, Clone)]
pub struct Check {
    pub what: String,
    pub configured: f64,
    pub observed: f64,
    pub tolerance: String,
    pub pass: bool,
}

#[derive(Serialize, Debug)]
pub struct CaseReport {
    pub name: String,
    pub flags: String,
    pub checks: Vec<Check>,
    pub summary: Summary,
}

/// Starts pathem between pa and pb in the bed's middle namespace (the a→b path is the one
/// under test, b→a is transparent), on its own CPU, and resolves the receiver's address
/// through it, so that the probe's first datagrams do not wait for ARP.
pub fn forwarder(bed: &Bed, kind: &str, path: PathConfig) -> Result<Link, Error> {
    let spec = LinkSpec {
        a: format!("{kind}:pa").parse()?,
        b: format!("{kind}:pb").parse()?,
        ab: path,
        ba: PathConfig::default(),
        classes_ab: Vec::new(),
        classes_ba: Vec::new(),
        one_way: false,
        seed: 1,
        engine: EngineConfig { max_frame: 2048, busy_poll: DEFAULT_BUSY_POLL, ..EngineConfig::default() },
        ports: PortOptions { max_frame: 2048, ..PortOptions::default() },
        cores: cpus().map(|(_, fwd)| vec![fwd]).unwrap_or_default(),
        netns: Some(bed.mid().to_string()),
        keep_offloads: false,
        schedule_ab: None,
        schedule_ba: None,
        attach: None,
    };
    let link = Link::start(spec)?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    bed.warm_up();
    Ok(link)
}

/// On two CPUs or more: the probe's CPU and pathem's, so that the two busy parties (the
/// sender and pathem) each have one; the receiver reads in batches and takes little.
pub fn cpus() -> Option<(usize, usize)> {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (n >= 2).then_some((0, n - 1))
}

/// Sends the probe from gen to sink through whatever joins them; draws its figures in `figures`.
#[allow(clippy::too_many_arguments)]
pub fn probe(
    bed: &Bed,
    pattern: Pattern,
    pps: f64,
    size: usize,
    seconds: f64,
    expect_delay: Nanos,
    expect_loss: Option<&LossConfig>,
    figures: &Path,
) -> Result<Summary, Error> {
    let plan = Plan::new(pattern, ProbeRate::Pps(pps), size, Some((pps * seconds) as u64), None, 1)?;
    let to = format!("{SINK_IP}:47001").parse().expect("a socket address");
    let (g, s) = (Some(bed.gen.clone()), Some(bed.sink.clone()));
    let idle = std::time::Duration::from_secs(3);
    let got = session::pair(to, g, s, cpus().map(|c| c.0), &plan, idle)?;
    let outputs = session::Outputs { expect_loss, json: None, figures: Some(figures) };
    Ok(session::conclude(&got, expect_delay, Nanos::from_secs(3), outputs)?.0)
}

/// The machine's own noise floor: the same probe over a direct veth pair, no pathem.
pub fn noise_floor(seconds: f64, figures: &Path) -> Result<Summary, Error> {
    let direct = Bed::direct(&format!("pvd{}", std::process::id()))?;
    probe(&direct, Pattern::Cbr, 10_000.0, 64, seconds, Nanos::ZERO, None, figures)
}

/// One path to check: pathem runs it a→b while the probe sends `pps` frames of `size` bytes.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    /// The flags it was given, for the report.
    pub flags: String,
    pub path: PathConfig,
    pub pps: f64,
    pub size: usize,
    /// The loss model whose burst CDF to draw next to the measured one.
    pub expect_loss: Option<LossConfig>,
}

/// What the path adds with no impairment (the transparent case, measured first), in µs: the
/// delay checks are made on top of it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Base {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
}

/// Runs `case` through pathem (`kind` ports) for `secs` and checks what came out. Delay checks
/// are made on top of `base`: its mean adds to the mean, its median to the median (a stall
/// of the machine in the transparent run moves its mean, not its median), its variance adds.
pub fn run_case(
    bed: &Bed,
    kind: &str,
    case: &Case,
    secs: f64,
    base: Option<Base>,
    dir: &Path,
) -> Result<CaseReport, Error> {
    let (path, pps, size) = (&case.path, case.pps, case.size);
    let fwd = forwarder(bed, kind, path.clone())?;
    let (delay_cfg, std_cfg) = path.delay.moments();
    let s =
        probe(bed, Pattern::Cbr, pps, size, secs, Nanos(delay_cfg as u64), case.expect_loss.as_ref(), dir);
    fwd.stop()?;
    let s = s?;
    let mut checks = Vec::new();
    // Delay checks are made on top of what the path adds with no impairment (the
    // transparent case, measured first): its mean and median add, its variance adds.
    let Base { mean: base_mean, median: base_median, std: base_std } = base.unwrap_or_default();
    if path.delay.is_random() {
        checks.push(mean_delay_check(
            delay_cfg,
            std_cfg,
            path.delay.half_life,
            pps,
            secs,
            s.delay_us.mean - base_mean,
        ));
        let std = (s.delay_std_us.powi(2) - base_std.powi(2)).max(0.0).sqrt();
        checks.push(within("delay std − base (us)", std_cfg / 1e3, std, 0.15));
    } else if delay_cfg > 0.0 {
        // Over the no-impairment case, as the random delays' checks: the veths and the
        // stacks add their own time (a few hundred µs on a busy small machine).
        checks.push(within(
            "median delay − base (us)",
            delay_cfg / 1e3,
            s.delay_us.median - base_median,
            0.02,
        ));
    }
    if let Some(l) = &path.loss {
        let (p, burst) = (l.loss_rate(), l.mean_burst());
        let burst_for_sigma = if burst.is_finite() { burst } else { s.mean_loss_burst };
        checks.push(sigma_check("loss rate", p, s.sent, s.loss_rate, 4.0, burst_for_sigma));
        if burst.is_finite() && s.loss_bursts > 0 {
            // Burst lengths are geometric: standard deviation √(B² − B).
            let se = (burst * burst - burst).sqrt() / (s.loss_bursts as f64).sqrt();
            checks.push(Check {
                what: "mean loss burst".into(),
                configured: burst,
                observed: s.mean_loss_burst,
                tolerance: format!("±4σ ({:.3})", 4.0 * se),
                pass: (s.mean_loss_burst - burst).abs() <= 4.0 * se + 1e-9,
            });
        }
    }
    let frame_bps = |pps: f64, extra: f64| pps * (size as f64 + extra) * 8.0;
    if let Some(link) = &path.link {
        let cfg = link.mean_rate().bits_per_sec() as f64;
        // Only a link the probe overloads shows its rate.
        if frame_bps(pps, 24.0) > cfg {
            checks.push(within(
                "rate on the wire (Mbit/s)",
                cfg / 1e6,
                frame_bps(s.throughput_pps, 24.0) / 1e6,
                0.03,
            ));
        }
    }
    if let Some(p) = &path.police {
        let cfg = p.rate.bits_per_sec() as f64;
        if frame_bps(pps, 0.0) > cfg {
            // The bucket starts full: over the run its depth passes on top of the rate.
            let expected = cfg + p.burst.0 as f64 * 8.0 / secs;
            checks.push(within(
                "policed rate + burst / run (Mbit/s)",
                expected / 1e6,
                frame_bps(s.throughput_pps, 0.0) / 1e6,
                0.05,
            ));
        }
    }
    if path.is_transparent() {
        checks.push(Check {
            what: "loss with no impairment".into(),
            configured: 0.0,
            observed: s.loss_rate,
            tolerance: "0".into(),
            pass: s.lost == 0,
        });
    }
    Ok(CaseReport { name: case.name.clone(), flags: case.flags.clone(), checks, summary: s })
}

pub fn within(what: &str, configured: f64, observed: f64, rel: f64) -> Check {
    Check {
        what: what.into(),
        configured,
        observed,
        tolerance: format!("±{:.0}%", rel * 100.0),
        pass: (observed - configured).abs() <= rel * configured.abs(),
    }
}

/// Mean delay within 3%, or within 4 standard errors of the mean where that is wider. The
/// delays of a correlated process are not independent: with an autocorrelation 2^(−τ/H) the
/// mean of T seconds has the variance of T / τ_int independent samples, τ_int = 2H / ln 2
/// (e.g. 3 s at H = 5 ms: about 200, not 15 000).
pub fn mean_delay_check(
    mean_ns: f64,
    std_ns: f64,
    half_life: Option<Nanos>,
    pps: f64,
    secs: f64,
    observed_us: f64,
) -> Check {
    let tau =
        half_life.map_or(1.0 / pps, |h| (2.0 * h.as_secs_f64() / std::f64::consts::LN_2).max(1.0 / pps));
    let se_us = std_ns / 1e3 * (tau / secs).sqrt();
    let (cfg, tol) = (mean_ns / 1e3, (0.03 * mean_ns / 1e3).max(4.0 * se_us));
    Check {
        what: "mean delay − base (us)".into(),
        configured: cfg,
        observed: observed_us,
        tolerance: format!("±max(3%, 4σ) ({tol:.1})"),
        pass: (observed_us - cfg).abs() <= tol,
    }
}

/// Loss rate within k standard errors; losses in bursts of mean length `burst` are correlated,
/// which inflates the variance of the count by about 2·burst − 1 (a Markov chain with
/// correlation 1 − 1/burst between neighbours).
///
/// A check whose tolerance reaches 0 (too few frames: a path that loses nothing would pass)
/// cannot tell, and fails saying to run longer.
pub fn sigma_check(what: &str, p: f64, n: u64, observed_rate: f64, k: f64, burst: f64) -> Check {
    let inflation = if burst.is_finite() && burst > 1.0 { 2.0 * burst - 1.0 } else { 1.0 };
    let sigma = (p * (1.0 - p) * inflation / n as f64).sqrt();
    let tells = p > 0.0 && k * sigma < p;
    Check {
        what: what.into(),
        configured: p,
        observed: observed_rate,
        tolerance: match tells || p == 0.0 {
            true => format!("±{k}σ ({:.5})", k * sigma),
            false => format!("±{k}σ ({:.5}): too few frames to tell a lossless path, run longer", k * sigma),
        },
        pass: (tells || p == 0.0) && (observed_rate - p).abs() <= k * sigma,
    }
}

/// TCP Reno (iperf3) through 10 ms and 0.5% loss, next to the Mathis et al. estimate
/// MSS/RTT · 1.22/√p: `{goodput_bps, mathis_bps, rtt_s, loss}`.
pub fn tcp_vs_mathis(b: &Bed, kind: &str, secs: f64) -> Result<serde_json::Value, Error> {
    let (delay_ms, p): (f64, f64) = (10.0, 0.005);
    let path = PathConfig {
        delay: pathem_model::delay::DelayConfig::constant(Nanos::from_millis(10)),
        loss: Some(LossConfig::Random(pathem_model::units::Probability::new(p).expect("a probability"))),
        ..PathConfig::default()
    };
    let fwd = forwarder(b, kind, path)?;
    let t = format!("{}", secs.max(3.0).round() as u64 * 2);
    // Mathis et al. model Reno; loss-agnostic controls such as BBR would not follow it.
    let v = b.iperf3(SINK_IP, &["-C", "reno", "-t", &t]);
    fwd.stop()?;
    let v = v?;

    let goodput = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    // The delay is on the data's way only (the ACKs come back through a transparent path).
    let rtt = delay_ms / 1e3;
    let mathis = 1448.0 * 8.0 / rtt * 1.22 / p.sqrt();
    Ok(serde_json::json!({ "goodput_bps": goodput, "mathis_bps": mathis, "rtt_s": rtt, "loss": p }))
}

/// One run of the latency benchmark.
#[derive(Serialize, Debug, Clone)]
pub struct TargetRun {
    pub case: String,
    pub run: usize,
    pub deviation_median_us: f64,
    pub deviation_p99_us: f64,
    pub deviation_p99_9_us: f64,
    pub gaps_kept_within_2us: f64,
    /// pathem's own lateness (release → port), for the runs through pathem.
    pub late_p50_us: Option<f64>,
    pub late_p99_9_us: Option<f64>,
}

/// One round of the latency benchmark: 100 kpps of 64-byte frames, CBR and in bursts of 10
/// every 100 µs, over the direct pair `direct` (the floor), then through pathem with each port
/// type and `--delay 10ms`.
pub fn target_round(
    b: &Bed,
    direct: &Bed,
    run: usize,
    secs: f64,
    out: &Path,
) -> Result<Vec<TargetRun>, Error> {
    let delay = Nanos::from_millis(10);
    let mut runs = Vec::new();
    let row = |case: String, s: &Summary, late: Option<&Stats>| TargetRun {
        case,
        run,
        deviation_median_us: s.deviation_us.median,
        deviation_p99_us: s.deviation_us.p99,
        deviation_p99_9_us: s.deviation_us.p99_9,
        gaps_kept_within_2us: s.gaps_kept_within_2us,
        late_p50_us: late.map(|l| l.late.p50_ns as f64 / 1e3),
        late_p99_9_us: late.map(|l| l.late.p99_9_ns as f64 / 1e3),
    };
    for (pname, pattern) in TARGET_PATTERNS {
        let dir = out.join(format!("target-direct-{pname}-{run}"));
        let s = probe(direct, pattern, TARGET_PPS, 64, secs, Nanos::ZERO, None, &dir)?;
        runs.push(row(format!("direct {pname}"), &s, None));
        for kind in ["afxdp", "afpacket"] {
            let path = PathConfig {
                delay: pathem_model::delay::DelayConfig::constant(delay),
                ..PathConfig::default()
            };
            let fwd = forwarder(b, kind, path)?;
            let dir = out.join(format!("target-{kind}-{pname}-{run}"));
            let s = probe(b, pattern, TARGET_PPS, 64, secs, delay, None, &dir);
            let stats = fwd.stop()?.ab;
            runs.push(row(format!("{kind} {pname}"), &s?, Some(&stats)));
        }
    }
    Ok(runs)
}

/// The latency benchmark's rate and patterns.
pub const TARGET_PPS: f64 = 100_000.0;
pub const TARGET_PATTERNS: [(&str, Pattern); 2] =
    [("CBR", Pattern::Cbr), ("bursts", Pattern::Burst { n: 10, every: Nanos::from_micros(100) })];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlated_delay_widens_the_mean_tolerance() {
        // Independent draws: 3% of 10 ms is wider than 4 standard errors.
        let c = mean_delay_check(10e6, 2e6, None, 5000.0, 3.0, 10_290.0);
        assert!(c.pass, "{c:?}");
        assert!(!mean_delay_check(10e6, 2e6, None, 5000.0, 3.0, 10_310.0).pass);
        // H = 5 ms over 3 s: about 208 independent samples, standard error ≈ 139 µs.
        let c = mean_delay_check(10e6, 2e6, Some(Nanos::from_millis(5)), 5000.0, 3.0, 10_450.0);
        assert!(c.pass, "{c:?}");
        assert!(!mean_delay_check(10e6, 2e6, Some(Nanos::from_millis(5)), 5000.0, 3.0, 10_600.0).pass);
    }

    #[test]
    fn a_loss_check_too_short_to_tell_a_lossless_path_fails() {
        // 1% of 1000 frames: 4σ = 0.0126, wider than 1%, so no loss at all would pass.
        let c = sigma_check("loss rate", 0.01, 1000, 0.0, 4.0, 1.0);
        assert!(!c.pass && c.tolerance.contains("run longer"), "{c:?}");
        assert!(!sigma_check("loss rate", 0.01, 1000, 0.01, 4.0, 1.0).pass, "even when it matches");
        // 1% of 100 000: 4σ = 0.0013; a lossless path fails, a 1% one passes.
        assert!(!sigma_check("loss rate", 0.01, 100_000, 0.0, 4.0, 1.0).pass);
        assert!(sigma_check("loss rate", 0.01, 100_000, 0.0101, 4.0, 1.0).pass);
        // Bursts widen it: mean burst 4 inflates the variance 7 times (4σ = 0.0033 here).
        assert!(sigma_check("loss rate", 0.01, 100_000, 0.0125, 4.0, 4.0).pass);
        assert!(!sigma_check("loss rate", 0.01, 20_000, 0.0, 4.0, 4.0).pass);
    }
}

/// The paths `pathem validate` checks: (name, flags, probe rate, frame size, loss to expect).
/// `quick` keeps the first four (what CI runs).
pub fn matrix(quick: bool) -> Result<Vec<Case>, Error> {
    let mut rows: Vec<(&str, &str, f64, usize, Option<&str>)> = vec![
        ("transparent", "", 10_000.0, 64, None),
        ("constant delay", "--delay 10ms", 10_000.0, 64, None),
        ("random loss", "--loss 1%", 10_000.0, 64, Some("1%")),
        ("rate and queue", "--rate 20mbit --queue 100pkt", 4_000.0, 1000, None),
    ];
    if !quick {
        rows.extend([
            ("normal jitter", "--delay 10ms --jitter 2ms --delay-dist normal --reorder", 5_000.0, 64, None),
            (
                "correlated delay",
                "--delay 10ms --jitter 2ms --delay-dist normal --delay-half-life 5ms --reorder",
                5_000.0,
                64,
                None,
            ),
            ("Gilbert-Elliott loss", "--loss ge:loss=2%,burst=4", 10_000.0, 64, Some("ge:loss=2%,burst=4")),
            ("4-state loss", "--loss gi:p13=1%,p31=50%", 10_000.0, 64, None),
            ("policer", "--police 10mbit,burst=20KB", 2_000.0, 1000, None),
            (
                "combined",
                "--delay 20ms --jitter 1ms --delay-dist normal --reorder --loss 1% --rate 50mbit --queue 300pkt",
                3_000.0,
                500,
                Some("1%"),
            ),
        ]);
    }
    let bad = |e: String| Error::Measure(format!("validate's own matrix: {e}"));
    rows.into_iter()
        .map(|(name, flags, pps, size, loss)| {
            let spec = pathem_spec::PathSpec::from_flags(flags).map_err(|e| bad(e.to_string()))?;
            Ok(Case {
                name: name.into(),
                flags: flags.into(),
                path: spec.to_config().map_err(|e| bad(e.to_string()))?,
                pps,
                size,
                expect_loss: loss
                    .map(|l| l.parse())
                    .transpose()
                    .map_err(|e: pathem_model::units::UnitError| bad(e.to_string()))?,
            })
        })
        .collect()
}

/// What `pathem validate` found, as it writes `validate.json`.
#[derive(Serialize, Debug)]
pub struct MatrixReport {
    pub port: String,
    pub noise_floor: Summary,
    pub cases: Vec<CaseReport>,
    pub tcp: Option<serde_json::Value>,
    pub all_pass: bool,
}

/// Runs the matrix through `kind` ports: the machine's noise floor first (a direct veth), then
/// each case (`done` is told of each as it ends), then TCP against Mathis unless `quick`; the
/// report is also written to `out/validate.json`.
pub fn run_matrix(
    b: &Bed,
    kind: &str,
    secs: f64,
    quick: bool,
    out: &Path,
    floor_done: impl FnOnce(&Summary),
    mut done: impl FnMut(&Case, &CaseReport),
) -> Result<MatrixReport, Error> {
    let noise_floor = noise_floor(secs, &out.join("noise-floor"))?;
    floor_done(&noise_floor);
    let mut cases = Vec::new();
    let mut base: Option<Base> = None;
    for case in matrix(quick)? {
        let dir = out.join(case.name.replace(' ', "-"));
        let report = run_case(b, kind, &case, secs, base, &dir)?;
        if case.path.is_transparent() {
            let d = &report.summary.delay_us;
            base = Some(Base { mean: d.mean, median: d.median, std: report.summary.delay_std_us });
        }
        done(&case, &report);
        cases.push(report);
    }
    let tcp = if quick { None } else { Some(tcp_vs_mathis(b, kind, secs)?) };
    let all_pass = cases.iter().all(|r| r.checks.iter().all(|c| c.pass));
    let report = MatrixReport { port: kind.into(), noise_floor, cases, tcp, all_pass };
    write_json(&out.join("validate.json"), &report)?;
    Ok(report)
}

/// Writes `value` as pretty JSON to `file`.
pub fn write_json(file: &Path, value: &impl Serialize) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value).expect("reports serialise");
    std::fs::write(file, text + "\n").map_err(|source| Error::Write { path: file.into(), source })
}

/// The latency benchmark's table: per case (`direct CBR`, `afxdp bursts`, ...), the medians
/// over the runs and, for pathem's cases, what it adds over the direct run of the same
/// pattern in the same round.
#[derive(Serialize, Debug)]
pub struct TargetRow {
    pub case: String,
    pub deviation_median_us: f64,
    pub deviation_p99_us: f64,
    pub deviation_p99_9_us: f64,
    pub gaps_kept_within_2us: f64,
    /// pathem's cases: added deviation at the median and p99.9, and its lateness p50/p99.9.
    pub adds_median_us: Option<f64>,
    pub adds_p99_9_us: Option<f64>,
    pub late_p50_us: Option<f64>,
    pub late_p99_9_us: Option<f64>,
}

/// `validate --target`: `runs` rounds of [`target_round`], the table of medians, and the
/// machine's hiccups measured right after; written to `out/target.json`.
pub fn target(
    b: &Bed,
    direct: &Bed,
    runs: usize,
    secs: f64,
    out: &Path,
    mut round_done: impl FnMut(usize),
) -> Result<(Vec<TargetRow>, Vec<crate::hiccups::CpuHiccups>), Error> {
    check_seconds(secs)?;
    crate::rounds::check_rounds(runs)?;
    let mut all: Vec<TargetRun> = Vec::new();
    for run in 0..runs {
        all.extend(target_round(b, direct, run, secs, out)?);
        round_done(run);
    }
    let of = |case: &str, f: &dyn Fn(&TargetRun) -> f64| -> f64 {
        crate::bench::median(&all.iter().filter(|r| r.case == case).map(f).collect::<Vec<_>>())
    };
    let adds = |case: &str, pattern: &str, f: &dyn Fn(&TargetRun) -> f64| -> f64 {
        let direct = format!("direct {pattern}");
        crate::bench::median(
            &(0..runs)
                .filter_map(|i| {
                    let at = |c: &str| all.iter().find(|r| r.case == c && r.run == i);
                    Some(f(at(case)?) - f(at(&direct)?))
                })
                .collect::<Vec<_>>(),
        )
    };
    let mut rows = Vec::new();
    for (pattern, _) in TARGET_PATTERNS {
        for kind in ["direct", "afxdp", "afpacket"] {
            let case = format!("{kind} {pattern}");
            let pathem = kind != "direct";
            rows.push(TargetRow {
                deviation_median_us: of(&case, &|r| r.deviation_median_us),
                deviation_p99_us: of(&case, &|r| r.deviation_p99_us),
                deviation_p99_9_us: of(&case, &|r| r.deviation_p99_9_us),
                gaps_kept_within_2us: of(&case, &|r| r.gaps_kept_within_2us),
                adds_median_us: pathem.then(|| adds(&case, pattern, &|r| r.deviation_median_us)),
                adds_p99_9_us: pathem.then(|| adds(&case, pattern, &|r| r.deviation_p99_9_us)),
                late_p50_us: pathem.then(|| of(&case, &|r| r.late_p50_us.unwrap_or(f64::NAN))),
                late_p99_9_us: pathem.then(|| of(&case, &|r| r.late_p99_9_us.unwrap_or(f64::NAN))),
                case,
            });
        }
    }
    let hiccups = crate::hiccups::measure(secs.min(5.0))?;
    write_json(&out.join("target.json"), &serde_json::json!({ "target": all, "hiccups": hiccups }))?;
    Ok((rows, hiccups))
}

/// Checks the seconds of a validation's runs: 0.1 to 3600 (a probe's run needs some frames).
pub fn check_seconds(secs: f64) -> Result<(), Error> {
    Ok(pathem_model::limits::within("seconds", secs, 0.1..=3600.0, "0.1 to 3600 (above 0)")?)
}

/// What `pathem validate` prints.
pub mod text {
    use super::*;
    use std::fmt::Write;

    /// The noise floor: the direct veth, without pathem.
    pub fn floor(s: &Summary) -> String {
        format!(
            "  noise floor (direct veth, no pathem): deviation median {:.1} p99.9 {:.1} us, gaps kept {:.1}%",
            s.deviation_us.median,
            s.deviation_us.p99_9,
            100.0 * s.gaps_kept_within_2us
        )
    }

    /// A case and its checks; `floor_p999` is the noise floor's deviation p99.9.
    pub fn case(case: &Case, report: &CaseReport, floor_p999: f64) -> String {
        let s = &report.summary;
        let flags = if case.flags.is_empty() { "no impairment" } else { &case.flags };
        let mut out = format!("  {} [{flags}]\n", case.name);
        // Only where the path holds every frame the same time is the deviation pathem's own:
        // with jitter or a queue it is mostly what the path was asked to do.
        let p = &case.path;
        let adds = match !p.delay.is_random() && p.link.is_none() && p.slot.is_none() {
            true => {
                format!(" (pathem adds {:.1} us at p99.9 above the floor)", s.deviation_us.p99_9 - floor_p999)
            }
            false => String::new(),
        };
        let _ = writeln!(
            out,
            "    deviation median {:.1} p99 {:.1} p99.9 {:.1} us{adds}; gaps kept {:.1}%",
            s.deviation_us.median,
            s.deviation_us.p99,
            s.deviation_us.p99_9,
            100.0 * s.gaps_kept_within_2us
        );
        for c in &report.checks {
            let _ = writeln!(
                out,
                "    {:<4} {:<26} configured {:>10.4}  observed {:>10.4}  ({})",
                if c.pass { "pass" } else { "FAIL" },
                c.what,
                c.configured,
                c.observed,
                c.tolerance
            );
        }
        out
    }

    /// The TCP run against Mathis's estimate, and the verdict.
    pub fn end(report: &MatrixReport, file: &Path) -> String {
        let mut out = String::new();
        if let Some(t) = &report.tcp {
            let (g, m) = (t["goodput_bps"].as_f64().unwrap_or(0.0), t["mathis_bps"].as_f64().unwrap_or(1.0));
            let _ = writeln!(
                out,
                "  TCP Reno through --delay 10ms --loss 0.5%: goodput {:.2} Mbit/s, Mathis estimate MSS/RTT·1.22/√p = {:.2} Mbit/s (ratio {:.2})",
                g / 1e6,
                m / 1e6,
                g / m
            );
        }
        let verdict = if report.all_pass { "all checks passed" } else { "SOME CHECKS FAILED" };
        let _ = writeln!(out, "  {verdict} — report in {}", file.display());
        out
    }

    /// `validate --target`'s table of `runs` rounds, with the hiccups that bound it.
    pub fn target(rows: &[TargetRow], hiccups: &[crate::hiccups::CpuHiccups], runs: usize) -> String {
        let mut out =
            format!("  medians over {runs} runs; deviation from the configured delay (direct: from 0), us\n");
        let _ = writeln!(
            out,
            "  {:<18} {:>8} {:>8} {:>10} {:>11}  {:>14} {:>14}  {:>18}",
            "", "median", "p99", "p99.9", "gaps ±2us", "adds: median", "adds: p99.9", "pathem late p50/p99.9"
        );
        for r in rows {
            let show = |v: Option<f64>| v.map(|v| format!("{v:+.1}")).unwrap_or_default();
            let late = match (r.late_p50_us, r.late_p99_9_us) {
                (Some(a), Some(b)) => format!("{a:.1}/{b:.1}"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  {:<18} {:>8.1} {:>8.1} {:>10.1} {:>10.2}%  {:>14} {:>14}  {late:>18}",
                r.case,
                r.deviation_median_us,
                r.deviation_p99_us,
                r.deviation_p99_9_us,
                100.0 * r.gaps_kept_within_2us,
                show(r.adds_median_us),
                show(r.adds_p99_9_us)
            );
        }
        let _ =
            writeln!(out, "  what bounds the tail: a busy-polling thread on each CPU, measured right after");
        for h in hiccups {
            let _ = writeln!(out, "    {}", crate::hiccups::describe(h));
        }
        let _ = writeln!(
            out,
            "  a frame due while pathem's CPU is away leaves when it comes back; at 100 kpps a gap of G us delays about G/10 frames"
        );
        out
    }
}
