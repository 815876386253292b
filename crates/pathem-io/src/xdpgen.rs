//! A frame generator in the kernel: one frame sent again and again by an XDP program run
//! through `BPF_PROG_TEST_RUN` in live-frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18).
//!
//! The program returns `XDP_TX`, which the test run turns into a redirect to the interface's
//! own `ndo_xdp_xmit`: on a veth the frame goes, as an `xdp_frame` without a socket buffer,
//! into the peer's receive ring and is read there by the peer's NAPI poll, as a frame from a
//! driver is. No system call, socket or copy per frame: the benchmarks' generator, so that a
//! forwarder's rate is the forwarder's and not the sender's.
//!
//! The peer must poll with NAPI: a veth peer does when it has an XDP program (an AF_XDP port)
//! or GRO on; otherwise the kernel refuses the frames and none arrive.

use crate::bpf::{bpf, insn, load, put_u32, put_u64, BPF_PROG_TYPE_XDP, BPF_XDP};
use crate::Error;
use std::os::fd::{AsRawFd, OwnedFd};

const BPF_PROG_TEST_RUN: i32 = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Frames the kernel sends between two looks for a signal or a reschedule.
const BATCH: u32 = 256;

/// Sends one frame out of an interface as fast as the kernel can.
pub struct XdpGenerator {
    prog: OwnedFd,
    frame: Vec<u8>,
    /// `struct xdp_md`: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    /// egress_ifindex.
    ctx: [u32; 6],
}

impl XdpGenerator {
    /// Loads the program, to send `frame` out of `ifname` (in the calling thread's network
    /// namespace).
    pub fn open(ifname: &str, frame: &[u8]) -> Result<XdpGenerator, Error> {
        let fail = |reason: String| Error::Interface { name: ifname.into(), reason };
        let ifindex = crate::afpacket::ifindex(ifname)? as u32;
        // SEC("xdp") int pathem_tx(struct xdp_md *ctx) { return XDP_TX; }
        let code = [insn(0xb7, 0, 0, 0, 3), insn(0x95, 0, 0, 0, 0)].concat();
        let prog = load(BPF_PROG_TYPE_XDP, BPF_XDP, &code, "pathem_gen")
            .map_err(|(e, log)| fail(format!("the kernel refused the generator's XDP program: {e} {log}")))?;
        let len = u32::try_from(frame.len()).map_err(|_| fail("frame too long".into()))?;
        Ok(XdpGenerator { prog, frame: frame.to_vec(), ctx: [0, len, 0, ifindex, 0, 0] })
    }

    /// Sends the frame `count` times (the kernel may send fewer where the peer's ring is
    /// full; the receiver's counters say how many arrived).
    pub fn send(&mut self, count: u32) -> std::io::Result<()> {
        let mut attr = [0u8; 80];
        put_u32(&mut attr, 0, self.prog.as_raw_fd() as u32);
        put_u32(&mut attr, 8, self.frame.len() as u32);
        put_u64(&mut attr, 16, self.frame.as_ptr() as u64);
        put_u32(&mut attr, 32, count);
        put_u32(&mut attr, 40, std::mem::size_of_val(&self.ctx) as u32);
        put_u64(&mut attr, 48, self.ctx.as_ptr() as u64);
        put_u32(&mut attr, 64, BPF_F_TEST_XDP_LIVE_FRAMES);
        put_u32(&mut attr, 72, BATCH);
        // SAFETY: the frame and the context are live buffers of the sizes given, only read
        // (no output buffers are set); both are owned by self for the call.
        unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr) }.map(|_| ())
    }
}
