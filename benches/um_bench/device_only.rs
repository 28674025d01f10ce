//! Section 13: device-only storage (`Device`) in section 2's run_task loop, with explicit
//! `copy_to_host` / `copy_from_host` of the buffer the host works on, against the C++
//! `explicit` policy (`bench/baseline.cpp run_task explicit`: pinned host buffers, async copies)
//! and um's mirror (whose host half is pinned); and the pinned host memory each holds.

use std::fmt::Write as _;

use um::Context;

use crate::Record;
use crate::cpp::{self, Baseline};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The rows: (imp, variant, what the page calls it).
const ROWS: [(&str, &str, &str); 4] = [
    ("um", "device", "um device"),
    ("um", "device_mirror", "um device + mirrored data"),
    ("um", "mirror", "um mirror"),
    ("cpp", "explicit", "C++ explicit"),
];

/// Per size: um device, um mirror (each in a fresh process, `um_bench --child run_task um ...`)
/// and C++ explicit, taking turns (the order rotates every round); and the pinned host MiB each
/// holds for the loop's three buffers.
pub(crate) fn device(
    ctx: &Context,
    cpp: Option<&Baseline>,
    sizes_mib: &[usize],
    rounds: usize,
    free: usize,
) -> Res<Vec<Record>> {
    println!("device: run_task on device storage, {sizes_mib:?} MiB, {rounds} rounds");
    let (device_pinned, mirror_pinned) = crate::runs::pinned_per_byte(ctx)?;
    let mut out = Vec::new();
    for &mib in sizes_mib {
        // Three buffers per variant (and the mirror's as many again on the host).
        if 3 * mib * (1 << 20) > free / 2 {
            println!("device: skipping {mib} MiB: more than half the free memory");
            continue;
        }
        let iters = crate::runs::iters_for(mib);
        let mut per: Vec<(Vec<f64>, Vec<f64>)> = ROWS.iter().map(|_| (vec![], vec![])).collect();
        for round in 0..rounds {
            for k in 0..ROWS.len() {
                let i = (round + k) % ROWS.len();
                let (imp, variant, _) = ROWS[i];
                let (m, n) = (mib.to_string(), iters.to_string());
                let line = if imp == "cpp" {
                    let Some(cpp) = cpp else { continue };
                    let line = cpp.run("run_task", &[variant.to_owned(), m, n])?.join("\n");
                    (
                        cpp::number(&line, "median_ms")?,
                        cpp::number(&line, "min_ms")?,
                    )
                } else {
                    let line = crate::runs::child_output(&["run_task", imp, variant, &m, &n])?;
                    (cpp::number(&line, "median")?, cpp::number(&line, "min")?)
                };
                per[i].0.push(line.0);
                per[i].1.push(line.1);
            }
        }
        for ((imp, variant, _), (medians, minima)) in ROWS.iter().zip(&per) {
            if medians.is_empty() {
                continue;
            }
            out.push(Record {
                scenario: "device",
                imp: (*imp).to_owned(),
                variant: (*variant).to_owned(),
                mib,
                bytes: 0,
                threads: 1,
                median: median(medians),
                min: min(minima),
                unit: "ms",
                paired: None,
            });
        }
        // Pinned host memory of the loop's three buffers: um's from the storages' footprints,
        // C++'s from its code (three cuMemAllocHost of the buffer's size).
        // The mixed variant: `data` mirrored, the other two device-only.
        for (imp, variant, pinned) in [
            ("um", "device", 3.0 * device_pinned),
            ("um", "device_mirror", mirror_pinned + 2.0 * device_pinned),
            ("um", "mirror", 3.0 * mirror_pinned),
            ("cpp", "explicit", 3.0),
        ] {
            let pinned = mib as f64 * pinned;
            out.push(Record {
                scenario: "device_pinned",
                imp: imp.to_owned(),
                variant: variant.to_owned(),
                mib,
                bytes: 0,
                threads: 1,
                median: pinned,
                min: pinned,
                unit: "MiB",
                paired: None,
            });
        }
        println!("  {mib} MiB done");
    }
    Ok(out)
}

fn get(records: &[Record], scenario: &str, imp: &str, variant: &str, mib: usize) -> Option<f64> {
    records
        .iter()
        .find(|r| r.scenario == scenario && r.imp == imp && r.variant == variant && r.mib == mib)
        .map(|r| r.median)
}

fn sizes(records: &[Record]) -> Vec<usize> {
    let mut sizes: Vec<usize> = records
        .iter()
        .filter(|r| r.scenario == "device")
        .map(|r| r.mib)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Section 13, where its records exist.
pub(crate) fn markdown(records: &[Record]) -> String {
    let mut md = String::new();
    if !records.iter().any(|r| r.scenario == "device") {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## 13. Device-only storage in the run_task loop\n\n\
         Section 2's loop (transform, the host subtracts 1 from `data`, convert; ms per \
         iteration) with its three buffers in device-only memory: `um device` is `Device` \
         storage (`Managed::from_slice_device`, `zeroed_slice_device`), `data` brought to a host \
         `Vec` by `sync` + `copy_to_host` and back by `copy_from_host` + `attach` (each copy \
         waits for itself, from pageable memory); `um mirror` is section 2's mirrored loop \
         (pinned host halves, the copies made by `sync` and `attach`); C++ is \
         `bench/baseline.cpp`'s `explicit` policy (`cuMemAlloc` buffers, three `cuMemAllocHost` \
         buffers, async copies on the stream). Each in a fresh process per round, taking turns; \
         median of the rounds' medians. Pinned host memory: what the loop's three buffers hold \
         beside their device memory (um's from `footprint_in_bytes` of real buffers, C++'s from \
         its code); `um device` copies through the program's own pageable `Vec`. `um device + \
         mirrored data` keeps each buffer in the storage its use needs: `input` and `out`, which \
         only kernels touch, in `Device` storage, and `data`, which the host works on, mirrored \
         (a third of the mirror's pinned memory). The section's goal (device-only storage in the loop \
         at C++'s speed with at most half the mirror's pinned host memory) is measured on that \
         row; `um device` is there for comparison, with no goal: with no pinned memory at all its \
         copies go through pageable memory, and such a copy waits for itself.\n\n\
         | MiB | um device ms | um device + mirrored data ms | um mirror ms | C++ explicit ms | device / C++ | device + mirrored data / C++ | mirror / C++ | pinned host MiB: um device | um device + mirrored data | um mirror | C++ |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for mib in sizes(records) {
        let ms = |imp: &str, v: &str| get(records, "device", imp, v, mib);
        let pinned = |imp: &str, v: &str| {
            get(records, "device_pinned", imp, v, mib)
                .map_or("–".to_owned(), |p| format!("{p:.0}"))
        };
        let f = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.3}"));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.3}x", a / b),
            _ => "–".to_owned(),
        };
        let (d, dm, m, c) = (
            ms("um", "device"),
            ms("um", "device_mirror"),
            ms("um", "mirror"),
            ms("cpp", "explicit"),
        );
        let _ = writeln!(
            md,
            "| {mib} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(d),
            f(dm),
            f(m),
            f(c),
            ratio(d, c),
            ratio(dm, c),
            ratio(m, c),
            pinned("um", "device"),
            pinned("um", "device_mirror"),
            pinned("um", "mirror"),
            pinned("cpp", "explicit"),
        );
    }
    md.push_str(&crate::report::goals_table("13", &goals(records)));
    md
}

/// The goal of section 13: device-only storage in the run_task loop at C++'s speed with at most
/// half the mirror's pinned host memory, measured where each buffer is in the storage its use
/// needs (`um device + mirrored data`: device-only memory for the two buffers only kernels
/// touch, pinned memory for the one the host works on). `um device`, all three buffers in
/// device-only memory and no pinned memory at all, copies through pageable memory; it is on the
/// page for comparison and has no goal (a copy from pageable memory waits for itself).
pub(crate) fn goals(records: &[Record]) -> Vec<(String, String, bool)> {
    let mut goals = Vec::new();
    for mib in sizes(records) {
        if let (Some(dm), Some(c), Some(p), Some(pm)) = (
            get(records, "device", "um", "device_mirror", mib),
            get(records, "device", "cpp", "explicit", mib),
            get(records, "device_pinned", "um", "device_mirror", mib),
            get(records, "device_pinned", "um", "mirror", mib),
        ) {
            goals.push((
                format!(
                    "run_task {mib} MiB, um device + mirrored data vs C++ explicit copies: ≤ 1.0x with at most half the mirror's pinned host memory (um {p:.0} MiB, mirror {pm:.0} MiB)"
                ),
                format!("{:.3}x", dm / c),
                dm <= c && p <= pm / 2.0,
            ));
        }
    }
    goals
}
