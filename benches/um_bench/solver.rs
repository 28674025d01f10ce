//! Section 11: a conjugate-gradient solve in safe um (`examples/conjugate_gradient.rs`: cuSPARSE
//! SpMV on a proved CSR matrix, cuBLAS level 1, owned buffers) against the same loop in C++
//! (`bench/cg_baseline.cpp`: cuSPARSE and cuBLAS on `cudaMalloc` memory). Two ways, round by
//! round: in ONE fresh process (`um_bench --child cg`: the example's own solve, compiled into
//! this benchmark, and the C++ solve built as a shared library, taking turns), which the goal
//! compares, since a process's host speed is drawn per process; and each program as a process
//! of its own, taking turns.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use um::Context;
use um::cublas::Blas;

use crate::Record;
use crate::cpp;
use crate::cpp_lib;

/// The example itself: its argument parser, matrix and solve.
#[allow(dead_code)] // its `main`, CPU reference and printing are the example's alone
#[path = "../../examples/conjugate_gradient.rs"]
mod example;

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

/// The suffix of a record measured in the one process where um and C++ take turns.
const HERE: &str = ", one process";

/// The example's arguments for one timed solve: [`ITERS`] iterations (no early exit), [`REPS`]
/// loops, no CPU run, in `storage`.
fn example_args(grid: usize, storage: &str) -> Vec<String> {
    let (grid, iters, reps) = (grid.to_string(), ITERS.to_string(), REPS.to_string());
    [
        "--grid",
        &grid,
        "--iters",
        &iters,
        "--reps",
        &reps,
        "--fixed",
        "--no-cpu",
        "--storage",
        storage,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The record of `imp` over C++, process by process, in one process.
fn ratio_name(imp: &str) -> String {
    format!("{imp} / cpp{HERE}")
}

/// `um_bench --child cg GRID ROUND [NAMES]`: in this fresh process, [`REPS`] loops of
/// [`ITERS`] iterations of each um variant (the example's `solve_on`) and of the C++ solve
/// (`cpp_lib::cg`), one after another in an order rotated by ROUND, `um-unified` last (or the
/// comma-separated NAMES, in their order); a `cg_here NAME ms ms ms` line per solve, then one JSON line, per
/// variant `"NAME_median"` and `"NAME_min"` (ms; NAME: the record names, and `cpp`).
pub(crate) fn child(ctx: &Context, args: &[String]) -> Res<String> {
    let (grid, round, names) = match args {
        [grid, round] => (grid, round, None),
        [grid, round, names] => (grid, round, Some(names)),
        _ => return Err("expected `cg GRID ROUND [NAMES]`".into()),
    };
    let (grid, round): (usize, usize) = (grid.parse()?, round.parse()?);
    let host = example::laplacian(grid);
    let blas = Blas::new(ctx)?;
    let index = |name: &str| {
        UM_VARIANTS
            .iter()
            .position(|v| v.0 == name)
            .or((name == "cpp").then_some(UM_VARIANTS.len()))
            .ok_or_else(|| format!("no solve {name:?}"))
    };
    let order: Vec<usize> = match names {
        Some(names) => names.split(',').map(index).collect::<Result<_, _>>()?,
        None => {
            // Coherent, mirror and C++ rotate; unified runs last: after its solve (managed
            // memory attached to the stream, then freed), every later solve of the process ran
            // 5 to 50% slower, C++'s as much as um's (1× H200, 2026-11-28), so nothing that
            // is compared runs after it.
            let unified = index("um-unified")?;
            let mut order: Vec<usize> = (0..=UM_VARIANTS.len()).filter(|&i| i != unified).collect();
            let turn = round % order.len();
            order.rotate_left(turn);
            order.push(unified);
            order
        }
    };
    let mut fields = Vec::new();
    for i in order {
        let (name, ms) = if let Some((imp, storage, _)) = UM_VARIANTS.get(i) {
            let a = example::parse(example_args(grid, storage))?;
            (*imp, example::solve_on(ctx, &a, &blas, &host)?.loop_ms)
        } else {
            ctx.make_current()?;
            let ms = cpp_lib::cg(grid, ITERS, REPS)?.ok_or("no C++ solve named (UM_CPP_CG_LIB)")?;
            ("cpp", ms)
        };
        let min = ms.iter().copied().fold(f64::INFINITY, f64::min);
        let shown: Vec<String> = ms.iter().map(|m| format!("{m:.3}")).collect();
        println!("cg_here {name} {}", shown.join(" "));
        fields.push(format!(
            "\"{name}_median\":{:.4},\"{name}_min\":{min:.4}",
            median(ms)
        ));
    }
    Ok(format!("{{{}}}", fields.join(",")))
}

/// Both programs at every grid (the um example once per [`UM_VARIANTS`]), `rounds` rounds
/// each, the C++ program first in even rounds and last in odd ones.
pub(crate) fn solver(um_example: &Path, cpp: &Path, rounds: usize) -> Res<Vec<Record>> {
    let mut records = Vec::new();
    for grid in GRIDS {
        let um_args = |storage: &str| example_args(grid, storage);
        let cpp_args = vec![grid.to_string(), ITERS.to_string(), REPS.to_string()];
        // Per implementation: the rounds' medians, and every loop; then the same in one process
        // (the rounds' medians, and each round's minimum).
        let mut per: Vec<(String, Vec<f64>, Vec<f64>)> = UM_VARIANTS
            .iter()
            .map(|(imp, _, _)| ((*imp).to_owned(), vec![], vec![]))
            .chain([("cpp".to_owned(), vec![], vec![])])
            .collect();
        let mut here: Vec<(String, Vec<f64>, Vec<f64>)> = per
            .iter()
            .map(|(imp, _, _)| (format!("{imp}{HERE}"), vec![], vec![]))
            .collect();
        for round in 0..rounds {
            if cpp_lib::cg_named() {
                let out =
                    crate::runs::child_output(&["cg", &grid.to_string(), &round.to_string()])?;
                let line = out.lines().last().unwrap_or_default();
                for (j, (_, medians, mins)) in here.iter_mut().enumerate() {
                    let name = UM_VARIANTS.get(j).map_or("cpp", |v| v.0);
                    medians.push(cpp::number(line, &format!("{name}_median"))?);
                    mins.push(cpp::number(line, &format!("{name}_min"))?);
                }
            }
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
        // Each um variant over C++, process by process (the two sides of a ratio share one).
        let cpp_here = &here[UM_VARIANTS.len()].1;
        for ((imp, _, _), (_, medians, _)) in UM_VARIANTS.iter().zip(&here) {
            if medians.is_empty() || medians.len() != cpp_here.len() {
                continue;
            }
            let ratios: Vec<f64> = medians.iter().zip(cpp_here).map(|(u, c)| u / c).collect();
            records.push(Record {
                scenario: "solver",
                imp: ratio_name(imp),
                variant: format!("cg{rows}"),
                mib: 0,
                bytes: 0,
                threads: 0,
                median: median(ratios.clone()),
                min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
                unit: "ratio",
                paired: None,
            });
        }
        let here = here.into_iter().filter(|(_, m, _)| !m.is_empty());
        for (imp, per_round, all) in per.into_iter().chain(here) {
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
         {REPS} loops per solve. Each iteration reads two dot products on the host, so it \
         synchronizes the stream twice: memory associated with the stream \
         (`cuStreamAttachMemAsync`, `Unified`) makes each such synchronization cost time in \
         proportion to the memory attached (the C++ loop on managed memory with the same \
         attach was 3.4x its `cudaMalloc` time at 1M rows and 4.7x at 16M, 1× H200, 2026-11-28).\n\n\
         **11a. In one process** (the goal's comparison): per round a fresh process of this \
         benchmark (`um_bench --child cg`) runs the example's own solve (its source compiled into \
         the benchmark) in each storage and the C++ solve (built as a shared library), one after \
         another: coherent, mirror and C++ in an order that rotates every round, unified last \
         (after the unified solve, every later solve of the process, C++'s as much as um's, ran \
         5 to 50% slower: nothing compared runs after it). A process's host speed is drawn per \
         process (`bench/notes.md`), and where the host paces the loop the same program differs \
         by more than the goal's margin from one process to the next, so each ratio is the \
         median of the processes' own ratios (of their {REPS}-loop medians); times are the \
         median of the rounds' medians, minima the least of all loops.\n\n\
         | rows | {} ms | {} ms | {} ms | C++ ms | coherent / C++ | mirror / C++ | unified / C++ | min ms (coherent, mirror, unified, C++) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        UM_VARIANTS[0].2, UM_VARIANTS[1].2, UM_VARIANTS[2].2
    );
    rows_of(&mut md, records, HERE);
    let _ = writeln!(
        md,
        "\n**11b. Each program in a process of its own**: the example (`--storage`) and the C++ \
         program run as processes of their own, the four taking turns, {REPS} loops per process; \
         median of the rounds' medians, minimum of all loops.\n\n\
         | rows | {} ms | {} ms | {} ms | C++ ms | coherent / C++ | mirror / C++ | unified / C++ | min ms (coherent, mirror, unified, C++) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        UM_VARIANTS[0].2, UM_VARIANTS[1].2, UM_VARIANTS[2].2
    );
    rows_of(&mut md, records, "");
    md.push_str(&crate::report::goals_table("11", &goals(records)));
    md
}

/// The table rows of the records whose names end in `suffix`.
fn rows_of(md: &mut String, records: &[Record], suffix: &str) {
    for grid in GRIDS {
        let v = format!("cg{}", grid * grid);
        let found: Vec<Option<(f64, f64)>> = UM_VARIANTS
            .iter()
            .map(|(imp, _, _)| get(records, &format!("{imp}{suffix}"), &v))
            .chain([get(records, &format!("cpp{suffix}"), &v)])
            .collect();
        // In one process, the median of the per-process ratios; else the medians' ratio.
        let ratio = |i: usize, u: f64, c: f64| {
            let paired = (!suffix.is_empty())
                .then(|| get(records, &ratio_name(UM_VARIANTS[i].0), &v))
                .flatten();
            paired.map_or(u / c, |r| r.0)
        };
        if let [Some(co), Some(mi), Some(un), Some(c)] = found[..] {
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3}x | {:.3}x | {:.3}x | {:.2}, {:.2}, {:.2}, {:.2} |",
                grid * grid,
                co.0,
                mi.0,
                un.0,
                c.0,
                ratio(0, co.0, c.0),
                ratio(1, mi.0, c.0),
                ratio(2, un.0, c.0),
                co.1,
                mi.1,
                un.1,
                c.1
            );
        }
    }
}

/// The goal of section 11: the safe solver at the libraries' speed, judged in one process
/// where it was measured there.
pub(crate) fn goals(records: &[Record]) -> Vec<(String, String, bool)> {
    let mut goals = Vec::new();
    for grid in GRIDS {
        let v = format!("cg{}", grid * grid);
        let apart = get(records, "um", &v)
            .zip(get(records, "cpp", &v))
            .map(|((u, _), (c, _))| u / c);
        let found = get(records, &ratio_name("um"), &v)
            .map(|(r, _)| (r, "one process, the median of the processes' ratios"))
            .or(apart.map(|r| (r, "each in its own process")));
        if let Some((r, which)) = found {
            goals.push((
                format!(
                    "conjugate gradient, {} rows, um coherent (the example's default): ≤ 1.0x the C++ loop",
                    grid * grid
                ),
                format!("{r:.3}x ({which})"),
                r <= 1.0,
            ));
        }
    }
    goals
}
