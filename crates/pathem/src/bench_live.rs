//! `pathem bench --live KIND`: forwarding rate on a veth path, in namespaces made for it.
//!
//! ```text
//!   gen: g0 ──veth── pa  [pathem, namespace mid]  pb ──veth── s0 :sink
//! ```
//! The runs themselves are `pathem_lab::bench::live_run`; this runs them in rounds (every
//! mode once per round, back to back) and prints medians, with each mode's rate as a ratio of
//! the raw port loop's and, for DPDK ports, of dpdk-testpmd's on the same virtual devices,
//! both taken within the round and then the median over rounds.

use pathem_lab::bench::{live_run, median};
use pathem_lab::testbed::Bed;
use pathem_model::{Nanos, PathConfig};
use serde::Serialize;

#[derive(Serialize)]
struct Row {
    port: String,
    size: usize,
    mode: &'static str,
    /// Medians over the rounds.
    offered_mpps: f64,
    forwarded_mpps: f64,
    /// Forwarded rate over the bypass run's of the same round, median over rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    of_raw: Option<f64>,
    /// DPDK kinds: forwarded rate over dpdk-testpmd's of the same round, median over rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    of_testpmd: Option<f64>,
    /// Every round's forwarded rate.
    rounds_mpps: Vec<f64>,
}

/// Runs the live benchmark for each port kind and frame size, `rounds` times.
pub fn main(
    kinds: &[String],
    sizes: &[usize],
    secs: f64,
    rounds: usize,
    split: bool,
    json: bool,
) -> anyhow::Result<()> {
    let bed = Bed::through(&format!("pb{}", std::process::id())).map_err(crate::usage)?;
    let impaired = PathConfig {
        link: Some(pathem_model::link::LinkConfig::rate("10gbit".parse()?)),
        loss: Some("1%".parse()?),
        delay: pathem_model::delay::DelayConfig::constant(Nanos::from_millis(1)),
        ..PathConfig::default()
    };
    let mut rows = Vec::new();
    for kind in kinds {
        let mut modes = vec![
            ("bypass", PathConfig::default()),
            ("engine", PathConfig::default()),
            ("impaired", impaired.clone()),
        ];
        if split {
            modes.push(("split", impaired.clone()));
        }
        if kind.starts_with("dpdk") {
            modes.insert(0, ("testpmd", PathConfig::default()));
        }
        for &size in sizes {
            // [mode][round] = (offered, forwarded)
            let mut runs = vec![Vec::new(); modes.len()];
            for round in 0..rounds {
                for (m, (mode, path)) in modes.iter().enumerate() {
                    let r = live_run(&bed, kind, size, mode, path, secs).map_err(crate::runtime_error)?;
                    runs[m].push(r);
                }
                if !json {
                    let each: Vec<String> = modes
                        .iter()
                        .zip(&runs)
                        .map(|((mode, _), r)| format!("{mode} {:.3}", r[round].1))
                        .collect();
                    eprintln!("{kind} {size} B round {}: {} Mpps", round + 1, each.join(", "));
                }
            }
            let column = |name: &str| modes.iter().position(|(m, _)| *m == name);
            // The median over rounds of this mode's rate over the reference's, round by round.
            let ratio = |m: usize, reference: Option<usize>| {
                reference.map(|r| {
                    median(&runs[m].iter().zip(&runs[r]).map(|(a, b)| a.1 / b.1).collect::<Vec<_>>())
                })
            };
            for (m, (mode, _)) in modes.iter().enumerate() {
                let row = Row {
                    port: kind.clone(),
                    size,
                    mode,
                    offered_mpps: median(&runs[m].iter().map(|r| r.0).collect::<Vec<_>>()),
                    forwarded_mpps: median(&runs[m].iter().map(|r| r.1).collect::<Vec<_>>()),
                    of_raw: if *mode == "testpmd" { None } else { ratio(m, column("bypass")) },
                    of_testpmd: ratio(m, column("testpmd")).filter(|_| *mode != "testpmd"),
                    rounds_mpps: runs[m].iter().map(|r| r.1).collect(),
                };
                if !json {
                    let pct = |r: Option<f64>, of: &str| r.map(|r| format!("  {:>5.1}% of {of}", 100.0 * r));
                    println!(
                        "{:<9} {:>5} B  {:<9} offered {:>6.3} Mpps  forwarded {:>6.3} Mpps{}{}",
                        row.port,
                        row.size,
                        row.mode,
                        row.offered_mpps,
                        row.forwarded_mpps,
                        pct(row.of_raw, "the raw port loop").unwrap_or_default(),
                        pct(row.of_testpmd, "testpmd").unwrap_or_default(),
                    );
                }
                rows.push(row);
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("medians of {rounds} rounds; ratios are taken within each round, then the median");
        println!("impaired = delay 1ms, loss 1% (a loss shows as 1% less forwarded), rate 10gbit");
        println!("the generator runs on CPU 0, the forwarder on CPU 1");
        if kinds.iter().any(|k| k.starts_with("dpdk")) {
            println!("testpmd = dpdk-testpmd --forward-mode=io on the same virtual devices (DPDK's own forwarder, no copy)");
        }
        if split {
            println!("split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)");
        }
    }
    Ok(())
}
