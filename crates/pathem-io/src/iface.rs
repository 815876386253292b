//! Facts about network interfaces and the offloads pathem turns off while it runs.
//!
//! Receive aggregation (GRO, LRO) merges wire frames into large ones before pathem sees them,
//! so one emulated loss would drop a whole burst (the DEMU paper, §4.3–4.4). pathem decides
//! per wire frame: it turns those offloads off on its ports for the duration of the run and
//! puts them back afterwards. The settings are changed with `ethtool`, the interface's own
//! tool, so what pathem does is what an administrator would type.

use crate::Error;
use std::path::PathBuf;
use std::process::Command;

fn sys(ifname: &str, attr: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{attr}")).ok().map(|s| s.trim().to_string())
}

/// Checks that `ifname` names an existing interface and says what is wrong otherwise.
pub fn check_exists(ifname: &str) -> Result<(), Error> {
    if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', ':']) {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: "is not a valid interface name (1 to 15 characters, no '/', ':' or spaces)".into(),
        });
    }
    if sys(ifname, "ifindex").is_none() {
        let known: Vec<String> = std::fs::read_dir("/sys/class/net")
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!("does not exist in this network namespace (there are: {})", known.join(", ")),
        });
    }
    Ok(())
}

/// True when the interface is administratively up.
pub fn is_up(ifname: &str) -> bool {
    sys(ifname, "flags")
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & 1 != 0)
}

/// An interface ioctl (`SIOCGIFMTU`, `SIOCSIFFLAGS`, ...) on a struct ifreq naming `ifname`
/// whose int is `value`, asked of the calling thread's network namespace; returns the ifreq
/// as the kernel left it. The one place pathem builds an ifreq.
pub(crate) fn ifreq(ifname: &str, req: libc::c_ulong, value: i32) -> std::io::Result<[u8; 40]> {
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // struct ifreq: the name, then a union whose first int is the value.
    let mut ifr = [0u8; 40];
    ifr[..name.len()].copy_from_slice(name);
    ifr[16..20].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: a plain socket(2) call; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and has no other owner.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: `ifr` is 40 bytes, the size of struct ifreq, and outlives the call; the name is
    // shorter than IFNAMSIZ, so it stays NUL-terminated.
    let rc = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&fd), req as _, ifr.as_mut_ptr()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ifr)
}

/// The int an [`ifreq`] answered.
pub(crate) fn ifreq_int(ifr: &[u8; 40]) -> i32 {
    i32::from_ne_bytes([ifr[16], ifr[17], ifr[18], ifr[19]])
}

/// The interface's MTU, asked of the calling thread's network namespace (`SIOCGIFMTU`):
/// `/sys/class/net` shows the namespace sysfs was mounted in, which a thread that entered
/// another one with `setns` (the shell's link) does not see.
pub fn mtu(ifname: &str) -> Option<u32> {
    ifreq(ifname, libc::SIOCGIFMTU, 0).ok().map(|ifr| ifreq_int(&ifr) as u32)
}

/// The interface's link speed in bit/s, when the driver reports one.
pub fn speed_bps(ifname: &str) -> Option<u64> {
    let mbit: i64 = sys(ifname, "speed")?.parse().ok()?;
    (mbit > 0).then_some(mbit as u64 * 1_000_000)
}

/// The interface's line rate in bit/s: its speed, or [`DEFAULT_LINE_RATE`] when the driver
/// reports none (a veth).
///
/// [`DEFAULT_LINE_RATE`]: pathem_model::units::DEFAULT_LINE_RATE
pub fn line_rate_bps(ifname: &str) -> u64 {
    speed_bps(ifname).unwrap_or(pathem_model::units::DEFAULT_LINE_RATE.0)
}

/// Offloads that merge or split frames, by ethtool's long names.
const AGGREGATION: [&str; 2] = ["generic-receive-offload", "large-receive-offload"];
const SEGMENTATION: [&str; 3] =
    ["tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload"];

/// What pathem changed on an interface, to put back on exit.
#[derive(Debug, Clone)]
pub struct SavedOffloads {
    ifname: String,
    /// `(ethtool -K keyword, was on)`.
    changed: Vec<(&'static str, bool)>,
}

fn keyword(long: &str) -> &'static str {
    match long {
        "generic-receive-offload" => "gro",
        "large-receive-offload" => "lro",
        "tcp-segmentation-offload" => "tso",
        "generic-segmentation-offload" => "gso",
        _ => "gro",
    }
}

fn ethtool_k(ifname: &str) -> Result<String, Error> {
    let out = Command::new("ethtool").arg("-k").arg(ifname).output().map_err(|e| Error::Interface {
        name: ifname.into(),
        reason: format!(
            "cannot run ethtool to check its offloads ({e}); install ethtool or pass --keep-offloads"
        ),
    })?;
    if !out.status.success() {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!("ethtool -k failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Which of `names` are on (and changeable) according to `ethtool -k` output.
fn enabled(text: &str, names: &[&str]) -> Vec<&'static str> {
    let mut on = Vec::new();
    for line in text.lines() {
        let Some((name, state)) = line.trim().split_once(':') else { continue };
        if names.contains(&name) && state.trim().starts_with("on") && !state.contains("[fixed]") {
            on.push(keyword(name));
        }
    }
    on
}

/// Where pathem notes the offloads it turned off, so that a run killed by SIGKILL is repaired
/// by the next one: `/run/pathem/offloads/<network namespace>-<interface>`.
fn state_file(ifname: &str) -> PathBuf {
    let ns = std::fs::read_link("/proc/self/ns/net")
        .map(|l| l.to_string_lossy().trim_start_matches("net:[").trim_end_matches(']').to_string())
        .unwrap_or_else(|_| "net".into());
    PathBuf::from(format!("/run/pathem/offloads/{ns}-{ifname}"))
}

/// Puts back the offloads a pathem that died without cleaning up had turned off, and refuses an
/// interface that a running pathem still uses.
fn recover_stale(ifname: &str) -> Result<(), Error> {
    let path = state_file(ifname);
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let mut lines = text.lines();
    let pid: u32 = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    if pid != 0 && pid != std::process::id() && std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!("is in use by another pathem (pid {pid})"),
        });
    }
    let keywords: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    if !keywords.is_empty() {
        set(ifname, &keywords, "on")?;
        eprintln!(
            "pathem: {ifname}: turned {} back on (left off by a pathem that was killed)",
            keywords.join(", ")
        );
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// The interface's driver (`veth`, `ixgbe`, ...), as `ethtool -i` names it.
pub fn driver(ifname: &str) -> Option<String> {
    let out = std::process::Command::new("ethtool").args(["-i", ifname]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.strip_prefix("driver:")).map(|d| d.trim().to_string())
}

/// Turns off receive aggregation on `ifname` (and, with `segmentation`, the offloads that make
/// the interface hand over frames larger than its MTU), returning what to restore.
pub fn disable_offloads(ifname: &str, segmentation: bool) -> Result<SavedOffloads, Error> {
    recover_stale(ifname)?;
    let text = ethtool_k(ifname)?;
    let names: &[&str] = if segmentation { &SEGMENTATION } else { &AGGREGATION };
    let mut on = enabled(&text, names);
    if segmentation {
        on.extend(enabled(&text, &AGGREGATION[1..]));
    }
    on.dedup();
    let saved = SavedOffloads { ifname: ifname.into(), changed: on.iter().map(|k| (*k, true)).collect() };
    if !on.is_empty() {
        // Note what is about to change first: if this process is killed, the next start repairs it.
        let path = state_file(ifname);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&path, format!("{}\n{}\n", std::process::id(), on.join(" ")));
        set(ifname, &on, "off")?;
    }
    Ok(saved)
}

fn set(ifname: &str, keywords: &[&str], state: &str) -> Result<(), Error> {
    let mut cmd = Command::new("ethtool");
    cmd.arg("-K").arg(ifname);
    for k in keywords {
        cmd.arg(k).arg(state);
    }
    let out = cmd
        .output()
        .map_err(|e| Error::Interface { name: ifname.into(), reason: format!("cannot run ethtool: {e}") })?;
    if !out.status.success() {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!(
                "ethtool -K {} {state} failed: {}; pass --keep-offloads to run with them",
                keywords.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(())
}

impl SavedOffloads {
    /// Offloads that were on and are now off.
    pub fn changed(&self) -> Vec<&'static str> {
        self.changed.iter().map(|c| c.0).collect()
    }

    /// Puts the offloads back as they were (best effort: the interface may be gone).
    pub fn restore(&self) -> Result<(), Error> {
        let on: Vec<&str> = self.changed.iter().filter(|c| c.1).map(|c| c.0).collect();
        if on.is_empty() {
            return Ok(());
        }
        set(&self.ifname, &on, "on")?;
        let _ = std::fs::remove_file(state_file(&self.ifname));
        Ok(())
    }
}

/// Where a privileged operation is refused, the capability it needs.
fn permission_hint(err: &std::io::Error, capability: &str) -> String {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!("{err} (run as root or grant {capability})"),
        _ => err.to_string(),
    }
}

/// The error for an interface on which `what` failed with `err`, with the hint to run as root
/// or grant `capability` where the kernel refused permission.
pub(crate) fn failure(ifname: &str, what: &str, err: std::io::Error, capability: &str) -> crate::Error {
    crate::Error::Interface {
        name: ifname.into(),
        reason: format!("{what}: {}", permission_hint(&err, capability)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopbacks_mtu_is_read_and_a_missing_interface_has_none() {
        assert!(mtu("lo").is_some_and(|m| m >= 1500));
        assert_eq!(mtu("no-such-if0"), None);
        assert_eq!(mtu(""), None);
    }

    #[test]
    fn parses_ethtool_output() {
        let text = "Features for veth0:\nrx-checksumming: on\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\n\
                    tcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\ngeneric-segmentation-offload: on [fixed]\n";
        assert_eq!(enabled(text, &AGGREGATION), vec!["gro"]);
        assert_eq!(enabled(text, &SEGMENTATION), vec!["gro", "tso"]);
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        let e = check_exists("no-such-if0").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(check_exists("a/b").unwrap_err().to_string().contains("not a valid"));
        assert!(check_exists("lo").is_ok());
    }
}
