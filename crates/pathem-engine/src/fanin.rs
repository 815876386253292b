//! Receive queues read on several CPUs, one arrival sequence for the path.
//!
//! A port whose interface has several receive queues (RSS on a NIC; a veth hands each frame to
//! the receive queue of its sender's transmit queue) can be read by several threads: when
//! `--cores` gives a direction more than one CPU, its queues are dealt out over them. On each
//! other CPU a [`QueueReader`] reads its share and copies each frame, with its receive stamp,
//! into a hand-off line: a [`delay_line`](crate::delay_line) whose release times are the
//! arrival stamps, SPSC and wait-free like the delay line itself. The direction's input reads
//! its own share into a line of its own the same way, and its [`Fanin`] hands the path the
//! frames of all lines in the order they arrived. So the path still sees one arrival sequence
//! on one thread: a rate, a queue limit or a discipline stays one bottleneck exactly, and a
//! flow (one queue) stays in order. What the readers buy is the ports' per-frame work (system
//! calls, descriptor rings, a DPDK driver's receive function) spread over CPUs; the path's own
//! work stays on one thread.
//!
//! **In arrival order, not reading order.** Each reader publishes a mark with its frames: the
//! instant up to which it has taken every frame its queues had (the start of its last poll
//! that emptied them; under a full burst, the last frame's stamp). The input hands on frames
//! only up to the lowest mark of all readers and its own, merging the lines by stamp, so a
//! frame read on another CPU is not overtaken by a later one read on the input's: without
//! this, the input's own queues went first every time and a drop-tail queue filled by them
//! refused the reader's flows almost always (a flow read on the other CPU got 9 of ~80
//! frames in the live test). Readers therefore never sleep (a sleeping reader's mark would
//! hold every frame back); each has its CPU to itself or shares the output's, which spins
//! anyway. A frame the kernel stamped just before a reader's mark but put in its ring just
//! after is handed on late by at most a poll, its arrival moved up to the last one handed on
//! (a flow's frames keep their order: they share a queue).
//!
//! Every frame stays counted: a frame in a hand-off line was taken from the kernel and is not
//! yet the path's, so at stop the input takes what the lines still hold before the final
//! counters ([`Fanin::holds_frames`]; a stopped reader's mark no longer holds anything back);
//! the readers' kernel drops and offload counts reach the input's counters with its own
//! port's (every 10 ms, as the port's are read); a frame a reader could not hand over (no
//! room: a reader asks for no more than its line surely holds, so never in practice) counts as
//! a port drop.

use crate::delay_line::{delay_line, record_size, AllocError, Reader, Writer};
use crate::pipeline::earliest;
use crate::task::{Error, Next, Task};
use pathem_io::offload::OffloadCounts;
use pathem_io::{PollAt, RxFrame, RxPort};
use pathem_model::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of each hand-off line: 100 000 minimum-size frames, or 6 ms of 10 Gbit/s in
/// full-size frames, if the input falls that far behind (the reader then leaves frames in its
/// queues, where the kernel or NIC counts what it cannot hold).
pub const HANDOFF_LINE: usize = 8 << 20;

/// The longest frame a hand-off line carries: the longest any port delivers.
const HANDOFF_FRAME: usize = pathem_model::limits::MAX_FRAME;

/// Frames taken from a share of queues per poll at most.
const READ_BURST: usize = crate::pipeline::RX_BURST;

/// How often a reader publishes its port's drop and offload counts.
const COUNTS_EVERY: Nanos = Nanos::from_millis(10);

/// What a reader tells the input, besides frames.
#[derive(Default)]
struct Shared {
    /// Every frame its queues had that arrived by this instant (ns) is in its line; `u64::MAX`
    /// once the reader has stopped.
    mark: AtomicU64,
    /// Its port's kernel drops, as last read.
    kernel_drops: AtomicU64,
    /// Frames it took and could not hand over.
    lost: AtomicU64,
    /// Frames it handed over.
    handed: AtomicU64,
    /// Its port's offload counts, as last read.
    offload: Mutex<OffloadCounts>,
}

/// One share of a port's queues and the line its frames go into.
struct Share<R> {
    port: R,
    line: Writer,
    shared: Arc<Shared>,
}

/// Reads as many frames of `port` as `line` surely holds (a burst at most) into it, and moves
/// the mark. With the line full it reads nothing: the frames wait in the queues, where the
/// kernel or NIC counts those it cannot hold. Returns the frames read.
fn read<R: RxPort>(
    port: &mut R,
    line: &mut Writer,
    shared: &Shared,
    now: Nanos,
) -> Result<usize, pathem_io::Error> {
    let record = record_size(HANDOFF_FRAME);
    // A frame may also cost the rest of the ring's end (records never wrap).
    let room = line.capacity().saturating_sub(line.used()).saturating_sub(record);
    let max = (room / record).min(READ_BURST);
    if max == 0 {
        return Ok(0);
    }
    let (mut handed, mut last) = (0, Nanos::ZERO);
    let n = port.recv_burst(now, max, |f| match line.push_unpublished(f.arrival, f.wire_len, f.data) {
        true => {
            handed += 1;
            last = f.arrival;
        }
        false => {
            shared.lost.fetch_add(1, Ordering::Relaxed);
        }
    });
    // The burst reaches the input at once (also what came before a failure), before the mark
    // that lets it hand the burst on.
    line.publish();
    shared.handed.fetch_add(handed, Ordering::Relaxed);
    let n = n?;
    // Taken all there was when read (at or after `now`, and after the last frame's stamp), or,
    // more waiting, all up to the last frame taken; from a port that has ended (a capture, a
    // synthetic source), everything.
    let mark = match port.poll_at() {
        PollAt::Now => last,
        PollAt::At(t) if t <= now => last,
        PollAt::Ended => Nanos(u64::MAX),
        _ => now.max(last),
    };
    shared.mark.fetch_max(mark.as_nanos(), Ordering::Release);
    Ok(n)
}

impl<R: RxPort> Share<R> {
    /// Publishes its port's drop and offload counts for the input.
    fn publish_counts(&mut self) {
        self.shared.kernel_drops.store(self.port.kernel_drops(), Ordering::Relaxed);
        *self.shared.offload.lock().unwrap_or_else(|e| e.into_inner()) = self.port.offload();
    }
}

/// The receiving side of a direction whose queues are read on several CPUs: its own share
/// (read on the input's CPU) and the hand-off lines of the [`QueueReader`]s. Without readers
/// it is its port, at the cost of one branch per burst.
pub struct Fanin<R> {
    pub port: R,
    /// The own share's line (its writing half), with the readers': `None` without readers.
    own: Option<(Writer, Arc<Shared>)>,
    /// The own share's line first, then each reader's.
    lines: Vec<(Reader, Arc<Shared>)>,
    last_arrival: Nanos,
    more: bool,
    ended: bool,
    stopped: bool,
    /// The lowest mark at the last hand-on.
    mark: Nanos,
}

/// Reads a share of a port's receive queues on a CPU of its own and hands the frames to the
/// direction's [`Fanin`]. A [`Task`]: it runs on the output's thread, or a thread of its own,
/// and never sleeps (see the module doc).
pub struct QueueReader<R: RxPort> {
    share: Share<R>,
    counts_read: Nanos,
}

/// `port` read by the input, with `parts` (the other shares of its queues) each read by a
/// [`QueueReader`]. Fails only when a hand-off line cannot be allocated.
pub fn fan_in<R: RxPort>(port: R, parts: Vec<R>) -> Result<(Fanin<R>, Vec<QueueReader<R>>), AllocError> {
    if parts.is_empty() {
        return Ok((Fanin::alone(port), Vec::new()));
    }
    // A line's writing half with what its share tells; the reading half goes to `lines`.
    let mut lines = Vec::with_capacity(parts.len() + 1);
    let mut line = || -> Result<(Writer, Arc<Shared>), AllocError> {
        let (writer, reader) = delay_line(HANDOFF_LINE, HANDOFF_FRAME)?;
        let shared = Arc::new(Shared::default());
        lines.push((reader, shared.clone()));
        Ok((writer, shared))
    };
    let own = line()?;
    let readers = parts
        .into_iter()
        .map(|port| {
            let (line, shared) = line()?;
            Ok(QueueReader { share: Share { port, line, shared }, counts_read: Nanos::ZERO })
        })
        .collect::<Result<Vec<_>, AllocError>>()?;
    Ok((Fanin { own: Some(own), lines, ..Fanin::alone(port) }, readers))
}

impl<R> Fanin<R> {
    /// A port read by the input alone.
    pub fn alone(port: R) -> Fanin<R> {
        Fanin {
            port,
            own: None,
            lines: Vec::new(),
            last_arrival: Nanos::ZERO,
            more: false,
            ended: false,
            stopped: false,
            mark: Nanos::ZERO,
        }
    }

    /// Readers handing frames to this input.
    pub fn readers(&self) -> usize {
        self.lines.len().saturating_sub(1)
    }

    /// Stops reading the input's own share and lets every frame the lines hold be handed on,
    /// whatever the marks say (at stop, once the readers have stopped: what the lines hold
    /// then is all there will be).
    pub fn stop(&mut self) {
        if let Some((_, own)) = &self.own {
            own.mark.store(u64::MAX, Ordering::Release);
        }
        self.stopped = true;
    }

    /// True while a hand-off line holds frames the input has not handed on.
    pub fn holds_frames(&mut self) -> bool {
        self.lines.iter_mut().any(|(l, _)| !l.is_empty())
    }

    /// Frames the readers handed over since the start (not counting the input's own share).
    pub fn handed_over(&self) -> u64 {
        self.lines.iter().skip(1).map(|(_, s)| s.handed.load(Ordering::Relaxed)).sum()
    }
}

impl<R: RxPort> RxPort for Fanin<R> {
    /// Reads the own share into its line, then hands on up to `max` frames of all lines in
    /// the order they arrived, up to the lowest mark (see the module doc). Arrivals are made
    /// non-decreasing, as a port with several queues makes them.
    #[inline]
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, pathem_io::Error> {
        let Some((line, own)) = &mut self.own else {
            return self.port.recv_burst(now, max, f);
        };
        if !self.stopped {
            read(&mut self.port, line, own, now)?;
        }
        let mark = Nanos(self.lines.iter().map(|(_, s)| s.mark.load(Ordering::Acquire)).min().unwrap_or(0));
        self.mark = mark;
        let mut given = 0;
        // A line's frames go in runs, up to the next head of the others: a visit to every
        // line per run, not per frame.
        while given < max {
            let heads = self.lines.iter_mut().map(|(l, _)| l.next_release());
            let Some((i, until)) = earliest(heads, mark) else { break };
            let line = &mut self.lines[i].0;
            while given < max {
                let Some(r) = line.peek().filter(|r| r.release <= until) else { break };
                let arrival = r.release.max(self.last_arrival);
                self.last_arrival = arrival;
                f(RxFrame { arrival, wire_len: r.wire_len, data: r.data });
                line.pop();
                given += 1;
            }
        }
        self.more = given == max || (!self.stopped && self.port.poll_at() == PollAt::Now);
        // Every share ended (a mark of "everything" is set after its last frame) and every
        // frame handed on.
        self.ended = mark.as_nanos() == u64::MAX && !self.holds_frames();
        Ok(given)
    }

    /// Every frame up to the lowest mark has been handed on (when none is waiting): frames
    /// stamped later may still come from a share that has not read that far.
    fn delivered_until(&self, now: Nanos) -> Nanos {
        match self.own {
            None => self.port.delivered_until(now),
            Some(_) => now.min(self.mark),
        }
    }

    /// Ended once every share has ended (its mark holds nothing back) and the lines are
    /// empty; live ports never end.
    fn poll_at(&self) -> PollAt {
        if self.own.is_none() {
            return self.port.poll_at();
        }
        match self.ended {
            true => PollAt::Ended,
            false => PollAt::live(self.more),
        }
    }

    /// The port's, the readers' (as they last published them), and the frames readers could
    /// not hand over.
    fn kernel_drops(&mut self) -> u64 {
        let shares: u64 = self
            .lines
            .iter()
            .map(|(_, s)| s.kernel_drops.load(Ordering::Relaxed) + s.lost.load(Ordering::Relaxed))
            .sum();
        self.port.kernel_drops() + shares
    }

    /// The port's: the readers on other CPUs read queues of the same port, whose kernel
    /// counts (where it keeps any) the port reads for all of them.
    fn rolled_over(&mut self) -> u64 {
        self.port.rolled_over()
    }

    /// The port's: only a TAP device's reader skips frames, and it reads one queue.
    fn foreign(&self) -> u64 {
        self.port.foreign()
    }

    fn offload(&self) -> OffloadCounts {
        let mut all = self.port.offload();
        for (_, s) in self.lines.iter().skip(1) {
            let o = *s.offload.lock().unwrap_or_else(|e| e.into_inner());
            all.gso_frames += o.gso_frames;
            all.gso_segments += o.gso_segments;
            all.csum_completed += o.csum_completed;
            all.refused += o.refused;
        }
        all
    }
}

impl<R: RxPort> Task for QueueReader<R> {
    fn poll(&mut self, now: Nanos) -> Result<Next, Error> {
        let Share { port, line, shared } = &mut self.share;
        read(port, line, shared, now)?;
        if now >= self.counts_read + COUNTS_EVERY {
            self.counts_read = now;
            self.share.publish_counts();
        }
        Ok(match self.share.port.poll_at() {
            PollAt::Now => Next::Now,
            PollAt::Ended => Next::Ended,
            _ => Next::Busy(None),
        })
    }
}

impl<R: RxPort> Drop for QueueReader<R> {
    /// The last counts, for the input's final read; its mark holds nothing back any more.
    fn drop(&mut self) {
        self.share.publish_counts();
        self.share.shared.mark.store(u64::MAX, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::run;
    use crate::testing::Frames;
    use std::sync::atomic::AtomicBool;

    /// Frames of flow `flow` (the tag's top byte) numbered `seq` (the rest), arriving at `t`.
    fn script(frames: impl IntoIterator<Item = (Nanos, u8, u32)>) -> Frames {
        Frames::tagged(frames.into_iter().map(|(t, flow, seq)| (t, u32::from(flow) << 24 | seq)))
    }

    fn frames_of(fanin: &mut Fanin<Frames>, now: Nanos) -> Vec<(Nanos, u8, u32)> {
        let mut got = Vec::new();
        fanin
            .recv_burst(now, 64, |f| {
                let tag = Frames::tag(f.data);
                got.push((f.arrival, (tag >> 24) as u8, tag & 0xff_ffff))
            })
            .unwrap();
        got
    }

    #[test]
    fn handed_over_frames_merge_in_by_arrival() {
        let t = Nanos::from_micros;
        let own = script([(t(2), 0, 0), (t(5), 0, 1)]);
        let other = script([(t(1), 1, 0), (t(3), 1, 1), (t(4), 1, 2), (t(9), 1, 3)]);
        let (mut fanin, mut readers) = fan_in(own, vec![other]).unwrap();
        readers[0].poll(t(10)).unwrap();
        let got = frames_of(&mut fanin, t(10));
        let order: Vec<(u8, u32)> = got.iter().map(|g| (g.1, g.2)).collect();
        assert_eq!(order, [(1, 0), (0, 0), (1, 1), (1, 2), (0, 1), (1, 3)]);
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "arrivals never go back: {got:?}");
        assert_eq!((fanin.handed_over(), fanin.holds_frames()), (4, false));
        assert_eq!(fanin.poll_at(), PollAt::Ended, "both shares ended, every frame handed on");
    }

    /// The input does not hand on its own frame of 5 us before the reader has read up to
    /// then: the reader's frame of 3 us goes first, as it arrived first.
    #[test]
    fn a_frame_read_on_another_cpu_is_not_overtaken() {
        let t = Nanos::from_micros;
        let own = script([(t(5), 0, 0)]);
        let other = script([(t(3), 1, 0)]);
        let (mut fanin, mut readers) = fan_in(own, vec![other]).unwrap();
        assert_eq!(frames_of(&mut fanin, t(10)), [], "held until the reader has read up to 10 us");
        assert_eq!(fanin.poll_at(), PollAt::Unknown);
        assert_eq!(fanin.delivered_until(t(10)), Nanos::ZERO, "a discipline may not be served past 0");
        readers[0].poll(t(10)).unwrap();
        assert_eq!(frames_of(&mut fanin, t(10)), [(t(3), 1, 0), (t(5), 0, 0)]);
        assert_eq!(fanin.delivered_until(t(12)), t(12), "both shares have ended: nothing held back");
        // A stopped reader holds nothing back.
        let own = script([(t(5), 0, 0)]);
        let (mut fanin, readers) = fan_in(own, vec![script([])]).unwrap();
        drop(readers);
        assert_eq!(frames_of(&mut fanin, t(10)), [(t(5), 0, 0)]);
    }

    /// At stop the own share is read no more and its mark holds nothing back: what the lines
    /// hold is handed on, what is still in the port stays the kernel's. (With a fixed `now`,
    /// as the runtime's last polls use, a frame stamped after the own share's mark — software
    /// stamps are taken when read — would otherwise wait for ever.)
    #[test]
    fn at_stop_every_frame_in_the_lines_is_handed_on() {
        let t = Nanos::from_micros;
        let own = script([(t(1), 0, 0), (t(5), 0, 1)]);
        let (mut fanin, mut readers) = fan_in(own, vec![script([(t(3), 1, 0)])]).unwrap();
        readers[0].poll(t(10)).unwrap();
        assert_eq!(frames_of(&mut fanin, t(2)), [(t(1), 0, 0)], "the reader's frame of 3 us waits");
        fanin.stop();
        let mut rest = Vec::new();
        while fanin.holds_frames() {
            rest.extend(frames_of(&mut fanin, t(6)));
        }
        assert_eq!(rest, [(t(3), 1, 0)], "the own frame of 5 us was never read");
    }

    #[test]
    fn the_readers_counts_reach_the_input() {
        let counts = |drops, csum_completed| Frames {
            drops,
            offload: OffloadCounts { csum_completed, ..Default::default() },
            ..script([])
        };
        let (own, other) = (counts(2, 1), counts(5, 3));
        let (mut fanin, readers) = fan_in(own, vec![other]).unwrap();
        assert_eq!(fanin.kernel_drops(), 2, "nothing published yet");
        drop(readers);
        assert_eq!((fanin.kernel_drops(), fanin.offload().csum_completed), (7, 4));
        let (alone, readers) = fan_in(script([]), Vec::new()).unwrap();
        assert_eq!((alone.readers(), readers.len()), (0, 0), "no reader, no line");
    }

    /// A reader on another thread whose line fills: every frame arrives once, each flow in
    /// order, the arrivals in order, and the reader waits for room rather than dropping.
    #[test]
    fn a_reader_on_another_thread_hands_over_every_frame_in_order() {
        let n = 300_000u32;
        let t = |i: u32| Nanos(u64::from(i) * 10);
        let own = script((0..n).step_by(2).map(|i| (t(i), 0, i / 2)));
        let other = script((1..n).step_by(2).map(|i| (t(i), 1, i / 2)));
        let (mut fanin, mut readers) = fan_in(own, vec![other]).unwrap();
        let stop = AtomicBool::new(false);
        let mut got = Vec::with_capacity(n as usize);
        std::thread::scope(|s| {
            let mut reader = readers.pop().unwrap();
            let stop = &stop;
            s.spawn(move || {
                let mut clock = crate::MonotonicClock::new();
                run(&mut [&mut reader], &mut clock, stop).unwrap();
            });
            // Slower than the reader at first, so that its line fills and it must wait.
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(fanin.handed_over() < u64::from(n / 2), "the line filled");
            while got.len() < n as usize {
                got.extend(frames_of(&mut fanin, crate::monotonic_now()));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(fanin.kernel_drops(), 0, "nothing lost");
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in arrival order");
        for flow in 0..2u8 {
            let seqs: Vec<u32> = got.iter().filter(|g| g.1 == flow).map(|g| g.2).collect();
            assert_eq!(seqs, (0..n / 2).collect::<Vec<_>>(), "flow {flow}");
        }
    }
}
