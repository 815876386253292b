//! DPDK ports through the C shim (`shim.c`): EAL set-up once per process, and a port's
//! receiving and transmitting halves.
//!
//! - **Receive**: `rte_eth_rx_burst`; each frame is handed to the engine while it sits in its
//!   mbuf, copied once into the delay line, and the burst's mbufs go back to the pool at once.
//!   The pool is sized by the rings, not by the path's delay: the delay line holds the
//!   bandwidth-delay product.
//! - **Transmit**: `send` copies a frame into an mbuf of the port's pool and queues it; `flush`
//!   hands the queue to `rte_eth_tx_burst`, and what the device does not take stays queued for
//!   the next flush (back-pressure: `send` refuses when the queue or the pool is full, and the
//!   engine keeps the frame). At close, queued mbufs are freed and counted as still queued.
//! - **Timestamps**: where the device stamps frames (`RTE_ETH_RX_OFFLOAD_TIMESTAMP`) and its
//!   clock can be read (`rte_eth_read_clock`), its stamp moved onto CLOCK_MONOTONIC by a
//!   [`ClockFit`] refreshed each second; otherwise the clock read once per burst, corrected
//!   back along the burst at the link speed (MoonEm's software mode).
//! - **Close**: when both halves are gone the port is stopped and closed, a virtual device is
//!   removed (so that it can be opened again), and the pool's count of mbufs still in use is
//!   recorded for [`closed`] before the pool is freed: it must be zero.

use super::{eal_args, split_eal, ClockFit, Closed, Device, EalPlan, CLOSED};
use crate::afpacket::ring_drops;
use crate::filler::{FillerCounts, Placed, TxTiming, Wire};
use crate::kstamp::monotonic_now;
use crate::port::{FallbackStamps, PollAt, RxFrame, RxPort, TxPort};
use crate::Error;
use pathem_model::Nanos;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock};

/// Frames per receive burst.
const BURST: usize = 32;
/// Frames a transmitting half queues before it refuses more.
const TX_QUEUE: usize = 512;
/// Descriptors asked for per ring (the device may adjust them).
const RING: u16 = 1024;
/// mbufs per port's pool: both rings, the transmit queue and a burst, with room for the
/// per-thread caches (a power of two less one, as the mempool prefers).
const POOL: u32 = 4095;
/// How often a device clock is read again.
const CLOCK_REFRESH: Nanos = Nanos::from_secs(1);

#[repr(C)]
struct PortInfo {
    port_id: u16,
    socket: c_int,
    speed_mbps: u32,
    rx_timestamps: c_int,
    ts_offset: c_int,
    ts_flag: u64,
    rx_desc: u16,
    tx_desc: u16,
    pool_size: u32,
    data_room: u32,
    driver: [c_char; 64],
    rx_queues: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RxMeta {
    data: *const u8,
    len: u32,
    pkt_len: u32,
    stamp: u64,
    stamped: u32,
    pad: u32,
}

impl RxMeta {
    const NONE: RxMeta = RxMeta { data: std::ptr::null(), len: 0, pkt_len: 0, stamp: 0, stamped: 0, pad: 0 };

    /// The frame's bytes as the shim left them (empty when it could not gather them).
    ///
    /// # Safety
    /// `self` was written by the shim for a burst whose mbufs (and the bounce buffer it may
    /// point into) are not freed or overwritten while the slice lives, and nothing else
    /// references those bytes meanwhile.
    unsafe fn bytes<'a>(&self) -> &'a mut [u8] {
        if self.data.is_null() {
            return &mut [];
        }
        // SAFETY: the caller's contract: `data`/`len` are a frame's bytes, valid and ours.
        unsafe { std::slice::from_raw_parts_mut(self.data as *mut u8, self.len as usize) }
    }
}

type Mbuf = c_void;
type Pool = c_void;

extern "C" {
    fn pathem_dpdk_strerror(e: c_int) -> *const c_char;
    fn pathem_dpdk_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    fn pathem_dpdk_thread_register() -> c_int;
    fn pathem_dpdk_thread_unregister();
    fn pathem_dpdk_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
    fn pathem_dpdk_port_valid(port: u16) -> c_int;
    fn pathem_dpdk_port_count() -> u16;
    fn pathem_dpdk_probe(devargs: *const c_char) -> c_int;
    fn pathem_dpdk_remove(bus: *const c_char, name: *const c_char) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn pathem_dpdk_port_start(
        port: u16,
        n_mbufs: u32,
        max_frame: u32,
        rx_desc: u16,
        tx_desc: u16,
        max_rx_queues: u16,
        want_timestamps: c_int,
        pool_out: *mut *mut Pool,
        info: *mut PortInfo,
        why: *mut *const c_char,
    ) -> c_int;
    fn pathem_dpdk_port_close(port: u16);
    fn pathem_dpdk_promisc_keep(port: u16);
    fn pathem_dpdk_pool_free(pool: *mut Pool);
    fn pathem_dpdk_pool_in_use(pool: *const Pool) -> u32;
    #[allow(clippy::too_many_arguments)]
    fn pathem_dpdk_rx_burst(
        port: u16,
        queue: u16,
        m: *mut *mut Mbuf,
        n: u16,
        out: *mut RxMeta,
        bounce: *mut u8,
        bounce_each: u32,
        ts_offset: c_int,
        ts_flag: u64,
    ) -> u16;
    fn pathem_dpdk_free_bulk(m: *mut *mut Mbuf, n: u32);
    fn pathem_dpdk_tx_copy(pool: *mut Pool, data: *const u8, len: u32) -> *mut Mbuf;
    fn pathem_dpdk_tx_filler(pool: *mut Pool, hdr: *const u8, len: u32) -> *mut Mbuf;
    fn pathem_dpdk_tx_burst(port: u16, m: *mut *mut Mbuf, n: u16) -> u16;
    fn pathem_dpdk_tx_cleanup(port: u16);
    fn pathem_dpdk_stats(port: u16, out: *mut u64) -> c_int;
    fn pathem_dpdk_read_clock(port: u16, clock: *mut u64) -> c_int;
    fn pathem_dpdk_rx_stamp_field(offset: *mut c_int, flag: *mut u64) -> c_int;
}

fn strerror(e: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(pathem_dpdk_strerror(e.abs())) }.to_string_lossy().into_owned()
}

fn fail(dev: &str, reason: impl Into<String>) -> Error {
    Error::Dpdk { dev: dev.into(), reason: reason.into() }
}

fn cstring(dev: &str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| fail(dev, "contains a NUL byte"))
}

/// Runs `f` with standard output and standard error going to a temporary file, and returns
/// what was written there: the EAL and the drivers print their failures (and the EAL its whole
/// usage text) themselves, and pathem reports a failure in one line of its own. Output written
/// meanwhile by other threads is caught too, and given back.
fn captured<T>(f: impl FnOnce() -> T) -> (T, String) {
    let Ok(mut file) = tempfile::tempfile() else { return (f(), String::new()) };
    use std::io::{Read, Seek};
    use std::os::fd::AsRawFd;
    // SAFETY: dup and dup2 on the process's standard descriptors and a file we own; the saved
    // descriptors are put back and closed below, on every path. C stdio is flushed first so
    // nothing buffered before lands in the file, and after so nothing caught stays buffered.
    let saved = unsafe {
        libc::fflush(std::ptr::null_mut());
        let saved = [libc::dup(1), libc::dup(2)];
        if saved.iter().any(|&d| d < 0) {
            for d in saved.into_iter().filter(|&d| d >= 0) {
                libc::close(d);
            }
            None
        } else {
            libc::dup2(file.as_raw_fd(), 1);
            libc::dup2(file.as_raw_fd(), 2);
            Some(saved)
        }
    };
    let out = f();
    if let Some([o, e]) = saved {
        // SAFETY: puts back the descriptors saved above and closes the copies.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(o, 1);
            libc::dup2(e, 2);
            libc::close(o);
            libc::close(e);
        }
    }
    let mut text = String::new();
    let _ = file.rewind();
    let _ = file.read_to_string(&mut text);
    (out, text)
}

/// The line of DPDK's own output that says what went wrong: one that names an option, a fatal
/// error or an error, else the first; before the usage text the EAL prints after its
/// complaint (whose banner, `Usage: pathem [options]`, names options too).
fn telling_line(text: &str) -> Option<&str> {
    let said = text.split("Usage:").next().filter(|s| !s.trim().is_empty()).unwrap_or(text);
    let lines = || said.lines().map(str::trim).filter(|l| !l.is_empty());
    let keys = ["option", "FATAL", "Error", "error", "Cannot", "cannot", "Invalid", "invalid"];
    keys.iter().find_map(|k| lines().find(|l| l.contains(k))).or_else(|| lines().next())
}

/// Passes on what DPDK printed while it worked (warnings the user should still see).
fn pass_on(text: &str) {
    if !text.trim().is_empty() {
        // Lost if stderr cannot be written (no panic, as eprint! would).
        let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
    }
}

/// The EAL's initialisation: once per process, its outcome kept for every later port.
static EAL: OnceLock<Result<EalPlan, String>> = OnceLock::new();

/// Initialises the EAL for `devices` with the user's `--eal` words (see [`eal_args`]); later
/// calls return the first call's outcome. The calling thread's CPU affinity is put back
/// afterwards (the EAL pins it to its main lcore).
pub fn init(eal: Option<&str>, devices: &[Device]) -> Result<EalPlan, Error> {
    let user = split_eal(eal.unwrap_or(""))?;
    let outcome = EAL.get_or_init(|| {
        let affinity = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok();
        let first_cpu = affinity
            .as_ref()
            .and_then(|set| (0..nix::sched::CpuSet::count()).find(|&c| set.is_set(c).unwrap_or(false)))
            .unwrap_or(0);
        let hugepages = crate::proc_kb("/proc/meminfo", "Hugetlb").unwrap_or(0);
        let plan = eal_args(&user, devices, first_cpu, hugepages);
        let words: Vec<CString> = plan
            .args
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| format!("EAL argument `{a}` contains a NUL byte")))
            .collect::<Result<_, _>>()?;
        // rte_eal_init may permute argv; it gets its own array of pointers into `words`.
        let mut argv: Vec<*mut c_char> = words.iter().map(|w| w.as_ptr() as *mut c_char).collect();
        argv.push(std::ptr::null_mut());
        // SAFETY: argv holds argc pointers to NUL-terminated strings that outlive the call,
        // then a null; the EAL reads them and may reorder the pointer array, which is ours.
        let (r, said) = captured(|| unsafe { pathem_dpdk_eal_init(words.len() as c_int, argv.as_mut_ptr()) });
        if let Some(set) = affinity {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
        if r < 0 {
            let hint = if plan.args.iter().any(|a| a == "--no-huge") {
                "check the --eal arguments"
            } else {
                "reserve hugepages (echo 1024 > /proc/sys/vm/nr_hugepages) or add --eal \"--no-huge\" for virtual devices"
            };
            let eal_said = telling_line(&said).map(|l| format!(" (it said: {l})")).unwrap_or_default();
            return Err(format!(
                "EAL initialisation failed with `{}`{eal_said}: {hint}",
                plan.args[1..].join(" ")
            ));
        }
        pass_on(&said);
        Ok(plan)
    });
    outcome.clone().map_err(|e| fail("eal", e))
}

/// A started port, shared by its two halves; stopped, closed and its pool freed when the
/// last half is dropped.
struct Port {
    id: u16,
    pool: *mut Pool,
    label: String,
    /// A virtual device's name, removed from the vdev bus at close.
    vdev: Option<String>,
    pool_size: u32,
    /// mbufs in use right after start (the driver's receive buffers).
    at_start: u32,
    driver: String,
    /// AF_XDP sockets the driver opened for this port, closed after the port if it left them.
    xdp_sockets: Vec<RawFd>,
    /// net_af_packet's sockets (one per queue pair), whose kernel ring drops pathem reads.
    ring_sockets: Vec<RawFd>,
    /// net_af_packet on a veth: the XDP program that stops the peer's segmentation offload,
    /// or why it could not be attached.
    whole_frames: Option<Result<crate::afxdp::FixedVerdict, Error>>,
}

// SAFETY: the port id and pool pointer are handles into DPDK's shared memory; ethdev allows
// its rx queue and tx queue to be used from different threads, each half owns one queue and
// uses it from one thread at a time, and mempools are safe for concurrent use.
unsafe impl Send for Port {}
// SAFETY: as above; the shared methods (`stats`) only read device counters.
unsafe impl Sync for Port {}

impl Port {
    /// ipackets, imissed, ierrors, rx_nombuf, opackets, oerrors.
    fn stats(&self) -> [u64; 6] {
        let mut out = [0u64; 6];
        // SAFETY: `out` has the six u64 the shim writes; the port id is valid until close.
        if unsafe { pathem_dpdk_stats(self.id, out.as_mut_ptr()) } != 0 {
            return [0; 6];
        }
        out
    }
}

/// The ids of the ports pathem holds open: a second port on the same device (another name
/// for it: a port id, another spelling of its address) is refused before it is touched, where
/// its failed start used to close the first port's device.
static HELD: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<u16>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Port {
    fn drop(&mut self) {
        held().retain(|&id| id != self.id);
        // SAFETY: both halves are gone (this is the last reference), so no queue is in use;
        // the port is stopped and closed once.
        unsafe { pathem_dpdk_port_close(self.id) };
        let in_use = (!self.pool.is_null()).then(|| {
            // SAFETY: the closed device no longer references the pool; it is counted, then
            // freed once.
            unsafe {
                let n = pathem_dpdk_pool_in_use(self.pool);
                pathem_dpdk_pool_free(self.pool);
                n
            }
        });
        // net_af_xdp (22.11) does not close its socket at close (it shares its descriptor with
        // the UMEM it then forgets), which keeps the interface's queue bound: a later open
        // fails with EBUSY. Checked right after the close, so no other socket can have taken
        // the descriptor meanwhile.
        let mut sockets_closed = 0;
        for &fd in &self.xdp_sockets {
            if socket_domain(fd) == Some(libc::AF_XDP) {
                // SAFETY: `fd` is the driver's AF_XDP socket of this port, which the closed
                // driver no longer uses; nothing else in pathem holds it.
                unsafe { libc::close(fd) };
                sockets_closed += 1;
            }
        }
        if let Some(name) = &self.vdev {
            if let Ok(c) = CString::new(name.as_str()) {
                // SAFETY: both strings are NUL-terminated and live for the call.
                unsafe { pathem_dpdk_remove(c"vdev".as_ptr(), c.as_ptr()) };
            }
        }
        // A port that failed before it had a pool has nothing to report.
        if let Some(in_use) = in_use {
            CLOSED.lock().unwrap_or_else(|e| e.into_inner()).push(Closed {
                port: self.label.clone(),
                driver: self.driver.clone(),
                in_use,
                at_start: self.at_start,
                pool: self.pool_size,
                sockets_closed,
            });
        }
    }
}

/// How received frames are stamped.
#[derive(Clone)]
enum Stamps {
    /// The device's clock, fitted to CLOCK_MONOTONIC.
    Device { fit: ClockFit, at: Nanos },
    /// The clock read per burst, corrected back along the burst at the link speed.
    Software,
    /// A capture's own times (net_pcap, microseconds), moved onto CLOCK_MONOTONIC by the
    /// offset of the first stamped frame: frames are handed on when their time comes, so they
    /// reach the path with the capture's spacing however fast the driver reads the file.
    Capture { offset: Option<i128> },
}

/// A thread's registration with the EAL, undone when the thread ends.
struct Registered(bool);

impl Drop for Registered {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: the thread registered itself below and is ending; no mbuf operation of
            // it follows.
            unsafe { pathem_dpdk_thread_unregister() };
        }
    }
}

thread_local! {
    static REGISTERED: std::cell::RefCell<Option<Registered>> = const { std::cell::RefCell::new(None) };
}

/// Registers the calling thread with the EAL the first time it touches a port, so it gets an
/// lcore id and with it the mempools' per-lcore caches: without one, every mbuf taken or
/// given back is an atomic operation on the pool's shared ring.
fn register_thread() {
    REGISTERED.with(|r| {
        let mut r = r.borrow_mut();
        if r.is_none() {
            // SAFETY: registers this thread (a no-op if it has an lcore id already).
            *r = Some(Registered(unsafe { pathem_dpdk_thread_register() } == 0));
        }
    });
}

/// One reading of (CLOCK_MONOTONIC, device clock), the monotonic one the middle of two reads
/// around the device's.
fn read_clock(port: u16) -> Option<(u64, u64)> {
    let before = monotonic_now().as_nanos();
    let mut ticks = 0u64;
    // SAFETY: writes one u64 into `ticks`; the port id is valid while the port is open.
    let r = unsafe { pathem_dpdk_read_clock(port, &mut ticks) };
    let after = monotonic_now().as_nanos();
    (r == 0).then_some((before + (after - before) / 2, ticks))
}

/// The receiving half of a DPDK port.
pub struct DpdkRx {
    port: Arc<Port>,
    mbufs: [*mut Mbuf; BURST],
    meta: [RxMeta; BURST],
    /// Where a frame spread over several segments is gathered (one `bounce_each` per slot).
    bounce: Vec<u8>,
    bounce_each: usize,
    ts: Option<(c_int, u64)>,
    stamps: Stamps,
    line_rate: u64,
    last_arrival: Nanos,
    more: bool,
    /// net_af_packet reports no drops of its own: the kernel's count of frames its ring had no
    /// room for is read from the driver's packet socket, as pathem's AF_PACKET port reads its own.
    ring_sockets: Vec<RawFd>,
    ring_drops: u64,
    /// Receive queues this half reads, and the index of the one read first next time (they
    /// take turns being first, so none waits behind the others for long).
    queues: Vec<u16>,
    next_queue: usize,
    /// The device's drop counters are this half's to report (the first half of a split).
    device_drops: bool,
    /// This half's thread has an lcore id (see [`register_thread`]); a half stays on its thread.
    registered: bool,
    offload: crate::offload::OffloadCounts,
    /// With capture stamps: the last burst's frames `pos..pending` wait in their mbufs until
    /// their arrival (`arrivals`) comes; the burst's mbufs are freed before the next is read.
    pending: usize,
    pos: usize,
    arrivals: [Nanos; BURST],
}

// SAFETY: the mbufs a half holds between calls (capture stamps: a burst not yet handed on)
// are its own until freed, and the port's rx queue is used only by this half.
unsafe impl Send for DpdkRx {}

impl Drop for DpdkRx {
    fn drop(&mut self) {
        if self.pending > 0 {
            // SAFETY: mbufs[..pending] came from rx_burst and were not freed.
            unsafe { pathem_dpdk_free_bulk(self.mbufs.as_mut_ptr(), self.pending as u32) };
        }
    }
}

/// The transmitting half of a DPDK port.
pub struct DpdkTx {
    port: Arc<Port>,
    /// mbufs queued for `rte_eth_tx_burst`, `queue[..len]`.
    queue: Box<[*mut Mbuf; TX_QUEUE]>,
    len: usize,
    /// Longest frame an mbuf holds.
    max_frame: usize,
    registered: bool,
    /// The device's transmit errors as last read, and when.
    refused: crate::port::TxRefused,
    refused_at: Nanos,
    /// With `--tx-timing filler`: the wire's plan and the fillers' make.
    filling: Option<Box<Filling>>,
    /// A virtual device's kernel interface (net_af_packet, net_af_xdp): frames the kernel
    /// drops there for want of a carrier leave no error for the driver to see, so the carrier
    /// is read at a flush (at most every 10 ms) and the frames queued without one are
    /// refused as `down` there (not at `send`: a reading older than 10 ms is renewed first).
    carrier: Option<Carrier>,
    /// Beside the transmit queue: each queued frame's length (to count what is refused).
    lens: Box<[u32; TX_QUEUE]>,
}

struct Carrier {
    reader: crate::iface::CarrierReader,
    up: bool,
    read_at: Nanos,
}

/// A transmitting half that times frames on the wire with filler frames ([`crate::filler`]).
struct Filling {
    wire: Wire,
    header: [u8; 14],
    lead: Nanos,
    counts: FillerCounts,
    /// The fillers before the frame being placed, by length (reused).
    lens: Vec<usize>,
    /// Beside the transmit queue: each entry's filler length, 0 for a real frame. Fillers are
    /// counted when the device takes them, so those still queued at close are not.
    in_queue: Box<[u16; TX_QUEUE]>,
    /// The clock, read at the first frame after a flush: the frames handed in one round are
    /// planned against one reading, not one per frame.
    now: Option<Nanos>,
}

// SAFETY: the queued mbufs belong to this half alone until the device takes them; the port's
// tx queue is used only by this half.
unsafe impl Send for DpdkTx {}

/// Opens the port `dev` for frames up to `max_frame` bytes (initialising the EAL with `eal`
/// if no port did before). Returns its halves and how it was opened, in words.
pub fn open(
    spec: &str,
    dev: &Device,
    max_frame: usize,
    eal: Option<&str>,
    timing: &TxTiming,
) -> Result<(DpdkRx, DpdkTx, String), Error> {
    init(eal, std::slice::from_ref(dev))?;
    // A virtual device on a kernel interface sends through that interface, whose MTU is the
    // user's: frames longer than it are not asked for (nor the MTU raised to carry them).
    let max_frame = crate::iface::frame_cap(dev.kernel_iface(), max_frame);
    slots_hold_the_mtu(dev)?;
    queue_pairs_within(dev)?;
    // A net_af_xdp device on an interface whose AF_XDP queue was released a moment ago may
    // find it still taken (the kernel frees it from a work queue): such a start is tried
    // again. Other drivers' failures would fail again (and each try may take seconds).
    let xdp = matches!(dev, Device::Vdev { name, .. } if name.starts_with("net_af_xdp"));
    let mut tries = 0;
    let (port, info) = loop {
        match start(spec, dev, max_frame) {
            Ok(started) => break started,
            Err(Failed::Start(e)) if xdp && tries < START_TRIES => {
                tries += 1;
                drop(e);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(Failed::Start(e) | Failed::Find(e)) => return Err(e),
        }
    };
    let id = port.id;
    let driver = port.driver.clone();
    let speed_mbps = match info.speed_mbps {
        0 => (pathem_model::units::DEFAULT_LINE_RATE.0 / 1_000_000) as u32,
        s => s,
    };
    let line_rate = u64::from(speed_mbps) * 1_000_000;
    let now = monotonic_now();
    // net_pcap reading a capture file (not an interface, whose stamps are the host's clock).
    let reads_file = matches!(dev, Device::Vdev { devargs, .. } if devargs.contains("rx_pcap="));
    let capture = match (info.rx_timestamps, driver.as_str()) {
        (0, "net_pcap") if reads_file => {
            let (mut offset, mut flag) = (0, 0);
            // SAFETY: writes one int and one u64 into the locals.
            (unsafe { pathem_dpdk_rx_stamp_field(&mut offset, &mut flag) } == 0).then_some((offset, flag))
        }
        _ => None,
    };
    let (stamps, stamp_words) = match info.rx_timestamps != 0 {
        _ if capture.is_some() => (
            Stamps::Capture { offset: None },
            "receive stamps from the capture (net_pcap, microseconds): frames handed on at their capture times' spacing".to_string(),
        ),
        true => match device_fit(id) {
            Some(fit) => (Stamps::Device { fit, at: now }, format!("receive stamps from the device clock ({:.3} MHz)", fit.hz() / 1e6)),
            None => (
                Stamps::Software,
                format!("software receive stamps per burst, corrected at {speed_mbps} Mbit/s (the device stamps frames but its clock cannot be read)"),
            ),
        },
        false => (Stamps::Software, format!("software receive stamps per burst, corrected at {speed_mbps} Mbit/s")),
    };
    let whole = match &port.whole_frames {
        None => String::new(),
        Some(Ok(_)) => ", the veth peer segments its own super-frames (pass-through XDP program)".into(),
        Some(Err(e)) => format!(
            "; a local sender's super-frames will be truncated ({e}): use afpacket: or net_af_xdp on this veth"
        ),
    };
    let queues = match info.rx_queues {
        0 | 1 => String::new(),
        n if driver == "net_af_packet" => format!(
            ", {n} receive queues (a packet fanout by flow hash that moves frames off a full queue's ring onto another: such a frame can pass its flow's earlier ones, counted as rolled over; qpairs=1 keeps every flow in order)"
        ),
        n => format!(", {n} receive queues"),
    };
    let (filling, timed) = match timing {
        TxTiming::Software => (None, String::new()),
        TxTiming::Filler(f) => {
            let (filling, words) = filling(spec, f, &info, max_frame, &driver)?;
            (Some(Box::new(filling)), words)
        }
    };
    let how = format!(
        "DPDK {driver} (port {id}, {} rx / {} tx descriptors, {} mbufs of {} B, {stamp_words}{whole}{queues}{timed})",
        info.rx_desc, info.tx_desc, info.pool_size, info.data_room
    );
    let bounce_each = max_frame.max(1);
    let ring_sockets = port.ring_sockets.clone();
    let rx = DpdkRx {
        port: port.clone(),
        mbufs: [std::ptr::null_mut(); BURST],
        meta: [RxMeta::NONE; BURST],
        bounce: vec![0; BURST * bounce_each],
        bounce_each,
        ts: capture.or((info.rx_timestamps != 0).then_some((info.ts_offset, info.ts_flag))),
        stamps,
        line_rate,
        last_arrival: Nanos::ZERO,
        more: false,
        ring_sockets,
        ring_drops: 0,
        queues: (0..info.rx_queues.max(1)).collect(),
        next_queue: 0,
        device_drops: true,
        registered: false,
        offload: Default::default(),
        pending: 0,
        pos: 0,
        arrivals: [Nanos::ZERO; BURST],
    };
    let tx = DpdkTx {
        port,
        queue: Box::new([std::ptr::null_mut(); TX_QUEUE]),
        len: 0,
        // The mbufs' room, or the transmitting interface's MTU where a virtual device sends
        // through one (the room is at least DPDK's default, above a 1500-byte MTU's frames):
        // a longer frame is dropped before the path as oversize, not refused by the kernel.
        max_frame: (info.data_room as usize).min(max_frame),
        registered: false,
        refused: Default::default(),
        refused_at: Nanos::ZERO,
        carrier: match (&filling, dev.kernel_iface()) {
            (None, Some(iface)) => Some(Carrier {
                reader: crate::iface::CarrierReader::for_port(iface)?,
                up: true,
                read_at: Nanos::ZERO,
            }),
            _ => None,
        },
        filling,
        lens: Box::new([0; TX_QUEUE]),
    };
    Ok((rx, tx, how))
}

/// Frames the kernel's fanout moved from packet socket `fd` to another socket of its group
/// because `fd`'s ring had no room for them (`PACKET_FANOUT_FLAG_ROLLOVER`), since the socket
/// joined the group: PACKET_ROLLOVER_STATS, which does not reset. `None` for a socket in no
/// group with rollover (the kernel keeps no count for it).
fn rolled_over(fd: RawFd) -> Option<u64> {
    // SAFETY: tpacket_rollover_stats is three u64 counters.
    let st: libc::tpacket_rollover_stats =
        unsafe { crate::afpacket::get_opt(fd, libc::SOL_PACKET, libc::PACKET_ROLLOVER_STATS) }.ok()?;
    Some(st.tp_all)
}

/// net_af_packet reads each frame into a ring slot of `framesz=` bytes (2048 unless given),
/// behind the kernel's header: the kernel cuts a longer frame to the slot, and the driver hands
/// on the cut frame as if whole, so pathem would forward it short and count it as sent. An
/// interface whose MTU makes frames longer than a slot holds is refused.
fn slots_hold_the_mtu(dev: &Device) -> Result<(), Error> {
    let Device::Vdev { name, .. } = dev else { return Ok(()) };
    let Some(iface) = dev.kernel_iface().filter(|_| name.starts_with("net_af_packet")) else { return Ok(()) };
    let framesz: u32 = dev.devarg("framesz").and_then(|v| v.parse().ok()).unwrap_or(2048);
    // TPACKET_V2's header and address (52 B) and at least 16 B for the MAC header, aligned to
    // 16: the network header starts 80 B into the slot, the frame 66 B (a ping of 4000 B
    // through an MTU of 9000 arrived cut to 1982 B). A VLAN tag may stay in the frame: 18 B
    // of header and tag on top of the MTU.
    let room = framesz.saturating_sub(66);
    match crate::iface::mtu(iface) {
        Some(mtu) if mtu.saturating_add(18) > room => Err(Error::Interface {
            name: iface.into(),
            reason: format!(
                "has MTU {mtu}: net_af_packet's ring slots ({framesz} B) hold frames of at most {room} B, and the kernel would cut longer ones, which the driver hands on as if whole; lower the MTU to {} or less, or use afpacket:{iface}",
                room.saturating_sub(18)
            ),
        }),
        _ => Ok(()),
    }
}

/// net_af_packet's `qpairs=` above the receive queues pathem reads is refused before the
/// driver is probed (it would set up every ring first, seconds each, and fail at the end).
fn queue_pairs_within(dev: &Device) -> Result<(), Error> {
    let Device::Vdev { name, .. } = dev else { return Ok(()) };
    match dev.devarg("qpairs").map(str::parse::<u64>) {
        Some(Ok(n)) if name.starts_with("net_af_packet") && n > crate::MAX_RX_QUEUES as u64 => Err(fail(
            name,
            format!("qpairs={n}: accepted: 1 to {} (the receive queues a port reads)", crate::MAX_RX_QUEUES),
        )),
        _ => Ok(()),
    }
}

/// A transmitting half's filler timing for `f` on the port `spec` just started (`info`), and
/// how it is done, in words; refused where the port reports no link speed and none is given,
/// or sends shorter frames than `max=`.
fn filling(
    spec: &str,
    f: &crate::filler::FillerSpec,
    info: &PortInfo,
    max_frame: usize,
    driver: &str,
) -> Result<(Filling, String), Error> {
    let rate = match (f.line_rate, info.speed_mbps) {
        (Some(r), _) => r,
        (None, 0) => {
            return Err(fail(spec, "--tx-timing filler needs --line-rate: the port reports no link speed"))
        }
        (None, s) => pathem_model::units::Rate(u64::from(s) * 1_000_000),
    };
    let longest = crate::filler::longest(max_frame.min(info.data_room as usize));
    if f.max > longest {
        let why = format!("--tx-timing filler,max={}: the port sends frames of at most {longest} B", f.max);
        return Err(fail(spec, why));
    }
    // net_pcap writing a capture has no clocked wire: its plan follows the frames.
    let (wire, unclocked) = match driver {
        "net_pcap" => (
            Wire::new(rate, f.max).unclocked(f.lead),
            "; the capture is the wire: its plan follows the frames, not the clock, silences over 1ms cut",
        ),
        _ => (Wire::new(rate, f.max), ""),
    };
    let words = format!(
        ", transmit timed by filler frames of up to {} B at {rate} (frames handed {} ahead{unclocked})",
        f.max, f.lead
    );
    let filling = Filling {
        wire,
        header: f.header(),
        lead: f.lead,
        counts: Default::default(),
        lens: Vec::new(),
        in_queue: Box::new([0; TX_QUEUE]),
        now: None,
    };
    Ok((filling, words))
}

/// Attempts at starting a virtual device before giving up.
const START_TRIES: u32 = 20;

/// The device string to probe where it is not the one given (`None`: as given): a net_af_xdp
/// device on an interface with several receive queues, given no `queue_count=` and starting
/// at queue 0, reads them all (`queue_count=N` added), as the driver's default of one would
/// leave the other queues' frames to the kernel's stack, unseen by pathem. The driver binds
/// only to combined channels (`ethtool -l`): where an interface has fewer of those than
/// receive queues (a veth has none), it is refused.
fn every_queue(spec: &str, dev: &Device) -> Result<Option<String>, Error> {
    let Device::Vdev { name, devargs } = dev else { return Ok(None) };
    let Some(iface) = dev.devarg("iface") else { return Ok(None) };
    let from_zero = dev.devarg("start_queue").is_none_or(|q| q.trim() == "0");
    let queues = crate::iface::rx_queues(iface);
    if !name.starts_with("net_af_xdp") || dev.devarg("queue_count").is_some() || !from_zero || queues < 2 {
        return Ok(None);
    }
    let combined = crate::iface::combined_channels(iface).unwrap_or(0) as usize;
    if queues > crate::MAX_RX_QUEUES {
        return Err(Error::Dpdk {
            dev: spec.into(),
            reason: format!(
                "{iface} has {queues} receive queues; pathem reads at most {}",
                crate::MAX_RX_QUEUES
            ),
        });
    }
    if combined < queues {
        return Err(Error::Dpdk {
            dev: spec.into(),
            reason: format!(
                "{iface} has {queues} receive queues and net_af_xdp binds only to its {combined} combined channels: frames on the others would not reach pathem; use afxdp:{iface} (it reads every queue), or say queue_count= to read fewer on purpose"
            ),
        });
    }
    Ok(Some(format!("{devargs},queue_count={queues}")))
}

/// Why [`start`] failed: the device is not there, or it would not start.
enum Failed {
    Find(Error),
    Start(Error),
}

/// Finds (or probes) and starts the port: its shared part and what the shim said of it.
fn start(spec: &str, dev: &Device, max_frame: usize) -> Result<(Arc<Port>, PortInfo), Failed> {
    let before = sockets();
    let id = find(spec, dev).map_err(Failed::Find)?;
    if held().contains(&id) {
        return Err(Failed::Find(fail(
            spec,
            format!("is the device the other port opened (DPDK port {id}): pathem forwards between two different devices"),
        )));
    }
    let mut pool: *mut Pool = std::ptr::null_mut();
    // SAFETY: PortInfo is plain data (integers and a char array); zero is valid.
    let mut info: PortInfo = unsafe { std::mem::zeroed() };
    let mut why: *const c_char = std::ptr::null();
    let max_rx = crate::MAX_RX_QUEUES as u16;
    // A kernel interface the administrator made promiscuous stays so after the run (the
    // driver's own flag starts off, and turning it off at close would clear the interface's).
    let promiscuous = dev.kernel_iface().is_some_and(crate::iface::is_promiscuous);
    // SAFETY: the out-pointers point at locals that live for the call; `id` is a valid port.
    let (r, said) = captured(|| unsafe {
        pathem_dpdk_port_start(
            id,
            POOL,
            max_frame as u32,
            RING,
            RING,
            max_rx,
            1,
            &mut pool,
            &mut info,
            &mut why,
        )
    });
    if promiscuous {
        // SAFETY: only clears the shim's note for this port id.
        unsafe { pathem_dpdk_promisc_keep(id) };
    }
    // What the driver opened for this port (probing and starting it).
    let opened: Vec<(RawFd, i32, i32)> = sockets().into_iter().filter(|s| !before.contains(s)).collect();
    let vdev = match dev {
        Device::Vdev { name, .. } => Some(name.clone()),
        _ => None,
    };
    let at_start = match pool.is_null() {
        true => 0,
        // SAFETY: a pool the shim created and nothing freed yet.
        false => unsafe { pathem_dpdk_pool_in_use(pool) },
    };
    // SAFETY: the shim wrote a NUL-terminated name into the 64-byte array (zeroed before).
    let driver = unsafe { CStr::from_ptr(info.driver.as_ptr()) }.to_string_lossy().into_owned();
    // net_af_packet's packet sockets on the interface (not the unbound one it opens to look
    // the interface up).
    let ifindex = dev.kernel_iface().and_then(|i| crate::afpacket::ifindex(i).ok());
    let ring_sockets = match driver.as_str() {
        "net_af_packet" => {
            opened.iter().filter(|s| s.1 == libc::AF_PACKET && Some(s.2) == ifindex).map(|s| s.0).collect()
        }
        _ => Vec::new(),
    };
    // net_af_packet reads frames into ring slots of about 2 KB: a super-frame from a local
    // sender on a veth peer would be truncated. A pass-through XDP program on the veth makes
    // the peer's stack segment them itself (frames a NIC receives are wire frames already).
    let whole_frames = match (driver.as_str(), dev.kernel_iface()) {
        ("net_af_packet", Some(i)) if crate::iface::driver(i).as_deref() == Some("veth") => {
            Some(crate::afxdp::pass_through(i))
        }
        _ => None,
    };
    // From here the port is closed (and its pool freed) when dropped, also on failure.
    let port = Arc::new(Port {
        id,
        pool,
        label: format!("dpdk:{}", dev_label(dev, id)),
        vdev,
        pool_size: info.pool_size,
        at_start,
        driver,
        xdp_sockets: opened.iter().filter(|s| s.1 == libc::AF_XDP).map(|s| s.0).collect(),
        ring_sockets,
        whole_frames,
    });
    held().push(id);
    if r != 0 {
        // SAFETY: `why` is null or points at one of the shim's static strings.
        let step = if why.is_null() {
            "start".into()
        } else {
            unsafe { CStr::from_ptr(why) }.to_string_lossy().into_owned()
        };
        drop(port);
        let said = telling_line(&said).map(|l| format!("; it said: {l}")).unwrap_or_default();
        return Err(Failed::Start(fail(spec, format!("{step} failed ({}{said})", strerror(r)))));
    }
    pass_on(&said);
    Ok((port, info))
}

fn dev_label(dev: &Device, id: u16) -> String {
    match dev {
        Device::Pci { addr, .. } => addr.clone(),
        Device::Vdev { name, .. } => name.clone(),
        Device::PortId(_) => id.to_string(),
    }
}

/// The device's clock fitted over 10 ms, or `None` when it cannot be read.
fn device_fit(id: u16) -> Option<ClockFit> {
    let a = read_clock(id)?;
    std::thread::sleep(std::time::Duration::from_millis(10));
    ClockFit::new(a, read_clock(id)?)
}

/// The sockets this process holds: descriptor, domain (`AF_PACKET`, `AF_XDP`, …) and, for a
/// packet socket, the interface it is bound to (else 0). Drivers open sockets of their own
/// that DPDK does not expose; pathem finds them by what is new after a port starts.
fn sockets() -> Vec<(RawFd, i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter_map(|fd| {
            let domain = socket_domain(fd)?;
            // SAFETY: sockaddr_ll is plain data; getsockname writes at most `len` bytes into it.
            let mut sa: libc::sockaddr_ll = unsafe { zeroed() };
            let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            let ifindex = match domain == libc::AF_PACKET
                // SAFETY: as above; `fd` is a socket of this process.
                && unsafe { libc::getsockname(fd, &mut sa as *mut _ as *mut libc::sockaddr, &mut len) } == 0
            {
                true => sa.sll_ifindex,
                false => 0,
            };
            Some((fd, domain, ifindex))
        })
        .collect()
}

/// The domain of socket `fd`, or `None` when `fd` is not an open socket.
fn socket_domain(fd: RawFd) -> Option<i32> {
    let mut domain: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: writes one int into `domain`; fails harmlessly on a descriptor that is not a
    // socket (or is closed).
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            &mut domain as *mut c_int as *mut c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(domain)
}

/// The port id of `dev`, probing a virtual device (or a PCI device the EAL did not take) if
/// it is not there yet.
fn find(spec: &str, dev: &Device) -> Result<u16, Error> {
    if let Device::PortId(id) = dev {
        // SAFETY: a plain query of the ethdev table.
        if unsafe { pathem_dpdk_port_valid(*id) } == 1 {
            return Ok(*id);
        }
        // SAFETY: as above.
        let n = unsafe { pathem_dpdk_port_count() };
        return Err(fail(
            spec,
            format!("no DPDK port {id} ({n} probed); bind the NIC with `dpdk-devbind.py -b vfio-pci ADDR` or name it by PCI address"),
        ));
    }
    let name = cstring(spec, dev.port_name().unwrap_or_default())?;
    let lookup = || {
        let mut id = 0u16;
        // SAFETY: `name` is NUL-terminated; `id` is a local the shim writes.
        (unsafe { pathem_dpdk_port_by_name(name.as_ptr(), &mut id) } == 0).then_some(id)
    };
    if let Some(id) = lookup() {
        return Ok(id);
    }
    let devargs = match dev {
        Device::Vdev { devargs, .. } => every_queue(spec, dev)?.unwrap_or_else(|| devargs.clone()),
        Device::Pci { addr, args: Some(a) } => format!("{addr},{a}"),
        Device::Pci { addr, args: None } => addr.clone(),
        Device::PortId(_) => unreachable!("handled above"),
    };
    let c = cstring(spec, &devargs)?;
    // SAFETY: `c` is NUL-terminated and lives for the call.
    let (r, said) = captured(|| unsafe { pathem_dpdk_probe(c.as_ptr()) });
    match (r, lookup()) {
        (0, Some(id)) => {
            pass_on(&said);
            Ok(id)
        }
        _ => {
            let said = telling_line(&said).map(|l| format!("; it said: {l}")).unwrap_or_default();
            let hint = match dev {
                Device::Pci { .. } => {
                    "bind the NIC to vfio-pci (`dpdk-devbind.py -b vfio-pci ADDR`), reserve hugepages, and check `-a` in --eal"
                }
                _ => "check the driver name and its arguments (iface= an interface that exists and is up)",
            };
            Err(fail(spec, format!("cannot probe the device ({}{said}): {hint}", strerror(r))))
        }
    }
}

impl DpdkRx {
    fn refresh(&mut self, now: Nanos) {
        match &mut self.stamps {
            Stamps::Device { fit, at } if now.saturating_sub(*at) > CLOCK_REFRESH => {
                if let Some(r) = read_clock(self.port.id) {
                    fit.refresh(r);
                }
                *at = now;
            }
            _ => {}
        }
    }
}

impl RxPort for DpdkRx {
    /// Reads the receive queues in turn (the first one rotating) until `max` frames or every
    /// queue read once; each queue's burst is stamped as it is read, so the frames reach the
    /// path in the order pathem took them.
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        if !self.registered {
            register_thread();
            self.registered = true;
        }
        self.refresh(now);
        if matches!(self.stamps, Stamps::Capture { .. }) {
            return Ok(self.recv_capture(now, max, &mut f));
        }
        let want = max.min(BURST);
        let (mut got, mut more) = (0, false);
        let (first, count) = (self.next_queue, self.queues.len());
        self.next_queue = (first + 1) % count;
        for k in 0..count {
            if got == want {
                more = true;
                break;
            }
            let n = self.recv_queue(self.queues[(first + k) % count], now, want - got, &mut f);
            more |= n == want - got;
            got += n;
        }
        self.more = more;
        Ok(got)
    }

    fn poll_at(&self) -> PollAt {
        match self.pos < self.pending {
            true => PollAt::At(self.arrivals[self.pos]),
            false => PollAt::live(self.more),
        }
    }

    /// Frames the device could not take (no descriptor, no mbuf, a bad frame, no room in a
    /// kernel ring) since start.
    fn kernel_drops(&mut self) -> u64 {
        for &fd in &self.ring_sockets {
            // The driver's sockets are open while the port is, and this half keeps the port.
            self.ring_drops += u64::from(ring_drops(fd).unwrap_or(0));
        }
        if !self.device_drops {
            return 0;
        }
        let s = self.port.stats();
        s[1] + s[2] + s[3] + self.ring_drops
    }

    /// net_af_packet with several queue pairs joins its sockets in a fanout group by flow hash
    /// with rollover (DPDK 22.11 sets `PACKET_FANOUT_FLAG_ROLLOVER`, and no argument unsets
    /// it): the kernel's count of frames moved off a full socket's ring, over every socket.
    fn rolled_over(&mut self) -> u64 {
        // The driver's sockets are open while the port is, and this half keeps the port.
        self.ring_sockets.iter().filter_map(|&fd| rolled_over(fd)).sum()
    }

    fn offload(&self) -> crate::offload::OffloadCounts {
        self.offload
    }
}

impl DpdkRx {
    /// The device's receive queues this half reads.
    pub fn queue_ids(&self) -> Vec<usize> {
        self.queues.iter().map(|&q| usize::from(q)).collect()
    }

    /// Deals the receive queues out to `parts` readers, queue `i` to part `i % parts`: this
    /// half keeps part 0's, and each other part with a queue becomes a half of its own, for a
    /// thread of its own (`None` for a part left without one). DPDK lets each queue be read
    /// from its own thread; the device's drop counters stay with this half.
    pub fn split(&mut self, parts: usize) -> Vec<Option<DpdkRx>> {
        let parts = parts.max(1);
        let all = std::mem::take(&mut self.queues);
        let dealt =
            |p: usize| all.iter().enumerate().filter(|(i, _)| i % parts == p).map(|(_, &q)| q).collect();
        self.queues = dealt(0);
        self.next_queue = 0;
        (1..parts)
            .map(|p| {
                let queues: Vec<u16> = dealt(p);
                (!queues.is_empty()).then(|| DpdkRx {
                    port: self.port.clone(),
                    mbufs: [std::ptr::null_mut(); BURST],
                    meta: [RxMeta::NONE; BURST],
                    bounce: vec![0; self.bounce.len()],
                    bounce_each: self.bounce_each,
                    ts: self.ts,
                    stamps: self.stamps.clone(),
                    line_rate: self.line_rate,
                    last_arrival: Nanos::ZERO,
                    more: false,
                    ring_sockets: Vec::new(),
                    ring_drops: 0,
                    queues,
                    next_queue: 0,
                    device_drops: false,
                    registered: false,
                    offload: Default::default(),
                    pending: 0,
                    pos: 0,
                    arrivals: [Nanos::ZERO; BURST],
                })
            })
            .collect()
    }

    /// One burst of up to `want` (≤ BURST) frames from receive queue `queue`.
    fn recv_queue<F: FnMut(RxFrame<'_>)>(&mut self, queue: u16, now: Nanos, want: usize, f: &mut F) -> usize {
        let n = self.read_burst(queue, want);
        if n == 0 {
            return 0;
        }
        let now = monotonic_now().max(now);
        let (meta, stamps, offload) = (&self.meta, &self.stamps, &mut self.offload);
        let mut fallback = FallbackStamps::<BURST>::new(now, self.line_rate, n);
        let mut last = self.last_arrival;
        for (i, m) in meta[..n].iter().enumerate() {
            let stamp = match (stamps, m.stamped) {
                (_, 0) | (Stamps::Software | Stamps::Capture { .. }, _) => {
                    fallback.get(i, |j| u64::from(meta[j].pkt_len))
                }
                (Stamps::Device { fit, .. }, _) => fit.to_monotonic(m.stamp),
            };
            let arrival = stamp.min(now).max(last);
            last = arrival;
            // SAFETY: the shim wrote `m` for this burst, whose mbufs are freed below, after
            // the last use of the slice; a received mbuf is this port's alone until then.
            let data = unsafe { m.bytes() };
            // Virtual devices on a kernel interface carry what a local sender left partial,
            // and nothing says which: the same rule as AF_XDP's (crate::offload).
            if crate::offload::complete_if_partial(data) {
                offload.csum_completed += 1;
            }
            f(RxFrame { arrival, wire_len: m.pkt_len, data: &*data });
        }
        self.last_arrival = last;
        // SAFETY: the first n entries are the mbufs rx_burst returned, not freed before; no
        // slice into them outlives this point.
        unsafe { pathem_dpdk_free_bulk(self.mbufs.as_mut_ptr(), n as u32) };
        n
    }
}

impl DpdkRx {
    /// Up to `want` (≤ BURST) frames from receive queue `queue` into `mbufs`/`meta` (and the
    /// bounce buffer for a frame in several segments), replacing the last burst's entries,
    /// whose mbufs the caller has freed.
    fn read_burst(&mut self, queue: u16, want: usize) -> usize {
        let (ts_offset, ts_flag) = self.ts.unwrap_or((0, 0));
        // SAFETY: mbufs and meta have room for `want` ≤ BURST entries, bounce for BURST slots
        // of bounce_each bytes; the shim writes at most that. The port's rx queues are ours.
        (unsafe {
            pathem_dpdk_rx_burst(
                self.port.id,
                queue,
                self.mbufs.as_mut_ptr(),
                want.min(BURST) as u16,
                self.meta.as_mut_ptr(),
                self.bounce.as_mut_ptr(),
                self.bounce_each as u32,
                ts_offset,
                ts_flag,
            )
        }) as usize
    }

    /// Capture stamps: hands on the held frames whose arrival has come (at most `max`), and
    /// reads the next burst once all are handed on. A frame without a stamp arrives when read.
    fn recv_capture<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, f: &mut F) -> usize {
        let Stamps::Capture { mut offset } = self.stamps else { return 0 };
        if self.pos == self.pending {
            if self.pending > 0 {
                // SAFETY: mbufs[..pending] came from rx_burst, were handed on and not freed;
                // no slice into them outlives the call that handed them.
                unsafe { pathem_dpdk_free_bulk(self.mbufs.as_mut_ptr(), self.pending as u32) };
                (self.pending, self.pos) = (0, 0);
            }
            // net_pcap has one receive queue.
            let n = self.read_burst(self.queues[0], BURST);
            self.more = n == BURST;
            let now = monotonic_now().max(now);
            let mut last = self.last_arrival;
            for (m, at) in self.meta[..n].iter().zip(&mut self.arrivals) {
                let arrival = match (m.stamped, m.stamp) {
                    (0, _) => now,
                    (_, us) => {
                        let ns = i128::from(us) * 1000;
                        let off = *offset.get_or_insert(i128::from(now.as_nanos()) - ns);
                        Nanos(u64::try_from((ns + off).max(0)).unwrap_or(u64::MAX))
                    }
                };
                last = arrival.max(last);
                *at = last;
            }
            self.last_arrival = last;
            self.pending = n;
            self.stamps = Stamps::Capture { offset };
        }
        let mut given = 0;
        while self.pos < self.pending && given < max && self.arrivals[self.pos] <= now {
            let m = &self.meta[self.pos];
            // SAFETY: the shim wrote `m` for the held burst, whose mbufs (and the bounce
            // buffer, untouched until the next burst is read) are freed only after every frame
            // was handed on; the slice does not outlive this iteration.
            let data = unsafe { m.bytes() };
            if crate::offload::complete_if_partial(data) {
                self.offload.csum_completed += 1;
            }
            f(RxFrame { arrival: self.arrivals[self.pos], wire_len: m.pkt_len, data: &*data });
            self.pos += 1;
            given += 1;
        }
        given
    }
}

impl DpdkTx {
    /// Frames the device failed to send since start (its `oerrors`).
    fn errors(&self) -> u64 {
        self.port.stats()[5]
    }

    /// Longest frame this port sends (its mbufs' data room): the runtime drops longer ones
    /// at ingress, as `oversize`.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }
}

impl DpdkTx {
    /// `send` with filler frames: the fillers that bring the wire to `release`, then the
    /// frame. With too little room in the queue for the whole gap, what room there is gets
    /// fillers and the frame waits (false: the engine offers it again after the flush); with
    /// no mbuf left, nothing of this call is queued and the plan is as it was.
    fn send_timed(&mut self, release: Nanos, data: &[u8]) -> bool {
        let Some(f) = self.filling.as_deref_mut() else { return false };
        let room = (TX_QUEUE - self.len).saturating_sub(1);
        let before = f.wire.clone();
        let mut lens = std::mem::take(&mut f.lens);
        lens.clear();
        let now = *f.now.get_or_insert_with(monotonic_now);
        let placed = f.wire.place(now, release, data.len(), room, |l| lens.push(l));
        let first = self.len;
        let mut ok = true;
        for &l in &lens {
            // SAFETY: the pool belongs to this port; `header` is 14 bytes; a filler is at most
            // the port's longest frame (checked at open), within its mbufs' data room.
            let m = unsafe { pathem_dpdk_tx_filler(self.port.pool, f.header.as_ptr(), l as u32) };
            if m.is_null() {
                ok = false;
                break;
            }
            self.queue[self.len] = m;
            // A filler is at most MAX_FILLER_RANGE's 65 535 bytes.
            f.in_queue[self.len] = l as u16;
            self.len += 1;
        }
        let late = match placed {
            Placed::Frame { late, .. } if ok => {
                // SAFETY: as in `send`.
                let m = unsafe { pathem_dpdk_tx_copy(self.port.pool, data.as_ptr(), data.len() as u32) };
                ok = !m.is_null();
                if ok {
                    self.queue[self.len] = m;
                    f.in_queue[self.len] = 0;
                    self.len += 1;
                }
                Some(late)
            }
            _ => None,
        };
        if !ok {
            // SAFETY: queue[first..len] are the mbufs allocated above, not handed to anyone;
            // the port is started and only this half transmits on it.
            unsafe {
                pathem_dpdk_free_bulk(self.queue[first..].as_mut_ptr(), (self.len - first) as u32);
                pathem_dpdk_tx_cleanup(self.port.id);
            }
            self.len = first;
            f.wire = before;
            f.lens = lens;
            // Nothing may be flushed before the next try: it reads the clock afresh.
            f.now = None;
            return false;
        }
        f.lens = lens;
        match late {
            Some(late) => {
                f.counts.late += u64::from(late);
                true
            }
            None => false,
        }
    }
}

impl TxPort for DpdkTx {
    /// The device's transmit errors (`oerrors`): frames `rte_eth_tx_burst` took and the device
    /// then failed to send. Reading them is a driver call, so they are read every 10 ms.
    fn refused(&mut self, fresh: bool) -> crate::port::TxRefused {
        let now = monotonic_now();
        if fresh || now.saturating_sub(self.refused_at) >= Nanos::from_millis(10) {
            self.refused_at = now;
            let other = crate::port::TxErrorClass::Other;
            let errors = self.errors();
            if let Some(f) = self.filling.as_deref_mut() {
                // With fillers the device's errors are fillers' and frames' alike, and which,
                // it does not say: counted apart, not taken out of the frames sent.
                f.counts.errors = errors;
            } else if errors > self.refused.frames[other as usize] {
                self.refused.frames[other as usize] = errors;
                self.refused.errno[other as usize] = 0;
            }
        }
        self.refused
    }

    #[inline]
    fn send(&mut self, release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
        if self.len == TX_QUEUE {
            return false;
        }
        if data.len() > self.max_frame {
            self.refused.too_large(data.len());
            return true;
        }
        if !self.registered {
            register_thread();
            self.registered = true;
        }
        if self.filling.is_some() {
            return self.send_timed(release, data);
        }
        // SAFETY: the pool belongs to this port and outlives it; `data` is valid for its
        // length, which fits the mbuf's data room (frames are at most max_frame).
        let m = unsafe { pathem_dpdk_tx_copy(self.port.pool, data.as_ptr(), data.len() as u32) };
        if m.is_null() {
            // The pool is empty (the device holds its mbufs): keep the frame for later, and
            // ask the driver for the mbufs of what it has sent.
            // SAFETY: the port is started; only this half transmits on it.
            unsafe { pathem_dpdk_tx_cleanup(self.port.id) };
            return false;
        }
        self.queue[self.len] = m;
        self.lens[self.len] = data.len() as u32;
        self.len += 1;
        true
    }

    fn lead(&self) -> Nanos {
        self.filling.as_ref().map_or(Nanos::ZERO, |f| f.lead)
    }

    fn fillers(&self) -> FillerCounts {
        self.filling.as_ref().map_or_else(FillerCounts::default, |f| f.counts)
    }

    fn flush(&mut self) -> Result<(), Error> {
        if let Some(f) = self.filling.as_deref_mut() {
            // The next round reads the clock afresh.
            f.now = None;
        }
        if let Some(c) = self.carrier.as_mut() {
            let now = monotonic_now();
            if now.saturating_sub(c.read_at) >= Nanos::from_millis(10) {
                (c.up, c.read_at) = (c.reader.has_carrier(), now);
            }
            if !c.up && self.len > 0 {
                for &l in &self.lens[..self.len] {
                    self.refused.add(crate::port::TxErrorClass::Down, libc::ENETDOWN, l as usize);
                }
                // SAFETY: queue[..len] are mbufs this half still owns; they go back to the pool.
                unsafe { pathem_dpdk_free_bulk(self.queue.as_mut_ptr(), self.len as u32) };
                self.len = 0;
            }
        }
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: queue[..len] are mbufs this half allocated and still owns; the device takes
        // ownership of the first `sent` of them.
        let sent =
            unsafe { pathem_dpdk_tx_burst(self.port.id, self.queue.as_mut_ptr(), self.len as u16) } as usize;
        if let Some(f) = self.filling.as_deref_mut() {
            for &l in &f.in_queue[..sent] {
                if l > 0 {
                    f.counts.frames += 1;
                    f.counts.bytes += u64::from(l);
                }
            }
            f.in_queue.copy_within(sent..self.len, 0);
        }
        self.queue.copy_within(sent..self.len, 0);
        self.lens.copy_within(sent..self.len, 0);
        self.len -= sent;
        Ok(())
    }

    fn queued(&self) -> usize {
        self.len
    }
}

impl Drop for DpdkTx {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: queue[..len] are mbufs this half still owns; they go back to the pool.
            unsafe { pathem_dpdk_free_bulk(self.queue.as_mut_ptr(), self.len as u32) };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn qpairs_past_the_queues_a_port_reads_are_refused_before_probing() {
        let pairs = |args: &str| super::queue_pairs_within(&super::super::parse(args).unwrap()).is_ok();
        assert!(pairs("net_af_packet0,iface=pa,qpairs=64") && pairs("net_af_packet0,iface=pa"));
        assert!(!pairs("net_af_packet0,iface=pa,qpairs=65"));
        // The driver's own to refuse: a word, or another driver's argument.
        assert!(pairs("net_af_packet0,iface=pa,qpairs=many") && pairs("net_af_xdp0,iface=pa,qpairs=65"));
    }

    #[test]
    fn the_eals_complaint_is_told_before_its_usage_text() {
        let said = "EAL: lcore 5 unavailable\nEAL: invalid core list, please check specified cores are part of 0-1\n\nUsage: pathem [options]\n\nEAL common options:\n  -c COREMASK   Hexadecimal bitmask of cores to run on\n";
        assert_eq!(
            super::telling_line(said),
            Some("EAL: invalid core list, please check specified cores are part of 0-1")
        );
        assert_eq!(
            super::telling_line("EAL: unrecognized option '--frob'\n"),
            Some("EAL: unrecognized option '--frob'")
        );
        assert_eq!(super::telling_line("Usage: pathem [options]\n"), Some("Usage: pathem [options]"));
    }

    #[test]
    fn net_af_xdp_is_given_every_queue_only_where_nothing_is_said_and_the_interface_has_more() {
        // The loopback has one receive queue; other drivers and said counts are left alone.
        for args in [
            "net_af_xdp0,iface=lo",
            "net_af_xdp0,iface=lo,queue_count=1",
            "net_af_packet0,iface=lo",
            "net_af_xdp0,iface=no-such-if",
            "net_af_xdp0",
            "net_af_xdp0,iface=lo,start_queue=1",
        ] {
            assert_eq!(super::every_queue("x", &super::super::parse(args).unwrap()).unwrap(), None, "{args}");
        }
    }
}
