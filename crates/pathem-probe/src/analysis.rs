//! What a path did to the probe's datagrams: delays and their deviation, gaps before and
//! after, losses and their bursts, reordering, duplicates, throughput.
//!
//! Pure arithmetic on `(sequence number, send time, receive time)` samples, so it is tested on
//! synthetic data with known answers.

use pathem_model::Nanos;
use serde::Serialize;

/// One datagram as the receiver saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub seq: u64,
    pub sent: Nanos,
    pub received: Nanos,
    /// Its frame's length: the datagram with its UDP, IP and Ethernet headers (as `--size`).
    pub len: usize,
}

/// Percentiles of a distribution, in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
    pub max: f64,
}

/// Everything the receiver computes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub sent: u64,
    /// The sender's end marker arrived with the count. Otherwise `sent` is the highest number
    /// received plus one: datagrams lost after the last that arrived are not counted.
    pub sent_known: bool,
    /// Datagrams this host's socket dropped, its buffer full (among `lost`, not the path's;
    /// with `foreign`, of any run), where the kernel says.
    pub socket_drops: Option<u64>,
    /// With both ends on one host (`pair`): the samples sent at the kernel's transmit stamp;
    /// the rest at the sender's own, read before its send call (a few µs earlier).
    pub kernel_send_stamps: Option<u64>,
    /// The sender's run measured (null from a sender from before runs).
    pub run: Option<u16>,
    /// Datagrams of other runs (another sender to this port, or a run from before this one):
    /// in nothing else.
    pub foreign: u64,
    pub received: u64,
    /// Datagrams of the run numbered at or past the count its sender announced; in nothing else.
    pub strays: u64,
    pub lost: u64,
    pub loss_rate: f64,
    pub duplicates: u64,
    pub reordered: u64,
    pub loss_bursts: u64,
    pub mean_loss_burst: f64,
    /// One-way delay, µs, and its standard deviation.
    pub delay_us: Percentiles,
    pub delay_std_us: f64,
    /// Every datagram arrived after its send stamp. Otherwise the sender's clock is not this
    /// host's (`send` and `recv` on two hosts): one-way delays and their deviation are not
    /// known (null in JSON; their spread, `delay_std_us`, is), and `before_send_us` says by
    /// how much the earliest arrival preceded its stamp.
    pub one_clock: bool,
    pub before_send_us: Option<f64>,
    /// |delay − expected delay|, µs.
    pub deviation_us: Percentiles,
    pub expected_delay_us: f64,
    /// Gaps between consecutive sends and consecutive receptions, µs.
    pub sender_gap_us: Percentiles,
    pub receiver_gap_us: Percentiles,
    /// Fraction of receiver gaps within ±2 µs of the sender's gap for the same pair.
    pub gaps_kept_within_2us: f64,
    /// Frame bits (as `--size` and `--rate` count them) and datagrams a second, between the
    /// first arrival and the last.
    pub throughput_bps: f64,
    pub throughput_pps: f64,
}

impl Summary {
    /// The receiver's screen; `expected_loss` is the rate the path should lose at, if known.
    pub fn describe(&self, expected_loss: Option<f64>) -> String {
        let at_least = if self.sent_known { "" } else { "at least " };
        let mut out = format!(
            "pathem probe: {at_least}{} sent, {} received, {at_least}{} lost ({at_least}{:.4}%)\n",
            self.sent,
            self.received,
            self.lost,
            100.0 * self.loss_rate
        );
        if !self.sent_known {
            out += "  sent       no end marker arrived: the count is the highest number received, so \
                    datagrams lost after it are not counted\n";
        }
        let samples = self.received + self.duplicates;
        if let Some(n) = self.kernel_send_stamps.filter(|&n| n < samples) {
            out += &format!(
                "  stamps     {n} of {samples} sent at the kernel's transmit stamp, the rest at the \
                 sender's own (read before its send call, a few us earlier)\n"
            );
        }
        if let Some(n) = self.socket_drops.filter(|&n| n > 0) {
            // The socket's count is of every datagram it took: with other runs', not all ours.
            let (of, lost) = if self.foreign > 0 {
                ("of any run ", "the lost may be among them")
            } else {
                ("", "among the lost")
            };
            out += &format!(
                "  socket     {n} datagrams {of}dropped by this host's socket, its buffer full: {lost}, \
                 not the path's\n"
            );
        }
        if self.foreign > 0 {
            let run = self.run.map_or("a sender from before runs".into(), |r| format!("run {r:04x}"));
            out += &format!(
                "  foreign    {} datagrams of other runs (another sender to this port, or a run \
                 from before), not counted; measured: {run}\n",
                self.foreign
            );
        }
        if self.strays > 0 {
            out += &format!(
                "  strays     {} datagrams numbered past the {} sent (not counted)\n",
                self.strays, self.sent
            );
        }
        let bursts = format!("bursts {} (mean {:.2})", self.loss_bursts, self.mean_loss_burst);
        match expected_loss {
            Some(l) => out += &format!("  loss       expected {:.4}%, loss {bursts}\n", 100.0 * l),
            None if self.lost > 0 => out += &format!("  loss       {bursts}\n"),
            None => {}
        }
        let (d, v) = (&self.delay_us, &self.deviation_us);
        match self.before_send_us {
            Some(before) if !self.one_clock => {
                out += &format!(
                    "  delay      unknown: a datagram arrived {before:.1} us before its send stamp, so \
                     the sender's clock is not this host's (run `probe pair`, or both ends on one \
                     host); std {:.1} us\n",
                    self.delay_std_us
                );
            }
            _ => {
                out += &format!(
                    "  delay      min {:.1} median {:.1} mean {:.1} p99 {:.1} max {:.1} us\n",
                    d.min, d.median, d.mean, d.p99, d.max
                );
                out += &format!(
                    "  deviation  from {:.1} us: median {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1} us\n",
                    self.expected_delay_us, v.median, v.p99, v.p99_9, v.p99_99, v.max
                );
            }
        }
        out += &format!(
            "  gaps       sent median {} us, received median {} us; {}% kept within ±2 us\n",
            figure(self.sender_gap_us.median, 1),
            figure(self.receiver_gap_us.median, 1),
            figure(100.0 * self.gaps_kept_within_2us, 2)
        );
        out += &format!(
            "  reordered  {}, duplicates {}, throughput {} Mbit/s {} pps\n",
            self.reordered,
            self.duplicates,
            figure(self.throughput_bps / 1e6, 3),
            figure(self.throughput_pps, 0)
        );
        out
    }
}

/// A figure on the screen with `digits` decimals, or `n/a` where no sample made it (NaN, null
/// in JSON): no gap without two consecutive numbers arrived, no rate from one arrival.
fn figure(x: f64, digits: usize) -> String {
    if x.is_nan() {
        "n/a".into()
    } else {
        format!("{x:.digits$}")
    }
}

/// The raw series behind the summary, for figures.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// |deviation| in ns, sorted.
    pub deviation_ns: Vec<u64>,
    /// Gaps in ns between consecutive sequence numbers that both arrived, sorted.
    pub sender_gaps_ns: Vec<u64>,
    pub receiver_gaps_ns: Vec<u64>,
    pub loss_bursts: Vec<u64>,
}

/// Exact percentiles (nearest rank) of `v` in ns, sorted here; the values are kept anyway,
/// so nothing is rounded to a histogram's buckets or capped at its bound.
fn percentiles(v: &mut [u64]) -> Percentiles {
    v.sort_unstable();
    let (Some(&min), Some(&max)) = (v.first(), v.last()) else { return Percentiles::unknown() };
    let us = |v: u64| v as f64 / 1e3;
    let at = |q: f64| us(v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]);
    let sum: u128 = v.iter().map(|&x| u128::from(x)).sum();
    Percentiles {
        min: us(min),
        median: at(0.5),
        mean: sum as f64 / v.len() as f64 / 1e3,
        p99: at(0.99),
        p99_9: at(0.999),
        p99_99: at(0.9999),
        max: us(max),
    }
}

/// The standard deviation of `v` (ns, signed: a clock offset moves every value alike) in µs.
fn std_us(v: &[i128]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt() / 1e3
}

impl Percentiles {
    /// Not known: every value NaN (null in JSON).
    fn unknown() -> Percentiles {
        let n = f64::NAN;
        Percentiles { min: n, median: n, mean: n, p99: n, p99_9: n, p99_99: n, max: n }
    }
}

/// Analyses `samples` (in arrival order) of a run that sent `sent` datagrams.
pub fn analyse(samples: &[Sample], sent: u64, expected_delay: Nanos) -> (Summary, Series) {
    // Only this run's datagrams: one numbered at or past what the sender announced is not.
    let strays = samples.iter().filter(|s| s.seq >= sent).count() as u64;
    let owned: Vec<Sample>;
    let samples = match strays {
        0 => samples,
        _ => {
            owned = samples.iter().filter(|s| s.seq < sent).copied().collect();
            &owned[..]
        }
    };
    let mut delay = Vec::with_capacity(samples.len());
    let mut series = Series::default();
    // Sequence numbers come off the wire: nothing is sized from them, only from the samples.
    let mut seen = std::collections::HashSet::with_capacity(samples.len());
    let (mut duplicates, mut reordered, mut max_seq) = (0u64, 0u64, None::<u64>);
    for s in samples {
        if !seen.insert(s.seq) {
            duplicates += 1;
            continue;
        }
        if max_seq.is_some_and(|m| s.seq < m) {
            reordered += 1;
        }
        max_seq = Some(max_seq.map_or(s.seq, |m| m.max(s.seq)));
        delay.push(i128::from(s.received.as_nanos()) - i128::from(s.sent.as_nanos()));
    }
    let delay_std_us = std_us(&delay);
    // A datagram that arrived before it was sent: the ends read two clocks.
    let earliest = delay.iter().copied().min().unwrap_or(0);
    let one_clock = earliest >= 0;
    let mut delay: Vec<u64> = if one_clock { delay.iter().map(|&d| d as u64).collect() } else { Vec::new() };
    series.deviation_ns = delay.iter().map(|d| d.abs_diff(expected_delay.as_nanos())).collect();
    let deviation_us = if one_clock { percentiles(&mut series.deviation_ns) } else { Percentiles::unknown() };
    // Gaps: sender side in sequence order (among received datagrams), receiver side in arrival
    // order; a pair of consecutive sequence numbers that both arrived compares the two.
    let mut by_seq: Vec<&Sample> = samples.iter().collect();
    by_seq.sort_by_key(|s| (s.seq, s.received));
    by_seq.dedup_by_key(|s| s.seq);
    let (mut kept, mut pairs) = (0u64, 0u64);
    for w in by_seq.windows(2) {
        if w[0].seq.checked_add(1) != Some(w[1].seq) {
            continue;
        }
        let sg = w[1].sent.saturating_sub(w[0].sent).as_nanos();
        let rg = w[1].received.as_nanos() as i128 - w[0].received.as_nanos() as i128;
        // Both sides' gaps over the same pairs: a pair that arrived reversed has no receiver
        // gap, and its sender gap would pull the two medians apart (it counts as not kept).
        if rg >= 0 {
            series.sender_gaps_ns.push(sg);
            series.receiver_gaps_ns.push(rg as u64);
        }
        pairs += 1;
        if (rg - sg as i128).abs() <= 2_000 {
            kept += 1;
        }
    }
    // Loss bursts: runs of sequence numbers below `sent` that never arrived, between the
    // distinct numbers that did (in order).
    let mut expect = 0u64;
    for seq in by_seq.iter().map(|s| s.seq).filter(|&q| q < sent).chain(std::iter::once(sent)) {
        if seq > expect {
            series.loss_bursts.push(seq - expect);
        }
        expect = seq.saturating_add(1);
    }
    let received = seen.len() as u64;
    let lost = sent.saturating_sub(received);
    let (first, last) = samples
        .iter()
        .fold((u64::MAX, 0u64), |(a, b), s| (a.min(s.received.as_nanos()), b.max(s.received.as_nanos())));
    let span = last.saturating_sub(first) as f64 / 1e9;
    // The span runs from the first arrival to the last: the frames after the first filled it.
    let first_len = samples.iter().min_by_key(|s| s.received).map_or(0, |s| s.len);
    let bits = (samples.iter().map(|s| s.len as u64).sum::<u64>() - first_len as u64) as f64 * 8.0;
    let summary = Summary {
        sent,
        sent_known: true,
        socket_drops: None,
        kernel_send_stamps: None,
        run: None,
        foreign: 0,
        received,
        strays,
        lost,
        loss_rate: if sent == 0 { 0.0 } else { lost as f64 / sent as f64 },
        duplicates,
        reordered,
        loss_bursts: series.loss_bursts.len() as u64,
        mean_loss_burst: if series.loss_bursts.is_empty() {
            0.0
        } else {
            series.loss_bursts.iter().sum::<u64>() as f64 / series.loss_bursts.len() as f64
        },
        delay_us: if one_clock { percentiles(&mut delay) } else { Percentiles::unknown() },
        delay_std_us,
        one_clock,
        before_send_us: (!one_clock).then(|| -(earliest as f64) / 1e3),
        deviation_us,
        expected_delay_us: expected_delay.as_nanos() as f64 / 1e3,
        sender_gap_us: percentiles(&mut series.sender_gaps_ns),
        receiver_gap_us: percentiles(&mut series.receiver_gaps_ns),
        gaps_kept_within_2us: if pairs == 0 { f64::NAN } else { kept as f64 / pairs as f64 },
        throughput_bps: if span > 0.0 { bits / span } else { f64::NAN },
        throughput_pps: if span > 0.0 { (samples.len() as f64 - 1.0) / span } else { f64::NAN },
    };
    (summary, series)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seq: u64, sent_us: u64, recv_us: u64) -> Sample {
        Sample { seq, sent: Nanos::from_micros(sent_us), received: Nanos::from_micros(recv_us), len: 100 }
    }

    /// Two hosts' clocks: one datagram "arrived" 3 ms before it was sent. The delays and their
    /// deviation are unknown (null in JSON, not zeros), their spread is kept, the screen says
    /// why; gaps and losses stand.
    #[test]
    fn delays_from_two_clocks_are_unknown_not_zero() {
        // Sent every 100 us, received every 100 us, 5 ms early by the receiver's clock, but one
        // datagram held 2 ms more (its delay a full 2 ms above the others').
        let samples = vec![
            Sample { seq: 0, sent: Nanos::from_millis(10), received: Nanos::from_millis(5), len: 100 },
            Sample {
                seq: 1,
                sent: Nanos::from_micros(10_100),
                received: Nanos::from_micros(7_100),
                len: 100,
            },
        ];
        let (sum, series) = analyse(&samples, 2, Nanos::from_millis(1));
        assert!(!sum.one_clock);
        assert_eq!(sum.before_send_us, Some(5000.0));
        assert!(sum.delay_us.median.is_nan() && sum.deviation_us.p99.is_nan());
        assert!((sum.delay_std_us - 1000.0).abs() < 1e-6, "{}", sum.delay_std_us);
        assert!(series.deviation_ns.is_empty(), "no deviation figure");
        assert_eq!((sum.received, sum.lost), (2, 0));
        let json = serde_json::to_value(&sum).unwrap();
        assert!(json["delay_us"]["median"].is_null() && json["deviation_us"]["max"].is_null(), "{json}");
        let text = sum.describe(None);
        assert!(text.contains("delay      unknown: a datagram arrived 5000.0 us before"), "{text}");
        assert!(!text.contains("deviation  from"), "{text}");
        // One clock: every datagram after its stamp.
        let (sum, _) = analyse(&[s(0, 0, 10)], 1, Nanos::ZERO);
        assert!(sum.one_clock && sum.before_send_us.is_none() && sum.delay_us.median == 10.0);
    }

    /// A pair that arrived reversed adds a gap to neither side (it is counted as not kept):
    /// the two medians compare the same pairs.
    #[test]
    fn reversed_pairs_leave_both_gap_series() {
        // Sent 0, 1, 2 every 10 us; 1 arrives 50 us late, after 2.
        let (sum, series) = analyse(&[s(0, 0, 100), s(2, 20, 120), s(1, 10, 160)], 3, Nanos::ZERO);
        assert_eq!(series.sender_gaps_ns, vec![10_000]);
        assert_eq!(series.receiver_gaps_ns, vec![60_000]);
        assert_eq!(sum.gaps_kept_within_2us, 0.0);
    }

    /// What no sample made is unknown, not zero: one datagram has no gap and no rate.
    #[test]
    fn figures_no_sample_made_are_unknown() {
        let (sum, _) = analyse(&[s(0, 0, 10)], 1, Nanos::ZERO);
        assert!(sum.gaps_kept_within_2us.is_nan() && sum.sender_gap_us.median.is_nan());
        assert!(sum.throughput_pps.is_nan() && sum.throughput_bps.is_nan());
        let json = serde_json::to_value(&sum).unwrap();
        assert!(json["gaps_kept_within_2us"].is_null() && json["throughput_pps"].is_null(), "{json}");
        let text = sum.describe(None);
        assert!(text.contains("sent median n/a us") && text.contains("n/a% kept"), "{text}");
        assert!(text.contains("throughput n/a Mbit/s n/a pps"), "{text}");
        // Only strays arrived: no delay either.
        let (sum, _) = analyse(&[s(5, 0, 10)], 1, Nanos::ZERO);
        assert!(sum.received == 0 && sum.delay_us.median.is_nan());
    }

    /// A count guessed (no end marker) and drops at this host's socket are said, not hidden.
    #[test]
    fn a_guessed_count_and_socket_drops_are_said() {
        let (mut sum, _) = analyse(&[s(0, 0, 10), s(2, 20, 30)], 3, Nanos::ZERO);
        assert!(sum.sent_known && !sum.describe(None).contains("at least"));
        (sum.sent_known, sum.socket_drops) = (false, Some(4));
        let text = sum.describe(None);
        assert!(text.starts_with("pathem probe: at least 3 sent, 2 received, at least 1 lost"), "{text}");
        assert!(
            text.contains("no end marker arrived")
                && text.contains("4 datagrams dropped by this host's socket")
        );
        // With other runs' datagrams at the socket, its drops are not all this run's.
        sum.foreign = 7;
        assert!(sum.describe(None).contains("4 datagrams of any run dropped by this host's socket"));
        sum.socket_drops = Some(0);
        assert!(!sum.describe(None).contains("socket "), "none dropped: no line");
        // Of two samples, one sent at the kernel's stamp: said; both: nothing to say.
        sum.kernel_send_stamps = Some(1);
        assert!(sum.describe(None).contains("1 of 2 sent at the kernel's transmit stamp"));
        sum.kernel_send_stamps = Some(2);
        assert!(!sum.describe(None).contains("stamps "));
    }

    #[test]
    fn known_delays_gaps_and_losses() {
        // 10 datagrams every 100 us, delay 1000 us; 3, 4 and 7 lost; 8 arrives before 6.
        let samples = vec![
            s(0, 0, 1000),
            s(1, 100, 1100),
            s(2, 200, 1200),
            s(5, 500, 1500),
            s(8, 800, 1550),
            s(6, 600, 1600),
            s(9, 900, 1900),
            s(9, 900, 1901),
        ];
        let (sum, series) = analyse(&samples, 10, Nanos::from_micros(1000));
        assert_eq!((sum.sent, sum.received, sum.lost), (10, 7, 3));
        assert!((sum.loss_rate - 0.3).abs() < 1e-12);
        assert_eq!((sum.duplicates, sum.reordered), (1, 1));
        assert_eq!(series.loss_bursts, vec![2, 1]);
        assert!((sum.mean_loss_burst - 1.5).abs() < 1e-12);
        assert!((sum.delay_us.median - 1000.0).abs() < 1.0);
        assert!((sum.delay_us.min - 750.0).abs() < 1.0, "{:?}", sum.delay_us);
        assert!((sum.deviation_us.max - 250.0).abs() < 1.0);
        // Pairs (0,1), (1,2), (5,6), (8,9): gaps 100/100, 100/100, 100/100, 100/350.
        assert_eq!(series.sender_gaps_ns, vec![100_000; 4]);
        assert!((sum.gaps_kept_within_2us - 0.75).abs() < 1e-12);
    }

    #[test]
    fn cbr_through_a_constant_delay_stays_cbr() {
        let samples: Vec<Sample> = (0..10_000).map(|i| s(i, i * 10, i * 10 + 5000)).collect();
        let (sum, _) = analyse(&samples, 10_000, Nanos::from_micros(5000));
        assert_eq!(sum.gaps_kept_within_2us, 1.0);
        assert!(sum.deviation_us.max < 0.01);
        assert!((sum.throughput_pps - 100_000.0).abs() < 100.0, "{}", sum.throughput_pps);
        assert!((sum.throughput_bps - 100_000.0 * 800.0).abs() / 8e7 < 0.01);
    }

    #[test]
    fn sequence_numbers_at_the_end_of_their_range_are_counted_not_wrapped() {
        // Stray datagrams with the probe's magic may carry any number: the last possible one
        // is a datagram like the others (no wrap to 0 in the gaps, the bursts or the count).
        let top = u64::MAX;
        let samples = vec![s(top - 2, 0, 1000), s(top - 1, 100, 1100), s(top, 200, 1200)];
        let (sum, series) = analyse(&samples, top, Nanos::from_micros(1000));
        // `top` datagrams are numbered 0 to top − 1: the one numbered `top` is a stray.
        assert_eq!((sum.received, sum.strays, sum.duplicates, sum.reordered), (2, 1, 0, 0));
        assert_eq!(series.sender_gaps_ns, [100_000]);
        assert_eq!(series.loss_bursts, [top - 2]);
    }

    #[test]
    fn strays_are_counted_apart_from_the_run() {
        // 10 sent; 3 and 4 lost; one datagram numbered 100 is not this run's.
        let mut samples: Vec<Sample> =
            [0, 1, 2, 5, 6, 7, 8, 9].iter().map(|&i| s(i, i * 100, i * 100 + 50)).collect();
        samples.push(s(100, 0, 2000));
        let (sum, series) = analyse(&samples, 10, Nanos::from_micros(50));
        assert_eq!((sum.received, sum.lost, sum.strays), (8, 2, 1));
        assert!((sum.loss_rate - 0.2).abs() < 1e-12);
        assert_eq!(series.loss_bursts, [2]);
        assert_eq!(sum.delay_us.max, 50.0, "the stray's delay is not the run's");
    }

    #[test]
    fn percentiles_are_exact_and_long_delays_are_not_capped() {
        // Delays 1.0000036 s to 1.0000863 s, and one of 200 s.
        let mut samples: Vec<Sample> =
            (0..10).map(|i| Sample { received: Nanos(1_000_003_600 + i * 9_189), ..s(i, 0, 0) }).collect();
        samples.push(Sample { received: Nanos::from_secs(200), ..s(10, 0, 0) });
        let (sum, _) = analyse(&samples, 11, Nanos::ZERO);
        assert_eq!(sum.delay_us.min, 1_000_003.6);
        assert_eq!(sum.delay_us.median, (1_000_003_600 + 5 * 9_189) as f64 / 1e3);
        assert_eq!(sum.delay_us.max, 200e6);
        assert_eq!(sum.deviation_us.max, 200e6);
    }

    #[test]
    fn throughput_is_frame_bits_between_the_first_arrival_and_the_last() {
        // Two 1000-byte frames 1 ms apart: 8000 bits in 1 ms, 1000 a second.
        let samples = [Sample { len: 1000, ..s(0, 0, 10) }, Sample { len: 1000, ..s(1, 1000, 1010) }];
        let (sum, _) = analyse(&samples, 2, Nanos::ZERO);
        assert!((sum.throughput_bps - 8e6).abs() < 1.0, "{}", sum.throughput_bps);
        assert!((sum.throughput_pps - 1000.0).abs() < 1e-6, "{}", sum.throughput_pps);
    }

    #[test]
    fn bunched_output_is_detected() {
        // Every 10 datagrams leave together: 90% of gaps collapse to zero.
        let samples: Vec<Sample> = (0..1000).map(|i| s(i, i * 10, (i / 10) * 100 + 5000)).collect();
        let (sum, _) = analyse(&samples, 1000, Nanos::from_micros(5000));
        assert!(sum.gaps_kept_within_2us < 0.15, "{}", sum.gaps_kept_within_2us);
    }
}
