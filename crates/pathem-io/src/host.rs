//! Where a thread runs: in which network namespace, on which CPU. Live links, the probe and
//! the test beds all place their threads through these two functions.

/// Moves the calling thread (and the sockets it opens, the processes it starts from now on)
/// into the network namespace `name` (as `ip netns` names them). The error is one line.
pub fn enter_netns(name: &str) -> Result<(), String> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))
        .map_err(|e| format!("network namespace {name}: {e} (`ip netns list` shows those there are)"))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot enter namespace {name}: {e}"))
}

/// Pins the calling thread to `cpu`. The error is one line.
pub fn pin_to_cpu(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|_| format!("--cores: no CPU {cpu}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("--cores: cannot pin to CPU {cpu} ({e})"))
}
