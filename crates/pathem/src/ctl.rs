//! `pathem ctl`: watch and steer a running `run` or `shell` through its control socket.
//!
//! ```text
//! pathem ctl list
//! pathem ctl NAME show [--json]
//! pathem ctl NAME set [impairment flags] [--a-to-b "FLAGS"] [--b-to-a "FLAGS"]
//! ```
//! `set` takes the flags of `run`; they apply on top of each direction's current ones, both
//! directions at once, between two frames, or not at all (a bad value changes nothing).

use crate::run::line;
use crate::usage;
use clap::Args;
use pathem_runtime::control::{self, Reply, Request, State};

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// `list`, or the name of a running link (`pathem run --name`, default IF_A-IF_B).
    #[arg(value_name = "NAME|list")]
    pub target: String,
    /// `show` or `set`.
    #[arg(value_name = "show|set")]
    pub action: Option<String>,
    /// With show: the state as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// With set: impairment flags, as for `run` (`--delay 20ms --loss 1%`, `--a-to-b "..."`).
    #[arg(value_name = "FLAGS", trailing_var_arg = true, allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

fn fail(e: pathem_runtime::Error) -> anyhow::Error {
    match e {
        pathem_runtime::Error::Control(m) if m.starts_with("--name") => usage(m),
        e => e.into(),
    }
}

pub fn main(args: CtlArgs) -> anyhow::Result<()> {
    if args.target == "list" {
        for name in control::list() {
            match control::request(&name, Request::Show) {
                Ok(Reply::State(s)) => {
                    println!("{name}\tpid {}\t{} <-> {}\tup {:.0} s", s.pid, s.port_a, s.port_b, s.uptime_s)
                }
                _ => println!("{name}"),
            }
        }
        return Ok(());
    }
    control::check_name(&args.target).map_err(|e| usage(e.to_string().replace("--name", "ctl NAME")))?;
    match args.action.as_deref() {
        Some("show") => {
            if !args.flags.is_empty() {
                return Err(usage(format!(
                    "ctl {} show {}: show takes no flags but --json",
                    args.target,
                    args.flags.join(" ")
                )));
            }
            let s: Box<State> = match control::request(&args.target, Request::Show).map_err(fail)? {
                Reply::State(s) => s,
                Reply::Refused { error } => return Err(anyhow::anyhow!("ctl {} show: {error}", args.target)),
                Reply::Changed => {
                    return Err(anyhow::anyhow!("ctl {} show: an answer to another request", args.target))
                }
            };
            if args.json {
                println!("{}", serde_json::to_string(&s)?);
                return Ok(());
            }
            println!("{} (pid {}, up {:.1} s, seed {})", s.name, s.pid, s.uptime_s, s.seed);
            let show = |from: &str, to: &str, d: &control::DirectionState| -> anyhow::Result<()> {
                let st = &d.stats;
                println!("  {from} -> {to}: {}", d.path);
                println!("    {}", line("counters", st));
                println!(
                    "    link queue {} frames / {} B; delay line {} of {} B",
                    st.queue_frames, st.queue_bytes, st.delay_line_used, st.delay_line_capacity
                );
                Ok(())
            };
            show(&s.port_a, &s.port_b, &s.a_to_b)?;
            if let Some(d) = &s.b_to_a {
                show(&s.port_b, &s.port_a, d)?;
            }
            Ok(())
        }
        Some("set") => {
            if args.flags.is_empty() {
                return Err(usage(format!(
                    "ctl {} set: accepted: impairment flags, e.g. --delay 20ms",
                    args.target
                )));
            }
            match control::request(&args.target, Request::Set { args: args.flags.clone() }).map_err(fail)? {
                Reply::Changed => {
                    eprintln!("pathem: {}: changed", args.target);
                    Ok(())
                }
                Reply::Refused { error } => Err(usage(format!("ctl {} set: {error}", args.target))),
                Reply::State(_) => {
                    Err(anyhow::anyhow!("ctl {} set: an answer to another request", args.target))
                }
            }
        }
        Some(other) => Err(usage(format!("ctl {} {other}: accepted: show, set", args.target))),
        None => Err(usage(format!("ctl {}: accepted: show, set", args.target))),
    }
}
