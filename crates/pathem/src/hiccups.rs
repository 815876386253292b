//! `pathem bench --hiccups`: prints what `pathem_lab::hiccups` measures.

use pathem_lab::hiccups::{describe, measure};

/// Prints the hiccups of `seconds` (already checked by `bench`).
pub fn main(seconds: f64, json: bool) -> anyhow::Result<()> {
    let all = measure(seconds);
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!("pathem bench --hiccups: a busy-polling thread on each CPU for {seconds} s; gaps between clock reads are time it did not run");
    for h in &all {
        println!("  {}", describe(h));
    }
    Ok(())
}
