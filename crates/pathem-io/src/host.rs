//! Where a thread runs: in which network namespace, on which CPU. Live links, the probe and
//! the test beds all place their threads through these two functions.

/// Why a thread could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// No namespace of that name (`/run/netns/NAME`), or it cannot be opened.
    #[error("network namespace {name}: {err} (`ip netns list` shows those there are)")]
    NoNamespace { name: String, err: std::io::Error },
    /// The kernel refused to move the thread (not root, say).
    #[error("cannot enter namespace {name}: {err}")]
    Enter { name: String, err: nix::Error },
    /// No such CPU on this machine.
    #[error("no CPU {0} on this machine")]
    NoCpu(usize),
    /// The kernel refused the affinity (a CPU outside the process's cgroup, say).
    #[error("cannot pin to CPU {cpu} ({err})")]
    Pin { cpu: usize, err: nix::Error },
}

/// Moves the calling thread (and the sockets it opens, the processes it starts from now on)
/// into the named network namespace (as `ip netns exec` does). The name is one `ip netns add`
/// makes: no `/`, not `.` or `..`.
pub fn enter_netns(name: &str) -> Result<(), PlaceError> {
    let bad = name.is_empty() || name.contains('/') || name == "." || name == "..";
    let f = match bad {
        true => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a namespace name")),
        false => std::fs::File::open(format!("/run/netns/{name}")),
    };
    let f = f.map_err(|err| PlaceError::NoNamespace { name: name.into(), err })?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|err| PlaceError::Enter { name: name.into(), err })
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), PlaceError> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|_| PlaceError::NoCpu(cpu))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|err| PlaceError::Pin { cpu, err })
}
