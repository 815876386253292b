//! `pathem bench --live KIND`: forwarding rate on a veth path, in namespaces made for it.
//!
//! ```text
//!   gen: g0 ──veth── pa  [pathem, namespace mid]  pb ──veth── s0 :sink
//! ```
//! The runs themselves are `pathem_runtime::bench::live_run`; this prints them as ratios of the
//! raw port loop's rate.

use pathem_model::{Nanos, PathConfig};
use pathem_runtime::bench::live_run;
use pathem_runtime::testbed::Bed;
use serde::Serialize;

#[derive(Serialize)]
struct Row {
    port: String,
    size: usize,
    mode: &'static str,
    offered_mpps: f64,
    forwarded_mpps: f64,
    /// Forwarded rate over the bypass run's.
    of_raw: f64,
}

/// Runs the live benchmark for each port kind and frame size.
pub fn main(kinds: &[String], sizes: &[usize], secs: f64, split: bool, json: bool) -> anyhow::Result<()> {
    let bed = Bed::through(&format!("pb{}", std::process::id())).map_err(crate::usage)?;
    let impaired = PathConfig {
        link: Some(pathem_model::link::LinkConfig::rate("10gbit".parse()?)),
        loss: Some("1%".parse()?),
        delay: pathem_model::delay::DelayConfig::constant(Nanos::from_millis(1)),
        ..PathConfig::default()
    };
    let mut rows = Vec::new();
    for kind in kinds {
        for &size in sizes {
            let mut raw = 0.0;
            let mut modes = vec![
                ("bypass", PathConfig::default()),
                ("engine", PathConfig::default()),
                ("impaired", impaired.clone()),
            ];
            if split {
                modes.push(("split", impaired.clone()));
            }
            for (mode, path) in modes {
                let (offered, forwarded) =
                    live_run(&bed, kind, size, mode, &path, secs).map_err(crate::run::runtime_error)?;
                if mode == "bypass" {
                    raw = forwarded;
                }
                let row = Row {
                    port: kind.clone(),
                    size,
                    mode,
                    offered_mpps: offered,
                    forwarded_mpps: forwarded,
                    of_raw: forwarded / raw,
                };
                if !json {
                    println!(
                        "{:<9} {:>5} B  {:<9} offered {:>6.3} Mpps  forwarded {:>6.3} Mpps  {:>5.1}% of the raw port loop",
                        row.port,
                        row.size,
                        row.mode,
                        row.offered_mpps,
                        row.forwarded_mpps,
                        100.0 * row.of_raw
                    );
                }
                rows.push(row);
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("impaired = delay 1ms, loss 1% (a loss shows as 1% less forwarded), rate 10gbit");
        if split {
            println!("split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)");
        }
    }
    Ok(())
}
