//! The benchmarks in rounds, as `pathem bench` reports them: each round runs every variant
//! once, back to back, so the machine's slow swings hit them alike; a variant's cost is the
//! median over rounds, and a ratio is taken within each round and then the median over rounds.
//! Each function returns a report (serialisable as `--json` prints it) and calls `progress`
//! with a line per round.

use crate::bench::{
    choose_sender, engine_alone, engine_fanned, engine_split, engine_with_classes, in_netns, live_run,
    median, offload_costs, LiveRun, OffloadCosts, Sender, SenderChoice,
};
use crate::testbed::Bed;
use crate::Error;
use pathem_engine::Stats;
use pathem_model::link::LinkConfig;
use pathem_model::units::QueueLimit;
use pathem_model::{Nanos, PathConfig};
use serde::Serialize;

/// How the engine-alone benchmarks run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub packets: u64,
    pub size: usize,
    pub runs: usize,
    pub seed: u64,
}

/// Frames of a run of `bench --offloads`: 1 to this many.
pub const MAX_OFFLOAD_FRAMES: u64 = 2_000_000;

/// Checks the frames of a run: 1 to 10^12, or to [`MAX_OFFLOAD_FRAMES`] for `--offloads`,
/// whose runs hold their frames.
fn check_packets(packets: u64, offloads: bool) -> Result<(), Error> {
    let (most, accepted) = match offloads {
        true => (MAX_OFFLOAD_FRAMES, "1 to 2000000 with --offloads"),
        false => (1_000_000_000_000, "1 to 10^12"),
    };
    Ok(pathem_model::limits::within("packets", packets, 1..=most, accepted)?)
}

/// Rounds a benchmark runs: 1 to [`MAX_ROUNDS`].
pub const MAX_ROUNDS: usize = 1000;

/// Checks a number of rounds (`--runs`): 1 to [`MAX_ROUNDS`].
pub(crate) fn check_rounds(runs: usize) -> Result<(), Error> {
    Ok(pathem_model::limits::within("runs", runs, 1..=MAX_ROUNDS, &format!("1 to {MAX_ROUNDS}"))?)
}

impl Plan {
    /// Checks the plan against the documented ranges: 1 to 10^12 frames, 14 to 65535 bytes
    /// each (the engine's longest frame), 1 to 1000 rounds.
    pub fn check(&self) -> Result<(), Error> {
        check_packets(self.packets, false)?;
        pathem_model::limits::within(
            "size",
            self.size,
            14..=65_535,
            "14 to 65535 bytes (the engine's longest frame)",
        )?;
        check_rounds(self.runs)
    }
}

/// The median over rounds of `a[i] / b[i]`.
fn paired(a: &[f64], b: &[f64]) -> f64 {
    median(&each_round(a, b))
}

/// `a[i] / b[i]` for every round.
fn each_round(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}

/// `bench`: the path against no impairment, one thread.
#[derive(Serialize, Debug)]
pub struct EngineReport {
    pub packets: u64,
    pub size: usize,
    pub runs: usize,
    pub path: String,
    pub mpps: f64,
    pub ns_per_packet: f64,
    pub baseline_mpps: f64,
    pub baseline_ns_per_packet: f64,
    /// Median over rounds of (cost with the path / cost without it in the same round).
    pub ratio: f64,
    /// Median cost with the path over median cost without it.
    pub ratio_of_medians: f64,
    pub ns_per_packet_runs: Vec<f64>,
    pub baseline_ns_per_packet_runs: Vec<f64>,
    pub last_run: Stats,
}

/// The engine's benches offer frames as fast as the engine takes them, on the real clock: a
/// bottleneck slower than that makes a run last as long as its frames take to leave at its
/// rate (`--rate 1kbit`: hours), while the unbounded queue fills the delay line and the run
/// measures its drops. Refused past 10 s of the link's time; `--disciplines` offers a load
/// in virtual time.
fn leaves_in_time(path: &PathConfig, plan: Plan) -> Result<(), Error> {
    plan.check()?;
    let Some(link) = &path.link else { return Ok(()) };
    let bits = u128::from(plan.packets) * u128::from(link.wire_len(plan.size as u32)) * 8;
    let rate = u128::from(link.mean_rate().bits_per_sec().max(1));
    let secs = bits / rate;
    if secs <= 10 {
        return Ok(());
    }
    Err(Error::Range(pathem_model::limits::RangeError {
        key: "rate",
        value: link.mean_rate().to_string(),
        accepted: format!(
            "a rate the {} frames leave within 10 s at (they take {secs} s at this one): the bench offers frames as fast as the engine takes them; give fewer --packets, a faster rate, or --disciplines, which offers a load in virtual time",
            plan.packets
        ),
    }))
}

pub fn engine(
    path: &PathConfig,
    plan: Plan,
    mut progress: impl FnMut(String),
) -> Result<EngineReport, Error> {
    leaves_in_time(path, plan)?;
    let (mut with, mut without, mut last) = (Vec::new(), Vec::new(), Stats::default());
    for round in 0..plan.runs {
        let (ns, stats) = engine_alone(path, plan.packets, plan.size, plan.seed)?;
        with.push(ns);
        last = stats;
        without.push(engine_alone(&PathConfig::default(), plan.packets, plan.size, plan.seed)?.0);
        progress(format!(
            "round {}: {:.1} ns/frame with the path, {:.1} without",
            round + 1,
            with[round],
            without[round]
        ));
    }
    let (m, b) = (median(&with), median(&without));
    Ok(EngineReport {
        packets: plan.packets,
        size: plan.size,
        runs: plan.runs,
        path: path.to_string(),
        mpps: 1e3 / m,
        ns_per_packet: m,
        baseline_mpps: 1e3 / b,
        baseline_ns_per_packet: b,
        ratio: paired(&with, &without),
        ratio_of_medians: m / b,
        ns_per_packet_runs: with,
        baseline_ns_per_packet_runs: without,
        last_run: last,
    })
}

/// `bench --classes N`: what classifying costs per frame.
#[derive(Serialize, Debug)]
pub struct ClassesReport {
    pub packets: u64,
    pub size: usize,
    pub runs: usize,
    pub path: String,
    /// The classes tried in order: `n` that do not match the frames, then one that does
    /// (with the path), and the default path (transparent).
    pub filters: Vec<String>,
    /// Classes that do not match before the one that does.
    pub n: usize,
    pub ns_per_packet: f64,
    /// The same path with no classes at all, in the same rounds.
    pub baseline_ns_per_packet: f64,
    /// Median over rounds of (with classes − without) in the same round.
    pub added_ns_per_packet: f64,
    pub ns_per_packet_runs: Vec<f64>,
    pub baseline_ns_per_packet_runs: Vec<f64>,
    /// The counters of the last run with classes (every frame took the class with the path:
    /// what that class forwarded and dropped), not of the run without them.
    pub last_run_class: Stats,
}

/// The filters of `bench --classes n`: `n` host filters that miss the bench's frames (from
/// 10.0.0.1 to 10.0.0.2), then one that takes them.
pub fn bench_filters(n: usize) -> Vec<String> {
    let mut f: Vec<String> = (0..n).map(|i| format!("host 192.0.2.{}", i % 250 + 1)).collect();
    f.push("udp port 9".into());
    f
}

/// `bench --classes n`: the path as the class that takes every frame, behind `n` classes that
/// take none, against the same path with no classes, each round.
pub fn classes(
    path: &PathConfig,
    n: usize,
    plan: Plan,
    mut progress: impl FnMut(String),
) -> Result<ClassesReport, Error> {
    pathem_model::limits::within("classes", n, 0..=63, "0 to 63")?;
    leaves_in_time(path, plan)?;
    let filters = bench_filters(n);
    let mut list = Vec::new();
    for (i, text) in filters.iter().enumerate() {
        let filter = pathem_filter::Filter::compile(text).map_err(|e| Error::Measure(e.to_string()))?;
        let p = if i == n { path.clone() } else { PathConfig::default() };
        list.push(pathem_engine::ClassConfig {
            name: format!("class{}", i + 1),
            filter,
            path: p,
            schedule: None,
        });
    }
    let (mut with, mut without, mut last) = (Vec::new(), Vec::new(), Stats::default());
    for round in 0..plan.runs {
        let (ns, stats) =
            engine_with_classes(&PathConfig::default(), &list, plan.packets, plan.size, plan.seed)?;
        with.push(ns);
        last = stats;
        let (base, _) = engine_alone(path, plan.packets, plan.size, plan.seed)?;
        without.push(base);
        progress(format!(
            "round {}: {:.1} ns/frame with {n} + 1 classes, {:.1} without",
            round + 1,
            ns,
            base
        ));
    }
    let added: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a - b).collect();
    Ok(ClassesReport {
        packets: plan.packets,
        size: plan.size,
        runs: plan.runs,
        path: path.to_string(),
        filters,
        n,
        ns_per_packet: median(&with),
        baseline_ns_per_packet: median(&without),
        added_ns_per_packet: median(&added),
        ns_per_packet_runs: with,
        baseline_ns_per_packet_runs: without,
        last_run_class: last,
    })
}

/// One queue discipline at one load as `bench --disciplines` measured it.
#[derive(Serialize, Debug)]
pub struct DisciplineCost {
    pub aqm: &'static str,
    /// Offered load as a fraction of the bottleneck's rate.
    pub load: f64,
    pub ns_per_packet: f64,
    /// Median over rounds of its cost over the mean of the two drop-tail runs beside it (1 for
    /// drop-tail).
    pub ratio_to_droptail: f64,
    /// Its cost in each run (drop-tail: every run between the others, seven a round).
    pub runs: Vec<f64>,
    /// Frames sent, dropped (by any reason) and CE-marked in a run: the same in every round.
    pub sent: u64,
    pub dropped: u64,
    pub marked: u64,
}

/// `path` with the hard limit every discipline gets in `bench --disciplines`: its `--queue`,
/// else 1000 frames (the disciplines' own defaults differ, and would not compare).
pub fn with_one_limit(path: &PathConfig) -> PathConfig {
    let link = path
        .link
        .as_ref()
        .map(|l| LinkConfig { queue: l.queue.or(Some(QueueLimit::Packets(1000))), ..l.clone() });
    PathConfig { link, ..path.clone() }
}

/// The loads `bench --disciplines` offers: a short queue, and one held at its limit.
pub const DISCIPLINE_LOADS: [f64; 2] = [0.95, 1.5];

/// `bench --disciplines`: the path (it has a bottleneck) with each queue discipline at each of
/// [`DISCIPLINE_LOADS`], all with the same hard limit (`--queue`, else 1000 frames), in virtual
/// time ([`crate::bench::engine_offered`]). Every round runs, at each load, drop-tail between
/// every two disciplines (D K₁ D K₂ … K₆ D), and a discipline's ratio in the round is its cost
/// over the mean of the drop-tail runs just before and just after it: a drift of the machine's
/// speed across the round (a noisy neighbour coming or going) cancels to first order, where a
/// single drop-tail run at the start would be compared with disciplines run a second later.
pub fn disciplines(
    path: &PathConfig,
    plan: Plan,
    mut progress: impl FnMut(String),
) -> Result<Vec<DisciplineCost>, Error> {
    plan.check()?;
    if path.link.is_none() {
        return Err(Error::Needs { what: "--disciplines", needs: "a bottleneck: --rate or --rate-trace" });
    }
    let path = &with_one_limit(path);
    let kinds: Vec<&str> = pathem_model::aqm::KINDS.iter().map(|k| k.name).collect();
    let (tail, others) = kinds.split_first().expect("drop-tail and the others");
    debug_assert_eq!(*tail, "droptail");
    let measure = |kind: &str, load: f64| -> Result<(f64, Stats), Error> {
        let aqm = kind.parse().map_err(|e| Error::Measure(format!("{kind}: {e}")))?;
        crate::bench::engine_offered(
            &PathConfig { aqm, ..path.clone() },
            load,
            plan.packets,
            plan.size,
            plan.seed,
        )
    };
    // Per load: drop-tail's runs (every round's), each other discipline's runs and ratios.
    let rows = DISCIPLINE_LOADS.len() * kinds.len();
    let (mut ns, mut ratios) = (vec![Vec::new(); rows], vec![Vec::new(); rows]);
    let mut last: Vec<Option<Stats>> = vec![None; rows];
    for round in 0..plan.runs {
        let mut each = Vec::new();
        for (l, &load) in DISCIPLINE_LOADS.iter().enumerate() {
            let row = |k: usize| l * kinds.len() + k;
            let (mut before, stats) = measure(tail, load)?;
            ns[row(0)].push(before);
            last[row(0)] = Some(stats);
            for (k, kind) in (1..).zip(others) {
                let (cost, stats) = measure(kind, load)?;
                let (after, _) = measure(tail, load)?;
                ns[row(0)].push(after);
                ns[row(k)].push(cost);
                ratios[row(k)].push(cost / ((before + after) / 2.0));
                last[row(k)] = Some(stats);
                each.push(format!("{kind}@{load} {cost:.1}"));
                before = after;
            }
            let tails = &ns[row(0)][ns[row(0)].len() - others.len() - 1..];
            each.insert(each.len() - others.len(), format!("{tail}@{load} {:.1}", median(tails)));
        }
        progress(format!("round {}: ns/frame {}", round + 1, each.join(", ")));
    }
    let mut out = Vec::with_capacity(rows);
    for (l, &load) in DISCIPLINE_LOADS.iter().enumerate() {
        for (k, &aqm) in kinds.iter().enumerate() {
            let i = l * kinds.len() + k;
            let stats = last[i].take().expect("every discipline ran in every round");
            out.push(DisciplineCost {
                aqm,
                load,
                ns_per_packet: median(&ns[i]),
                ratio_to_droptail: if k == 0 { 1.0 } else { median(&ratios[i]) },
                runs: std::mem::take(&mut ns[i]),
                sent: stats.tx_packets,
                dropped: stats.dropped.total(),
                marked: stats.aqm_mark + stats.ecn_marked,
            });
        }
    }
    Ok(out)
}

/// A measuring run: wall ns per frame and the counters.
type Measure = fn(&PathConfig, u64, usize, u64) -> Result<(f64, Stats), Error>;

/// `bench --split`: one direction on one thread against the same split over CPUs 0 and 1.
#[derive(Serialize, Debug)]
pub struct SplitReport {
    pub path: String,
    pub one_thread_ns_per_packet: f64,
    pub split_ns_per_packet: f64,
    pub one_thread_runs: Vec<f64>,
    pub split_runs: Vec<f64>,
    /// Median over rounds of split / one thread.
    pub ratio: f64,
    /// Split, with half the frames read on the output's CPU and handed to the input (a port
    /// with two receive queues under `--cores 0,1`).
    pub fanned_ns_per_packet: f64,
    pub fanned_runs: Vec<f64>,
    /// Median over rounds of fanned / one thread.
    pub fanned_ratio: f64,
}

pub fn split(path: &PathConfig, plan: Plan, mut progress: impl FnMut(String)) -> Result<SplitReport, Error> {
    leaves_in_time(path, plan)?;
    let has = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if has < 2 {
        return Err(Error::Cpus { what: "--split", needs: 2, has });
    }
    let (mut one, mut two, mut fanned) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..plan.runs {
        pathem_runtime::link::pin(0)?;
        one.push(engine_alone(path, plan.packets, plan.size, plan.seed)?.0);
        for (run, into) in [(engine_split as Measure, &mut two), (engine_fanned, &mut fanned)] {
            let (ns, stats) = run(path, plan.packets, plan.size, plan.seed)?;
            into.push(ns);
            if stats.tx_packets + stats.dropped.total() != plan.packets {
                return Err(Error::Measure(format!("a split run lost track of frames: {stats:?}")));
            }
        }
        progress(format!(
            "round {}: {:.1} ns/frame on one thread, {:.1} split over two, {:.1} with half read on the second",
            round + 1,
            one[round],
            two[round],
            fanned[round]
        ));
    }
    Ok(SplitReport {
        path: path.to_string(),
        one_thread_ns_per_packet: median(&one),
        split_ns_per_packet: median(&two),
        ratio: paired(&two, &one),
        fanned_ns_per_packet: median(&fanned),
        fanned_ratio: paired(&fanned, &one),
        one_thread_runs: one,
        split_runs: two,
        fanned_runs: fanned,
    })
}

/// Frames per run of the engine's benchmarks: `given`, or 10^7 (2·10^6 for `--offloads`);
/// 1 to 10^12 (to 2·10^6 for `--offloads`, whose runs hold their frames).
pub fn packets(given: Option<u64>, offloads: bool) -> Result<u64, Error> {
    let packets = given.unwrap_or(if offloads { MAX_OFFLOAD_FRAMES } else { 10_000_000 });
    check_packets(packets, offloads)?;
    Ok(packets)
}

/// `bench --offloads`: the ports' offload work per frame at each size, medians over rounds.
pub fn offloads(sizes: &[usize], frames: u64, runs: usize) -> Result<Vec<OffloadCosts>, Error> {
    for &size in sizes {
        pathem_model::limits::within("sizes", size, 64..=9000, "64 to 9000 bytes with --offloads")?;
    }
    check_packets(frames, true)?;
    check_rounds(runs)?;
    Ok(sizes
        .iter()
        .map(|&size| {
            let all: Vec<OffloadCosts> = (0..runs).map(|_| offload_costs(size, frames)).collect();
            let m = |f: fn(&OffloadCosts) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
            OffloadCosts {
                size,
                copy_ns: m(|r| r.copy_ns),
                check_ns: m(|r| r.check_ns),
                complete_ns: m(|r| r.complete_ns),
                segment_ns: m(|r| r.segment_ns),
            }
        })
        .collect())
}

/// One mode of one port kind and frame size, as `bench --live` measured it.
#[derive(Serialize, Debug)]
pub struct LiveRow {
    pub port: String,
    pub size: usize,
    pub mode: &'static str,
    /// Frames forwarded (for the generator's row: offered), median over the rounds.
    pub mpps: f64,
    /// Frames that reached the forwarder's interface, median over the rounds.
    pub offered_mpps: f64,
    /// Within 10% of what the generator offers (its own row, or what reached the forwarder in
    /// these runs): the sender, not the forwarder, set this rate, which is then only a floor
    /// of what the forwarder can do.
    pub generator_bound: bool,
    /// Within 10% of the frames a second the path's rate link carries at this size (with its
    /// overhead per frame): the link, not the forwarder, set this rate.
    pub rate_bound: bool,
    /// Forwarded rate over the bypass run's of the same round, median over rounds (`null` for
    /// the rows that are not a forwarder's: the generator, testpmd).
    pub of_raw: Option<f64>,
    /// Forwarded rate over dpdk-testpmd's of the same round on the same veths through DPDK's
    /// driver for the same kind of socket, median over rounds (`null` where testpmd did not
    /// run, and for the generator's and testpmd's own rows).
    pub of_testpmd: Option<f64>,
    /// Each round's forwarded rate over testpmd's in that round, in round order (`null` where
    /// `of_testpmd` is): the spread the median of `of_testpmd` comes from, which on a shared
    /// machine can be wider than the gap to testpmd.
    pub of_testpmd_rounds: Option<Vec<f64>>,
    /// Every round's forwarded rate.
    pub rounds_mpps: Vec<f64>,
}

/// The impaired mode of `bench --live`: delay 1 ms, loss 1%, rate 100 Gbit/s. The rate link
/// does its work for every frame but must not be what limits the row: at 10 Gbit/s, 1500-byte
/// frames leave at most 0.82 Mpps, which the forwarders here pass (docs/performance.md).
pub fn live_impairment() -> PathConfig {
    PathConfig {
        link: Some(pathem_model::link::LinkConfig::rate(pathem_model::units::Rate(100_000_000_000))),
        loss: Some(pathem_model::loss::LossConfig::Random(
            pathem_model::units::Probability::new(0.01).expect("1% is a probability"),
        )),
        delay: pathem_model::delay::DelayConfig::constant(Nanos::from_millis(1)),
        ..PathConfig::default()
    }
}

/// What `bench --live` measures.
pub struct LivePlan {
    /// Port kinds (see [`crate::testbed::PORT_KINDS`]).
    pub kinds: Vec<String>,
    /// Frame sizes.
    pub sizes: Vec<usize>,
    /// Seconds per run.
    pub secs: f64,
    pub rounds: usize,
    /// Also the impaired path one way with its stages on two CPUs.
    pub split: bool,
    /// Queues of every veth of the bed.
    pub queues: u32,
}

impl LivePlan {
    /// Checks the plan against the documented ranges: frame sizes 60 to 1514 bytes, seconds
    /// above 0 up to 3600, 1 to 64 queues (what a port reads), 1 to 1000 rounds, known port
    /// kinds.
    pub fn check(&self) -> Result<(), Error> {
        use pathem_model::limits::within;
        for &size in &self.sizes {
            within("sizes", size, 60..=1514, "frame sizes from 60 to 1514 bytes")?;
        }
        within("seconds", self.secs, 0.001..=3600.0, "0.001 to 3600")?;
        let most = pathem_io::MAX_RX_QUEUES as u32;
        within("queues", self.queues, 1..=most, &format!("1 to {most}"))?;
        check_rounds(self.rounds)?;
        for k in &self.kinds {
            crate::testbed::check_kind(k)?;
        }
        Ok(())
    }
}

/// The most a path's rate link carries of frames of `size` bytes, in Mpps (`None` without a
/// link of constant rate).
fn link_mpps(path: &PathConfig, size: usize) -> Option<f64> {
    let link = path.link.as_ref()?;
    let pathem_model::link::Server::Rate(rate) = &link.server else { return None };
    let bits = 8 * link.wire_len(u32::try_from(size).unwrap_or(u32::MAX));
    Some(rate.bits_per_sec() as f64 / bits.max(1) as f64 / 1e6)
}

/// A row at 90% or more of what the path's rate link carries: the link set it.
fn rate_bound(path: &PathConfig, size: usize, mpps: f64) -> bool {
    link_mpps(path, size).is_some_and(|most| mpps >= 0.9 * most)
}

/// A run's rate: what it forwarded, or for the generator's own row what it offered.
fn rate(mode: &str, run: &LiveRun) -> f64 {
    if mode == "generator" {
        run.offered
    } else {
        run.forwarded
    }
}

/// What `bench --live` measured, as its JSON gives it.
#[derive(Serialize, Debug)]
pub struct LiveReport {
    /// What flooded g0 (`null` when only attach was measured, whose sender is g0's stack),
    /// and why each faster sender was passed over.
    pub sender: Option<SenderChoice>,
    pub rows: Vec<LiveRow>,
}

/// `bench --live`: each port kind and frame size in every mode (the generator alone, testpmd
/// where installed, the raw port loop, the engine, the impaired path, and split if asked),
/// `rounds` times, on a bed made for it (veths with `queues` queues); `row` is called with
/// each row as it is done.
pub fn live(
    plan: &LivePlan,
    mut progress: impl FnMut(String),
    mut row: impl FnMut(&LiveRow),
) -> Result<LiveReport, Error> {
    plan.check()?;
    let &LivePlan { ref kinds, ref sizes, secs, rounds, split, queues } = plan;
    let bed = Bed::through_queues(&format!("pb{}", std::process::id()), queues)?;
    // A sink that costs the forwarder's CPU nothing much: frames reaching s0 are dropped by
    // an XDP program (counted by the veth), not handed to s0's stack.
    let _sink = in_netns(&bed.sink, || pathem_io::afxdp::drop_all("s0"))?;
    let testpmd = crate::bench::testpmd_installed();
    if !testpmd {
        progress("no dpdk-testpmd here (apt install dpdk): no testpmd reference rows".into());
    }
    let choice = if kinds.iter().any(|k| k != "attach") { Some(choose_sender(&bed)?) } else { None };
    if let Some(c) = choice.as_ref().filter(|c| !c.passed_over.is_empty()) {
        progress(format!(
            "{}: the sender is {}, slower; rows near it are marked generator-bound",
            c.passed_over.join("; "),
            c.sender.describe()
        ));
    }
    let sender = choice.as_ref().map_or(Sender::AfPacket, |c| c.sender);
    let impaired = live_impairment();
    let mut rows = Vec::new();
    for kind in kinds {
        // The floor each is measured against: the port loop without the engine, or for an
        // attach the plain interface.
        let floor = if kind == "attach" { "plain" } else { "bypass" };
        let mut modes = vec![
            (floor, PathConfig::default()),
            ("engine", PathConfig::default()),
            ("impaired", impaired.clone()),
        ];
        if split && kind != "attach" {
            modes.push(("split", impaired.clone()));
        }
        if kind != "attach" {
            if testpmd {
                modes.insert(0, ("testpmd", PathConfig::default()));
            }
            modes.insert(0, ("generator", PathConfig::default()));
        }
        for &size in sizes {
            // [mode][round]
            let mut runs: Vec<Vec<LiveRun>> = vec![Vec::new(); modes.len()];
            for round in 0..rounds {
                // Every other round runs the modes in reverse order, so that what running first
                // or right after another costs or spares (a process's teardown, the caches and
                // page allocator it leaves) is not always charged to the same mode.
                let mut order: Vec<usize> = (0..modes.len()).collect();
                if round % 2 == 1 {
                    order.reverse();
                }
                for m in order {
                    let (mode, path) = &modes[m];
                    runs[m].push(live_run(&bed, kind, size, mode, path, secs, sender)?);
                }
                let each: Vec<String> = modes
                    .iter()
                    .zip(&runs)
                    .map(|((mode, _), r)| format!("{mode} {:.3}", rate(mode, &r[round])))
                    .collect();
                progress(format!("{kind} {size} B round {}: {} Mpps", round + 1, each.join(", ")));
            }
            let column = |name: &str| modes.iter().position(|(m, _)| *m == name);
            let rounds_of = |m: usize, reference: Option<usize>| {
                reference.map(|r| {
                    let (a, b): (Vec<f64>, Vec<f64>) =
                        runs[m].iter().zip(&runs[r]).map(|(a, b)| (a.forwarded, b.forwarded)).unzip();
                    each_round(&a, &b)
                })
            };
            let generator = column("generator").or(column("plain")).map(|g| {
                let (mode, r) = (modes[g].0, &runs[g]);
                median(&r.iter().map(|r| rate(mode, r)).collect::<Vec<_>>())
            });
            for (m, (mode, path)) in modes.iter().enumerate() {
                let mpps = median(&runs[m].iter().map(|r| rate(mode, r)).collect::<Vec<_>>());
                let offered_mpps = median(&runs[m].iter().map(|r| r.offered).collect::<Vec<_>>());
                let is_floor = *mode == "generator" || *mode == "plain";
                // The generator's and testpmd's own rows are not a forwarder's: no ratios.
                let reference = matches!(*mode, "testpmd" | "generator");
                let to_testpmd = rounds_of(m, column("testpmd")).filter(|_| !reference);
                let r = LiveRow {
                    port: kind.clone(),
                    size,
                    mode,
                    mpps,
                    offered_mpps,
                    generator_bound: !is_floor
                        && generator.into_iter().chain([offered_mpps]).any(|g| mpps >= 0.9 * g),
                    rate_bound: rate_bound(path, size, mpps),
                    of_raw: rounds_of(m, column(floor)).filter(|_| !reference).map(|r| median(&r)),
                    of_testpmd: to_testpmd.as_deref().map(median),
                    of_testpmd_rounds: to_testpmd,
                    rounds_mpps: runs[m].iter().map(|r| rate(mode, r)).collect(),
                };
                row(&r);
                rows.push(r);
            }
        }
    }
    Ok(LiveReport { sender: choice, rows })
}

/// The benchmarks' results as `pathem bench` prints them.
pub mod text {
    use super::*;
    use std::fmt::Write;

    /// `bench`: the path against no impairment.
    pub fn engine(r: &EngineReport) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pathem bench: {} frames of {} B per run, {} rounds, one thread",
            r.packets, r.size, r.runs
        );
        let _ = writeln!(out, "  path      {}", r.path);
        let _ = writeln!(
            out,
            "  with path       {:>7.1} ns/frame  {:>7.2} Mpps (median)",
            r.ns_per_packet, r.mpps
        );
        let _ = writeln!(
            out,
            "  no impairment   {:>7.1} ns/frame  {:>7.2} Mpps (median)",
            r.baseline_ns_per_packet, r.baseline_mpps
        );
        let _ = writeln!(
            out,
            "  ratio           {:>7.2} (median of paired rounds; of medians {:.2})",
            r.ratio, r.ratio_of_medians
        );
        let _ = writeln!(
            out,
            "  last run: forwarded {}, dropped {}",
            r.last_run.tx_packets,
            r.last_run.dropped.describe()
        );
        out
    }

    /// `bench --classes`.
    pub fn classes(r: &ClassesReport) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pathem bench --classes {}: {} frames of {} B per run, {} rounds, one thread",
            r.n, r.packets, r.size, r.runs
        );
        let _ = writeln!(out, "  path            {}", r.path);
        let _ =
            writeln!(out, "  classes         {} missing, then {:?} taking every frame", r.n, r.filters[r.n]);
        let _ = writeln!(out, "  with classes    {:>7.1} ns/frame (median)", r.ns_per_packet);
        let _ = writeln!(out, "  without         {:>7.1} ns/frame (median)", r.baseline_ns_per_packet);
        let _ = writeln!(
            out,
            "  added           {:>7.1} ns/frame (median of paired rounds)",
            r.added_ns_per_packet
        );
        out
    }

    /// `bench --split`.
    pub fn split(r: &SplitReport, plan: Plan) -> String {
        let mut out = String::new();
        let (m1, m2) = (r.one_thread_ns_per_packet, r.split_ns_per_packet);
        let _ = writeln!(
            out,
            "pathem bench --split: {} frames of {} B per run, {} rounds",
            plan.packets, plan.size, plan.runs
        );
        let _ = writeln!(out, "  path            {}", r.path);
        let _ = writeln!(out, "  one thread      {m1:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m1);
        let _ = writeln!(out, "  split over two  {m2:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m2);
        let _ =
            writeln!(out, "  ratio           {:>7.2} (split / one thread, median of paired rounds)", r.ratio);
        let m3 = r.fanned_ns_per_packet;
        let _ = writeln!(
            out,
            "  two queues      {m3:>7.1} ns/frame  {:>7.2} Mpps (median; split, half the frames read on the second CPU)",
            1e3 / m3
        );
        let _ = writeln!(out, "  ratio           {:>7.2} (two queues / one thread)", r.fanned_ratio);
        out
    }

    /// `bench --disciplines`: a row per discipline and load.
    pub fn disciplines(path: &PathConfig, plan: Plan, rows: &[DisciplineCost]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pathem bench --disciplines: {} frames of {} B per run, {} rounds, one thread, virtual time",
            plan.packets, plan.size, plan.runs
        );
        let _ = writeln!(out, "  path  {} (every discipline with this limit)", with_one_limit(path));
        let _ = writeln!(
            out,
            "  {:>5}  {:>9}  {:>9}  {:>6}  {:>10}  {:>10}  {:>10}",
            "load", "aqm", "ns/frame", "ratio", "sent", "dropped", "marked"
        );
        for r in rows {
            let _ = writeln!(
                out,
                "  {:>4.0}%  {:>9}  {:>9.1}  {:>6.2}  {:>10}  {:>10}  {:>10}",
                r.load * 100.0,
                r.aqm,
                r.ns_per_packet,
                r.ratio_to_droptail,
                r.sent,
                r.dropped,
                r.marked
            );
        }
        let _ = writeln!(
            out,
            "  (medians; ratio: median over rounds of the cost over the mean of the drop-tail runs just before and after it, at the same load)"
        );
        out
    }

    /// `bench --offloads`: a row per frame size.
    pub fn offloads(frames: u64, runs: usize, rows: &[OffloadCosts]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pathem bench --offloads: {frames} frames per measure, {runs} rounds, medians, ns per frame"
        );
        let _ = writeln!(
            out,
            "  {:>6}  {:>10}  {:>16}  {:>18}  {:>16}",
            "size", "copy (old)", "+ checksum rule", "+ complete partial", "cut from 64 KB"
        );
        for r in rows {
            let _ = writeln!(
                out,
                "  {:>4} B  {:>10.1}  {:>16.1}  {:>18.1}  {:>16.1}",
                r.size, r.copy_ns, r.check_ns, r.complete_ns, r.segment_ns
            );
        }
        out
    }

    /// `bench --live`: one row, as soon as it is measured.
    pub fn live_row(row: &LiveRow) -> String {
        let pct = |r: Option<f64>, of: &str| {
            r.map(|r| format!("  {:>5.1}% of {of}", 100.0 * r)).unwrap_or_default()
        };
        format!(
            "{:<9} {:>5} B  {:<9} {:>6.3} Mpps  (offered {:>6.3}){}{}{}{}{}",
            row.port,
            row.size,
            row.mode,
            row.mpps,
            row.offered_mpps,
            pct(row.of_raw, if row.port == "attach" { "the plain interface" } else { "the raw port loop" }),
            pct(row.of_testpmd, "testpmd"),
            row.of_testpmd_rounds.as_deref().map(spread).unwrap_or_default(),
            if row.generator_bound { "  generator-bound" } else { "" },
            if row.rate_bound { "  rate-bound" } else { "" },
        )
    }

    /// The rounds behind a median ratio to testpmd, when there are several: their range and
    /// how many were at or above testpmd (` (rounds 79.0–107.5%, 1 of 9 at or above)`).
    fn spread(rounds: &[f64]) -> String {
        if rounds.len() < 2 {
            return String::new();
        }
        let low = rounds.iter().copied().fold(f64::INFINITY, f64::min);
        let high = rounds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let above = rounds.iter().filter(|&&r| r >= 1.0).count();
        format!(" (rounds {:.1}–{:.1}%, {above} of {} at or above)", 100.0 * low, 100.0 * high, rounds.len())
    }

    /// `bench --live`: what the rows mean.
    pub fn live_notes(report: &LiveReport, runs: usize, split: bool) -> String {
        let kinds: Vec<&str> = report.rows.iter().map(|r| r.port.as_str()).collect();
        let mut out =
            format!("medians of {runs} rounds; ratios are taken within each round, then the median");
        if report.rows.iter().any(|r| r.of_testpmd_rounds.as_ref().is_some_and(|v| v.len() > 1)) {
            out += " (beside it, the rounds' range and how many reached testpmd)";
        }
        out += "\n";
        out += "impaired = delay 1ms, loss 1% (a loss shows as 1% less forwarded), rate 100gbit\n";
        out += "the generator runs on CPU 0, the forwarder on CPU 1; the sink s0 drops frames in XDP\n";
        if let Some(c) = &report.sender {
            out += &format!("generator = {} into pa, where a program drops them\n", c.sender.describe());
            for why in &c.passed_over {
                out += &format!("  passed over: {why}\n");
            }
            out += "offered = frames that reached pa; generator-bound = within 10% of the generator or of what was offered: a floor, not the forwarder's rate\n";
            out += "rate-bound = within 10% of what the path's rate link carries at that size: the link's rate, not the forwarder's\n";
            out += "testpmd = dpdk-testpmd --forward-mode=io on the same veths through net_af_xdp (afxdp) or net_af_packet (afpacket, dpdk)\n";
        }
        if kinds.contains(&"attach") {
            out +=
                "attach: the sender is a packet socket on g0 through its qdisc and tc; plain = no attach\n";
        }
        if split {
            out += "split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)\n";
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row is the link's when it reaches 90% of what the link carries at its size, counting
    /// the link's 24 bytes a frame: 10 Gbit/s carries 0.820 Mpps of 1500-byte frames, 14.2 of
    /// 64-byte ones.
    #[test]
    fn a_row_near_its_links_rate_is_rate_bound() {
        let ten = PathConfig {
            link: Some(pathem_model::link::LinkConfig::rate(pathem_model::units::Rate(10_000_000_000))),
            ..PathConfig::default()
        };
        let most = link_mpps(&ten, 1500).unwrap();
        assert!((most - 0.8202).abs() < 1e-3, "{most}");
        assert!(rate_bound(&ten, 1500, 0.757));
        assert!(!rate_bound(&ten, 1500, 0.73));
        assert!(!rate_bound(&ten, 64, 0.9));
        assert!(!rate_bound(&PathConfig::default(), 1500, 100.0), "no link, no bound");
        assert!(!rate_bound(&live_impairment(), 1500, 1.5), "the bench's own path");
    }

    /// A row's ratio to testpmd comes with the rounds it is the median of: their range and how
    /// many reached testpmd, so a median a few per cent off 1 is read against the spread.
    #[test]
    fn a_row_shows_the_rounds_behind_its_ratio_to_testpmd() {
        let row = |rounds: Vec<f64>| LiveRow {
            port: "dpdk".into(),
            size: 64,
            mode: "impaired",
            mpps: 0.5,
            offered_mpps: 1.0,
            generator_bound: false,
            rate_bound: false,
            of_raw: Some(0.99),
            of_testpmd: Some(median(&rounds)),
            of_testpmd_rounds: Some(rounds),
            rounds_mpps: vec![0.5; 3],
        };
        let line = text::live_row(&row(vec![0.95, 1.0, 0.9]));
        assert!(line.ends_with("95.0% of testpmd (rounds 90.0–100.0%, 1 of 3 at or above)"), "{line}");
        let one = text::live_row(&row(vec![1.02]));
        assert!(one.ends_with("102.0% of testpmd"), "one round, no range: {one}");
        let json = serde_json::to_value(row(vec![0.9, 1.1])).unwrap();
        assert_eq!(json["of_testpmd_rounds"], serde_json::json!([0.9, 1.1]));
        let notes = |rounds: Vec<f64>| {
            let n = rounds.len();
            text::live_notes(&LiveReport { sender: None, rows: vec![row(rounds)] }, n, false)
        };
        assert!(notes(vec![0.9, 1.1, 1.0]).contains("the rounds' range"));
        assert!(!notes(vec![1.02]).contains("the rounds' range"), "no range printed, none named");
    }

    /// `bench --classes` reports the counters of its run with classes, whose class draws its
    /// losses from its own seeded stream, not those of the run without classes (the same path,
    /// another stream: with these seeds the two lose different counts).
    #[test]
    fn the_classes_report_counts_the_run_with_classes() {
        let path = PathConfig { loss: Some("10%".parse().unwrap()), ..Default::default() };
        let plan = Plan { packets: 20_000, size: 64, runs: 1, seed: 7 };
        let r = classes(&path, 2, plan, |_| {}).unwrap();
        let c = &r.last_run_class;
        assert_eq!(c.tx_packets + c.dropped.total(), 20_000);
        assert!((1_700..2_300).contains(&c.dropped.total()), "{c:?}");
        let (_, alone) = crate::bench::engine_alone(&path, plan.packets, plan.size, plan.seed).unwrap();
        assert_ne!(c.dropped.total(), alone.dropped.total(), "the run without classes");
    }
}
