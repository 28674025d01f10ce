//! Section 11: a conjugate-gradient solve in safe um (`examples/conjugate_gradient.rs`: cuSPARSE
//! SpMV on a proved CSR matrix, cuBLAS level 1, owned buffers) against the same loop in C++
//! (`bench/cg_baseline.cpp`: cuSPARSE and cuBLAS on `cudaMalloc` memory), both run as
//! subprocesses, taking turns round by round.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::Record;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Iterations per timed loop, as both programs run it (`--fixed`: no early exit).
pub(crate) const ITERS: usize = 100;
/// Timed loops per process run.
const REPS: usize = 3;
/// Grid sides: 1000² = 1M rows, 4000² = 16M rows.
const GRIDS: [usize; 2] = [1000, 4000];

/// The `loop_ms=` values of the lines that start with `tag`.
fn loop_ms(out: &str, tag: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.starts_with(tag))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("loop_ms="))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

fn run(exe: &Path, args: &[String], tag: &str) -> Res<Vec<f64>> {
    let out = Command::new(exe).args(args).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}{}",
            exe.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let ms = loop_ms(&stdout, tag);
    if ms.len() != REPS {
        return Err(format!(
            "{}: expected {REPS} `{tag}` lines, got: {stdout}",
            exe.display()
        )
        .into());
    }
    Ok(ms)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The um example's variants: (record name, `--storage` value, what the page calls it). The
/// first is the example's default on a device with concurrent managed access, and the goal's.
const UM_VARIANTS: [(&str, &str, &str); 3] = [
    ("um", "coherent", "um coherent"),
    ("um-mirror", "mirror", "um mirror"),
    ("um-unified", "unified", "um unified"),
];

/// Both programs at every grid (the um example once per [`UM_VARIANTS`]), `rounds` rounds
/// each, the C++ program first in even rounds and last in odd ones.
pub(crate) fn solver(um_example: &Path, cpp: &Path, rounds: usize) -> Res<Vec<Record>> {
    let mut records = Vec::new();
    for grid in GRIDS {
        let um_args = |storage: &str| -> Vec<String> {
            [
                "--grid",
                &grid.to_string(),
                "--iters",
                &ITERS.to_string(),
                "--reps",
                &REPS.to_string(),
                "--fixed",
                "--no-cpu",
                "--storage",
                storage,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let cpp_args = vec![grid.to_string(), ITERS.to_string(), REPS.to_string()];
        // Per implementation: the rounds' medians, and every loop.
        let mut per: Vec<(String, Vec<f64>, Vec<f64>)> = UM_VARIANTS
            .iter()
            .map(|(imp, _, _)| ((*imp).to_owned(), vec![], vec![]))
            .chain([("cpp".to_owned(), vec![], vec![])])
            .collect();
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..per.len()).collect();
            if round % 2 == 0 {
                order.rotate_right(1); // C++ first
            }
            for i in order {
                let ms = if let Some((_, storage, _)) = UM_VARIANTS.get(i) {
                    run(um_example, &um_args(storage), "cg_um")?
                } else {
                    run(cpp, &cpp_args, "cg_cpp")?
                };
                per[i].2.extend(ms.iter().copied());
                per[i].1.push(median(ms));
            }
        }
        let rows = grid * grid;
        for (imp, per_round, all) in per {
            let min = all.iter().copied().fold(f64::INFINITY, f64::min);
            records.push(Record {
                scenario: "solver",
                imp,
                variant: format!("cg{rows}"),
                mib: 0,
                bytes: 0,
                threads: 0,
                median: median(per_round),
                min,
                unit: "ms",
                paired: None,
            });
        }
        println!("solver: {rows} rows done");
    }
    Ok(records)
}

fn get(records: &[Record], imp: &str, variant: &str) -> Option<(f64, f64)> {
    records
        .iter()
        .find(|r| r.scenario == "solver" && r.imp == imp && r.variant == variant)
        .map(|r| (r.median, r.min))
}

/// Section 11, where its records exist.
pub(crate) fn markdown(records: &[Record]) -> String {
    let mut md = String::new();
    if !records.iter().any(|r| r.scenario == "solver") {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## 11. A conjugate-gradient solve\n\n\
         The 5-point Laplacian of an N×N grid (f64, N² rows, 5 entries per row), {ITERS} iterations of \
         the textbook loop from x = 0 (SpMV, two dot products read on the host, three axpy and a \
         scal per iteration; no early exit). `um`: `examples/conjugate_gradient.rs`, entirely safe \
         (a proved `Csr`, `um::cusparse::Sparse::spmv`, `um::cublas::Blas` level 1, owned buffers \
         on one stream, the matrix and the five vectors in one storage: `Coherent` (managed memory \
         attached globally: the example's default where the device has concurrent managed access), \
         `Mirror` (device memory) or `Unified` (managed memory attached to the stream), all with the \
         stream's `Transfer::Prefetch`). C++: `bench/cg_baseline.cpp`, the same calls on \
         `cudaMalloc` memory. Host time of the {ITERS} iterations, ended by the last dot's read; \
         each program runs {REPS} loops per process, the four taking turns; median of the rounds' \
         medians, minimum of all loops. Each iteration reads two dot products on the host, so it \
         synchronizes the stream twice: memory associated with the stream \
         (`cuStreamAttachMemAsync`, `Unified`) makes each such synchronization cost time in \
         proportion to the memory attached (the C++ loop on managed memory with the same \
         attach was 3.4x its `cudaMalloc` time at 1M rows and 4.7x at 16M, 1× H200, 2026-11-28).\n\n\
         | rows | {} ms | {} ms | {} ms | C++ ms | coherent / C++ | mirror / C++ | unified / C++ | min ms (coherent, mirror, unified, C++) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        UM_VARIANTS[0].2, UM_VARIANTS[1].2, UM_VARIANTS[2].2
    );
    for grid in GRIDS {
        let v = format!("cg{}", grid * grid);
        let found: Vec<Option<(f64, f64)>> = UM_VARIANTS
            .iter()
            .map(|(imp, _, _)| get(records, imp, &v))
            .chain([get(records, "cpp", &v)])
            .collect();
        if let [Some(co), Some(mi), Some(un), Some(c)] = found[..] {
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3}x | {:.3}x | {:.3}x | {:.2}, {:.2}, {:.2}, {:.2} |",
                grid * grid,
                co.0,
                mi.0,
                un.0,
                c.0,
                co.0 / c.0,
                mi.0 / c.0,
                un.0 / c.0,
                co.1,
                mi.1,
                un.1,
                c.1
            );
        }
    }
    md
}

/// The goal of section 11: the safe solver at the libraries' speed.
pub(crate) fn goals(records: &[Record]) -> Vec<(String, String, bool)> {
    let mut goals = Vec::new();
    for grid in GRIDS {
        let v = format!("cg{}", grid * grid);
        if let (Some((u, _)), Some((c, _))) = (get(records, "um", &v), get(records, "cpp", &v)) {
            goals.push((
                format!(
                    "conjugate gradient, {} rows, um coherent (the example's default): ≤ 1.0x the C++ loop",
                    grid * grid
                ),
                format!("{:.3}x", u / c),
                u <= c,
            ));
        }
    }
    goals
}
