//! Section 12: memory born on a stream (`Stream::alloc_zeroed` from a `MemPool`, freed by
//! `cuMemFreeAsync` at its drop) against the driver API's own calls.
//!
//! 12a, the host cost of one allocate-and-free: every variant in ONE process, taking turns
//! batch by batch (the order rotates every round), as section 1b does, so that a paired
//! difference to the raw calls made from Rust resolves a few hundredths of a µs; the C++
//! baseline (`bench/baseline.cpp alloc`) makes the same calls in its own process, run between
//! this process's rounds, and gives the goal's ratio.
//!
//! 12b, a loop that needs fresh scratch every batch: section 7's two-stage pipeline on device
//! memory with a scratch buffer born on stream A per batch and dropped at the batch's end, in a
//! fresh process (`um_bench --child scratch`), against the same loop in C++
//! (`bench/baseline.cpp scratch`). The um loop counts its host waits
//! (`um::host_waits_on_this_thread`) and times each drop.

use std::fmt::Write as _;
use std::time::Instant;

use cust::sys as cs;
use um::kernels::run_task as rt;
use um::{Context, DeviceManaged, Managed, MemPool, StreamOptions};
use um_test_kernels::testing;

use crate::Record;
use crate::cpp::{self, Baseline};
use crate::cpp_lib::{self, CppAlloc};
use crate::paired::paired_of;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The sizes of 12a, in bytes: 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB.
pub(crate) const SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];
/// Allocate-and-free pairs per timed batch; every stream is drained between batches, untimed.
const BATCH: usize = 16;
/// Batches of each variant per process round (one paired difference each).
const PAIRED_ROUNDS: usize = 100;
/// The index of the C++ baseline's batch in [`measure`]'s rounds.
const CPP_HERE: usize = 4;
/// The record of the C++ baseline's pooled calls in this process, taking turns with um's: the
/// goal's reference where it was measured.
const CPP_HERE_VARIANT: &str =
    "cuMemAllocFromPoolAsync + cuMemsetD8Async + cuMemFreeAsync, in um's process";
/// The record of the C++ program's pooled calls in a process of its own.
const CPP_POOL_VARIANT: &str = "cuMemAllocFromPoolAsync + cuMemsetD8Async + cuMemFreeAsync";
/// The record of the C++ program's `cuMemAlloc` calls in a process of its own.
const CPP_MALLOC_VARIANT: &str = "cuMemAlloc + cuMemsetD8Async + cuMemFree";

/// The variants of 12a as the page names them; index 1 (the raw calls from Rust) is the
/// reference of the paired differences.
pub(crate) const VARIANTS: [&str; 4] = [
    "um, pool with threshold u64::MAX",
    "raw cuMemAllocFromPoolAsync + cuMemsetD8Async + cuMemFreeAsync from Rust",
    "um, pool with threshold 0",
    "raw cuMemAlloc + cuMemsetD8Async + cuMemFree from Rust",
];

fn ok(r: cs::CUresult, what: &str) -> Res<()> {
    if r == cs::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}").into())
    }
}

/// An error of the raw reference, as um's error type (the closure of `with_stream` returns one).
fn raw_error(call: &'static str, what: impl std::fmt::Debug) -> um::Error {
    um::Error::Driver {
        call,
        code: -1,
        name: format!("{what:?}"),
        description: "the raw reference of the stream-ordered allocation benchmark".to_owned(),
    }
}

fn check(r: cs::CUresult, call: &'static str) -> um::Result<()> {
    if r == cs::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(raw_error(call, r))
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// A pool of its own with the given release threshold.
fn pool(ctx: &Context, threshold: u64) -> um::Result<MemPool> {
    let pool = MemPool::new(ctx)?;
    pool.set_release_threshold(threshold)?;
    Ok(pool)
}

/// `rounds` rounds of every variant at `bytes`, and of the C++ baseline's batch in this process
/// where bench.sh built it ([`CppAlloc`]; index [`CPP_HERE`], 0 where there is none); per
/// round, each variant's host µs per allocate-and-free.
fn measure(ctx: &Context, bytes: usize, rounds: usize) -> Res<Vec<[f64; 5]>> {
    let keep = pool(ctx, u64::MAX)?;
    let release = pool(ctx, 0)?;
    // The raw reference: the device's default pool (which nothing else of this process uses),
    // with the same threshold as `keep`, and a stream of its own, in the context um made current.
    let raw_stream = cust::stream::Stream::new(cust::stream::StreamFlags::DEFAULT, None)?;
    let mut raw_pool: cs::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; device 0 is the context's.
    let r = unsafe { cs::cuDeviceGetDefaultMemPool(&mut raw_pool, 0) };
    ok(r, "cuDeviceGetDefaultMemPool")?;
    let mut threshold = u64::MAX;
    // SAFETY: a live pool; the release threshold is a u64 read through the pointer.
    let r = unsafe {
        cs::cuMemPoolSetAttribute(
            raw_pool,
            cs::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    };
    ok(r, "cuMemPoolSetAttribute")?;
    let hs = raw_stream.as_inner();
    let raw_pooled = || -> um::Result<()> {
        let mut p: cs::CUdeviceptr = 0;
        // SAFETY: a valid out-pointer, a live pool and stream of the current context.
        let r = unsafe { cs::cuMemAllocFromPoolAsync(&mut p, bytes, raw_pool, hs) };
        check(r, "cuMemAllocFromPoolAsync")?;
        // SAFETY: the allocation of `bytes` bytes just enqueued on the same stream.
        let r = unsafe { cs::cuMemsetD8Async(p, 0, bytes, hs) };
        check(r, "cuMemsetD8Async")?;
        // SAFETY: freed once, on the stream that used it, after its fill.
        check(unsafe { cs::cuMemFreeAsync(p, hs) }, "cuMemFreeAsync")
    };
    let raw_malloc = || -> um::Result<()> {
        let mut p: cs::CUdeviceptr = 0;
        // SAFETY: a valid out-pointer.
        check(unsafe { cs::cuMemAlloc_v2(&mut p, bytes) }, "cuMemAlloc")?;
        // SAFETY: an allocation of `bytes` bytes.
        let r = unsafe { cs::cuMemsetD8Async(p, 0, bytes, hs) };
        check(r, "cuMemsetD8Async")?;
        // SAFETY: freed once; cuMemFree waits for the fill.
        check(unsafe { cs::cuMemFree_v2(p) }, "cuMemFree")
    };
    let out = ctx.with_stream(StreamOptions::new(), |s| {
        let drain = || -> um::Result<()> {
            s.wait_idle()?;
            raw_stream
                .synchronize()
                .map_err(|e| raw_error("cuStreamSynchronize", e))
        };
        // The C++ side's own pool and stream, warmed by a batch, with um's context current.
        ctx.make_current()?;
        let cpp = CppAlloc::open(bytes, BATCH)
            .map_err(|e| raw_error("the C++ baseline in this process", e))?;
        let turns = if cpp.is_some() { 5 } else { 4 };
        // Warm-up: every path a batch, every pool holding its memory where it keeps any.
        for _ in 0..BATCH {
            drop(s.alloc_zeroed::<u8>(&keep, bytes)?);
            drop(s.alloc_zeroed::<u8>(&release, bytes)?);
            raw_pooled()?;
            raw_malloc()?;
        }
        drain()?;
        let mut out = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let mut t = [0.0f64; 5];
            for k in 0..turns {
                let which = (round + k) % turns;
                if which == CPP_HERE {
                    if let Some(cpp) = &cpp {
                        t[which] = cpp
                            .batch(BATCH)
                            .map_err(|e| raw_error("the C++ baseline in this process", e))?;
                    }
                    continue;
                }
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    match which {
                        0 => drop(s.alloc_zeroed::<u8>(&keep, bytes)?),
                        1 => raw_pooled()?,
                        2 => drop(s.alloc_zeroed::<u8>(&release, bytes)?),
                        _ => raw_malloc()?,
                    }
                }
                t[which] = t0.elapsed().as_secs_f64() * 1e6 / BATCH as f64;
                drain()?;
            }
            out.push(t);
        }
        drop(cpp);
        Ok(out)
    });
    let _ = raw_stream.synchronize();
    let mut zero = 0u64;
    // SAFETY: as above; the default pool back at the driver's default threshold.
    let _ = unsafe {
        cs::cuMemPoolSetAttribute(
            raw_pool,
            cs::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut zero).cast(),
        )
    };
    Ok(out?)
}

/// A size as the page writes it.
pub(crate) fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn record(variant: &str, imp: &str, bytes: usize, medians: &[f64], all: &[f64]) -> Record {
    Record {
        scenario: "alloc",
        imp: imp.to_owned(),
        variant: variant.to_owned(),
        mib: bytes >> 20,
        bytes,
        threads: 1,
        median: median(medians),
        min: min(all),
        unit: "us",
        paired: None,
    }
}

/// 12a's records: per size, the four in-process variants (um's with their paired difference to
/// the raw pool calls over every batch of every round) and C++'s two, each the median of the
/// process rounds' medians.
pub(crate) fn allocation(ctx: &Context, cpp: Option<&Baseline>, rounds: usize) -> Res<Vec<Record>> {
    println!(
        "alloc: {SIZES:?} bytes, {rounds} rounds of {PAIRED_ROUNDS} batches of {BATCH} per variant, interleaved"
    );
    let mut records = Vec::new();
    for bytes in SIZES {
        // Per round: the in-process samples; C++'s medians and minima per round.
        let mut samples: Vec<[f64; 5]> = Vec::new();
        let mut round_medians: [Vec<f64>; 5] = Default::default();
        let (mut cpp_pool, mut cpp_malloc) = ((vec![], vec![]), (vec![], vec![]));
        for round in 0..rounds {
            for k in 0..2 {
                if (round + k) % 2 == 0 {
                    let got = measure(ctx, bytes, PAIRED_ROUNDS)?;
                    for (i, m) in round_medians.iter_mut().enumerate() {
                        m.push(median(&got.iter().map(|t| t[i]).collect::<Vec<_>>()));
                    }
                    samples.extend(got);
                } else if let Some(cpp) = cpp {
                    let args = [
                        bytes.to_string(),
                        PAIRED_ROUNDS.to_string(),
                        BATCH.to_string(),
                    ];
                    let line = cpp.run("alloc", &args)?.join("\n");
                    cpp_pool.0.push(cpp::number(&line, "pool_median_us")?);
                    cpp_pool.1.push(cpp::number(&line, "pool_min_us")?);
                    cpp_malloc.0.push(cpp::number(&line, "malloc_median_us")?);
                    cpp_malloc.1.push(cpp::number(&line, "malloc_min_us")?);
                }
            }
        }
        for (i, name) in VARIANTS.iter().enumerate() {
            let own: Vec<f64> = samples.iter().map(|t| t[i]).collect();
            let mut r = record(name, "um", bytes, &round_medians[i], &own);
            if i == 0 || i == 2 {
                let d: Vec<f64> = samples.iter().map(|t| t[i] - t[1]).collect();
                r.paired = Some(paired_of(&d));
            }
            records.push(r);
        }
        if cpp_lib::alloc_named() && !samples.is_empty() {
            let own: Vec<f64> = samples.iter().map(|t| t[CPP_HERE]).collect();
            let mut r = record(
                CPP_HERE_VARIANT,
                "cpp",
                bytes,
                &round_medians[CPP_HERE],
                &own,
            );
            // um minus C++, batch by batch in one process.
            let d: Vec<f64> = samples.iter().map(|t| t[0] - t[CPP_HERE]).collect();
            r.paired = Some(paired_of(&d));
            records.push(r);
        }
        if cpp.is_some() {
            records.push(record(
                CPP_POOL_VARIANT,
                "cpp",
                bytes,
                &cpp_pool.0,
                &cpp_pool.1,
            ));
            records.push(record(
                CPP_MALLOC_VARIANT,
                "cpp",
                bytes,
                &cpp_malloc.0,
                &cpp_malloc.1,
            ));
        }
        println!("  {} done", size_label(bytes));
    }
    Ok(records)
}

// ------------------------------------------------------------------ 12b. scratch per batch

/// Floats per batch and per scratch buffer (4 KiB).
pub(crate) const LEN: usize = 1024;
/// The pipelines: (batches, stage length in ns, label), as section 7's first two.
pub(crate) const PIPELINES: [(usize, u64, &str); 2] =
    [(400, 10_000, "10 µs"), (200, 100_000, "100 µs")];

/// One pipeline of `batches` batches: per batch, on stream A a scratch buffer born from `pool`,
/// `spin_then_add` on it (stage A), `transform` adding twice it to the batch, the scratch
/// dropped; the batch handed to B, `spin_then_add` on it (stage B). Returns the µs per batch
/// (first enqueue to every batch back on the host), each drop's host µs where `time_drops`
/// (empty otherwise: the clock reads would be host work the C++ loop does not do) and the host
/// waits of the loop (the final wait excluded).
fn scratch_pipeline(
    ctx: &Context,
    pool: &MemPool,
    batches: usize,
    stage_ns: u64,
    time_drops: bool,
) -> Res<(f64, Vec<f64>, u64)> {
    let inputs: Vec<DeviceManaged<[f32]>> = (0..batches)
        .map(|k| {
            let host: Vec<f32> = (0..LEN).map(|j| (k + j) as f32).collect();
            Managed::from_slice_device(ctx, &host)
        })
        .collect::<um::Result<_>>()?;
    let options = StreamOptions::new().non_blocking();
    let (outputs, us, drops, waits) = ctx.with_stream(options, |a| {
        ctx.with_stream(options, |b| {
            let mut done = Vec::with_capacity(batches);
            let mut drops = Vec::with_capacity(batches);
            let waits0 = um_core::host_waits_on_this_thread();
            let start = Instant::now();
            for x in inputs {
                let mut x = x.attach(a)?;
                let mut scratch = a.alloc_zeroed::<f32>(pool, LEN)?;
                testing::spin_then_add(a, &mut scratch, 1.0, stage_ns)?;
                rt::transform(a, &scratch, &mut x)?;
                if time_drops {
                    let t0 = Instant::now();
                    drop(scratch);
                    drops.push(t0.elapsed().as_secs_f64() * 1e6);
                } else {
                    drop(scratch);
                }
                let mut x = x.hand_off(b)?;
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                done.push(x);
            }
            let waits = um_core::host_waits_on_this_thread() - waits0;
            let home = b.sync_all(done)?;
            let us = start.elapsed().as_secs_f64() * 1e6 / batches as f64;
            Ok((home, us, drops, waits))
        })
    })?;
    for (k, x) in outputs.iter().enumerate() {
        let v = x.to_vec()?;
        if v.iter()
            .enumerate()
            .any(|(j, v)| *v != (k + j) as f32 + 4.0)
        {
            return Err("scratch pipeline: a batch came back wrong".into());
        }
    }
    Ok((us, drops, waits))
}

/// `um_bench --child scratch [ROUND PTX_DIR]`: 12b's um loops in this fresh process (which
/// attaches no managed memory), and with ROUND and PTX_DIR, where bench.sh built it, the C++
/// loop in this process too (`cpp_lib::scratch`, its PTX from PTX_DIR), um first in even rounds
/// and second in odd ones; one JSON line: per pipeline i, `p{i}_us` (µs per batch),
/// `p{i}_drop_us` (median host µs of a scratch drop, from a third run of um's loop after the
/// timed ones), `p{i}_waits` (host waits in the loop),
/// and `p{i}_cpp_us` (C++'s µs per batch, where it ran).
pub(crate) fn child(ctx: &Context, args: &[String]) -> Res<String> {
    let (round, ptx_dir) = match args {
        [] => (0, None),
        [round, dir] => (round.parse::<usize>()?, Some(std::path::Path::new(dir))),
        _ => return Err("expected `scratch [ROUND PTX_DIR]`".into()),
    };
    let pool = pool(ctx, u64::MAX)?;
    let mut line = String::from("{");
    for (i, (batches, stage_ns, _)) in PIPELINES.into_iter().enumerate() {
        scratch_pipeline(ctx, &pool, 4, stage_ns, false)?; // warm-up
        let cpp_turn = |warm: bool| -> Res<Option<f64>> {
            let Some(dir) = ptx_dir else {
                return Ok(None);
            };
            ctx.make_current()?;
            Ok(cpp_lib::scratch(
                dir,
                if warm { 4 } else { batches },
                stage_ns,
            )?)
        };
        cpp_turn(true)?; // warm-up
        let cpp_first = round % 2 == 1;
        let mut cpp_us = if cpp_first { cpp_turn(false)? } else { None };
        let (us, _, waits) = scratch_pipeline(ctx, &pool, batches, stage_ns, false)?;
        if !cpp_first {
            cpp_us = cpp_turn(false)?;
        }
        // The drops' host time, from a run of its own after the two timed ones.
        let (_, drops, _) = scratch_pipeline(ctx, &pool, batches, stage_ns, true)?;
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            line,
            "{sep}\"p{i}_us\":{us:.4},\"p{i}_drop_us\":{:.4},\"p{i}_waits\":{waits}",
            median(&drops)
        );
        if let Some(c) = cpp_us {
            let _ = write!(line, ",\"p{i}_cpp_us\":{c:.4}");
        }
    }
    Ok(line + "}")
}

/// The 12b record of C++'s µs per batch in um's process.
const IN_UMS_PROCESS: &str = "µs per batch, in um's process";
/// The 12b record of um over C++ in one process, process by process.
const OVER_CPP_HERE: &str = "um / C++ in one process";

/// The name of a 12b record.
fn loop_variant(stages: &str, what: &str) -> String {
    format!("scratch per batch, {stages} stages: {what}")
}

/// 12b's records: um (µs per batch, drop µs, host waits) and C++ (µs per batch) per pipeline,
/// the two taking turns round by round, each in a fresh process; and, where bench.sh built
/// the C++ library, C++ in um's fresh process too, with um over it process by process.
pub(crate) fn scratch(cpp: Option<&Baseline>, rounds: usize) -> Res<Vec<Record>> {
    println!("alloc: scratch per batch, pipelines {PIPELINES:?}, {rounds} rounds");
    // Per pipeline: um µs, um drop µs, um waits, C++ µs, C++ µs in um's process, um over that;
    // one value per round each.
    let mut per: Vec<[Vec<f64>; 6]> = PIPELINES.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                let (round_arg, dir);
                let args: Vec<&str> = match cpp.filter(|_| cpp_lib::alloc_named()) {
                    Some(c) => {
                        round_arg = round.to_string();
                        dir = c.ptx_dir.to_string_lossy().into_owned();
                        vec!["scratch", &round_arg, &dir]
                    }
                    None => vec!["scratch"],
                };
                let line = crate::runs::child_output(&args)?;
                for (i, p) in per.iter_mut().enumerate() {
                    let us = cpp::number(&line, &format!("p{i}_us"))?;
                    p[0].push(us);
                    p[1].push(cpp::number(&line, &format!("p{i}_drop_us"))?);
                    p[2].push(cpp::number(&line, &format!("p{i}_waits"))?);
                    if cpp::field(&line, &format!("p{i}_cpp_us")).is_some() {
                        let c = cpp::number(&line, &format!("p{i}_cpp_us"))?;
                        p[4].push(c);
                        p[5].push(us / c);
                    }
                }
            } else if let Some(cpp) = cpp {
                for ((batches, stage_ns, _), p) in PIPELINES.iter().zip(&mut per) {
                    let args = [batches.to_string(), stage_ns.to_string()];
                    let line = cpp.run("scratch", &args)?.join("\n");
                    p[3].push(cpp::number(&line, "us_per_batch")?);
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((_, _, stages), p) in PIPELINES.iter().zip(&per) {
        let rows: [(&str, &str, &Vec<f64>, &'static str); 6] = [
            ("um", "µs per batch", &p[0], "us"),
            ("um", "host µs of a scratch drop", &p[1], "us"),
            ("um", "host waits in the loop", &p[2], "waits"),
            ("cpp", "µs per batch", &p[3], "us"),
            ("cpp", IN_UMS_PROCESS, &p[4], "us"),
            ("um", OVER_CPP_HERE, &p[5], "ratio"),
        ];
        for (imp, what, v, unit) in rows {
            if v.is_empty() {
                continue;
            }
            out.push(Record {
                scenario: "alloc_loop",
                imp: imp.to_owned(),
                variant: loop_variant(stages, what),
                mib: 0,
                bytes: 0,
                threads: 1,
                // host waits: the most of any round, so that one wait anywhere shows
                median: if unit == "waits" {
                    v.iter().copied().fold(0.0, f64::max)
                } else {
                    median(v)
                },
                min: min(v),
                unit,
                paired: None,
            });
        }
    }
    Ok(out)
}

fn get<'a>(records: &'a [Record], scenario: &str, imp: &str, variant: &str) -> Option<&'a Record> {
    records
        .iter()
        .find(|r| r.scenario == scenario && r.imp == imp && r.variant == variant)
}

/// Section 12, where its records exist.
pub(crate) fn markdown(records: &[Record]) -> String {
    let mut md = String::new();
    if !records.iter().any(|r| r.scenario.starts_with("alloc")) {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## 12. Stream-ordered allocation\n\n\
         ### 12a. Allocate and free on a stream\n\n\
         Host µs of one allocation, zero fill and free, all enqueued on one stream, by size. \
         `um`: `stream.alloc_zeroed::<u8>(&pool, len)` and its drop (`cuMemAllocFromPoolAsync`, \
         `cuMemsetD8Async`, then `cuMemFreeAsync` at the drop), from a `MemPool::new` whose \
         release threshold is `u64::MAX` (freed memory stays in the pool) or 0 (the driver's \
         default: unused memory goes back at every synchronization). The same calls raw from \
         Rust (the device's default pool, threshold `u64::MAX`, a stream of its own) and, for \
         contrast, `cuMemAlloc` + `cuMemsetD8Async` + `cuMemFree`. The four take turns in one \
         process, {BATCH} pairs per batch, the order rotating every batch, every stream drained \
         between batches (untimed); {PAIRED_ROUNDS} batches of each per process round. The \
         paired columns are differences batch by batch, over every batch of every round: median \
         with its distribution-free 95% interval. **C++ in um's process**: `bench/baseline.cpp` \
         built a second time as a shared library, whose batch (its own pool with threshold \
         `UINT64_MAX` and its own stream, timed by the C++ side) takes its turn among the four: \
         a process's host speed is drawn per process (`bench/notes.md`), so the goal compares \
         um with C++ in the same process. **C++, own process** (`bench/baseline.cpp alloc`: \
         the same pool calls, and `cuMemAlloc`/`cuMemFree`, the same batches, interleaved) runs \
         as a subprocess between the Rust rounds. Every figure is the median of its rounds' \
         medians.\n\n\
         | size | um, threshold MAX µs | C++ in um's process µs | um / C++, same process | um − C++ in um's process, µs (95% CI) | C++, own process µs | um / C++ own process | um − raw pool from Rust, µs (95% CI) | um, threshold 0 µs | raw cuMemAlloc from Rust µs | C++ cuMemAlloc, own process µs | C++ cuMemAlloc / um |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for bytes in SIZES {
        let um_get = |i: usize| {
            records.iter().find(|r| {
                r.scenario == "alloc"
                    && r.imp == "um"
                    && r.variant == VARIANTS[i]
                    && r.bytes == bytes
            })
        };
        let cpp_get = |v: &str| {
            records.iter().find(|r| {
                r.scenario == "alloc" && r.imp == "cpp" && r.variant == v && r.bytes == bytes
            })
        };
        let (Some(keep), Some(release), Some(raw_malloc)) = (um_get(0), um_get(2), um_get(3))
        else {
            continue;
        };
        let cpp_here = cpp_get(CPP_HERE_VARIANT);
        let cpp_pool = cpp_get(CPP_POOL_VARIANT);
        let cpp_malloc = cpp_get(CPP_MALLOC_VARIANT);
        let cell = |r: Option<&Record>| r.map_or("–".to_owned(), |r| format!("{:.3}", r.median));
        let ratio = |c: Option<&Record>| {
            c.map_or("–".to_owned(), |c| {
                format!("{:.3}x", keep.median / c.median)
            })
        };
        let diff = |r: Option<&Record>| {
            r.and_then(|r| r.paired).map_or("–".to_owned(), |p| {
                format!(
                    "{:+.3} ({:+.3} .. {:+.3})",
                    p.median, p.median_ci.0, p.median_ci.1
                )
            })
        };
        let _ = writeln!(
            md,
            "| {} | {:.3} | {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {} | {} |",
            size_label(bytes),
            keep.median,
            cell(cpp_here),
            ratio(cpp_here),
            diff(cpp_here),
            cell(cpp_pool),
            ratio(cpp_pool),
            diff(Some(keep)),
            release.median,
            raw_malloc.median,
            cell(cpp_malloc),
            cpp_malloc.map_or("–".to_owned(), |c| format!(
                "{:.0}x",
                c.median / keep.median
            )),
        );
    }
    let _ = writeln!(
        md,
        "\n### 12b. A loop that needs fresh scratch every batch\n\n\
         Section 7's two-stage pipeline with a scratch buffer of {LEN} floats per batch: on \
         stream A the scratch is born from a pool (threshold `u64::MAX`), `spin_then_add` works \
         on it (stage A), `transform` adds twice it to the batch, and the scratch is dropped (um: its \
         drop enqueues `cuMemFreeAsync`; C++: `cuMemFreeAsync`); the batch goes to stream B \
         (um: `hand_off`; C++: `cuEventRecord` + `cuStreamWaitEvent`), where `spin_then_add` \
         is stage B. Batches are device memory filled before the clock (um: `Device` storage; \
         C++: `cuMemAlloc`), {LEN} floats each. Host wall time per batch from the first enqueue \
         until stream B has finished every batch (um: `sync_all`; C++: `cuStreamSynchronize`). \
         **C++ in um's process**: per round a fresh process runs um's loop and the C++ loop \
         (`bench/baseline.cpp` built as a shared library), each after a warm-up, um first in \
         even rounds; the goal takes the median of the processes' own ratios, since a \
         process's host speed is drawn per process. **C++, own process**: the C++ program in a \
         process of its own, taking turns with um's process; median of rounds. Host waits: um's `cuStreamSynchronize`, \
         `cuEventSynchronize` and `cuCtxSynchronize` calls on the loop's thread between the \
         first enqueue and the final wait (the most of any round); the C++ loop makes none. \
         The drop's host time comes from a third run of um's loop in the same process, after \
         the timed two: the clock reads around each drop are host work the C++ loop does not \
         do.\n\n\
         | stages | batches | um µs per batch | C++ in um's process, µs per batch | um / C++, same process | C++, own process, µs per batch | um / C++ own process | um drop of the scratch, host µs | um host waits in the loop |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for (batches, _, stages) in PIPELINES {
        let g = |imp: &str, what: &str| {
            get(records, "alloc_loop", imp, &loop_variant(stages, what)).map(|r| r.median)
        };
        if let (Some(u), Some(d), Some(w)) = (
            g("um", "µs per batch"),
            g("um", "host µs of a scratch drop"),
            g("um", "host waits in the loop"),
        ) {
            let c = g("cpp", "µs per batch");
            let here = g("cpp", IN_UMS_PROCESS);
            let ratio = g("um", OVER_CPP_HERE);
            let us = |v: Option<f64>| v.map_or("–".to_owned(), |c| format!("{c:.2}"));
            let x = |v: Option<f64>| v.map_or("–".to_owned(), |r| format!("{r:.3}x"));
            let _ = writeln!(
                md,
                "| {stages} | {batches} | {u:.2} | {} | {} | {} | {} | {d:.3} | {w:.0} |",
                us(here),
                x(ratio),
                us(c),
                x(c.map(|c| u / c)),
            );
        }
    }
    md.push_str(&crate::report::goals_table("12", &goals(records)));
    md
}

/// The goals of section 12: allocation at the driver's speed, and a loop with scratch per batch
/// at C++'s speed with no host wait.
pub(crate) fn goals(records: &[Record]) -> Vec<(String, String, bool)> {
    let mut goals = Vec::new();
    for bytes in SIZES {
        let find = |imp: &str, v: &str| {
            records
                .iter()
                .find(|r| {
                    r.scenario == "alloc" && r.imp == imp && r.variant == v && r.bytes == bytes
                })
                .map(|r| r.median)
        };
        // C++ in um's process where it was measured, else the C++ program's own process.
        let cpp = find("cpp", CPP_HERE_VARIANT)
            .map(|c| (c, "C++ in the same process"))
            .or(find("cpp", CPP_POOL_VARIANT).map(|c| (c, "C++ in its own process")));
        if let (Some(u), Some((c, which))) = (find("um", VARIANTS[0]), cpp) {
            goals.push((
                format!(
                    "allocate and free on a stream, {}, um (threshold u64::MAX) vs C++ cuMemAllocFromPoolAsync: ≤ 1.05x",
                    size_label(bytes)
                ),
                format!("{:.3}x ({which})", u / c),
                u / c <= 1.05,
            ));
        }
    }
    for (_, _, stages) in PIPELINES {
        let g = |imp: &str, what: &str| {
            get(records, "alloc_loop", imp, &loop_variant(stages, what)).map(|r| r.median)
        };
        let apart = g("um", "µs per batch")
            .zip(g("cpp", "µs per batch"))
            .map(|(u, c)| (u / c, "C++ in its own process"));
        let found = g("um", OVER_CPP_HERE)
            .map(|r| (r, "C++ in the same process"))
            .or(apart);
        if let (Some((r, which)), Some(w)) = (found, g("um", "host waits in the loop")) {
            goals.push((
                format!(
                    "scratch born on the stream per batch, {stages} stages, um vs C++: ≤ 1.02x and no host wait in the loop"
                ),
                format!("{r:.3}x ({which}), {w:.0} waits"),
                r <= 1.02 && w == 0.0,
            ));
        }
    }
    goals
}
