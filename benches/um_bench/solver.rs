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

/// Both programs at every grid, `rounds` rounds each, the C++ program first in even rounds.
pub(crate) fn solver(um_example: &Path, cpp: &Path, rounds: usize) -> Res<Vec<Record>> {
    let mut records = Vec::new();
    for grid in GRIDS {
        let um_args: Vec<String> = [
            "--grid",
            &grid.to_string(),
            "--iters",
            &ITERS.to_string(),
            "--reps",
            &REPS.to_string(),
            "--fixed",
            "--no-cpu",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let cpp_args = vec![grid.to_string(), ITERS.to_string(), REPS.to_string()];
        let (mut um_rounds, mut cpp_rounds, mut um_all, mut cpp_all) =
            (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            let mut one = |who: &str| -> Res<()> {
                if who == "um" {
                    let ms = run(um_example, &um_args, "cg_um")?;
                    um_all.extend(ms.iter().copied());
                    um_rounds.push(median(ms));
                } else {
                    let ms = run(cpp, &cpp_args, "cg_cpp")?;
                    cpp_all.extend(ms.iter().copied());
                    cpp_rounds.push(median(ms));
                }
                Ok(())
            };
            let order = if round % 2 == 0 {
                ["cpp", "um"]
            } else {
                ["um", "cpp"]
            };
            for who in order {
                one(who)?;
            }
        }
        let rows = grid * grid;
        for (imp, per_round, all) in [("um", um_rounds, um_all), ("cpp", cpp_rounds, cpp_all)] {
            let min = all.iter().copied().fold(f64::INFINITY, f64::min);
            records.push(Record {
                scenario: "solver",
                imp: imp.to_owned(),
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
         (a proved `Csr`, `um::cusparse::Sparse::spmv`, `um::cublas::Blas` level 1, owned unified \
         buffers on one stream). C++: `bench/cg_baseline.cpp`, the same calls on `cudaMalloc` \
         memory. Host time of the {ITERS} iterations, ended by the last dot's read; each program \
         runs {REPS} loops per process, the two taking turns; median of the rounds' medians, \
         minimum of all loops.\n\n\
         | rows | um ms | C++ ms | um / C++ | um min ms | C++ min ms |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for grid in GRIDS {
        let v = format!("cg{}", grid * grid);
        if let (Some((u, umin)), Some((c, cmin))) =
            (get(records, "um", &v), get(records, "cpp", &v))
        {
            let _ = writeln!(
                md,
                "| {} | {u:.2} | {c:.2} | {:.3}x | {umin:.2} | {cmin:.2} |",
                grid * grid,
                u / c
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
                    "conjugate gradient, {} rows: ≤ 1.0x the C++ loop",
                    grid * grid
                ),
                format!("{:.3}x", u / c),
                u <= c,
            ));
        }
    }
    goals
}
