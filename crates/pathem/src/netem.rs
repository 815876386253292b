//! `pathem netem "SPEC"`: NetEm's words as pathem's flags and TOML, and back (`pathem_spec::netem`).

use crate::usage;
use clap::Args;
use pathem_spec::{netem, PathSpec};

#[derive(Args, Debug)]
pub struct NetemArgs {
    /// A tc-netem(8) spec, e.g. "delay 100ms 10ms 25% loss 0.3%".
    #[arg(value_name = "SPEC", required_unless_present = "from_flags", allow_hyphen_values = true)]
    pub spec: Option<String>,
    /// The reverse: pathem's impairment flags in NetEm's words, e.g. --from-flags "--delay 10ms".
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true, conflicts_with = "spec")]
    pub from_flags: Option<String>,
}

pub fn main(args: NetemArgs) -> anyhow::Result<()> {
    if let Some(flags) = &args.from_flags {
        let spec = PathSpec::from_flags(flags).map_err(usage)?;
        outln!("{}", netem::to_netem(&spec).map_err(usage)?);
        return Ok(());
    }
    let explained = netem::explain(args.spec.as_deref().unwrap_or_default()).map_err(usage)?;
    explained.notes.iter().for_each(|n| errln!("pathem: note: {n}"));
    outln!("flags: {}\ntoml ([a_to_b], [egress], ...):", explained.flags);
    explained.toml.lines().for_each(|l| outln!("  {l}"));
    Ok(())
}
