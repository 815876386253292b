//! The papers' figures for any path, as SVG: delay-deviation percentiles (MoonEm Fig. 7),
//! inter-packet gaps before and after (MoonEm Figs. 9/10), loss-burst CDF against a theory
//! (DEMU Fig. 7).

use crate::analysis::Series;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// Percentile levels shown: 50% … 99.999%, on a log scale of 1/(1−p).
const LEVELS: [f64; 9] = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 0.99999];

fn quantile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64
}

/// Delay deviation (µs) against percentile.
pub fn deviation(series: &Series, out: &Path, title: &str) -> PlotResult {
    let root = SVGBackend::new(out, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let pts: Vec<(f64, f64)> =
        LEVELS.iter().map(|&p| (-(1.0 - p).log10(), quantile(&series.deviation_ns, p) / 1e3)).collect();
    let ymax = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.25f64..5.2, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("|delay − expected| (µs)")
        .x_label_formatter(&|x| format!("{:.3}%", 100.0 * (1.0 - 10f64.powf(-x))))
        .draw()?;
    chart.draw_series(LineSeries::new(pts.clone(), &BLUE))?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))?;
    root.present()?;
    Ok(())
}

/// Histograms of the gaps at the sender and at the receiver (µs).
pub fn gaps(series: &Series, out: &Path, title: &str) -> PlotResult {
    let root = SVGBackend::new(out, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let all: Vec<u64> = series.sender_gaps_ns.iter().chain(&series.receiver_gaps_ns).copied().collect();
    let mut sorted = all.clone();
    sorted.sort_unstable();
    let hi = (quantile(&sorted, 0.999) / 1e3).max(1.0) * 1.2;
    let bins = 60usize;
    let width = hi / bins as f64;
    let count = |v: &[u64]| -> Vec<f64> {
        let mut c = vec![0.0; bins];
        for &g in v {
            let b = ((g as f64 / 1e3) / width) as usize;
            if b < bins {
                c[b] += 1.0;
            }
        }
        let n = v.len().max(1) as f64;
        c.iter().map(|x| x / n).collect()
    };
    let (s, r) = (count(&series.sender_gaps_ns), count(&series.receiver_gaps_ns));
    let ymax = s.iter().chain(&r).fold(0.01f64, |a, &b| a.max(b)) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..hi, 0.0..ymax)?;
    chart.configure_mesh().x_desc("inter-packet gap (µs)").y_desc("fraction of gaps").draw()?;
    for (data, color, label) in [(&s, BLUE, "sent"), (&r, RED, "received")] {
        chart
            .draw_series(LineSeries::new(
                data.iter().enumerate().map(|(i, &y)| ((i as f64 + 0.5) * width, y)),
                color,
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw()?;
    root.present()?;
    Ok(())
}

/// CDF of loss-burst lengths, with the model's CDF when one is known.
pub fn loss_bursts(
    series: &Series,
    theory: Option<&dyn Fn(u64) -> f64>,
    out: &Path,
    title: &str,
) -> PlotResult {
    let root = SVGBackend::new(out, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut b = series.loss_bursts.clone();
    b.sort_unstable();
    let max = b.last().copied().unwrap_or(1).clamp(1, 200);
    let n = b.len().max(1) as f64;
    let measured: Vec<(f64, f64)> =
        (1..=max).map(|k| (k as f64, b.partition_point(|&x| x <= k) as f64 / n)).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5f64..max as f64 + 0.5, 0.0..1.05)?;
    chart.configure_mesh().x_desc("loss burst length (frames)").y_desc("CDF").draw()?;
    chart
        .draw_series(LineSeries::new(measured, &BLUE))?
        .label("measured")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    if let Some(f) = theory {
        let pts: Vec<(f64, f64)> = (1..=max).map(|k| (k as f64, f(k))).collect();
        chart
            .draw_series(LineSeries::new(pts, &RED))?
            .label("model")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw()?;
    root.present()?;
    Ok(())
}

/// Writes all three figures into `dir` with `prefix`; returns their paths.
pub fn all(
    series: &Series,
    theory: Option<&dyn Fn(u64) -> f64>,
    dir: &Path,
    prefix: &str,
) -> Result<Vec<PathBuf>, crate::Error> {
    let failed = |path: &Path, e: &dyn std::fmt::Display| crate::Error::Write {
        path: path.into(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| failed(dir, &e))?;
    let mut files = Vec::new();
    // No deviation without one clock at both ends (`Summary::one_clock`): no figure of it.
    if !series.deviation_ns.is_empty() {
        let f = dir.join(format!("{prefix}delay-deviation.svg"));
        deviation(series, &f, "delay deviation by percentile").map_err(|e| failed(&f, &e))?;
        files.push(f);
    }
    let f = dir.join(format!("{prefix}gaps.svg"));
    gaps(series, &f, "inter-packet gaps, sent and received").map_err(|e| failed(&f, &e))?;
    files.push(f);
    let f = dir.join(format!("{prefix}loss-bursts.svg"));
    loss_bursts(series, theory, &f, "loss-burst lengths").map_err(|e| failed(&f, &e))?;
    files.push(f);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures from what any datagrams can make the analysis hold: nothing, one value, and
    /// values at the end of their range (stray datagrams carry any numbers and stamps).
    #[test]
    fn figures_are_drawn_from_empty_single_and_extreme_series() {
        let dir = std::env::temp_dir().join(format!("pathem-plot-test-{}", std::process::id()));
        let top = u64::MAX;
        let cases = [
            Series::default(),
            Series {
                deviation_ns: vec![0],
                sender_gaps_ns: vec![0],
                receiver_gaps_ns: vec![0],
                loss_bursts: vec![1],
            },
            Series {
                deviation_ns: vec![top, top],
                sender_gaps_ns: vec![top],
                receiver_gaps_ns: vec![0, top],
                loss_bursts: vec![top, 1],
            },
        ];
        let theory = |k: u64| 1.0 - 0.5f64.powf(k as f64);
        for (i, s) in cases.iter().enumerate() {
            let files = all(s, Some(&theory), &dir, &format!("{i}-")).expect("figures drawn");
            for f in files {
                let svg = std::fs::read_to_string(&f).expect("a figure written");
                assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{}", f.display());
            }
        }
        std::fs::remove_dir_all(&dir).expect("the figures removed");
    }
}
