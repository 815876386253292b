//! Where a thread runs: in which network namespace, on which CPU. Live links, the probe and
//! the test beds all place their threads through these two functions.

/// Why a thread could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// No namespace of that name (`/run/netns/NAME`), or it cannot be opened.
    #[error("network namespace {name}: {source} (`ip netns list` shows those there are)")]
    NoNamespace { name: String, source: std::io::Error },
    /// The kernel refused to move the thread (not root, say).
    #[error("cannot enter namespace {name}: {source}")]
    Enter { name: String, source: nix::Error },
    /// No such CPU on this machine.
    #[error("--cores: no CPU {0}")]
    NoCpu(usize),
    /// The kernel refused the affinity (a CPU outside the process's cgroup, say).
    #[error("--cores: cannot pin to CPU {cpu} ({source})")]
    Pin { cpu: usize, source: nix::Error },
}

/// Moves the calling thread (and the sockets it opens, the processes it starts from now on)
/// into the network namespace `name` (as `ip netns` names them).
pub fn enter_netns(name: &str) -> Result<(), PlaceError> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))
        .map_err(|source| PlaceError::NoNamespace { name: name.into(), source })?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|source| PlaceError::Enter { name: name.into(), source })
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), PlaceError> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|_| PlaceError::NoCpu(cpu))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|source| PlaceError::Pin { cpu, source })
}
