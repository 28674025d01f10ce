//! Section 8: NCCL all-reduce on owned buffers, every GPU, one thread: each round of
//! the bandwidth rows in a fresh process (as the C++ baseline's), the host times in this one.
//!
//! * Bus bandwidth by size, 8 B to 1 GiB, out of place, f32 sum, by nccl-tests' formula
//!   (busbw = algbw x 2(n-1)/n): the C++ baseline (`bench/nccl_baseline.cpp`, NCCL on
//!   `cuMemAlloc` buffers, `ncclCommInitAll`), run as a subprocess in every round, against um's
//!   `Group` of all-reduces on device-resident buffers (a mirror's device half; coherent
//!   memory) and on unified memory (prefetched to the GPU at `attach`, and not), all with
//!   blocking communicators as the baseline's, and on mirrors with um's default nonblocking
//!   communicators.
//! * Host time per step (one all-reduce on every GPU), um's `Group` against the raw
//!   `ncclGroupStart`, `ncclAllReduce` x n, `ncclGroupEnd` called from Rust on the same
//!   communicators and buffers, interleaved batch by batch in one process as section 1b does;
//!   for each kind of communicator (a nonblocking one's raw step includes the poll NCCL
//!   requires before the next call).

use std::ffi::{c_int, c_void};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use um::nccl::{Comm, CommOptions, Group, ReduceOp};
use um::{Context, HostOwned, Managed, Storage, StreamOptions, Transfer};

use crate::cpp;
use crate::paired::stats;
use crate::raw_nccl::RawNccl;
use crate::{Paired, Record};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(120);

/// The sizes, in bytes: x4 from 8 B to 512 KiB, then x2 from 1 MiB to 1 GiB.
pub(crate) fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (0..9).map(|k| 8usize << (2 * k)).collect();
    v.extend((0..11).map(|k| (1usize << 20) << k));
    v
}

/// Iterations per measurement: about 4 GiB of all-reduce, 20 to 1000 (the C++ baseline's too).
pub(crate) fn iters(bytes: usize) -> usize {
    ((4usize << 30) / bytes.max(1)).clamp(20, 1000)
}

/// The index in [`VARIANTS`] of the raw calls on um's mirrors: the reference of the ratios
/// within one process.
const RAW: usize = 5;

/// The um variants of the bandwidth table, in its column order.
pub(crate) const VARIANTS: [&str; 6] = [
    "mirror (device half), blocking",
    "coherent, blocking",
    "unified, prefetched, blocking",
    "unified, on demand, blocking",
    "mirror (device half), nonblocking",
    "raw calls from Rust on the mirrors, blocking",
];

type Alloc<M> = fn(&Context, usize) -> um::Result<Managed<[f32], HostOwned, M>>;

/// Seconds per step of `iters` grouped all-reduces of `bytes` on every GPU, buffers of storage
/// `M` attached to streams of `transfer`.
/// With `raw`, each step makes NCCL's calls itself (group start, one all-reduce per GPU, group
/// end) on the same communicators, streams and buffers, as the C++ baseline does: the row that
/// tells um's own cost from the process's.
fn bandwidth_once<M: Storage>(
    ctxs: &[Context],
    comms: &[Comm],
    bytes: usize,
    alloc: Alloc<M>,
    transfer: Transfer,
    raw: Option<&RawNccl>,
) -> Res<f64> {
    let n = (bytes / 4).max(1);
    let mut bufs = Vec::with_capacity(ctxs.len());
    for ctx in ctxs {
        bufs.push((alloc(ctx, n)?, alloc(ctx, n)?));
    }
    let k = iters(n * 4);
    let warm = (k / 10).max(3);
    let opts = StreamOptions::new().transfer(transfer);
    let secs = Context::with_stream_set_across(ctxs, opts, |streams| {
        let mut on = Vec::with_capacity(bufs.len());
        for ((send, recv), s) in bufs.into_iter().zip(streams) {
            on.push((send.attach(s)?, recv.attach(s)?));
        }
        let mut step = || -> um::Result<()> {
            let Some(raw) = raw else {
                let mut g = Group::new();
                for (((send, recv), s), c) in on.iter_mut().zip(streams).zip(comms) {
                    g.all_reduce(c, s, send, recv, ReduceOp::Sum)?;
                }
                return g.launch().map(drop);
            };
            let calls = on.iter_mut().zip(streams.iter()).map(|((send, recv), s)| {
                let (p, q) = (send.as_device_ptr(), recv.as_device_ptr_mut());
                (p.address() as usize, q.address() as usize, s.as_raw())
            });
            // SAFETY: um's own blocking communicators (live, used by this thread only) and
            // buffers owned by each GPU's stream, which the all-reduce is enqueued on; `n`
            // elements each.
            unsafe { raw_step(raw, calls, comms, n, true) }
        };
        for _ in 0..warm {
            step()?;
        }
        for s in streams {
            s.wait_idle()?;
        }
        let t0 = Instant::now();
        for _ in 0..k {
            step()?;
        }
        for s in streams {
            s.wait_idle()?;
        }
        let secs = t0.elapsed().as_secs_f64() / k as f64;
        for ((send, recv), s) in on.into_iter().zip(streams) {
            s.sync_all((send, recv))?;
        }
        Ok(secs)
    })?;
    Ok(secs)
}

fn busbw(bytes: usize, secs: f64, gpus: usize) -> f64 {
    let algbw = bytes as f64 / secs / 1e9;
    algbw * 2.0 * (gpus as f64 - 1.0) / gpus as f64
}

/// Whether every GPU has room for two buffers of `bytes` in half its free memory (um's rule for
/// the benchmark: never ask for more than the GPU has free).
fn fits(ctxs: &[Context], bytes: usize) -> Res<bool> {
    for c in ctxs {
        let (free, _) = c.mem_info()?;
        if 2 * bytes > free / 2 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Steps per timed batch of the host-time measurement, and rounds.
/// One step of the raw reference: `ncclGroupStart`, an f32 sum all-reduce of `n` elements per
/// (send, receive, stream) with the communicator of the same index, `ncclGroupEnd`; on nonblocking communicators
/// (`!blocking`), polled until NCCL is done with it, as um's `Group::launch` does.
///
/// # Safety
/// Every communicator is live and used by this thread only; each send and receive address is
/// device memory of at least `n` f32 that the work of its stream owns, and the stream is of the
/// communicator's device.
unsafe fn raw_step(
    raw: &RawNccl,
    calls: impl Iterator<Item = (usize, usize, *mut c_void)>,
    comms: &[Comm],
    n: usize,
    blocking: bool,
) -> um::Result<()> {
    let bad = |what: &'static str, rc: c_int| um::Error::Nccl {
        call: what,
        code: rc,
        name: "raw reference".to_owned(),
        detail: "the raw reference of the NCCL benchmark".to_owned(),
    };
    // ncclInProgress is success for a nonblocking communicator.
    let ok = |rc: c_int| rc == 0 || (!blocking && rc == 7);
    // SAFETY: the caller's guarantees for the all-reduces and the polls; the group calls take
    // no arguments.
    unsafe {
        let rc = (raw.group_start)();
        if rc != 0 {
            return Err(bad("ncclGroupStart", rc));
        }
        for ((send, recv, stream), comm) in calls.zip(comms) {
            let rc = (raw.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                n,
                7,
                0,
                comm.as_raw(),
                stream,
            );
            if !ok(rc) {
                return Err(bad("ncclAllReduce", rc));
            }
        }
        let rc = (raw.group_end)();
        if !ok(rc) {
            return Err(bad("ncclGroupEnd", rc));
        }
        if !blocking {
            for comm in comms {
                let mut state: c_int = 7;
                while state == 7 {
                    let rc = (raw.async_error)(comm.as_raw(), &mut state);
                    if rc != 0 {
                        return Err(bad("ncclCommGetAsyncError", rc));
                    }
                }
                if state != 0 {
                    return Err(bad("ncclAllReduce", state));
                }
            }
        }
    }
    Ok(())
}

const BATCH: usize = 32;

/// The variant suffix of the host-time records whose per-round figure is the batch's median
/// step, not its mean.
const MEDIAN_STEP: &str = ", median step";

/// Rounds of the host-time measurement (each: one batch of um's steps, one of raw steps), unless
/// `--host-rounds` says otherwise.
pub(crate) const HOST_TIME_ROUNDS: usize = 16_000;

/// Per round, µs per step: [um, raw] as the batch's mean, then [um, raw] as the median of the
/// batch's steps, each timed alone. NCCL starts a thread for every call on a nonblocking
/// communicator, and a step now and then takes several times the rest: the mean carries those
/// into every round's difference, the median of the batch's steps leaves them out.
fn host_time_paired(ctxs: &[Context], comms: &[Comm], rounds: usize) -> Res<Vec<[f64; 4]>> {
    let raw = RawNccl::load()?;
    let n = 256; // 1 KiB per GPU: the GPU's time is far below the host's
    let mut bufs = Vec::with_capacity(ctxs.len());
    for ctx in ctxs {
        bufs.push((
            Managed::from_fn_mirrored(ctx, n, |_| 1.0f32)?,
            Managed::from_fn_mirrored(ctx, n, |_| 0.0f32)?,
        ));
    }
    let blocking = comms[0].options().is_blocking();
    let out = Context::with_stream_set_across(ctxs, StreamOptions::new(), |streams| {
        let mut on = Vec::with_capacity(bufs.len());
        for ((send, recv), s) in bufs.into_iter().zip(streams) {
            on.push((send.attach(s)?, recv.attach(s)?));
        }
        let mut samples = Vec::with_capacity(rounds);
        let mut steps = [0.0f64; BATCH];
        for round in 0..rounds + 1 {
            let mut t = [0.0f64; 4];
            for k in 0..2 {
                let which = (round + k) % 2;
                let t0 = Instant::now();
                for step in &mut steps {
                    let s0 = Instant::now();
                    if which == 0 {
                        let mut g = Group::new();
                        for (((send, recv), s), c) in on.iter_mut().zip(streams).zip(comms) {
                            g.all_reduce(c, s, send, recv, ReduceOp::Sum)?;
                        }
                        g.launch()?;
                    } else {
                        let calls = on.iter_mut().zip(streams.iter()).map(|((send, recv), s)| {
                            let (p, q) = (send.as_device_ptr(), recv.as_device_ptr_mut());
                            (p.address() as usize, q.address() as usize, s.as_raw())
                        });
                        // SAFETY: the raw reference: um's own communicators (live, used by this
                        // thread only) and buffers owned by each GPU's stream, which the
                        // all-reduce is enqueued on; n elements each.
                        unsafe { raw_step(&raw, calls, comms, n, blocking) }?;
                    }
                    *step = s0.elapsed().as_secs_f64() * 1e6;
                }
                t[which] = t0.elapsed().as_secs_f64() * 1e6 / BATCH as f64;
                steps.sort_by(f64::total_cmp);
                t[2 + which] = (steps[BATCH / 2 - 1] + steps[BATCH / 2]) / 2.0;
                for s in streams {
                    s.wait_idle()?;
                }
            }
            // The first round warms both paths up and is not kept.
            if round > 0 {
                samples.push(t);
            }
        }
        for ((send, recv), s) in on.into_iter().zip(streams) {
            s.sync_all((send, recv))?;
        }
        Ok(samples)
    })?;
    Ok(out)
}

/// The processes of a bandwidth round, as `um_bench --child nccl KIND` names them, by phase:
/// the device-resident rows on blocking communicators (with the raw calls), then the mirrors on
/// nonblocking ones, each process with one set of communicators, as the C++ baseline's; then
/// unified memory.
const PHASES: [&[&str]; 2] = [&["blocking", "nonblocking"], &["unified"]];

/// For the unified rows: per size, 20 times the mirror's median time per step so far ("inf"
/// where it has none), comma-separated: a unified row stops after a size where it took longer.
fn stop_limits(mirror: &[Vec<f64>]) -> String {
    mirror
        .iter()
        .map(|t| {
            if t.is_empty() {
                "inf".to_owned()
            } else {
                let mut t = t.clone();
                t.sort_by(f64::total_cmp);
                format!("{:e}", 20.0 * t[t.len() / 2])
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `um_bench --child nccl KIND [LIMITS]`: one round of um's bandwidth rows of `KIND` (of
/// [`PHASES`]) in this fresh process, on every GPU, one line per measurement:
/// `{"variant":V,"bytes":B,"secs":T}` (V indexes [`VARIANTS`]), and `{"skip":B}` for a size
/// that does not fit, `{"stop":V,"bytes":B}` where a unified row stops (`LIMITS`:
/// [`stop_limits`]), `{"note":"..."}` for a coherent row that cannot run.
pub(crate) fn child(args: &[String]) -> Res<String> {
    let (phase, limits, round) = match args {
        [p] => (p.as_str(), "", 0),
        [p, l] => (p.as_str(), l.as_str(), 0),
        [p, l, r] => (p.as_str(), l.as_str(), r.parse::<usize>()?),
        _ => return Err("expected `nccl KIND [LIMITS [ROUND]]`".into()),
    };
    if !PHASES.concat().contains(&phase) {
        return Err(format!("no kind {phase:?}: expected one of {PHASES:?}").into());
    }
    let limits: Vec<f64> = limits
        .split(',')
        .filter(|l| !l.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let count = um::device_count()?;
    let ctxs: Vec<Context> = (0..count).map(Context::new).collect::<um::Result<_>>()?;
    let raw = RawNccl::load()?;
    let comms = Comm::init_all(
        &ctxs,
        CommOptions::new()
            .blocking(phase != "nonblocking")
            .timeout(WAIT),
    )?;
    let unified: Alloc<um::Unified> = |c, n| Managed::zeroed_slice(c, n);
    let mirror: Alloc<um::Mirror> =
        |c, n| um::MirroredManaged::<[f32]>::zeroed_slice_mirrored(c, n);
    let coherent: Alloc<um::Coherent> = |c, n| Managed::zeroed_slice_coherent(c, n);
    let od = Transfer::OnDemand;
    let mut out = String::new();
    let mut put = |v: usize, bytes: usize, secs: f64| {
        let _ = writeln!(
            out,
            "{{\"variant\":{v},\"bytes\":{bytes},\"secs\":{secs:e}}}"
        );
    };
    let mut extra = String::new();
    let mut last: [Option<f64>; VARIANTS.len()] = [None; VARIANTS.len()];
    let mut stopped = [false; VARIANTS.len()];
    for (i, &bytes) in sizes().iter().enumerate() {
        if !fits(&ctxs, bytes)? {
            let _ = writeln!(extra, "{{\"skip\":{bytes}}}");
            continue;
        }
        match phase {
            "blocking" => {
                // The three rows of one process, in an order that rotates by round, so that
                // none is always the first measured after a size change.
                for k in 0..3 {
                    match (round + i + k) % 3 {
                        0 => put(
                            0,
                            bytes,
                            bandwidth_once(&ctxs, &comms, bytes, mirror, od, None)?,
                        ),
                        1 => match bandwidth_once(&ctxs, &comms, bytes, coherent, od, None) {
                            Ok(t) => put(1, bytes, t),
                            Err(e) if i == 0 => {
                                let e = e.to_string().replace(['"', '\\'], "'");
                                let _ = writeln!(extra, "{{\"note\":\"coherent: {e}\"}}");
                            }
                            Err(_) => {}
                        },
                        _ => put(
                            5,
                            bytes,
                            bandwidth_once(&ctxs, &comms, bytes, mirror, od, Some(&raw))?,
                        ),
                    }
                }
                continue;
            }
            "nonblocking" => {
                put(
                    4,
                    bytes,
                    bandwidth_once(&ctxs, &comms, bytes, mirror, od, None)?,
                );
                continue;
            }
            _ => {}
        }
        // Unified memory may migrate between GPUs when a peer's kernel reads it (NCCL's
        // direct pointers within a process): a row whose step took more than 20 times the
        // mirror's at the previous size stops there.
        for (v, transfer) in [(2, Transfer::Prefetch), (3, od)] {
            let slow = i > 0
                && last[v]
                    .zip(limits.get(i - 1))
                    .is_some_and(|(u, limit)| u > *limit);
            if slow || stopped[v] {
                if !stopped[v] {
                    let _ = writeln!(extra, "{{\"stop\":{v},\"bytes\":{bytes}}}");
                    stopped[v] = true;
                }
                continue;
            }
            let t = bandwidth_once(&ctxs, &comms, bytes, unified, transfer, None)?;
            last[v] = Some(t);
            put(v, bytes, t);
        }
    }
    Ok(out + &extra)
}

/// Section 8's measurements, or `None` (after one line) where it cannot run.
pub(crate) fn nccl(
    cpp_exe: Option<&std::path::Path>,
    rounds: usize,
    host_rounds: usize,
) -> Res<Option<Vec<Record>>> {
    let count = um::device_count().unwrap_or(0);
    if count < 2 {
        println!("nccl: skipped: needs at least 2 GPUs, this machine has {count}");
        return Ok(None);
    }
    if let Err(e) = um::nccl::nccl() {
        println!("nccl: skipped: {e}");
        return Ok(None);
    }
    let sizes = sizes();
    println!(
        "nccl: {count} GPUs, {} sizes from {} B to {} MiB, {rounds} rounds; NCCL {:?}",
        sizes.len(),
        sizes[0],
        sizes[sizes.len() - 1] >> 20,
        um::nccl::nccl()?.version()
    );
    let mut cpp_t: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut um_t: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); sizes.len()]; VARIANTS.len()];
    let list = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut stopped = [false; VARIANTS.len()];
    // Per size, round by round: the mirror's and coherent memory's busbw over the raw calls'
    // in the same process (blocking communicators).
    let mut same_process: [Vec<Vec<f64>>; 2] =
        [vec![Vec::new(); sizes.len()], vec![Vec::new(); sizes.len()]];
    let mut host = Vec::new();
    // Two phases: every device-resident variant first (with the C++ baseline and the host
    // times), unified memory last, each round of each in a fresh process (`child`). One collective on unified memory slows every later
    // collective of the process about 9x at small sizes, on any memory (measured with
    // bench/nccl_probe --touch unified, 2x H200, 2026-11-22): measured in one loop, it made the
    // device-resident variants look 0.1x of C++ up to 4 MiB.
    for (phase, kinds) in PHASES.iter().enumerate() {
        for round in 0..rounds {
            // The order rotates each round: C++ first, then um; then um first.
            for part in 0..2 {
                if (round + part) % 2 == 0 {
                    if let Some(exe) = cpp_exe.filter(|_| phase == 0) {
                        let out = std::process::Command::new(exe)
                            .args(["allreduce", "--sizes", &list, "--gpus", &count.to_string()])
                            .env("NCCL_NVLS_ENABLE", "0")
                            .output()?;
                        if !out.status.success() {
                            return Err(format!(
                                "{} failed: {}",
                                exe.display(),
                                String::from_utf8_lossy(&out.stderr)
                            )
                            .into());
                        }
                        for line in String::from_utf8_lossy(&out.stdout).lines() {
                            if cpp::field(line, "skipped").is_some() {
                                continue;
                            }
                            let bytes = cpp::number(line, "bytes")? as usize;
                            if let Some(i) = sizes.iter().position(|s| *s == bytes) {
                                cpp_t[i].push(cpp::number(line, "time_us")? * 1e-6);
                            }
                        }
                    }
                } else {
                    // um's rows of this round, in a fresh process as the C++ baseline's: a
                    // process's NCCL setup moves small sizes by up to a third from one
                    // process to the next (1 MiB: 64 to 79 GB/s for C++, 55 to 77 for um, 2x
                    // H200), so that um measured in one process was one draw against C++'s
                    // median of several.
                    let limits = if phase == 0 {
                        String::new()
                    } else {
                        stop_limits(&um_t[0])
                    };
                    let mut text = String::new();
                    let round_arg = round.to_string();
                    for kind in *kinds {
                        text += &crate::runs::child_output(&["nccl", kind, &limits, &round_arg])?;
                    }
                    // This round's seconds by size and variant: the um rows' ratios to the raw
                    // calls of the same process.
                    let mut this_round = vec![[None::<f64>; VARIANTS.len()]; sizes.len()];
                    for line in text.lines().filter(|l| !l.trim().is_empty()) {
                        if let Some(b) = cpp::field(line, "skip") {
                            if round == 0 {
                                println!("nccl: skipping {b} B: more than half the free memory");
                            }
                        } else if let Some(v) = cpp::field(line, "stop") {
                            let v: usize = v.parse()?;
                            if !stopped[v] {
                                println!(
                                    "nccl: {} stops at {} B: more than 20x the mirror's time",
                                    VARIANTS[v],
                                    cpp::number(line, "bytes")?
                                );
                                stopped[v] = true;
                            }
                        } else if let Some(note) = cpp::field(line, "note") {
                            if round == 0 {
                                println!("nccl: {note}");
                            }
                        } else {
                            let v = cpp::number(line, "variant")? as usize;
                            let bytes = cpp::number(line, "bytes")? as usize;
                            let i = sizes
                                .iter()
                                .position(|s| *s == bytes)
                                .ok_or("no such size")?;
                            let secs = cpp::number(line, "secs")?;
                            um_t.get_mut(v).ok_or("no such variant")?[i].push(secs);
                            this_round[i][v] = Some(secs);
                        }
                    }
                    for (i, t) in this_round.iter().enumerate() {
                        for (v, ratios) in same_process.iter_mut().enumerate() {
                            if let (Some(u), Some(r)) = (t[v], t[RAW]) {
                                // um's busbw over the raw calls': their time over um's.
                                ratios[i].push(r / u);
                            }
                        }
                    }
                }
            }
            println!(
                "nccl: phase {} round {} of {rounds} done",
                phase + 1,
                round + 1
            );
        }
        if phase == 0 {
            // 200 rounds resolved the blocking communicators' difference to ±0.12 µs, but the
            // nonblocking ones' only to ±2.3 µs (2× H200, 2026-11-22: +1.503, CI -0.044 ..
            // +4.482; NCCL starts a thread per call there, and a step takes 60 µs): 5x the
            // rounds (about 4 s of the run) for both, for a 1 µs goal. 1,000 rounds still left
            // the nonblocking batch mean's interval ±0.85 µs wide (2× H200, 2026-11-23: +1.110,
            // CI +0.197 .. +1.907; a tenth of the steps take twice the median): 4,000 (about
            // 16 s) halved it, to about ±0.5 µs (+0.853, CI +0.372 .. +1.443 on `329aa45`).
            // 16,000 (about 75 s) halve it again (2× H200, 2026-11-23, `8bf02b0`: +0.750, CI
            // +0.575 .. +0.937), so that its upper bound says what um costs, not how few rounds
            // were run.
            let ctxs: Vec<Context> = (0..count).map(Context::new).collect::<um::Result<_>>()?;
            for blocking in [true, false] {
                let opts = CommOptions::new().blocking(blocking).timeout(WAIT);
                let comms = Comm::init_all(&ctxs, opts)?;
                host.push(host_time_paired(&ctxs, &comms, host_rounds)?);
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = Vec::new();
    let record = |imp: &str, variant: &str, bytes: usize, times: &[f64]| {
        let best = times.iter().copied().fold(f64::INFINITY, f64::min);
        Record {
            scenario: "nccl_busbw",
            imp: imp.to_owned(),
            variant: variant.to_owned(),
            bytes,
            threads: count,
            // GB/s: the median time's, and the best time's.
            median: busbw(bytes, median(times), count),
            min: busbw(bytes, best, count),
            unit: "GB/s",
            ..Record::default()
        }
    };
    for (i, &bytes) in sizes.iter().enumerate() {
        if !cpp_t[i].is_empty() {
            out.push(record("cpp", "cuMemAlloc, blocking", bytes, &cpp_t[i]));
        }
        for (v, name) in VARIANTS.iter().enumerate() {
            if !um_t[v][i].is_empty() {
                out.push(record("um", name, bytes, &um_t[v][i]));
            }
        }
    }
    for (v, ratios) in same_process.iter().enumerate() {
        for (i, r) in ratios.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            out.push(Record {
                scenario: "nccl_same_process",
                imp: "um".to_owned(),
                variant: VARIANTS[v].to_owned(),
                bytes: sizes[i],
                threads: count,
                median: median(r),
                min: r.iter().copied().fold(f64::INFINITY, f64::min),
                unit: "x",
                ..Record::default()
            });
        }
    }
    let estimators = [(0, ""), (2, MEDIAN_STEP)];
    for (samples, mode) in host.iter().zip(["blocking", "nonblocking"]) {
        for (at, estimator) in estimators {
            let mode = format!("{mode}{estimator}");
            for (k, imp) in ["um", "raw"].iter().enumerate() {
                let own: Vec<f64> = samples.iter().map(|t| t[at + k]).collect();
                let s = stats(&own);
                let paired = (k == 0).then(|| {
                    let d = stats(
                        &samples
                            .iter()
                            .map(|t| t[at] - t[at + 1])
                            .collect::<Vec<_>>(),
                    );
                    Paired {
                        median: d.median,
                        median_ci: d.median_ci,
                        mean: d.mean,
                        mean_ci: d.mean_ci,
                        rounds: samples.len(),
                    }
                });
                println!(
                    "nccl host time, {mode}, {imp}: median {:.3} µs per step{}",
                    s.median,
                    paired.map_or(String::new(), |p| format!(
                        ", vs raw {:+.3} µs (95% CI {:+.3} .. {:+.3})",
                        p.median, p.median_ci.0, p.median_ci.1
                    ))
                );
                out.push(Record {
                    scenario: "nccl_host",
                    imp: (*imp).to_owned(),
                    variant: mode.clone(),
                    threads: count,
                    median: s.median,
                    min: own.iter().copied().fold(f64::INFINITY, f64::min),
                    unit: "us",
                    paired,
                    ..Record::default()
                });
            }
        }
    }
    Ok(Some(out))
}

fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The heading of section 10 for `gpus` GPUs: a page may hold one per GPU count.
pub(crate) fn heading(gpus: usize) -> String {
    format!("## 10. NCCL all-reduce, {gpus} GPUs")
}

/// Section 8, with its own goals, or nothing if it did not run.
pub(crate) fn markdown(records: &[Record]) -> String {
    let bw: Vec<&Record> = records
        .iter()
        .filter(|r| r.scenario == "nccl_busbw")
        .collect();
    let host: Vec<&Record> = records
        .iter()
        .filter(|r| r.scenario == "nccl_host")
        .collect();
    if bw.is_empty() && host.is_empty() {
        return String::new();
    }
    let gpus = bw.first().or(host.first()).map_or(0, |r| r.threads);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n{}\n\nOne process, one thread, every GPU: per step a group of all-reduces (f32, sum, out of place), one per GPU, as nccl-tests runs with `-g {gpus}`. Bus bandwidth by nccl-tests' formula, busbw = algbw x 2(n-1)/n, from the median time per step of each round's run (median of rounds); \"best\" from the fastest run. The C++ baseline (`bench/nccl_baseline.cpp`: `ncclCommInitAll`, `cuMemAlloc` buffers, blocking communicators) runs as a subprocess in every round, alternating with um's rows, which run in fresh processes too (`um_bench --child nccl`), each with one set of communicators as the baseline's: blocking ones for the mirror, coherent and raw rows, nonblocking ones for the nonblocking row (a process's NCCL setup moves the small sizes by up to a third from one process to the next). Unified memory is measured last, in processes of its own after every other row and the host times: one collective on unified memory slows every later collective of its process, on any memory, about 9x at small sizes (`bench/nccl_probe --touch unified`). um's rows: `Group::all_reduce` on a mirror's device half, on coherent memory, and on unified memory prefetched to the GPU at `attach` (`Transfer::Prefetch`) and not (`OnDemand`), each with blocking communicators as the baseline's; mirrors with um's default, nonblocking communicators (NCCL 2.28 starts a thread for every call on those); and, last, the baseline's NCCL calls made raw from Rust on um's blocking communicators, streams and mirrors, in the same process: the gap between it and the first um column is um's own code, the gap between it and C++ is not. A blocking process measures its three rows at each size in an order that rotates by round. The last two columns divide um's busbw by the raw calls' of the same process, round by round (median of the rounds' ratios): a process's setup puts it in a fast or a slow state, which mostly lasts its whole life (1 MiB at about 75 or about 50 GB/s on 2x H200, the C++ baseline's processes as um's, whatever CPU they are pinned to, with the same NCCL setup in NCCL's log: `bench/nccl_probe --ab`), so that a median across processes compares draws of that state, and a ratio within one process does not. `NCCL_NVLS_ENABLE=0`.\n\n### Bus bandwidth, GB/s (median / best)\n",
        heading(gpus)
    );
    let _ = write!(md, "| size | C++ |");
    for v in VARIANTS {
        let _ = write!(md, " um {v} |");
    }
    let _ = writeln!(
        md,
        " um mirror blocking / C++ | um mirror blocking / raw calls, same process | um coherent blocking / raw calls, same process |"
    );
    let _ = writeln!(
        md,
        "| ---: | ---: |{} ---: | ---: | ---: |",
        " ---: |".repeat(VARIANTS.len())
    );
    let same: Vec<&Record> = records
        .iter()
        .filter(|r| r.scenario == "nccl_same_process")
        .collect();
    let mut sizes: Vec<usize> = Vec::new();
    for r in &bw {
        if !sizes.contains(&r.bytes) {
            sizes.push(r.bytes);
        }
    }
    let find = |imp: &str, variant: &str, bytes: usize| {
        bw.iter()
            .find(|r| r.imp == imp && r.variant == variant && r.bytes == bytes)
            .copied()
    };
    let mut worst: Option<(f64, usize)> = None;
    for &bytes in &sizes {
        let cell = |r: Option<&Record>| {
            r.map_or("n/a".to_owned(), |r| {
                format!("{:.2} / {:.2}", r.median, r.min)
            })
        };
        let c = find("cpp", "cuMemAlloc, blocking", bytes);
        let _ = write!(md, "| {} | {} |", size_label(bytes), cell(c));
        for v in VARIANTS {
            let _ = write!(md, " {} |", cell(find("um", v, bytes)));
        }
        let ratio = c
            .zip(find("um", VARIANTS[0], bytes))
            .map(|(c, u)| u.median / c.median);
        let _ = write!(
            md,
            " {} |",
            ratio.map_or("".to_owned(), |r| format!("{r:.3}x"))
        );
        for v in &VARIANTS[..2] {
            let r = same
                .iter()
                .find(|r| r.variant == *v && r.bytes == bytes)
                .map_or(String::new(), |r| format!("{:.3}x", r.median));
            let _ = write!(md, " {r} |");
        }
        let _ = writeln!(md);
        if let Some(r) = ratio.filter(|_| bytes >= 1 << 20) {
            if worst.is_none_or(|(w, _)| r < w) {
                worst = Some((r, bytes));
            }
        }
    }
    let mut goals: Vec<(String, String, bool)> = Vec::new();
    if let Some((r, bytes)) = worst {
        goals.push((
            "all-reduce busbw, um mirror (device half) vs C++, every size from 1 MiB up: ≥ 0.98x"
                .into(),
            format!("{r:.3}x (lowest, at {})", size_label(bytes)),
            r >= 0.98,
        ));
    }
    if !host.is_empty() {
        let host_rounds = host.iter().find_map(|r| r.paired).map_or(0, |p| p.rounds);
        let _ = writeln!(
            md,
            "\n### Host time per step, um against the raw call\n\nOne all-reduce of 1 KiB on every GPU per step, um's `Group` (checks, agreement ledger, `ncclGroupStart` .. `ncclGroupEnd`, the poll of a nonblocking communicator) against the same NCCL calls made raw from Rust on the same communicators and buffers. Interleaved in one process, batches of {BATCH} steps taking turns, {host_rounds} rounds, streams drained between batches; per round, um's µs per step minus the raw one's, with a round's µs per step taken two ways: the batch's mean, and (rows \"median step\") the median of its steps, each timed alone, which leaves out the steps that NCCL's own work now and then makes several times longer (it starts a thread for every call on a nonblocking communicator). Intervals are 95%.\n\n| communicators | raw µs per step | um µs per step | um - raw: median (95% CI) | um - raw: mean (95% CI) |\n| --- | ---: | ---: | ---: | ---: |"
        );
        for mode in [
            "blocking",
            "nonblocking",
            "blocking, median step",
            "nonblocking, median step",
        ] {
            let (u, r) = (
                host.iter().find(|x| x.imp == "um" && x.variant == mode),
                host.iter().find(|x| x.imp == "raw" && x.variant == mode),
            );
            if let (Some(u), Some(r), Some(p)) = (u, r, u.and_then(|u| u.paired)) {
                let _ = writeln!(
                    md,
                    "| {mode} | {:.3} | {:.3} | {:+.3} ({:+.3} .. {:+.3}) | {:+.3} ({:+.3} .. {:+.3}) |",
                    r.median,
                    u.median,
                    p.median,
                    p.median_ci.0,
                    p.median_ci.1,
                    p.mean,
                    p.mean_ci.0,
                    p.mean_ci.1
                );
                goals.push((
                    match mode.strip_suffix(MEDIAN_STEP) {
                        None => format!("host time per step over the raw calls, {mode} communicators (median, 95% CI upper bound): ≤ +1 µs"),
                        Some(comm) => format!("host time per step over the raw calls, {comm} communicators, each round's median step (median, 95% CI upper bound): ≤ +1 µs"),
                    },
                    format!("{:+.3} µs ({:+.3} .. {:+.3})", p.median, p.median_ci.0, p.median_ci.1),
                    p.median_ci.1 <= 1.0,
                ));
            }
        }
    }
    let _ = writeln!(
        md,
        "\n### Goals of section 10\n\n| goal | measured | |\n| --- | ---: | --- |"
    );
    for (g, m, ok) in &goals {
        let _ = writeln!(
            md,
            "| {g} | {m} | {} |",
            if *ok { "met" } else { "**not met**" }
        );
    }
    md
}
