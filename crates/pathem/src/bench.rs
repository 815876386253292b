//! `pathem bench`: reads the flags, runs the lab's rounds (`pathem_lab::rounds`: every
//! variant once per round, back to back; medians and ratios within rounds) and prints them.

use crate::usage;
use clap::Args;
use pathem_lab::rounds::{self, text, Plan};
use pathem_spec::PathSpec;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub path: PathSpec,
    /// Frames per run, 1 to 10^12 (with --offloads at most 2000000; not with --live or
    /// --hiccups, whose runs last --seconds) [default: 10000000, with --offloads 2000000].
    #[arg(long, value_name = "N", conflicts_with_all = ["live", "hiccups"])]
    pub packets: Option<u64>,
    /// Frame size in bytes (without FCS; with --live or --offloads, --sizes).
    #[arg(long, value_name = "BYTES", default_value_t = 64, conflicts_with_all = ["live", "hiccups", "offloads"])]
    pub size: usize,
    /// Rounds; each runs the path and the no-impairment baseline once (with --live: every mode).
    #[arg(long, value_name = "N", default_value_t = 5, conflicts_with = "hiccups")]
    pub runs: usize,
    /// Pin the benchmark thread to this CPU (not with --live or --split, which place their own).
    #[arg(long, value_name = "CPU", conflicts_with_all = ["live", "split", "hiccups", "offloads"])]
    pub core: Option<usize>,
    /// Seed of the random models (not with --live, --hiccups or --offloads).
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with_all = ["live", "hiccups", "offloads"])]
    pub seed: u64,
    /// Run the direction's input and output stages on two threads (CPUs 0 and 1), and compare
    /// with the same path on one thread in the same round (with --live: as `run --one-way
    /// --cores 0,1` does).
    #[arg(long, conflicts_with = "hiccups")]
    pub split: bool,
    /// Measure the path (it needs a rate) with each queue discipline in turn, every round:
    /// drop-tail, drop-head, RED, CoDel, FQ-CoDel, PIE and DualPI2 with their defaults, each
    /// one's cost per frame and its ratio to drop-tail in the same round.
    #[arg(long, conflicts_with_all = ["split", "live", "hiccups"])]
    pub disciplines: bool,
    /// Measure what the ports do to frames a local sender left to the hardware, per frame at
    /// each of --sizes, next to the copy every frame costs anyway: the pseudo-header check
    /// every AF_XDP and DPDK frame pays, completing a partial checksum, cutting a 64 KB
    /// super-frame.
    #[arg(long, conflicts_with_all = ["split", "live", "hiccups", "disciplines"])]
    pub offloads: bool,
    /// Measure classifying: the path as a class behind N (0 to 63) that take no frame, vs no classes.
    #[arg(long, value_name = "N", conflicts_with_all = ["split", "live", "hiccups", "disciplines", "offloads"])]
    pub classes: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Measure live forwarding instead, on a veth path in namespaces made for it, through
    /// these port types (afpacket, afxdp, dpdk, attach; comma-separated; dpdk needs --features
    /// dpdk; each next to dpdk-testpmd on the same veths where it is installed, attach against
    /// the plain interface), fed by the fastest sender the kernel allows, in its own row. Root.
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    pub live: Vec<String>,
    /// With --live: receive and transmit queues of every veth of the bed (1 to 64); the
    /// generator's frames arrive on one, the ports read them all [default: 1].
    #[arg(long, value_name = "N")]
    pub queues: Option<u32>,
    /// With --live or --offloads: frame sizes to measure [default: 64,1500].
    #[arg(long, value_name = "BYTES", value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Measure this machine instead: how often and for how long a busy-polling thread on each
    /// CPU loses its CPU (the floor of any software emulator's timing precision here).
    #[arg(long, conflicts_with = "live")]
    pub hiccups: bool,
    /// With --live or --hiccups: seconds per run [default: 3].
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
}

pub fn main(args: BenchArgs) -> anyhow::Result<()> {
    let json = args.json;
    let emit = |value: serde_json::Value, text: String| match json {
        true => outln!("{value}"),
        false => out!("{text}"),
    };
    let live = !args.live.is_empty();
    // (clap's `requires` does not hold here: checked by hand.)
    if args.queues.is_some() && !live {
        return Err(usage("--queues is only for --live (the veths' queues)"));
    }
    if args.sizes.is_some() && !(live || args.offloads) {
        return Err(usage("--sizes is only for --live or --offloads (a run of the engine takes --size)"));
    }
    if args.seconds.is_some() && !(live || args.hiccups) {
        return Err(usage("--seconds is only for --live or --hiccups (a run of the engine takes --packets)"));
    }
    let (sizes, seconds) = (args.sizes.clone().unwrap_or(vec![64, 1500]), args.seconds.unwrap_or(3.0));
    let own = [
        (live, "--live measures its own modes (README: bypass, engine, impaired)"),
        (args.hiccups, "--hiccups measures the machine"),
        (args.offloads, "--offloads measures the ports' work on a frame"),
    ];
    if let Some((_, own)) = own.iter().find(|m| m.0) {
        if args.path.to_config().map_err(usage)? != Default::default() {
            return Err(usage(format!("{own}: path flags do not apply")));
        }
    }
    if args.hiccups {
        let all = pathem_lab::hiccups::measure(seconds).map_err(crate::lab_error)?;
        emit(serde_json::to_value(&all)?, pathem_lab::hiccups::text(&all, seconds));
        return Ok(());
    }
    // Rounds print a line each on stderr unless the output is JSON.
    let progress = move |line: String| {
        if !json {
            errln!("  {line}");
        }
    };
    if live {
        let print = |row: &rounds::LiveRow| {
            if !json {
                outln!("{}", text::live_row(row));
            }
        };
        let plan = rounds::LivePlan {
            kinds: args.live.clone(),
            sizes,
            secs: seconds,
            rounds: args.runs,
            split: args.split,
            queues: args.queues.unwrap_or(1),
        };
        pathem_lab::testbed::clean_up_on_signals().map_err(crate::lab_error)?;
        let report = rounds::live(&plan, progress, print).map_err(crate::lab_error)?;
        emit(serde_json::json!(report), text::live_notes(&report, args.runs, args.split));
        return Ok(());
    }
    let packets = rounds::packets(args.packets, args.offloads).map_err(crate::lab_error)?;
    if args.offloads {
        let frames = packets;
        let rows = rounds::offloads(&sizes, frames, args.runs).map_err(crate::lab_error)?;
        let value = serde_json::json!({ "frames": frames, "runs": args.runs, "offloads": rows });
        emit(value, text::offloads(frames, args.runs, &rows));
        return Ok(());
    }
    if let Some(cpu) = args.core {
        pathem_runtime::link::pin(cpu).map_err(crate::runtime_error)?;
    }
    let path = args.path.to_config().map_err(usage)?;
    let plan = Plan { packets, size: args.size, runs: args.runs, seed: args.seed };
    if let Some(n) = args.classes {
        let r = rounds::classes(&path, n, plan, progress).map_err(crate::lab_error)?;
        emit(serde_json::to_value(&r)?, text::classes(&r));
    } else if args.split {
        let r = rounds::split(&path, plan, progress).map_err(crate::lab_error)?;
        emit(serde_json::to_value(&r)?, text::split(&r, plan));
    } else if args.disciplines {
        let rows = rounds::disciplines(&path, plan, progress).map_err(crate::lab_error)?;
        let value = serde_json::json!({ "path": rounds::with_one_limit(&path).to_string(), "packets": packets, "size": args.size, "disciplines": rows });
        emit(value, text::disciplines(&path, plan, &rows));
    } else {
        let r = rounds::engine(&path, plan, progress).map_err(crate::lab_error)?;
        emit(serde_json::to_value(&r)?, text::engine(&r));
    }
    Ok(())
}
