//! Prometheus metrics of a running link (`--metrics [ADDR:]PORT`), in the OpenMetrics text
//! format of the `prometheus-client` crate.
//!
//! A scrape reads the single-writer counters (relaxed loads) and what each direction's
//! control last reported; it never touches the data path. Served on loopback unless an
//! address is given, by a thread of its own that answers `GET /metrics` (and `/`).
//!
//! Per direction (label `direction="a_to_b"` or `"b_to_a"`): `pathem_rx_frames_total`,
//! `pathem_rx_bytes_total`, `pathem_tx_frames_total`, `pathem_tx_bytes_total`,
//! `pathem_dropped_frames_total{reason}` (pathem's reasons and `port`, the kernel's drops
//! before pathem), `pathem_duplicated_frames_total`, `pathem_corrupted_frames_total`,
//! `pathem_ecn_marked_frames_total`, `pathem_reorder_clamped_frames_total`,
//! `pathem_port_rx_rolled_over_frames_total` (frames the kernel moved off a full receive
//! queue onto another of the port's, where they may pass their flow's earlier frames),
//! `pathem_port_rx_foreign_frames_total` (frames the host itself sent on an attachment's TAP
//! device, read and not forwarded), gauges
//! `pathem_link_queue_frames`, `pathem_link_queue_bytes`, `pathem_delay_line_used_bytes`,
//! `pathem_delay_line_capacity_bytes`, `pathem_in_flight_frames`, `pathem_port_tx_queued_frames`,
//! `pathem_aqm_marked_frames_total` (the queue discipline's CE marks), the histograms
//! `pathem_lateness_seconds` and `pathem_sojourn_seconds` (time in the queue discipline's
//! queue, `--aqm`), and `pathem_path_info{direction,path}` = 1. Drop reasons include
//! `aqm_drop` and `overlimit` (the queue discipline's control law and hard limit) and
//! `offload` (a super-frame the port could not cut). `pathem_port_tx_errors_total{error}`
//! counts frames the transmitting port refused (`too_large`, `no_buffer`, `down`, `other`);
//! they are also in `pathem_tx_frames_total` (frames handed to the port), which therefore
//! never goes back when a refusal is found after a scrape: sent = tx − tx errors;
//! `pathem_gso_frames_total`, `pathem_gso_segments_total` and
//! `pathem_checksums_completed_total` what the receiving port did to a local sender's frames;
//! `pathem_tx_filler_frames_total`, `pathem_tx_filler_bytes_total` and
//! `pathem_tx_filler_late_frames_total` what a port timing frames with fillers sent, and
//! `pathem_tx_filler_device_errors_total` what its device failed to send.

use crate::Error;
use pathem_engine::{Control, DirectionCounters};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};

/// One direction as exported.
#[derive(Debug, Clone)]
pub struct Exported {
    pub direction: &'static str,
    pub counters: DirectionCounters,
    /// The default path's control, then each class's.
    pub controls: Vec<Control>,
}

#[derive(Debug)]
struct LinkCollector(Vec<Exported>);

type Read = fn(&pathem_engine::Stats) -> u64;
type Histogram = fn(&DirectionCounters) -> pathem_engine::stats::Histo;
/// Series of a family: their labels and the counters they read.
type Series<'a> = [(Vec<(&'static str, &'a str)>, &'a pathem_engine::Stats)];

/// A family per row of `table` (`kind`: counter or gauge), a value per series.
fn families(
    encoder: &mut DescriptorEncoder,
    kind: MetricType,
    table: &[(&str, &str, Read)],
    series: &Series,
) -> Result<(), std::fmt::Error> {
    for (name, help, read) in table {
        let mut m = encoder.encode_descriptor(name, help, None, kind)?;
        for (labels, s) in series {
            let mut f = m.encode_family(labels)?;
            match kind {
                MetricType::Gauge => f.encode_gauge(&(read(s) as i64))?,
                _ => f.encode_counter::<NoLabelSet, _, u64>(&read(s), None)?,
            }
        }
    }
    Ok(())
}

/// A counter family by a second label (`key`): each series' `(value of key, count)` pairs.
fn by_label<'a>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    key: &'static str,
    series: &'a Series<'a>,
    counts: impl Fn(&'a pathem_engine::Stats) -> Vec<(&'static str, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, s) in series {
        for (value, n) in counts(s) {
            let mut all = labels.clone();
            all.push((key, value));
            m.encode_family(&all)?.encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
    }
    Ok(())
}

impl Collector for LinkCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Counters never go back: what was handed to the port (a refusal found after a scrape
        // would take a frame back out of "sent"), with the refusals in a family of their own.
        // Each direction read once: its classes' families add up to its own.
        let mut per = Vec::new();
        let snaps: Vec<(&'static str, pathem_engine::Stats)> = self
            .0
            .iter()
            .map(|e| {
                let (mut s, classes) = e.counters.read();
                per.push((e.direction, classes));
                (s.tx_packets, s.tx_bytes) = e.counters.handed();
                (e.direction, s)
            })
            .collect();
        let counters: [(&str, &str, Read); 18] = [
            ("pathem_rx_frames", "Frames pathem took from the receiving port", |s| s.rx_packets),
            ("pathem_rx_bytes", "Bytes pathem took from the receiving port", |s| s.rx_bytes),
            ("pathem_tx_frames", "Frames handed to the transmitting port (its refusals included: pathem_port_tx_errors)", |s| s.tx_packets),
            ("pathem_tx_bytes", "Bytes handed to the transmitting port (its refusals included)", |s| s.tx_bytes),
            ("pathem_duplicated_frames", "Duplicates made", |s| s.duplicated),
            ("pathem_corrupted_frames", "Frames with a bit flipped", |s| s.corrupted),
            ("pathem_ecn_marked_frames", "Frames CE-marked instead of dropped", |s| s.ecn_marked),
            ("pathem_aqm_marked_frames", "Frames the queue discipline CE-marked", |s| s.aqm_mark),
            ("pathem_reorder_clamped_frames", "Frames held back so none overtook another", |s| {
                s.reorder_clamped
            }),
            ("pathem_port_rx_rolled_over_frames", "Frames the kernel moved off a full receive queue onto another of the port's, where they may pass earlier frames of their flow (DPDK net_af_packet with qpairs above 1)", |s| s.port_rx_rolled_over),
            ("pathem_port_rx_foreign_frames", "Frames the host itself sent on an attachment's TAP device, read and not forwarded (they never crossed the interface)", |s| s.port_rx_foreign),
            ("pathem_gso_frames", "GSO super-frames the receiving port cut into wire frames", |s| {
                s.offload.gso_frames
            }),
            ("pathem_gso_segments", "Wire frames cut from GSO super-frames", |s| s.offload.gso_segments),
            ("pathem_checksums_completed", "Partial checksums the receiving port completed", |s| {
                s.offload.csum_completed
            }),
            ("pathem_tx_filler_frames", "Filler frames sent before real frames (--tx-timing filler)", |s| {
                s.tx_filler_frames
            }),
            ("pathem_tx_filler_bytes", "Bytes of filler frames (--tx-timing filler)", |s| s.tx_filler_bytes),
            ("pathem_tx_filler_late_frames", "Frames that started on the wire later than a minimum frame after their release (--tx-timing filler)", |s| {
                s.tx_filler_late
            }),
            ("pathem_tx_filler_device_errors", "Frames the device failed to send while fillers were on, fillers and real frames together (--tx-timing filler)", |s| s.tx_filler_errors),
        ];
        let series: Vec<_> = snaps.iter().map(|(d, s)| (vec![("direction", *d)], s)).collect();
        families(&mut encoder, MetricType::Counter, &counters, &series)?;
        let drops = (
            "pathem_dropped_frames",
            "Frames dropped, by reason (port: by the kernel or NIC before pathem saw them)",
        );
        by_label(&mut encoder, drops, "reason", &series, |s| {
            s.dropped.iter().map(|(r, n)| (r.name(), n)).chain([("port", s.port_rx_dropped)]).collect()
        })?;
        let refused = (
            "pathem_port_tx_errors",
            "Frames the transmitting port's kernel or NIC refused (not counted as sent), by kind of error",
        );
        by_label(&mut encoder, refused, "error", &series, |s| {
            s.port_tx_errors.iter().map(|(c, n)| (c.name(), n)).collect()
        })?;
        let gauges: [(&str, &str, Read); 6] = [
            ("pathem_link_queue_frames", "Frames in the link's queue (with a queue limit)", |s| {
                s.queue_frames
            }),
            ("pathem_link_queue_bytes", "Bytes in the link's queue (with a queue limit)", |s| s.queue_bytes),
            ("pathem_delay_line_used_bytes", "Bytes in use in the delay line", |s| s.delay_line_used),
            ("pathem_delay_line_capacity_bytes", "The delay line's capacity", |s| s.delay_line_capacity),
            ("pathem_in_flight_frames", "Frames in the delay line", |s| s.in_flight),
            ("pathem_port_tx_queued_frames", "Frames waiting in the transmitting port", |s| s.port_tx_queued),
        ];
        families(&mut encoder, MetricType::Gauge, &gauges, &series)?;
        let histograms: [(&str, &str, Histogram); 2] = [
            (
                "pathem_lateness_seconds",
                "How long after its release time each frame reached the transmitting port",
                |c| c.late(),
            ),
            (
                "pathem_sojourn_seconds",
                "How long frames waited in the queue discipline's queue (--aqm)",
                |c| c.sojourn(),
            ),
        ];
        for (name, help, which) in histograms {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for e in &self.0 {
                histogram(&mut m, e.direction, &which(&e.counters))?;
            }
        }
        let mut m = encoder.encode_descriptor("pathem_path", "The path in effect", None, MetricType::Info)?;
        for e in &self.0 {
            let path = e.controls.first().map(|c| c.current().to_string()).unwrap_or_default();
            m.encode_info(&[("direction", e.direction.to_string()), ("path", path)])?;
        }
        self.encode_classes(&mut encoder, per)
    }
}

impl LinkCollector {
    /// With classes, each path's own counters in families of their own (`pathem_class_...`,
    /// labels `direction` and `class`; the default path is `class="default"`), so a sum over a
    /// direction's families above never counts a frame twice.
    fn encode_classes(
        &self,
        encoder: &mut DescriptorEncoder,
        per: Vec<(&'static str, Vec<(String, pathem_engine::Stats)>)>,
    ) -> Result<(), std::fmt::Error> {
        if per.iter().all(|(_, c)| c.is_empty()) {
            return Ok(());
        }
        let series: Vec<_> = per
            .iter()
            .flat_map(|(d, classes)| {
                classes.iter().map(move |(c, s)| (vec![("direction", *d), ("class", c.as_str())], s))
            })
            .collect();
        let counters: [(&str, &str, Read); 7] = [
            ("pathem_class_rx_frames", "Frames the classifier gave the class", |s| s.rx_packets),
            ("pathem_class_rx_bytes", "Bytes the classifier gave the class", |s| s.rx_bytes),
            ("pathem_class_tx_frames", "The class's frames handed to the transmitting port", |s| {
                s.tx_packets
            }),
            ("pathem_class_tx_bytes", "The class's bytes handed to the transmitting port", |s| s.tx_bytes),
            ("pathem_class_duplicated_frames", "The class's duplicates", |s| s.duplicated),
            ("pathem_class_ecn_marked_frames", "The class's frames CE-marked instead of dropped", |s| {
                s.ecn_marked
            }),
            ("pathem_class_aqm_marked_frames", "The class's frames its queue discipline CE-marked", |s| {
                s.aqm_mark
            }),
        ];
        families(encoder, MetricType::Counter, &counters, &series)?;
        let drops = ("pathem_class_dropped_frames", "The class's frames pathem dropped, by reason");
        by_label(encoder, drops, "reason", &series, |s| {
            s.dropped.iter().map(|(r, n)| (r.name(), n)).collect()
        })?;
        let gauges: [(&str, &str, Read); 3] = [
            ("pathem_class_link_queue_frames", "Frames in the class's link queue", |s| s.queue_frames),
            ("pathem_class_link_queue_bytes", "Bytes in the class's link queue", |s| s.queue_bytes),
            ("pathem_class_in_flight_frames", "The class's frames in its delay line", |s| s.in_flight),
        ];
        families(encoder, MetricType::Gauge, &gauges, &series)?;
        let mut m = encoder.encode_descriptor(
            "pathem_class_path",
            "The class's path in effect",
            None,
            MetricType::Info,
        )?;
        for (e, (_, classes)) in self.0.iter().zip(&per) {
            for ((class, _), control) in classes.iter().zip(&e.controls) {
                let labels = [
                    ("direction", e.direction.to_string()),
                    ("class", class.to_string()),
                    ("path", control.current().to_string()),
                ];
                m.encode_info(&labels)?;
            }
        }
        Ok(())
    }
}

/// One direction's log2 histogram, in seconds.
fn histogram(
    m: &mut prometheus_client::encoding::MetricEncoder,
    direction: &str,
    h: &pathem_engine::stats::Histo,
) -> Result<(), std::fmt::Error> {
    let (buckets, sum) = h.cumulative();
    let count = buckets.last().map_or(0, |b| b.1);
    // The encoder adds the buckets up itself and writes `+Inf` for `f64::MAX`: each bucket's
    // own frames, the last bound as the encoder spells infinity. A bound in seconds is the
    // nanoseconds divided (one rounding, so `le` reads `2.55e-7`, not `2.5500000000000004e-7`).
    let mut below = 0;
    let buckets: Vec<(f64, u64)> = buckets
        .into_iter()
        .map(|(ns, upto)| {
            let own = upto - below;
            below = upto;
            (if ns == u64::MAX { f64::MAX } else { ns as f64 / 1e9 }, own)
        })
        .collect();
    m.encode_family(&[("direction", direction)])?.encode_histogram::<NoLabelSet>(
        sum as f64 * 1e-9,
        count,
        &buckets,
        None,
    )?;
    Ok(())
}

/// The text a scrape returns.
pub fn render(directions: &[Exported]) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(LinkCollector(directions.to_vec())));
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Parses `PORT` (on 127.0.0.1) or `ADDR:PORT`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, Error> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| Error::MetricsAddr(text.into()))
}

/// A metrics endpoint; stops when dropped.
pub struct Metrics {
    pub addr: SocketAddr,
    _thread: crate::ServerThread,
}

impl Metrics {
    /// Serves `directions` on `addr`.
    pub fn serve(addr: SocketAddr, directions: Vec<Exported>) -> Result<Metrics, Error> {
        let listener = TcpListener::bind(addr).map_err(|source| Error::Listen { addr, source })?;
        let addr = listener.local_addr().unwrap_or(addr);
        listener.set_nonblocking(true).map_err(|source| Error::Listen { addr, source })?;
        let thread = crate::ServerThread::spawn(
            "pathem-metrics",
            listener,
            |l| l.accept().map(|(s, _)| s),
            move |s| {
                let _ = answer(s, &directions);
            },
        )?;
        Ok(Metrics { addr, _thread: thread })
    }
}

fn answer(stream: std::net::TcpStream, directions: &[Exported]) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(crate::CLIENT_TIME))?;
    let request = crate::read_request(&stream, |t| stream.set_read_timeout(Some(t)), 8 << 10)?;
    let mut w = &stream;
    w.write_all(response(&request, || render(directions)).as_bytes())
}

/// The answer to an HTTP request: the exposition for `GET` (and the same headers without it
/// for `HEAD`) of `/metrics` or `/`, a query string ignored (scrapers may add one); 405 with
/// the methods allowed for any other method there; 404 for any other path.
fn response(request: &str, body: impl FnOnce() -> String) -> String {
    let mut words = request.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split(['?', '#']).next().unwrap_or("");
    let close = "Connection: close\r\n";
    if !(path == "/metrics" || path == "/") {
        return format!("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n{close}\r\n");
    }
    if method != "GET" && method != "HEAD" {
        return format!(
            "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\n{close}\r\n"
        );
    }
    let body = body();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n{close}\r\n",
        body.len()
    );
    if method == "HEAD" {
        head
    } else {
        head + &body
    }
}

/// Serves `link`'s metrics on `addr`, per direction.
pub fn serve(link: &crate::Link, addr: SocketAddr) -> Result<Metrics, Error> {
    let (kab, kba) = link.counters();
    let (cab, cba) = link.path_controls();
    let mut dirs = vec![Exported { direction: "a_to_b", counters: kab.clone(), controls: cab.to_vec() }];
    if let (Some(k), Some(c)) = (kba, cba) {
        dirs.push(Exported { direction: "b_to_a", counters: k.clone(), controls: c.to_vec() });
    }
    Metrics::serve(addr, dirs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::DropReason;

    /// The control of a transparent path.
    fn transparent() -> Control {
        Control::detached(&pathem_model::PathConfig::default())
    }

    #[test]
    fn requests_get_the_answer_their_method_and_path_ask_for() {
        let body = || "x 1\n# EOF\n".to_string();
        let get = response("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", body);
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n") && get.ends_with("\r\n\r\nx 1\n# EOF\n"), "{get}");
        assert!(get.contains("Content-Length: 10\r\n"), "{get}");
        for q in
            ["GET /metrics?job=a HTTP/1.1\r\n\r\n", "GET /?x HTTP/1.0\r\n\r\n", "GET /#f HTTP/1.1\r\n\r\n"]
        {
            assert_eq!(response(q, body), get, "{q}");
        }
        // HEAD: the same headers (the length of the body it would send), no body.
        let head = response("HEAD /metrics HTTP/1.1\r\n\r\n", body);
        assert!(
            get.starts_with(&head) && head.ends_with("\r\n\r\n") && head.len() + 10 == get.len(),
            "{head}"
        );
        let post = response("POST /metrics HTTP/1.1\r\n\r\n", || unreachable!("no body for a POST"));
        assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"), "{post}");
        for other in ["GET /nothing HTTP/1.1\r\n\r\n", "GET /metricsx HTTP/1.1\r\n\r\n", "", "GET"] {
            let r = response(other, || unreachable!("no body for {other:?}"));
            assert!(
                r.starts_with("HTTP/1.1 404 ")
                    && r.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"),
                "{r}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever a client sends, the answer is one HTTP response, and a body only for a
        /// `GET` of the exposition's paths.
        #[test]
        fn any_request_gets_one_answer(request in "(GET|HEAD|POST|)( (/|/metrics|/x)(\\?[a-z=&]*)?)?( HTTP/1\\.[01])?\r?\n?.{0,40}") {
            let r = response(&request, || "x 1\n# EOF\n".to_string());
            proptest::prop_assert!(r.starts_with("HTTP/1.1 ") && r.contains("\r\n\r\n"), "{r}");
            let mut w = request.split_whitespace();
            let (method, path) = (w.next().unwrap_or(""), w.next().unwrap_or("").split(['?', '#']).next().unwrap_or(""));
            let ok = matches!(method, "GET" | "HEAD") && matches!(path, "/" | "/metrics");
            proptest::prop_assert_eq!(r.starts_with("HTTP/1.1 200 "), ok, "{}", r);
            proptest::prop_assert_eq!(r.ends_with("# EOF\n"), ok && method == "GET", "{}", r);
        }
    }

    /// Connections that send nothing hold only their own threads: a scrape among them is
    /// answered while they are still open (one at a time, each waited for up to 2 s, five of
    /// them held it 10 s), and one past [`crate::MOST_CLIENTS`] is closed unanswered.
    #[test]
    fn idle_connections_do_not_hold_a_scrape() {
        use std::io::{Read, Write};
        let one = || std::sync::Arc::new(pathem_engine::Counters::default());
        let counters = DirectionCounters::new(one(), vec![("default".into(), one())]);
        let exported = vec![Exported { direction: "a_to_b", counters, controls: vec![transparent()] }];
        let m = Metrics::serve("127.0.0.1:0".parse().unwrap(), exported).unwrap();
        let idle: Vec<_> = (0..5).map(|_| std::net::TcpStream::connect(m.addr).unwrap()).collect();
        let mut scrape = std::net::TcpStream::connect(m.addr).unwrap();
        scrape.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut text = String::new();
        scrape.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK") && text.ends_with("# EOF\n"), "{text}");
        for c in &idle {
            c.set_nonblocking(true).unwrap();
            let e = (&*c).read(&mut [0u8; 1]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "an idle connection was given up first");
        }
        // Closed, the idle ones give their threads back at once; then exactly the most are
        // taken, and one more is closed unanswered.
        drop(idle);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let full: Vec<_> =
            (0..crate::MOST_CLIENTS).map(|_| std::net::TcpStream::connect(m.addr).unwrap()).collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut one_more = std::net::TcpStream::connect(m.addr).unwrap();
        one_more.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
        assert_eq!(one_more.read(&mut [0u8; 1]).unwrap(), 0, "closed unanswered");
        for c in &full {
            c.set_nonblocking(true).unwrap();
            let e = (&*c).read(&mut [0u8; 1]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "each of the most is being answered");
        }
    }

    #[test]
    fn a_scrape_shows_every_counter_per_direction() {
        let counters = std::sync::Arc::new(pathem_engine::Counters::default());
        counters.rx_packets.add(7);
        counters.dropped[DropReason::Queue as usize].add(2);
        counters.late.record(pathem_model::Nanos(300));
        counters.dropped[DropReason::Aqm as usize].add(3);
        counters.dropped[DropReason::Overlimit as usize].add(4);
        counters.aqm_marked.add(5);
        counters.sojourn.record(pathem_model::Nanos(2_000_000));
        counters.sojourn.record(pathem_model::Nanos(3_000_000));
        let control = transparent();
        counters.tx_packets.add(6);
        counters.tx_bytes.add(600);
        let port = std::sync::Arc::new(pathem_engine::Counters::default());
        port.port_tx_errors[pathem_io::TxErrorClass::TooLarge as usize].set(2);
        port.port_tx_refused_bytes.set(200);
        let counters = DirectionCounters::new(port, vec![("default".into(), counters)]);
        // Sent is handed less refused; the metric is what was handed, so it never goes back.
        assert_eq!((counters.snapshot().tx_packets, counters.handed()), (4, (6, 600)));
        let text = render(&[Exported { direction: "a_to_b", counters, controls: vec![control] }]);
        for want in [
            "pathem_rx_frames_total{direction=\"a_to_b\"} 7",
            "pathem_tx_frames_total{direction=\"a_to_b\"} 6",
            "pathem_tx_bytes_total{direction=\"a_to_b\"} 600",
            "pathem_port_tx_errors_total{direction=\"a_to_b\",error=\"too_large\"} 2",
            "pathem_dropped_frames_total{direction=\"a_to_b\",reason=\"queue\"} 2",
            "pathem_lateness_seconds_count{direction=\"a_to_b\"} 1",
            "pathem_dropped_frames_total{direction=\"a_to_b\",reason=\"aqm_drop\"} 3",
            "pathem_dropped_frames_total{direction=\"a_to_b\",reason=\"overlimit\"} 4",
            "pathem_aqm_marked_frames_total{direction=\"a_to_b\"} 5",
            "pathem_sojourn_seconds_count{direction=\"a_to_b\"} 2",
            "pathem_sojourn_seconds_sum{direction=\"a_to_b\"} 0.005",
            "pathem_path_info{direction=\"a_to_b\",path=\"transparent (no impairment)\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        // Buckets count every frame at or below their bound: they never fall, the first
        // holds neither sojourn (both above 255 ns), the 2 ms and 3 ms ones fall in 2^21 and
        // 2^22 ns, and the last, `+Inf`, holds them all (= `_count`).
        let buckets: Vec<(&str, u64)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("pathem_sojourn_seconds_bucket{le=\""))
            .map(|l| {
                let (le, n) = l.split_once("\",direction=\"a_to_b\"} ").unwrap();
                (le, n.parse().unwrap())
            })
            .collect();
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.first(), Some(&("2.55e-7", 0)), "{buckets:?}");
        assert!(
            buckets.contains(&("0.002097151", 1)) && buckets.contains(&("0.004194303", 2)),
            "{buckets:?}"
        );
        assert_eq!(buckets.last(), Some(&("+Inf", 2)), "{buckets:?}");
        assert!(parse_addr("9100").unwrap().ip().is_loopback());
        assert!(parse_addr("0.0.0.0:9100").is_ok() && parse_addr("nine").is_err());
    }

    #[test]
    fn classes_have_families_of_their_own_with_a_class_label() {
        use std::sync::Arc;
        let (port, default, dns) = (
            Arc::new(pathem_engine::Counters::default()),
            Arc::new(Default::default()),
            Arc::new(Default::default()),
        );
        let (default, dns): (Arc<pathem_engine::Counters>, Arc<pathem_engine::Counters>) = (default, dns);
        default.rx_packets.add(10);
        dns.rx_packets.add(4);
        dns.dropped[DropReason::Loss as usize].add(1);
        port.port_rx_dropped.add(2);
        let counters = DirectionCounters::new(port, vec![("default".into(), default), ("dns".into(), dns)]);
        let controls = vec![transparent(), transparent()];
        let text = render(&[Exported { direction: "a_to_b", counters, controls }]);
        for want in [
            "pathem_rx_frames_total{direction=\"a_to_b\"} 14",
            "pathem_dropped_frames_total{direction=\"a_to_b\",reason=\"port\"} 2",
            "pathem_class_rx_frames_total{direction=\"a_to_b\",class=\"default\"} 10",
            "pathem_class_rx_frames_total{direction=\"a_to_b\",class=\"dns\"} 4",
            "pathem_class_dropped_frames_total{direction=\"a_to_b\",class=\"dns\",reason=\"loss\"} 1",
            "pathem_class_path_info{direction=\"a_to_b\",class=\"dns\",path=\"transparent (no impairment)\"} 1",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        // Without classes, no class families.
        let single = DirectionCounters::single(Arc::new(pathem_engine::Counters::default()));
        let text =
            render(&[Exported { direction: "a_to_b", counters: single, controls: vec![transparent()] }]);
        assert!(!text.contains("pathem_class_"), "{text}");
    }
}
