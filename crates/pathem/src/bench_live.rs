//! `pathem bench --live KIND`: forwarding rate on a veth path, in namespaces made for it.
//!
//! ```text
//!   gen: g0 ──veth── pa  [pathem, namespace mid]  pb ──veth── s0 :sink
//! ```
//! The runs themselves are `pathem_runtime::bench::live_run`; this prints them as ratios of the
//! raw port loop's rate, and for DPDK ports of dpdk-testpmd's on the same virtual devices.

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
    /// DPDK kinds: forwarded rate over dpdk-testpmd's in the same round.
    #[serde(skip_serializing_if = "Option::is_none")]
    of_testpmd: Option<f64>,
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
            let (mut raw, mut testpmd) = (0.0, None);
            let dpdk = kind.starts_with("dpdk");
            let mut modes = vec![
                ("bypass", PathConfig::default()),
                ("engine", PathConfig::default()),
                ("impaired", impaired.clone()),
            ];
            if dpdk {
                modes.insert(0, ("testpmd", PathConfig::default()));
            }
            if split {
                modes.push(("split", impaired.clone()));
            }
            for (mode, path) in modes {
                let (offered, forwarded) =
                    live_run(&bed, kind, size, mode, &path, secs).map_err(crate::run::runtime_error)?;
                match mode {
                    "bypass" => raw = forwarded,
                    "testpmd" => testpmd = Some(forwarded),
                    _ => {}
                }
                let row = Row {
                    port: kind.clone(),
                    size,
                    mode,
                    offered_mpps: offered,
                    forwarded_mpps: forwarded,
                    of_raw: if raw > 0.0 { forwarded / raw } else { f64::NAN },
                    of_testpmd: testpmd.map(|t| forwarded / t),
                };
                if !json {
                    let of_raw = match mode {
                        "testpmd" => String::new(),
                        _ => format!("  {:>5.1}% of the raw port loop", 100.0 * row.of_raw),
                    };
                    let of_testpmd = row
                        .of_testpmd
                        .map(|r| format!("  {:>5.1}% of testpmd", 100.0 * r))
                        .unwrap_or_default();
                    println!(
                        "{:<9} {:>5} B  {:<9} offered {:>6.3} Mpps  forwarded {:>6.3} Mpps{of_raw}{of_testpmd}",
                        row.port, row.size, row.mode, row.offered_mpps, row.forwarded_mpps,
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
        if kinds.iter().any(|k| k.starts_with("dpdk")) {
            println!("testpmd = dpdk-testpmd --forward-mode=io on the same virtual devices (DPDK's own forwarder, no copy)");
        }
        if split {
            println!("split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)");
        }
    }
    Ok(())
}
