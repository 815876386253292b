//! Offline port: read a classic pcap capture, write a nanosecond pcap capture.
//!
//! The reader feeds frames to the engine at their capture timestamps (the virtual clock jumps
//! from one to the next); the writer stamps each frame with the instant the engine released it.
//! Output goes to a temporary file in the destination's folder and is renamed into place only
//! by [`PcapSink::commit`], so a failed run never leaves a half-written capture behind. Its
//! snapshot length is at least 256 KiB (libpcap's largest), so no reader cuts a frame.

use crate::port::{PollAt, RxFrame, RxPort, TxPort};
use crate::Error;
use pathem_model::Nanos;
use pcap_file::pcap::{PcapHeader, PcapReader, PcapWriter, RawPcapPacket};
use pcap_file::{DataLink, PcapError, TsResolution};
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};

/// The link type pathem forwards.
const LINKTYPE_ETHERNET: u32 = 1;
/// Largest frame pathem accepts from a capture; longer records mean a corrupt file. Also
/// libpcap's largest snapshot length, and the least a written capture declares: a reader
/// cuts a record longer than its file's snapshot length without an error.
const MAX_RECORD: u32 = 256 * 1024;

/// A capture being read, one frame ahead so the engine knows when the next one arrives.
pub struct PcapSource {
    path: PathBuf,
    reader: PcapReader<BufReader<Box<dyn Read + Send>>>,
    frac_scale: u64,
    next: Option<Pending>,
    buf: Vec<u8>,
    frames_read: u64,
    last_arrival: Nanos,
    /// Frames whose timestamp went backwards; they were taken to arrive with their predecessor.
    backwards: u64,
    snaplen: u32,
}

#[derive(Clone, Copy)]
struct Pending {
    arrival: Nanos,
    wire_len: u32,
}

impl PcapSource {
    /// Opens a capture and checks that it is a classic pcap of Ethernet frames.
    pub fn open(path: &Path) -> Result<PcapSource, Error> {
        let format = |reason: String| Error::Format { path: path.to_path_buf(), reason };
        let mut file = File::open(path).map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(format("is a directory, not a pcap capture".into()));
        }
        // The header's bytes are read once and put back in front of the rest: a pipe (`<(...)`,
        // /dev/stdin) cannot be opened a second time from its start.
        let mut head = [0u8; 24];
        let got = read_up_to(&mut file, &mut head).map_err(|e| format(e.to_string()))?;
        let magic = [head[0], head[1], head[2], head[3]];
        let input = std::io::Cursor::new(head[..got].to_vec()).chain(file);
        Self::from_reader(path, Box::new(Records::new(input, magic)), magic, got)
    }

    /// Reads a capture held in memory; `name` stands for its path in messages.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<PcapSource, Error> {
        let mut magic = [0u8; 4];
        let got = bytes.len().min(24);
        magic[..got.min(4)].copy_from_slice(&bytes[..got.min(4)]);
        Self::from_reader(name, Box::new(Records::new(std::io::Cursor::new(bytes), magic)), magic, got)
    }

    fn from_reader(
        path: &Path,
        input: Box<dyn Read + Send>,
        magic: [u8; 4],
        got: usize,
    ) -> Result<PcapSource, Error> {
        let format = |reason: String| Error::Format { path: path.to_path_buf(), reason };
        let reader =
            match PcapReader::new(BufReader::new(input)) {
                Ok(r) => r,
                Err(PcapError::InvalidField(_)) if magic == [0x0a, 0x0d, 0x0d, 0x0a] => return Err(format(
                    "is a pcapng capture; pathem reads classic pcap (convert with `editcap -F pcap IN OUT`)"
                        .into(),
                )),
                Err(PcapError::InvalidField(_)) => {
                    return Err(format(format!(
                        "is not a pcap capture (magic number {:02x}{:02x}{:02x}{:02x})",
                        magic[0], magic[1], magic[2], magic[3]
                    )))
                }
                Err(PcapError::IncompleteBuffer) | Err(PcapError::IoError(_)) if got < 24 => {
                    return Err(format(format!(
                        "is not a pcap capture ({got} bytes, shorter than a pcap header)"
                    )))
                }
                Err(e) => return Err(format(format!("cannot read the pcap header: {e}"))),
            };
        let header = reader.header();
        let link = u32::from(header.datalink);
        if link != LINKTYPE_ETHERNET {
            return Err(format(format!(
                "link type {link} ({:?}) is not Ethernet (1); pathem forwards Ethernet frames",
                header.datalink
            )));
        }
        let frac_scale = match header.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        };
        let mut source = PcapSource {
            path: path.to_path_buf(),
            reader,
            frac_scale,
            next: None,
            buf: Vec::with_capacity(65_536),
            frames_read: 0,
            last_arrival: Nanos::ZERO,
            backwards: 0,
            snaplen: header.snaplen,
        };
        source.advance()?;
        Ok(source)
    }

    /// The capture's snapshot length (the longest frame it may hold).
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// How many frames had a timestamp earlier than the frame before them.
    pub fn backwards_timestamps(&self) -> u64 {
        self.backwards
    }

    /// Arrival time of the next frame, if any.
    pub fn peek_arrival(&self) -> Option<Nanos> {
        self.next.map(|p| p.arrival)
    }

    /// Reads the next record into `buf` and `next`.
    fn advance(&mut self) -> Result<(), Error> {
        let index = self.frames_read + 1;
        let raw = match self.reader.next_raw_packet() {
            None => {
                self.next = None;
                return Ok(());
            }
            Some(Ok(raw)) => raw,
            Some(Err(e)) => return Err(self.failed(e, index)),
        };
        let bad = |reason: String| Error::OutOfRange {
            path: self.path.clone(),
            reason: format!("frame {index}: {reason}"),
        };
        // (A captured length past MAX_RECORD never gets here: `Records` refuses its header.)
        // The original length sets the frame's transmission time: a corrupt one would make it
        // take hours on the link, so it is refused rather than believed.
        if raw.orig_len > MAX_RECORD {
            return Err(bad(format!(
                "original length {} is larger than {MAX_RECORD} bytes (no Ethernet frame is)",
                raw.orig_len
            )));
        }
        let frac = u64::from(raw.ts_frac) * self.frac_scale;
        if frac >= 1_000_000_000 {
            let most = 1_000_000_000 / self.frac_scale - 1;
            return Err(bad(format!("timestamp fraction {} is out of range (0 to {most})", raw.ts_frac)));
        }
        let mut arrival = Nanos(u64::from(raw.ts_sec) * 1_000_000_000 + frac);
        if arrival < self.last_arrival {
            self.backwards += 1;
            arrival = self.last_arrival;
        }
        self.last_arrival = arrival;
        self.buf.clear();
        self.buf.extend_from_slice(&raw.data);
        // Some writers leave orig_len at 0 or below incl_len; the bytes we hold are the minimum.
        let wire_len = raw.orig_len.max(raw.incl_len);
        self.next = Some(Pending { arrival, wire_len });
        self.frames_read = index;
        Ok(())
    }

    /// What a failed read of record `index` says: a record too long (named by [`Records`],
    /// which may be reading a few records ahead) is a value out of range; a file that ends
    /// inside a record is truncated.
    fn failed(&self, e: PcapError, index: u64) -> Error {
        let path = self.path.clone();
        let io = match &e {
            PcapError::IoError(io) => Some(io),
            _ => None,
        };
        if let Some(long) = io.and_then(|io| io.get_ref()?.downcast_ref::<TooLong>()) {
            return Error::OutOfRange { path, reason: format!("frame {}: {long}", long.index) };
        }
        let reason = match io {
            Some(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                format!("truncated: the file ends inside frame {index}")
            }
            _ => format!("frame {index}: {e}"),
        };
        Error::Format { path, reason }
    }
}

/// A record whose captured length is past [`MAX_RECORD`], seen by [`Records`] before its
/// bytes are read.
#[derive(Debug, thiserror::Error)]
#[error("captured length {len} is larger than {MAX_RECORD} bytes")]
struct TooLong {
    /// The record's number, from 1.
    index: u64,
    len: u32,
}

/// The capture's bytes on their way to the pcap reader, whose record headers it reads as they
/// pass: a record longer than [`MAX_RECORD`] fails the read at its header, named as such,
/// where the reader (whose buffer holds 8 MB) would call a longer one a truncated file and
/// read a shorter one whole first.
struct Records<R> {
    inner: R,
    /// The record headers' byte order (from the magic number): big-endian or not.
    big: bool,
    /// Bytes of the file header still to pass, then of the record's data.
    skip: u64,
    /// The record header being gathered, and how much of it has passed.
    header: [u8; 16],
    have: usize,
    index: u64,
}

impl<R: Read> Records<R> {
    fn new(inner: R, magic: [u8; 4]) -> Records<R> {
        let big = matches!(magic, [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d]);
        Records { inner, big, skip: 24, header: [0; 16], have: 0, index: 0 }
    }
}

impl<R: Read> Read for Records<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut at = 0;
        while at < n {
            if self.skip > 0 {
                let step = self.skip.min((n - at) as u64);
                self.skip -= step;
                at += step as usize;
                continue;
            }
            let step = (16 - self.have).min(n - at);
            self.header[self.have..self.have + step].copy_from_slice(&buf[at..at + step]);
            (self.have, at) = (self.have + step, at + step);
            if self.have == 16 {
                self.have = 0;
                self.index += 1;
                let field = [self.header[8], self.header[9], self.header[10], self.header[11]];
                let len = if self.big { u32::from_be_bytes(field) } else { u32::from_le_bytes(field) };
                if len > MAX_RECORD {
                    let long = TooLong { index: self.index, len };
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, long));
                }
                self.skip = u64::from(len);
            }
        }
        Ok(n)
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

impl RxPort for PcapSource {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.next else { break };
            if p.arrival > now {
                break;
            }
            f(RxFrame { arrival: p.arrival, wire_len: p.wire_len, data: &self.buf });
            n += 1;
            self.advance()?;
        }
        Ok(n)
    }

    fn poll_at(&self) -> PollAt {
        match self.next {
            Some(p) => PollAt::At(p.arrival),
            None => PollAt::Ended,
        }
    }
}

/// A nanosecond pcap capture being written; see the module doc for its all-or-nothing rule.
pub struct PcapSink {
    path: PathBuf,
    writer: Option<PcapWriter<BufWriter<tempfile::NamedTempFile>>>,
    snaplen: u32,
    /// What failed (a release time past 2106, or the file), said at the next flush.
    error: Option<Error>,
}

impl PcapSink {
    /// Starts a capture that will appear at `path` when committed. Its snapshot length is
    /// `snaplen` (the input's) or 256 KiB, whichever is larger, so that every frame pathem
    /// reads or carries fits; a longer frame fails the capture rather than be cut by readers.
    pub fn create(path: &Path, snaplen: u32) -> Result<PcapSink, Error> {
        let snaplen = snaplen.max(MAX_RECORD);
        let tmp = crate::temp_beside(path, ".pathem-", ".pcap.tmp")
            .map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: pcap_file::Endianness::native(),
        };
        let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, tmp), header)
            .map_err(|e| Error::Write { path: path.to_path_buf(), reason: e.to_string() })?;
        Ok(PcapSink { path: path.to_path_buf(), writer: Some(writer), snaplen, error: None })
    }

    /// Finishes the capture and moves it into place.
    pub fn commit(mut self) -> Result<(), Error> {
        self.flush()?;
        let write_err = |reason: String| Error::Write { path: self.path.clone(), reason };
        let writer = self.writer.take().expect("a sink is committed once");
        let tmp = writer.into_writer().into_inner().map_err(|e| write_err(e.error().to_string()))?;
        tmp.as_file().sync_all().map_err(|e| write_err(e.to_string()))?;
        tmp.persist(&self.path).map_err(|e| write_err(e.error.to_string()))?;
        Ok(())
    }
}

impl TxPort for PcapSink {
    fn send(&mut self, release: Nanos, wire_len: u32, data: &[u8]) -> bool {
        if self.error.is_some() {
            return true;
        }
        let secs = release.as_nanos() / 1_000_000_000;
        let Ok(ts_sec) = u32::try_from(secs) else {
            self.error = Some(Error::OutOfRange {
                path: self.path.clone(),
                reason: format!(
                    "a frame released at {secs} s (its arrival plus what the path held it: queue, rate, delay) is past what a pcap timestamp holds (up to 4294967295 s, early 2106)"
                ),
            });
            return true;
        };
        if data.len() > self.snaplen as usize {
            let n = data.len();
            let reason = format!("a frame of {n} bytes is longer than the capture's snapshot length");
            self.error = Some(Error::Write { path: self.path.clone(), reason });
            return true;
        }
        let packet = RawPcapPacket {
            ts_sec,
            ts_frac: (release.as_nanos() % 1_000_000_000) as u32,
            incl_len: data.len() as u32,
            orig_len: wire_len.max(data.len() as u32),
            data: Cow::Borrowed(data),
        };
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.write_raw_packet(&packet) {
                self.error = Some(Error::Write { path: self.path.clone(), reason: e.to_string() });
            }
        }
        true
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.error.take().map_or(Ok(()), Err)
    }
}

/// Writes a capture in one go (for generated inputs and tests): frames as `(arrival, bytes)`.
pub fn write_capture(path: &Path, frames: impl IntoIterator<Item = (Nanos, Vec<u8>)>) -> Result<(), Error> {
    let mut sink = PcapSink::create(path, 65_535)?;
    for (t, data) in frames {
        sink.send(t, data.len() as u32, &data);
    }
    sink.commit()
}

/// Reads a whole capture (for checks and tests): `(timestamp, wire length, bytes)` per frame.
pub fn read_capture(path: &Path) -> Result<Vec<(Nanos, u32, Vec<u8>)>, Error> {
    let mut src = PcapSource::open(path)?;
    let mut out = Vec::new();
    src.recv_burst(Nanos::MAX, usize::MAX, |f| out.push((f.arrival, f.wire_len, f.data.to_vec())))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u8, len: usize) -> Vec<u8> {
        vec![n; len]
    }

    #[test]
    fn round_trip_nanosecond() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.pcap");
        let frames = vec![(Nanos(1_000_000_123), frame(1, 60)), (Nanos(2_500_000_001), frame(2, 1514))];
        write_capture(&p, frames.clone()).unwrap();
        let back = read_capture(&p).unwrap();
        assert_eq!(back.len(), 2);
        for ((t, d), (bt, bl, bd)) in frames.iter().zip(&back) {
            assert_eq!(t, bt);
            assert_eq!(*bl as usize, d.len());
            assert_eq!(d, bd);
        }
        // No temporary file is left beside the output.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    /// Hand-written classic pcap: microsecond resolution, big-endian, one truncated frame.
    fn microsecond_big_endian() -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        v.extend_from_slice(&2u16.to_be_bytes());
        v.extend_from_slice(&4u16.to_be_bytes());
        v.extend_from_slice(&0i32.to_be_bytes());
        v.extend_from_slice(&0u32.to_be_bytes());
        v.extend_from_slice(&96u32.to_be_bytes()); // snaplen 96
        v.extend_from_slice(&1u32.to_be_bytes()); // Ethernet
        for (sec, usec, incl, orig) in [(10u32, 5u32, 60u32, 60u32), (10, 999_999, 96, 1514)] {
            v.extend_from_slice(&sec.to_be_bytes());
            v.extend_from_slice(&usec.to_be_bytes());
            v.extend_from_slice(&incl.to_be_bytes());
            v.extend_from_slice(&orig.to_be_bytes());
            v.extend(std::iter::repeat_n(0xab, incl as usize));
        }
        v
    }

    #[test]
    fn reads_microsecond_big_endian_and_keeps_wire_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("us.pcap");
        std::fs::write(&p, microsecond_big_endian()).unwrap();
        let back = read_capture(&p).unwrap();
        assert_eq!(back[0].0, Nanos(10_000_005_000));
        assert_eq!(back[1].0, Nanos(10_999_999_000));
        assert_eq!((back[1].1, back[1].2.len()), (1514, 96));
    }

    #[test]
    fn bad_inputs_have_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let check = |bytes: &[u8], want: &str| {
            let p = dir.path().join("bad.pcap");
            std::fs::write(&p, bytes).unwrap();
            let e = read_capture(&p).expect_err("must fail").to_string();
            assert!(e.contains(want), "{e:?} should say {want:?}");
        };
        check(b"", "shorter than a pcap header");
        check(b"hello world, this is not a capture file", "not a pcap capture");
        check(
            &[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            "pcapng",
        );
        let good = microsecond_big_endian();
        check(&good[..good.len() - 10], "truncated: the file ends inside frame 2");
        let mut absurd = good.clone();
        absurd[24 + 12..24 + 16].copy_from_slice(&3_000_000_000u32.to_be_bytes());
        check(&absurd, "frame 1: original length 3000000000 is larger");
        let mut linux_sll = good.clone();
        linux_sll[20..24].copy_from_slice(&113u32.to_be_bytes());
        check(&linux_sll, "is not Ethernet");
        let missing = PcapSource::open(&dir.path().join("nope.pcap")).err().unwrap().to_string();
        assert!(missing.contains("cannot open") && missing.contains("nope.pcap"), "{missing}");
    }

    /// A record longer than its file's snapshot length is cut by libpcap's readers, so a
    /// written capture declares room for every frame pathem carries, and refuses a longer one.
    #[test]
    fn a_written_capture_declares_room_for_its_longest_frame() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.pcap");
        write_capture(&p, vec![(Nanos(1), frame(1, 65_536))]).unwrap();
        let header = PcapReader::new(File::open(&p).unwrap()).unwrap().header();
        assert_eq!(header.snaplen, MAX_RECORD);
        assert_eq!(read_capture(&p).unwrap()[0].2.len(), 65_536);
        let mut s = PcapSink::create(&p, 65_535).unwrap();
        s.send(Nanos(1), 300_000, &frame(2, MAX_RECORD as usize + 1));
        let e = s.commit().expect_err("a frame past the snapshot length").to_string();
        assert!(e.contains("262145 bytes is longer than the capture's snapshot length"), "{e}");
    }

    #[test]
    fn uncommitted_sink_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.pcap");
        {
            let mut s = PcapSink::create(&p, 65_535).unwrap();
            s.send(Nanos(1), 60, &[0; 60]);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
