//! `pathem ctl`: watch and steer a running `run` or `shell` through its control socket.
//!
//! ```text
//! pathem ctl list
//! pathem ctl NAME show [--json]
//! pathem ctl NAME set [impairment flags] [--a-to-b "FLAGS"] [--b-to-a "FLAGS"]
//! ```
//! `set` takes the flags of `run`; they apply on top of each direction's current ones, both
//! directions at once, between two frames, or not at all (a bad value changes nothing).

use crate::usage;
use clap::Args;
use pathem_runtime::control::{self, Reply, Request};

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
    /// With set: impairment flags, as for `run` (`--delay 20ms --loss 1%`, `--a-to-b "..."`), on top of what runs, or with `--reset` first instead of it.
    #[arg(value_name = "FLAGS", trailing_var_arg = true, allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

pub fn main(args: CtlArgs) -> anyhow::Result<()> {
    let target = &args.target;
    let json = args.json.then(|| "--json".to_string());
    let words: Vec<_> = args.action.iter().chain(&args.flags).chain(&json).map(String::as_str).collect();
    if target == "list" && !words.is_empty() {
        return Err(usage(format!("ctl list {}: list takes nothing after it", words.join(" "))));
    } else if target == "list" {
        control::list_lines().iter().for_each(|l| outln!("{l}"));
        return Ok(());
    }
    control::check_name(target).map_err(|e| usage(e.to_string().replace("--name", "ctl NAME")))?;
    let (request, what) = match args.action.as_deref() {
        Some("show") if args.flags.is_empty() => (Request::Show, "show"),
        Some("show") => {
            return Err(usage(format!("ctl {target} {}: show takes no flags but --json", words.join(" "))))
        }
        Some("set") if args.json => {
            return Err(usage(format!("ctl {target} set --json: --json is for show")))
        }
        Some("set") if !args.flags.is_empty() => {
            (Request::set(args.flags.clone()).map_err(crate::runtime_error)?, "set")
        }
        Some("set") => {
            return Err(usage(format!("ctl {target} set: accepted: impairment flags, e.g. --delay 20ms")))
        }
        Some(other) => return Err(usage(format!("ctl {target} {other}: accepted: show, set"))),
        None => return Err(usage(format!("ctl {target}: accepted: show, set"))),
    };
    match control::request(target, request).map_err(crate::runtime_error)? {
        Reply::State(s) if args.json => outln!("{}", serde_json::to_string(&s)?),
        Reply::State(s) => out!("{}", s.describe()),
        Reply::Changed => errln!("pathem: {target}: changed"),
        Reply::Refused { error, usage: true } if what == "set" => {
            return Err(usage(format!("ctl {target} set: {error}")))
        }
        Reply::Refused { error, .. } => anyhow::bail!("ctl {target} {what}: {error}"),
    }
    Ok(())
}
