//! Network namespaces and the commands that build them, for the subcommands that make their
//! own test beds (`shell`, `validate`, `bench --live`, `probe pair`).

use crate::usage;
use anyhow::{bail, Context};
use pathem_engine::MonotonicClock;
use pathem_io::afpacket::wait_readable;
use pathem_model::Nanos;
use std::os::fd::RawFd;
use std::process::Command;

/// Runs `ip ARGS`, failing with its error message.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run `ip` (install iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Runs a command whose failure is tolerated; true when it succeeded.
pub fn quiet(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Moves the calling thread (and the sockets it opens from now on) into namespace `name`.
pub fn enter(name: &str) -> anyhow::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}")).map_err(|e| {
        usage(format!("network namespace {name}: {e} (`ip netns list` shows those there are)"))
    })?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("cannot enter namespace {name}"))?;
    Ok(())
}

/// The clock of a live loop: it sleeps until the next release or until one of `fds` (the
/// receiving sockets) has frames.
pub fn live_clock(fds: Vec<RawFd>) -> MonotonicClock {
    MonotonicClock::with_waiter(Box::new(move |nap: Nanos| {
        wait_readable(&fds, nap);
        true
    }))
}
