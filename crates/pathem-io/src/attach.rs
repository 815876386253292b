//! In place on an interface (`pathem attach IF`): both directions of an existing interface
//! cross pathem, and nothing on the interface moves.
//!
//! ```text
//!  stack ─► IF egress ─► tcx: marked? pass : mark, redirect ─► tap E's receive ─► ring ─► pathem
//!  wire  ◄─ IF qdisc ◄──────────── AF_PACKET on IF, SO_MARK ◄───────────────────────────┘
//!  wire  ─► IF ingress ─► tcx: marked? pass : mark, redirect ─► tap I's receive ─► ring ─► pathem
//!  stack ◄─ IF ingress ◄─ tap I's tcx egress: marked? redirect(IF, ingress) ◄─ AF_PACKET on tap I, SO_MARK
//! ```
//! Five tcx programs (each a few instructions, assembled here; their C is on the functions
//! that write them) steer the frames. A steered frame enters a TAP device's receive side with
//! the mark; a packet socket on the device takes the marked frames from its ring
//! ([`crate::tap::TapRx`]), and the device's own ingress program then drops them, so the
//! host's stack never sees them there. The kernel's work for a steered frame (the redirect,
//! the copy into the ring) is done where it was steered: the host's sending thread, the
//! interface's receive. At stop the interface's programs are replaced by one that only clears
//! the mark ([`Steering::close_ways_in`]); the two TAP devices are non-persistent and the BPF
//! links unpinned, so when pathem ends, however it ends, the kernel removes all of it and the
//! plain interface works at once. A frame pathem sends back carries the mark
//! ([`DEFAULT_MARK`] or `--mark`): out of IF through its qdisc, or on the ingress device,
//! whose egress program hands it to IF's ingress (what the host itself sends on the device,
//! unmarked, goes its own way); IF's programs let it pass and clear the mark, so the qdisc,
//! the taps of `tcpdump -i IF` and the stack see an ordinary frame. Frames of any protocol
//! (ARP, IPv6 neighbour discovery) take the path; addresses, routes, MTU, name and qdisc stay
//! as they are. A direction not attached is left alone entirely.
//!
//! A second pathem on the same interface and direction finds the TAP device's name taken
//! (`pthme<ifindex>` for egress, `pthmi<ifindex>` for ingress) and is refused with a line
//! naming the process that holds it; the interface's claim ([`crate::iface::claim_attached`],
//! shared by attachments) refuses a run's port on it, and it while one runs. Kernels before 6.6 have no tcx: refused with a line
//! saying so.

use crate::afpacket::AfPacketTx;
use crate::bpf::{insn, BPF_PROG_TYPE_SCHED_CLS, BPF_TCX_EGRESS, BPF_TCX_INGRESS};
use crate::live::{LiveRx, LiveTx};
use crate::tap::Tap;
use crate::Error;
use std::os::fd::OwnedFd;

/// The mark of frames pathem sends back through the interface ("path" in ASCII): the
/// interface's programs let them pass. `--mark` picks another where the host marks its own
/// traffic with this value.
pub const DEFAULT_MARK: u32 = 0x7061_7468;
/// Frames the host itself sends on a TAP device that wait for pathem's next look (every 10
/// ms); the frames steered to the device wait in its packet ring instead.
pub const TAP_QUEUE: u32 = 1_000;

/// `--mark`: decimal or 0x-hex, 1 to 2^32−1 (0 is every unmarked frame).
pub fn parse_mark(text: &str) -> Result<u32, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => text.parse(),
    };
    match parsed {
        Ok(m) if m != 0 => Ok(m),
        _ => Err(format!("`{text}`: accepted: 1 to 0xffffffff (decimal or 0x…)")),
    }
}

/// What to attach to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachSpec {
    pub iface: String,
    /// Steer frames the host sends through pathem.
    pub egress: bool,
    /// Steer frames the host receives through pathem.
    pub ingress: bool,
    /// The mark of frames pathem sends back (not 0).
    pub mark: u32,
}

/// One direction's two halves: where its frames come from, where they go.
pub type Halves = (LiveRx, LiveTx);

/// An attachment: each direction's halves (an idle pair where not attached) and the
/// steering, loaded but not in place until [`Steering::engage`], which holds the programs in
/// place until it is dropped.
pub struct Attached {
    pub egress: Halves,
    pub ingress: Halves,
    pub steering: Steering,
    /// How each direction is steered, in words.
    pub how: Vec<String>,
}

/// The tcx programs and their links: dropping this detaches them (and the interface is as it
/// was); the TAP devices go when their halves are dropped.
pub struct Steering {
    iface: String,
    /// Each program, where it goes (interface, hook) and, once engaged, its link.
    progs: Vec<Prog>,
    /// The ways in were closed: nothing is engaged again.
    closed: bool,
}

struct Prog {
    fd: OwnedFd,
    ifindex: u32,
    at: u32,
    link: Option<OwnedFd>,
    /// For a way in: what takes its place at stop ([`clear_program`]).
    plain: Option<OwnedFd>,
}

impl Prog {
    /// A TAP device's program `code` at hook `at` of the device `tap`.
    fn on_tap(iface: &str, code: &[u8], tap: u32, at: u32) -> Result<Prog, Error> {
        Ok(Prog { fd: load(iface, code, at)?, ifindex: tap, at, link: None, plain: None })
    }

    /// A way in: the interface's program at hook `at`, steering to device `tap`, with the one
    /// that takes its place at stop.
    fn steering(iface: &str, ifindex: u32, mark: u32, tap: u32, at: u32) -> Result<Prog, Error> {
        let fd = load(iface, &steer_program(mark, tap), at)?;
        let plain = Some(load(iface, &clear_program(mark), at)?);
        Ok(Prog { fd, ifindex, at, link: None, plain })
    }
}

impl Steering {
    /// Puts the programs in place, in the order they were loaded (each direction's way back
    /// before its way in): from now on the interface's frames go to the TAP devices. Called
    /// once whatever reads them is ready, so no frame waits in a device meanwhile.
    pub fn engage(&mut self) -> Result<(), Error> {
        if self.closed {
            return Ok(());
        }
        for p in self.progs.iter_mut().filter(|p| p.link.is_none()) {
            p.link = Some(link(&self.iface, &p.fd, p.ifindex, p.at)?);
        }
        Ok(())
    }

    /// Closes the ways in (the interface's own programs, in one step each): its frames go
    /// the plain way from now on, and what pathem still sends through it (what the devices
    /// held, what falls due) passes with its mark cleared, as before. The way back on the
    /// ingress TAP device stays, so what pathem sends on the device reaches the stack as
    /// sent. All of it goes when this is dropped; [`engage`](Self::engage) does nothing after.
    pub fn close_ways_in(&mut self) {
        self.closed = true;
        for p in self.progs.iter_mut() {
            let (Some(link), Some(plain)) = (p.link.as_ref(), p.plain.as_ref()) else { continue };
            if crate::bpf::update(link, plain).is_err() {
                // The way in must close whatever happens: detached, its frames keep the mark.
                p.link = None;
            }
        }
    }
}

const TCX_NEXT: i32 = -1;
const TC_ACT_SHOT: i32 = 2;
const BPF_F_INGRESS: i32 = 1;
const FN_REDIRECT: i32 = 23;
/// Offset of `mark` in `struct __sk_buff`.
const SKB_MARK: i16 = 8;

/// The interface's program at egress or ingress:
/// ```c
/// SEC("tcx") int pathem_steer(struct __sk_buff *skb) {
///     if (skb->mark == MARK) {         /* pathem sent it back */
///         skb->mark = 0;
///         return TCX_NEXT;
///     }
///     skb->mark = MARK;                /* steered: what the tap's packet socket takes */
///     return bpf_redirect(TAP, BPF_F_INGRESS);
/// }
/// ```
fn steer_program(mark: u32, tap: u32) -> Vec<u8> {
    let mut prog = pass_marked(mark, 4); // 1: if w2 != MARK goto 6
    prog.extend(
        [
            insn(0xb7, 2, 0, 0, mark as i32),   // 6: r2 = MARK
            insn(0x63, 1, 2, SKB_MARK, 0),      // 7: skb->mark = w2
            insn(0xb7, 1, 0, 0, tap as i32),    // 8: r1 = TAP
            insn(0xb7, 2, 0, 0, BPF_F_INGRESS), // 9: r2 = BPF_F_INGRESS
            insn(0x85, 0, 0, 0, FN_REDIRECT),   // 10: call bpf_redirect
            insn(0x95, 0, 0, 0, 0),             // 11: exit
        ]
        .concat(),
    );
    prog
}

/// The first six instructions of the interface's programs: a frame with the mark has it
/// cleared and goes on (`TCX_NEXT`); one without jumps `unmarked` instructions past the
/// jump's next.
fn pass_marked(mark: u32, unmarked: i16) -> Vec<u8> {
    [
        insn(0x61, 2, 1, SKB_MARK, 0),           // 0: w2 = skb->mark
        insn(0x56, 2, 0, unmarked, mark as i32), // 1: if w2 != MARK goto 2 + unmarked (32-bit)
        insn(0xb7, 3, 0, 0, 0),                  // 2: r3 = 0
        insn(0x63, 1, 3, SKB_MARK, 0),           // 3: skb->mark = w3
        insn(0xb7, 0, 0, 0, TCX_NEXT),           // 4: r0 = TCX_NEXT
        insn(0x95, 0, 0, 0, 0),                  // 5: exit
    ]
    .concat()
}

/// What takes the place of the interface's programs at stop: frames go the plain way, and
/// those pathem still sends lose the mark as before.
/// ```c
/// SEC("tcx") int pathem_plain(struct __sk_buff *skb) {
///     if (skb->mark == MARK)
///         skb->mark = 0;
///     return TCX_NEXT;
/// }
/// ```
fn clear_program(mark: u32) -> Vec<u8> {
    pass_marked(mark, 2) // 1: if w2 != MARK goto 4 (the same way on, its mark unset)
}

/// Each tap's program at its ingress: every frame that reaches its receive side was steered
/// there and has been taken by pathem's packet socket (which sees a frame before this
/// program).
/// ```c
/// SEC("tcx/ingress") int pathem_taken(struct __sk_buff *skb) { return TC_ACT_SHOT; }
/// ```
fn taken_program() -> Vec<u8> {
    [
        insn(0xb7, 0, 0, 0, TC_ACT_SHOT), // 0: r0 = TC_ACT_SHOT
        insn(0x95, 0, 0, 0, 0),           // 1: exit
    ]
    .concat()
}

/// The ingress tap's program at its egress, for the frames pathem sends on the device (a
/// packet socket with the mark): they go on to the stack on IF, still marked, where IF's
/// program clears the mark. What the host itself sends on the device goes its own way.
/// ```c
/// SEC("tcx/egress") int pathem_return(struct __sk_buff *skb) {
///     if (skb->mark != MARK)
///         return TCX_NEXT;
///     return bpf_redirect(IF, BPF_F_INGRESS);  /* the stack receives it on IF */
/// }
/// ```
fn return_program(mark: u32, iface: u32) -> Vec<u8> {
    [
        insn(0x61, 2, 1, SKB_MARK, 0),      // 0: w2 = skb->mark
        insn(0x16, 2, 0, 2, mark as i32),   // 1: if w2 == MARK goto 4 (32-bit)
        insn(0xb7, 0, 0, 0, TCX_NEXT),      // 2: r0 = TCX_NEXT
        insn(0x95, 0, 0, 0, 0),             // 3: exit
        insn(0xb7, 1, 0, 0, iface as i32),  // 4: r1 = IF
        insn(0xb7, 2, 0, 0, BPF_F_INGRESS), // 5: r2 = BPF_F_INGRESS
        insn(0x85, 0, 0, 0, FN_REDIRECT),   // 6: call bpf_redirect
        insn(0x95, 0, 0, 0, 0),             // 7: exit
    ]
    .concat()
}

/// The TAP device's name for a direction of interface `ifindex`.
pub fn tap_name(ingress: bool, ifindex: u32) -> String {
    format!("pthm{}{ifindex}", if ingress { 'i' } else { 'e' })
}

/// Who holds TAP device `tap`: `pid N (command line)`, read from /proc.
fn holder(tap: &str) -> Option<String> {
    let want = format!("iff:\t{tap}\n");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_to_string(fd.path()).is_ok_and(|t| t.contains(&want)) {
                let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmd: Vec<String> = cmd
                    .split(|&b| b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect();
                return Some(format!("pid {pid}: {}", cmd.join(" ")));
            }
        }
    }
    None
}

fn refuse(iface: &str, reason: impl Into<String>) -> Error {
    Error::Interface { name: iface.into(), reason: reason.into() }
}

/// Checks that the directions asked (`egress`, `ingress`) of `iface` can be attached: it
/// exists here, is an Ethernet interface with a wire (not loopback), and no pathem attaches
/// there already. Returns its index.
pub fn check(iface: &str, egress: bool, ingress: bool) -> Result<u32, Error> {
    let ifindex = check_iface(iface)?;
    for (on, way) in [(egress, false), (ingress, true)] {
        let name = tap_name(way, ifindex);
        if on && crate::iface::mtu(&name).is_some() {
            return Err(taken(iface, way, &name));
        }
    }
    Ok(ifindex)
}

fn taken(iface: &str, ingress: bool, tap: &str) -> Error {
    let way = if ingress { "ingress" } else { "egress" };
    let who = holder(tap).unwrap_or_else(|| "another process".into());
    refuse(iface, format!("its {way} is already attached by {who} (tap {tap})"))
}

fn check_iface(iface: &str) -> Result<u32, Error> {
    // Asked of the calling thread's namespace (it may have entered one): no /sys here.
    let ifindex = crate::afpacket::ifindex(iface)? as u32;
    match hardware_type(iface) {
        Some(772) => Err(refuse(
            iface,
            "is the loopback interface, which has no wire to emulate; attach to an interface with a peer (eth0, a veth)",
        )),
        Some(1) | None => Ok(ifindex),
        Some(other) => Err(refuse(
            iface,
            format!("is not an Ethernet interface (ARP type {other}); pathem attaches to Ethernet interfaces (eth0, veth, bridge, bond)"),
        )),
    }
}

/// The interface's ARP hardware type (`SIOCGIFHWADDR`): 1 for Ethernet, 772 for loopback.
fn hardware_type(iface: &str) -> Option<u16> {
    crate::iface::hwaddr(iface).ok().map(|(kind, _)| kind)
}

/// A receiving half that never has a frame and a transmitting half that is never used: the
/// direction that is not attached.
fn idle(iface: &str) -> Result<Halves, Error> {
    // SAFETY: a plain eventfd(2) call; the result is checked. Nobody writes to it, so a wait
    // on it sleeps until the link's stop.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(refuse(iface, format!("cannot make an eventfd: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: a descriptor eventfd(2) just returned, owned by nothing else.
    Ok((LiveRx::Idle(unsafe { crate::bpf::owned(fd) }), LiveTx::Idle))
}

fn load(iface: &str, code: &[u8], attach: u32) -> Result<OwnedFd, Error> {
    crate::bpf::load(BPF_PROG_TYPE_SCHED_CLS, attach, code, "pathem_attach").map_err(|(e, log)| {
        let log = log.lines().last().unwrap_or("").to_string();
        crate::iface::failure(
            iface,
            &format!("cannot load the tcx program ({log})"),
            e,
            "CAP_BPF and CAP_NET_ADMIN",
        )
    })
}

fn link(iface: &str, prog: &OwnedFd, ifindex: u32, attach: u32) -> Result<OwnedFd, Error> {
    crate::bpf::link(prog, ifindex, attach, 0).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) if !has_tcx() => refuse(
            iface,
            format!("this kernel cannot attach tcx programs ({e}); pathem attach needs Linux 6.6 or later"),
        ),
        _ => crate::iface::failure(iface, "cannot attach the tcx program", e, "CAP_BPF and CAP_NET_ADMIN"),
    })
}

/// Whether the running kernel is 6.6 or later, the first with tcx.
fn has_tcx() -> bool {
    crate::iface::kernel_at_least(6, 6)
}

/// Makes the TAP device of one direction, or says who holds it.
fn tap(iface: &str, ingress: bool, ifindex: u32, mtu: u32) -> Result<Tap, Error> {
    let name = tap_name(ingress, ifindex);
    Tap::create(&name, mtu, TAP_QUEUE).map_err(|e| match (crate::iface::mtu(&name), e) {
        (Some(_), _) => taken(iface, ingress, &name),
        // Named after the interface the user gave, the tap in the reason.
        (None, Error::Interface { reason, .. }) => refuse(iface, format!("tap {name}: {reason}")),
        (None, e) => e,
    })
}

/// Prepares to attach to `spec.iface` (see the module doc): the TAP devices made, the
/// programs loaded; [`Steering::engage`] puts them in place. Frames are at most `max_frame`
/// bytes; each device's packet ring holds about `rx_buffer` bytes (`--rx-buffer`).
pub fn open(spec: &AttachSpec, max_frame: usize, rx_buffer: usize) -> Result<Attached, Error> {
    let iface = spec.iface.as_str();
    let ifindex = check(iface, spec.egress, spec.ingress)?;
    if spec.mark == 0 {
        return Err(refuse(iface, "mark 0 is every unmarked frame; accepted: 1 to 0xffffffff"));
    }
    let mtu = crate::iface::mtu(iface).unwrap_or(1500);
    let max_frame = max_frame.min(mtu as usize + 18);
    let (mut progs, mut how) = (Vec::new(), Vec::new());
    // Each device's program goes in place before the interface's way in, so no steered frame
    // reaches a device that would hand it to the host's stack.
    let egress = match spec.egress {
        false => idle(iface)?,
        true => {
            let tap = tap(iface, false, ifindex, mtu)?;
            let (name, tap_index) = (tap.name.clone(), tap.ifindex);
            let rx = tap.reader(max_frame, rx_buffer, spec.mark)?;
            let tx = AfPacketTx::open_marked(iface, max_frame, spec.mark)?;
            progs.push(Prog::on_tap(iface, &taken_program(), tap_index, BPF_TCX_INGRESS)?);
            progs.push(Prog::steering(iface, ifindex, spec.mark, tap_index, BPF_TCX_EGRESS)?);
            how.push(format!(
                "egress: tcx on {iface} -> tap {name}'s receive -> packet ring -> pathem -> AF_PACKET on {iface} (mark {:#x})",
                spec.mark
            ));
            (LiveRx::Tap(rx), LiveTx::Packet(tx))
        }
    };
    let ingress = match spec.ingress {
        false => idle(iface)?,
        true => {
            // A VLAN tag's 4 bytes above IF's MTU: a packet socket sends an untagged frame of
            // at most MTU + 14 bytes, where IF's receive takes one of MTU + 18 (a veth's does).
            let tap = tap(iface, true, ifindex, mtu.saturating_add(4).min(65_535))?;
            let (name, tap_index) = (tap.name.clone(), tap.ifindex);
            let rx = tap.reader(max_frame, rx_buffer, spec.mark)?;
            // Through the device's tc egress (not straight to its driver), with the mark.
            let tx = AfPacketTx::open_marked(&name, max_frame, spec.mark)?;
            // The way back first, so no frame is steered in before it can come out.
            let back = return_program(spec.mark, ifindex);
            progs.push(Prog::on_tap(iface, &back, tap_index, BPF_TCX_EGRESS)?);
            progs.push(Prog::on_tap(iface, &taken_program(), tap_index, BPF_TCX_INGRESS)?);
            progs.push(Prog::steering(iface, ifindex, spec.mark, tap_index, BPF_TCX_INGRESS)?);
            how.push(format!(
                "ingress: tcx on {iface} -> tap {name}'s receive -> packet ring -> pathem -> AF_PACKET on tap {name} -> {iface}'s ingress"
            ));
            (LiveRx::Tap(rx), LiveTx::Packet(tx))
        }
    };
    let steering = Steering { iface: iface.into(), progs, closed: false };
    Ok(Attached { egress, ingress, steering, how })
}

/// The tcx programs on `iface` (ingress, egress), whoever attached them: what a test checks
/// is back to what it was after pathem ends.
pub fn tcx_programs(iface: &str) -> Result<(u32, u32), Error> {
    let ifindex = crate::afpacket::ifindex(iface)? as u32;
    let q = |at| {
        crate::bpf::count(ifindex, at)
            .map_err(|e| crate::iface::failure(iface, "cannot query its tcx programs", e, "CAP_BPF"))
    };
    Ok((q(BPF_TCX_INGRESS)?, q(BPF_TCX_EGRESS)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_whole_instructions_and_names_fit() {
        assert_eq!(steer_program(DEFAULT_MARK, 7).len(), 12 * 8);
        assert_eq!(return_program(DEFAULT_MARK, 7).len(), 8 * 8);
        assert_eq!(taken_program().len(), 2 * 8);
        // The largest ifindex still makes a valid interface name (at most 15 bytes).
        assert!(tap_name(true, u32::MAX).len() <= 15);
        assert_eq!(tap_name(false, 12), "pthme12");
    }

    #[test]
    fn marks_are_decimal_or_hex_and_never_zero() {
        assert_eq!(parse_mark("0x10"), Ok(16));
        assert_eq!(parse_mark("4294967295"), Ok(u32::MAX));
        for bad in ["0", "0x0", "4294967296", "-1", "x", ""] {
            assert!(parse_mark(bad).unwrap_err().contains("accepted"), "{bad}");
        }
    }

    #[test]
    fn loopback_and_missing_interfaces_are_refused() {
        let e = check("lo", true, false).unwrap_err().to_string();
        assert!(e.contains("loopback"), "{e}");
        let e = check("no-such-if0", true, true).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
