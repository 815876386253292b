//! Micro-benchmarks of the per-frame work: delay line copy in/out, and a path's decision.
//! The end-to-end figure is `pathem bench`; these show where its nanoseconds go.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pathem_engine::delay_line::delay_line;
use pathem_model::delay::DelayConfig;
use pathem_model::dist::Dist;
use pathem_model::link::LinkConfig;
use pathem_model::loss::LossConfig;
use pathem_model::{FrameMeta, Nanos, Path, PathConfig, Rng};
use std::hint::black_box;

fn delay_line_round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("delay_line");
    for size in [64usize, 1500] {
        let frame = vec![0xa5u8; size];
        let (mut w, mut r) = delay_line(1 << 20, 2048).unwrap();
        g.throughput(Throughput::Elements(32));
        g.bench_function(format!("push_pop_32x{size}B"), |b| {
            b.iter(|| {
                for i in 0..32 {
                    assert!(w.push(Nanos(i), size as u32, black_box(&frame), |_| {}));
                }
                for _ in 0..32 {
                    black_box(r.peek().unwrap().data.len());
                    r.pop();
                }
            })
        });
    }
    g.finish();
}

fn path_process(c: &mut Criterion) {
    let mut g = c.benchmark_group("path");
    let basic = PathConfig {
        link: Some(LinkConfig {
            queue: Some("1MB".parse().unwrap()),
            ..LinkConfig::rate("40gbit".parse().unwrap())
        }),
        loss: Some(LossConfig::Random("1%".parse().unwrap())),
        delay: DelayConfig::constant(Nanos::from_millis(10)),
        ..PathConfig::default()
    };
    let rich = PathConfig {
        police: Some("30gbit,burst=1MB".parse().unwrap()),
        loss: Some("ge:loss=1%,burst=5".parse().unwrap()),
        delay: DelayConfig {
            base: Nanos::from_millis(10),
            jitter: Nanos::from_millis(1),
            dist: Dist::Normal,
            half_life: Some(Nanos::from_millis(5)),
            correlation: None,
            trace: None,
        },
        ..basic.clone()
    };
    for (name, cfg) in
        [("transparent", PathConfig::default()), ("rate_queue_loss_delay", basic), ("rich", rich)]
    {
        g.throughput(Throughput::Elements(1));
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || (Path::new(&cfg), Rng::seeded(1), 0u64),
                |(path, rng, t)| {
                    *t += 20;
                    black_box(path.process(FrameMeta::new(Nanos(*t), 64), rng))
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, delay_line_round_trip, path_process);
criterion_main!(benches);
