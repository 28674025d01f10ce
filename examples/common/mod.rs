//! Shared by the examples: kernel intervals from device timestamps, the overlap factor, an SVG
//! timeline, and the workload size.
#![allow(dead_code, unreachable_pub)]

use std::fmt::Write as _;

/// One kernel's run on one lane (a stream or a thread), in GPU nanoseconds (`%globaltimer`).
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub lane: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Sum of the kernels' durations over the time from the first start to the last end: 1.0 when
/// they ran one after another, the number of lanes when they all ran at once.
pub fn overlap_factor(intervals: &[Interval]) -> f64 {
    let busy: u64 = intervals
        .iter()
        .map(|i| i.end_ns.saturating_sub(i.start_ns))
        .sum();
    let first = intervals.iter().map(|i| i.start_ns).min().unwrap_or(0);
    let last = intervals.iter().map(|i| i.end_ns).max().unwrap_or(0);
    if last > first {
        busy as f64 / (last - first) as f64
    } else {
        0.0
    }
}

/// An SVG with one row per lane and one bar per kernel, for each of the `runs` (title,
/// intervals), stacked vertically and drawn to the same time scale.
pub fn svg(title: &str, lane_name: &str, runs: &[(&str, &[Interval])]) -> String {
    let lanes = runs
        .iter()
        .flat_map(|(_, iv)| iv.iter().map(|i| i.lane + 1))
        .max()
        .unwrap_or(1);
    let span = runs
        .iter()
        .map(|(_, iv)| {
            let first = iv.iter().map(|i| i.start_ns).min().unwrap_or(0);
            iv.iter().map(|i| i.end_ns - first).max().unwrap_or(1)
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let (left, width, row, gap) = (110.0, 760.0, 18.0, 56.0);
    let block = lanes as f64 * row + gap;
    let height = 40.0 + runs.len() as f64 * block + 30.0;
    let colors = [
        "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
        "#9c755f",
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
        left + width + 20.0
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="15" font-weight="bold">{title}</text>"#
    );
    for (r, (name, intervals)) in runs.iter().enumerate() {
        let top = 40.0 + r as f64 * block;
        let first = intervals.iter().map(|i| i.start_ns).min().unwrap_or(0);
        let _ = writeln!(
            s,
            r#"<text x="10" y="{}" font-weight="bold">{name} (overlap {:.2}x)</text>"#,
            top + 12.0,
            overlap_factor(intervals)
        );
        for lane in 0..lanes {
            let y = top + 20.0 + lane as f64 * row;
            let _ = writeln!(
                s,
                r#"<text x="10" y="{}">{lane_name} {lane}</text>"#,
                y + 12.0
            );
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/>"##,
                left + width,
                y + 15.0,
                y + 15.0
            );
        }
        for i in intervals.iter() {
            let x = left + (i.start_ns - first) as f64 / span as f64 * width;
            let w = ((i.end_ns - i.start_ns) as f64 / span as f64 * width).max(1.0);
            let y = top + 20.0 + i.lane as f64 * row;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="14" fill="{}"><title>{lane_name} {}: {:.3} ms</title></rect>"#,
                colors[i.lane % colors.len()],
                i.lane,
                (i.end_ns - i.start_ns) as f64 / 1e6
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{}">0 to {:.2} ms (GPU %globaltimer)</text></svg>"#,
        height - 10.0,
        span as f64 / 1e6
    );
    s
}

/// Writes `svg` to the path after `--svg`, or else to `$UM_SVG_DIR/<name>.svg` (the GPU
/// bundle's run script sets it), if either is given.
pub fn write_svg_if_asked(name: &str, svg: &str) -> std::io::Result<Option<String>> {
    let arg = std::env::args().skip_while(|a| a != "--svg").nth(1);
    let path = arg.or_else(|| {
        std::env::var("UM_SVG_DIR")
            .ok()
            .map(|d| format!("{d}/{name}.svg"))
    });
    match path {
        Some(path) => std::fs::write(&path, svg).map(|()| Some(path)),
        None => Ok(None),
    }
}

/// `full`, or `small` when `UM_SANITIZE` is set: the GPU run script's sanitizer mode sets it,
/// because the tools slow every kernel by orders of magnitude.
pub fn workload(full: usize, small: usize) -> usize {
    if std::env::var_os("UM_SANITIZE").is_some() {
        small
    } else {
        full
    }
}

/// The context of device 0, or `None` after saying in one line why the example cannot run (on
/// a machine without a GPU, say); the example then exits with status 2.
pub fn open_gpu(example: &str) -> Option<um::Context> {
    match um::Context::new(0) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            eprintln!("{example}: cannot run: {e}");
            None
        }
    }
}

/// Draws the timeline of `runs`, writes it where asked (see [`write_svg_if_asked`]) and says
/// where.
pub fn publish_timeline(example: &str, title: &str, lane_name: &str, runs: &[(&str, &[Interval])]) {
    match write_svg_if_asked(example, &svg(title, lane_name, runs)) {
        Ok(Some(path)) => println!("timeline: {path}"),
        Ok(None) => {}
        Err(e) => eprintln!("{example}: cannot write the SVG: {e}"),
    }
}

/// Whether the example's timing (an overlap, a kernel still running) counts: not under a
/// sanitizer (`UM_SANITIZE`, set by the GPU run script's sanitizer mode), where the tool
/// serializes and slows every kernel, so timing says nothing about um. Results are checked in
/// every mode. Says so when it does not count.
pub fn timing_counts() -> bool {
    let counts = std::env::var_os("UM_SANITIZE").is_none();
    if !counts {
        println!("timing not checked: UM_SANITIZE (a sanitizer slows and serializes every kernel)");
    }
    counts
}

/// Whether the two runs show what NVIDIA's CUDA 7 streams post shows: the legacy default stream serializes
/// (overlap < 1.5x) and the per-thread default stream overlaps (> 4x). Says so when not.
/// Under a sanitizer ([`timing_counts`]), true whatever the overlaps.
pub fn legacy_serializes_and_per_thread_overlaps(
    legacy_overlap: f64,
    per_thread_overlap: f64,
) -> bool {
    let shows = legacy_overlap < 1.5 && per_thread_overlap > 4.0;
    if !shows {
        println!(
            "unexpected: the legacy run should serialize (< 1.5x) and the per-thread run overlap (> 4x)"
        );
    }
    shows || !timing_counts()
}
