//! Every input the fuzzers kept (`fuzz/corpus/TARGET/`) and every crash they found once
//! (`fuzz/regressions/TARGET/`), run through the same harness on stable Rust: a parser that
//! regresses fails here, in the ordinary test command, without a nightly toolchain.
//! `scripts/fuzz.sh` runs the fuzzers themselves.

#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let bytes = std::fs::read(e.path()).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&bytes));
            assert!(outcome.is_ok(), "{target}: {} fails", e.path().display());
            n += 1;
        }
    }
    assert!(n > 0, "{target}: no corpus found under {}", root.display());
}

#[test]
fn pcap_inputs() {
    replay("pcap", harness::pcap);
}

#[test]
fn unit_inputs() {
    replay("units", harness::units);
}

#[test]
fn spec_inputs() {
    replay("specs", harness::specs);
}

#[test]
fn netem_inputs() {
    replay("netem", harness::netem);
}

#[test]
fn config_inputs() {
    replay("config", harness::config);
}

#[test]
fn trace_inputs() {
    replay("traces", harness::traces);
}

#[test]
fn offload_inputs() {
    replay("offload", harness::offload);
}

#[test]
fn filter_inputs() {
    replay("filter", harness::filter);
}

#[test]
fn probe_inputs() {
    replay("probe", harness::probe);
}
