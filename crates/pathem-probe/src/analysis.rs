//! What a path did to the probe's datagrams: delays and their deviation, gaps before and
//! after, losses and their bursts, reordering, duplicates, throughput.
//!
//! Pure arithmetic on `(sequence number, send time, receive time)` samples, so it is tested on
//! synthetic data with known answers.

use hdrhistogram::Histogram;
use pathem_model::Nanos;
use serde::Serialize;

/// One datagram as the receiver saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub seq: u64,
    pub sent: Nanos,
    pub received: Nanos,
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
    pub received: u64,
    pub lost: u64,
    pub loss_rate: f64,
    pub duplicates: u64,
    pub reordered: u64,
    pub loss_bursts: u64,
    pub mean_loss_burst: f64,
    /// One-way delay, µs, and its standard deviation.
    pub delay_us: Percentiles,
    pub delay_std_us: f64,
    /// |delay − expected delay|, µs.
    pub deviation_us: Percentiles,
    pub expected_delay_us: f64,
    /// Gaps between consecutive sends and consecutive receptions, µs.
    pub sender_gap_us: Percentiles,
    pub receiver_gap_us: Percentiles,
    /// Fraction of receiver gaps within ±2 µs of the sender's gap for the same pair.
    pub gaps_kept_within_2us: f64,
    pub throughput_bps: f64,
    pub throughput_pps: f64,
}

impl Summary {
    /// The receiver's screen; `expected_loss` is the rate the path should lose at, if known.
    pub fn describe(&self, expected_loss: Option<f64>) -> String {
        let mut out = format!(
            "pathem probe: {} sent, {} received, {} lost ({:.4}%)\n",
            self.sent,
            self.received,
            self.lost,
            100.0 * self.loss_rate
        );
        let bursts = format!("bursts {} (mean {:.2})", self.loss_bursts, self.mean_loss_burst);
        match expected_loss {
            Some(l) => out += &format!("  loss       expected {:.4}%, loss {bursts}\n", 100.0 * l),
            None if self.lost > 0 => out += &format!("  loss       {bursts}\n"),
            None => {}
        }
        let (d, v) = (&self.delay_us, &self.deviation_us);
        out += &format!(
            "  delay      min {:.1} median {:.1} mean {:.1} p99 {:.1} max {:.1} us\n",
            d.min, d.median, d.mean, d.p99, d.max
        );
        out += &format!(
            "  deviation  from {:.1} us: median {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1} us\n",
            self.expected_delay_us, v.median, v.p99, v.p99_9, v.p99_99, v.max
        );
        out += &format!(
            "  gaps       sent median {:.1} us, received median {:.1} us; {:.2}% kept within ±2 us\n",
            self.sender_gap_us.median,
            self.receiver_gap_us.median,
            100.0 * self.gaps_kept_within_2us
        );
        out += &format!(
            "  reordered  {}, duplicates {}, throughput {:.3} Mbit/s {:.0} pps\n",
            self.reordered,
            self.duplicates,
            self.throughput_bps / 1e6,
            self.throughput_pps
        );
        out
    }
}

/// The raw series behind the summary, for figures.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// |deviation| in ns, sorted.
    pub deviation_ns: Vec<u64>,
    pub sender_gaps_ns: Vec<u64>,
    pub receiver_gaps_ns: Vec<u64>,
    pub loss_bursts: Vec<u64>,
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let us = |v: u64| v as f64 / 1e3;
    Percentiles {
        min: us(h.min()),
        median: us(h.value_at_quantile(0.5)),
        mean: h.mean() / 1e3,
        p99: us(h.value_at_quantile(0.99)),
        p99_9: us(h.value_at_quantile(0.999)),
        p99_99: us(h.value_at_quantile(0.9999)),
        max: us(h.max()),
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 100 s with 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds")
}

/// Analyses `samples` (in arrival order) of a run that sent `sent` datagrams.
pub fn analyse(samples: &[Sample], sent: u64, expected_delay: Nanos) -> (Summary, Series) {
    let mut delay = histogram();
    let mut deviation = histogram();
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
        let d = s.received.saturating_sub(s.sent).as_nanos();
        delay.saturating_record(d.max(1));
        let dev = d.abs_diff(expected_delay.as_nanos());
        deviation.saturating_record(dev.max(1));
        series.deviation_ns.push(dev);
    }
    series.deviation_ns.sort_unstable();
    // Gaps: sender side in sequence order (among received datagrams), receiver side in arrival
    // order; a pair of consecutive sequence numbers that both arrived compares the two.
    let mut by_seq: Vec<&Sample> = samples.iter().collect();
    by_seq.sort_by_key(|s| (s.seq, s.received));
    by_seq.dedup_by_key(|s| s.seq);
    let mut sender_gaps = histogram();
    let mut receiver_gaps = histogram();
    let (mut kept, mut pairs) = (0u64, 0u64);
    for w in by_seq.windows(2) {
        if w[0].seq.checked_add(1) != Some(w[1].seq) {
            continue;
        }
        let sg = w[1].sent.saturating_sub(w[0].sent).as_nanos();
        let rg = w[1].received.as_nanos() as i128 - w[0].received.as_nanos() as i128;
        sender_gaps.saturating_record(sg.max(1));
        series.sender_gaps_ns.push(sg);
        if rg >= 0 {
            receiver_gaps.saturating_record((rg as u64).max(1));
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
    let bytes: usize = samples.iter().map(|s| s.len).sum();
    let summary = Summary {
        sent,
        received,
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
        delay_us: percentiles(&delay),
        delay_std_us: delay.stdev() / 1e3,
        deviation_us: percentiles(&deviation),
        expected_delay_us: expected_delay.as_nanos() as f64 / 1e3,
        sender_gap_us: percentiles(&sender_gaps),
        receiver_gap_us: percentiles(&receiver_gaps),
        gaps_kept_within_2us: if pairs == 0 { 0.0 } else { kept as f64 / pairs as f64 },
        throughput_bps: if span > 0.0 { bytes as f64 * 8.0 / span } else { 0.0 },
        throughput_pps: if span > 0.0 { (samples.len() as f64 - 1.0) / span } else { 0.0 },
    };
    (summary, series)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seq: u64, sent_us: u64, recv_us: u64) -> Sample {
        Sample { seq, sent: Nanos::from_micros(sent_us), received: Nanos::from_micros(recv_us), len: 100 }
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
        assert_eq!((sum.received, sum.duplicates, sum.reordered), (3, 0, 0));
        assert_eq!(series.sender_gaps_ns, [100_000, 100_000]);
        assert_eq!(series.loss_bursts, [top - 2]);
    }

    #[test]
    fn bunched_output_is_detected() {
        // Every 10 datagrams leave together: 90% of gaps collapse to zero.
        let samples: Vec<Sample> = (0..1000).map(|i| s(i, i * 10, (i / 10) * 100 + 5000)).collect();
        let (sum, _) = analyse(&samples, 1000, Nanos::from_micros(5000));
        assert!(sum.gaps_kept_within_2us < 0.15, "{}", sum.gaps_kept_within_2us);
    }
}
