//! A frame generator in XDP: every frame that reaches interface `IN` leaves interface `OUT`
//! [`COPIES`] times, sent by an XDP program on `IN` as a broadcast (`bpf_redirect_map` with
//! `BPF_F_BROADCAST`, Linux 5.13) to a device map whose every entry is `OUT`.
//!
//! The kernel copies the frame into a page of its own for each entry but the last, and hands
//! the copies to `OUT`'s `ndo_xdp_xmit` as `xdp_frame`s: on a veth `OUT` they go into the
//! peer's receive ring with no socket buffer, as the XDP generator's ([`crate::xdpgen`]) do,
//! and the peer must poll with NAPI to take them (an XDP program on it). One frame a sender
//! writes into `IN`'s peer (one socket buffer, a share of one system call) thus becomes
//! [`COPIES`] frames on the wire: the benchmarks' sender where the kernel refuses the XDP
//! generator's live frames.

use crate::bpf::{
    insn, load, map_create, map_put, BPF_PROG_TYPE_XDP, BPF_PSEUDO_MAP_FD, BPF_XDP, FN_REDIRECT_MAP,
    XDP_FLAGS_DRV_MODE,
};
use crate::Error;
use std::os::fd::{AsRawFd, OwnedFd};

/// Frames sent for each frame that arrives: the device map's entries. A veth's receive ring
/// holds 256: a sender writing frames into `IN` one system call at a time has `IN`'s poll take
/// each as it comes and the peer's poll empty the ring between two (copies beyond what the
/// ring holds, were `IN`'s poll to take several at once, are dropped at `OUT` and counted
/// there, not on the peer).
pub const COPIES: u32 = 64;
const BPF_MAP_TYPE_DEVMAP: u32 = 14;
const BPF_F_BROADCAST: i32 = 1 << 3;

/// The program in place on `IN`, with its map; dropping it detaches both.
pub struct CopyGenerator {
    _map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
}

impl CopyGenerator {
    /// Puts the program on `input` in native mode (in the calling thread's network namespace),
    /// to send each frame arriving there out of `output` [`COPIES`] times.
    /// ```c
    /// struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __uint(max_entries, COPIES); ... } outs;
    /// SEC("xdp") int pathem_copies(struct xdp_md *ctx) {
    ///     return bpf_redirect_map(&outs, 0, BPF_F_BROADCAST);  /* every entry is OUT */
    /// }
    /// ```
    pub fn attach(input: &str, output: &str) -> Result<CopyGenerator, Error> {
        let fail = |what: &str, e: std::io::Error, capability: &str| {
            crate::iface::failure(input, what, e, capability)
        };
        if !crate::iface::kernel_at_least(5, 13) {
            // An older kernel loads the program and aborts every frame: the flag is 5.13's.
            return Err(Error::Interface {
                name: input.into(),
                reason: "this kernel has no XDP broadcast (BPF_F_BROADCAST, Linux 5.13 or later)".into(),
            });
        }
        let out = crate::afpacket::ifindex(output)? as u32;
        let ifindex = crate::afpacket::ifindex(input)? as u32;
        let map = map_create(BPF_MAP_TYPE_DEVMAP, COPIES)
            .map_err(|e| fail("cannot create the device map", e, "CAP_BPF"))?;
        for key in 0..COPIES {
            map_put(&map, key, out)
                .map_err(|e| fail(&format!("cannot put {output} in the device map"), e, "CAP_BPF"))?;
        }
        let code = [
            insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map.as_raw_fd()), // 0: r1 = &outs
            insn(0, 0, 0, 0, 0),                                  // 1: (its upper half)
            insn(0xb7, 2, 0, 0, 0),                               // 2: r2 = 0
            insn(0xb7, 3, 0, 0, BPF_F_BROADCAST),                 // 3: r3 = BPF_F_BROADCAST
            insn(0x85, 0, 0, 0, FN_REDIRECT_MAP),                 // 4: call bpf_redirect_map
            insn(0x95, 0, 0, 0, 0),                               // 5: exit
        ]
        .concat();
        let prog = load(BPF_PROG_TYPE_XDP, BPF_XDP, &code, "pathem_copies").map_err(|(e, log)| {
            let log = log.lines().last().unwrap_or("").to_string();
            fail(&format!("the kernel refused the copying XDP program ({log})"), e, "CAP_BPF")
        })?;
        let link = crate::bpf::link(&prog, ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE)
            .map_err(|e| fail("cannot attach the copying XDP program", e, "CAP_NET_ADMIN"))?;
        Ok(CopyGenerator { _map: map, _prog: prog, _link: link })
    }
}
