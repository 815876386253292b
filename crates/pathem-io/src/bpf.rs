//! The bpf(2) system call and hand-assembled eBPF programs, without libbpf.
//!
//! pathem's programs are a handful of instructions each (the XDP redirect of [`crate::afxdp`],
//! the tcx steering of [`crate::attach`]); each is written out next to its C source, so the
//! default build needs no compiler for BPF and no C library. Programs are attached through BPF
//! links that are never pinned: the kernel removes them when their file descriptor closes, on
//! exit, on a crash, even after SIGKILL.

use std::os::fd::{FromRawFd, OwnedFd};

pub(crate) const BPF_MAP_CREATE: i32 = 0;
pub(crate) const BPF_MAP_UPDATE_ELEM: i32 = 2;
pub(crate) const BPF_PROG_LOAD: i32 = 5;
pub(crate) const BPF_PROG_QUERY: i32 = 16;
pub(crate) const BPF_LINK_CREATE: i32 = 28;
pub(crate) const BPF_LINK_UPDATE: i32 = 29;
pub(crate) const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
pub(crate) const BPF_PROG_TYPE_XDP: u32 = 6;
pub(crate) const BPF_XDP: u32 = 37;
pub(crate) const BPF_TCX_INGRESS: u32 = 46;
pub(crate) const BPF_TCX_EGRESS: u32 = 47;
/// `src` of a 64-bit load (`0x18`) whose immediate is a map's descriptor.
pub(crate) const BPF_PSEUDO_MAP_FD: u8 = 1;
/// Helper number of `bpf_redirect_map`.
pub(crate) const FN_REDIRECT_MAP: i32 = 51;
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The bpf(2) system call with an attribute block of `N` bytes.
///
/// # Safety
/// Every pointer `attr` holds for `cmd` (code, license, log, key, value, data in or out)
/// points to a live buffer of the size `attr` gives it, which the kernel may read or, where
/// the command writes (the log, a lookup's value, a test run's output), write during the call
/// while no reference to it is held.
pub(crate) unsafe fn bpf<const N: usize>(cmd: i32, attr: &mut [u8; N]) -> std::io::Result<i32> {
    // SAFETY: `attr` is a live, writable buffer of the size passed; the kernel reads (and for
    // some commands writes) at most that many bytes; the pointers in it are the caller's
    // promise (# Safety).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), N as u32) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// One eBPF instruction: opcode, dst and src registers, offset, immediate.
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | dst;
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    b
}

/// Takes ownership of descriptor `fd`.
///
/// # Safety
/// `fd` is an open descriptor the kernel just returned to this process, which nothing else
/// owns or will close.
pub(crate) unsafe fn owned(fd: i32) -> OwnedFd {
    // SAFETY: the caller's promise (# Safety).
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Creates a map of `map_type` with `entries` entries, each a u32 key and a u32 value (an
/// XSK map's sockets, a device map's interfaces).
pub(crate) fn map_create(map_type: u32, entries: u32) -> std::io::Result<OwnedFd> {
    let mut attr = [0u8; 72];
    put_u32(&mut attr, 0, map_type);
    put_u32(&mut attr, 4, 4);
    put_u32(&mut attr, 8, 4);
    put_u32(&mut attr, 12, entries);
    // SAFETY: the attribute holds no pointer.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?;
    // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
    Ok(unsafe { owned(fd) })
}

/// Puts `value` at `key` in `map`, a map of u32 keys and values ([`map_create`]).
pub(crate) fn map_put(map: &OwnedFd, key: u32, value: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut attr = [0u8; 32];
    put_u32(&mut attr, 0, map.as_raw_fd() as u32);
    put_u64(&mut attr, 8, &key as *const u32 as u64);
    put_u64(&mut attr, 16, &value as *const u32 as u64);
    // SAFETY: key and value are live u32s (the map's sizes) until the call returns; the
    // kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(|_| ())
}

/// Loads `code` as a program of `prog_type` for `attach_type`, named `name` (at most 15
/// bytes). On refusal, the kernel's error and the verifier's log.
///
/// The first try asks for no log: a log that outgrows its buffer makes the kernel refuse a
/// program it would accept (ENOSPC; a loop's log runs long). Only a refusal is loaded again
/// with a log, for its reason (the first error where the log overflows).
pub(crate) fn load(
    prog_type: u32,
    attach_type: u32,
    code: &[u8],
    name: &str,
) -> Result<OwnedFd, (std::io::Error, String)> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, prog_type);
    put_u32(&mut attr, 4, (code.len() / 8) as u32);
    put_u64(&mut attr, 8, code.as_ptr() as u64);
    put_u64(&mut attr, 16, license.as_ptr() as u64);
    let n = name.len().min(15);
    attr[48..48 + n].copy_from_slice(&name.as_bytes()[..n]);
    put_u32(&mut attr, 68, attach_type);
    // SAFETY: code (its length in instructions) and license (NUL-terminated) are live
    // buffers until the call returns, only read; no log is asked for.
    let error = match unsafe { bpf(BPF_PROG_LOAD, &mut attr.clone()) } {
        // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
        Ok(fd) => return Ok(unsafe { owned(fd) }),
        Err(e) => e,
    };
    put_u32(&mut attr, 24, 1);
    put_u32(&mut attr, 28, log.len() as u32);
    put_u64(&mut attr, 32, log.as_mut_ptr() as u64);
    // SAFETY: as above, and the log (its length) is live and written only by the kernel
    // during the call; nothing else refers to it meanwhile.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) } {
        // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
        Ok(fd) => Ok(unsafe { owned(fd) }),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let e = if e.raw_os_error() == Some(libc::ENOSPC) { error } else { e };
            Err((e, String::from_utf8_lossy(&log[..end]).trim().to_string()))
        }
    }
}

/// Attaches `prog` to interface `ifindex` at `attach_type` through a BPF link, after the
/// programs already there; the link (and the attachment) lasts as long as the returned fd.
pub(crate) fn link(prog: &OwnedFd, ifindex: u32, attach_type: u32, flags: u32) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let mut attr = [0u8; 64];
    put_u32(&mut attr, 0, prog.as_raw_fd() as u32);
    put_u32(&mut attr, 4, ifindex);
    put_u32(&mut attr, 8, attach_type);
    put_u32(&mut attr, 12, flags);
    // SAFETY: the attribute holds no pointer.
    let fd = unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?;
    // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
    Ok(unsafe { owned(fd) })
}

/// Puts `prog` in the place of the program `link` holds (one of the same type and attach
/// type), in one step: no frame meets neither.
pub(crate) fn update(link: &OwnedFd, prog: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut attr = [0u8; 16];
    put_u32(&mut attr, 0, link.as_raw_fd() as u32);
    put_u32(&mut attr, 4, prog.as_raw_fd() as u32);
    // SAFETY: the attribute holds no pointer.
    unsafe { bpf(BPF_LINK_UPDATE, &mut attr) }.map(|_| ())
}

/// How many programs are attached to interface `ifindex` at `attach_type` (tcx).
pub(crate) fn count(ifindex: u32, attach_type: u32) -> std::io::Result<u32> {
    let mut attr = [0u8; 64];
    put_u32(&mut attr, 0, ifindex);
    put_u32(&mut attr, 4, attach_type);
    // SAFETY: the attribute holds no pointer (no program id buffer: the count only).
    unsafe { bpf(BPF_PROG_QUERY, &mut attr) }?;
    Ok(u32::from_ne_bytes([attr[24], attr[25], attr[26], attr[27]]))
}
