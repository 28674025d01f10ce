//! Where the NCCL benchmark's small-size gap comes from: the C++ baseline's loop
//! (`bench/nccl_baseline.cpp`: group of `ncclAllReduce`, one per GPU, on `cuMemAlloc` buffers
//! and `cuStreamCreate` streams), made from Rust, with each piece of the process set up either
//! raw or by um. Prints one JSON line per size, as the baseline does.
//!
//!   nccl_probe [--ctx raw|um] [--comm raw|um] [--also-nonblocking] [--sizes B1,B2,..]
//!
//! * `--ctx um`: `Context::new` for every GPU first (um's primary-context retain, its reaper);
//!   otherwise only `cuDevicePrimaryCtxRetain`.
//! * `--comm um`: `Comm::init_all` (blocking); otherwise `ncclCommInitAll`.
//! * `--also-nonblocking`: a second, nonblocking set of um communicators held (as um_bench does);
//!   `--use-nonblocking N` also runs N grouped all-reduces on them first.
//! * `--touch unified|coherent|managed-only`: one all-reduce on that storage through the blocking
//!   um communicators before anything is measured (`managed-only`: unified memory used by a
//!   kernel, not by NCCL). `--touch unified` is what slows every later collective about 9x at
//!   small sizes (2x H200, 2026-11-22).
//! * `--um streams|mirrors|group`: the loop on um's streams, with raw buffers, um's mirrors, or
//!   um's `Group` (with `--comm um`).
//!
//! * `--ab ROUNDS` (with `--comm um`): um's pieces added one at a time, side by side in one
//!   process (`nccl_probe/ab.rs`).
//! * `--poll ROUNDS [--blocking]`: only the study of `poll.rs` (how um's host time per step on nonblocking
//!   communicators compares with raw calls polled in several ways).
//!
//! Without `--um`, streams and buffers are raw and the loop is raw NCCL calls: the variants
//! differ only in how the process was set up.

use std::ffi::{c_int, c_void};
use std::time::Instant;

use cust::sys as cu;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[path = "nccl_probe/ab.rs"]
mod ab;
#[path = "nccl_probe/poll.rs"]
mod poll;
#[path = "um_bench/raw_nccl.rs"]
mod raw_nccl;
use raw_nccl::RawNccl as Nccl;

fn check(what: &str, rc: cu::CUresult) -> Res<()> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {rc:?}").into())
    }
}

fn nccl_ok(what: &str, rc: c_int) -> Res<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed: NCCL error {rc}").into())
    }
}

fn iters_for(bytes: usize) -> usize {
    ((4usize << 30) / bytes.max(1)).clamp(20, 1000)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let has = |name: &str| args.iter().any(|a| a == name);
    let um_ctx = arg("--ctx").as_deref() == Some("um");
    let um_comm = arg("--comm").as_deref() == Some("um");
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "8,1048576,4194304,8388608,16777216".to_owned())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let nccl = Nccl::load()?;
    // SAFETY: no arguments but the flags, which must be 0.
    unsafe { check("cuInit", cu::cuInit(0))? };
    if let Some(rounds) = arg("--poll") {
        return poll::study(&nccl, rounds.parse()?, has("--blocking"));
    }
    let gpus = um::device_count()?;
    let ctxs: Vec<um::Context> = if um_ctx {
        (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?
    } else {
        Vec::new()
    };
    let mut raw_ctx = vec![std::ptr::null_mut(); gpus];
    let mut streams = vec![std::ptr::null_mut(); gpus];
    for g in 0..gpus {
        // SAFETY: driver calls with valid out-pointers on a live primary context, made current first.
        unsafe {
            let mut dev = 0;
            check("cuDeviceGet", cu::cuDeviceGet(&mut dev, g as c_int))?;
            check(
                "cuDevicePrimaryCtxRetain",
                cu::cuDevicePrimaryCtxRetain(&mut raw_ctx[g], dev),
            )?;
            check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[g]))?;
            check("cuStreamCreate", cu::cuStreamCreate(&mut streams[g], 0))?;
        }
    }
    let mut raw_comms: Vec<*mut c_void> = vec![std::ptr::null_mut(); gpus];
    let mut um_comms = Vec::new();
    let mut _nonblocking = Vec::new();
    if um_comm {
        let c: Vec<um::Context> = if um_ctx {
            ctxs.clone()
        } else {
            (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?
        };
        um_comms = um::nccl::Comm::init_all(&c, um::nccl::CommOptions::new().blocking(true))?;
        for (r, c) in raw_comms.iter_mut().zip(&um_comms) {
            *r = c.as_raw();
        }
    } else {
        let devs: Vec<c_int> = (0..gpus as c_int).collect();
        // SAFETY: `gpus` out-slots and device ordinals.
        nccl_ok("ncclCommInitAll", unsafe {
            (nccl.init_all)(raw_comms.as_mut_ptr(), gpus as c_int, devs.as_ptr())
        })?;
    }
    if let Some(rounds) = arg("--ab") {
        if !um_comm {
            return Err("--ab needs --comm um".into());
        }
        let c: Vec<um::Context> = (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?;
        return ab::study(
            &nccl,
            &raw_ctx,
            &streams,
            &c,
            &um_comms,
            &sizes,
            rounds.parse()?,
        );
    }
    if let Some(what) = arg("--touch") {
        // One all-reduce on the blocking um communicators, on unified or coherent memory,
        // before anything is measured (um_bench does so at its first size).
        let c: Vec<um::Context> = (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?;
        match what.as_str() {
            "unified" => once_on(&c, &um_comms, |c| um::Managed::zeroed_slice(c, 256))?,
            "coherent" => once_on(&c, &um_comms, |c| {
                um::Managed::zeroed_slice_coherent(c, 256)
            })?,
            "managed-only" => {
                // Unified memory used by a kernel of each GPU, never by NCCL: whether the
                // slowdown comes with managed memory itself or with NCCL's use of it.
                for ctx in &c {
                    let x = um::Managed::<[f32]>::zeroed_slice(ctx, 256)?;
                    ctx.with_stream(um::StreamOptions::new(), |s| {
                        let mut x = x.attach(s)?;
                        um_test_kernels::testing::add_scalar(s, &mut x, 1.0)?;
                        s.sync_all((x,)).map(drop)
                    })?;
                }
            }
            other => {
                return Err(format!("--touch {other}: unified, coherent or managed-only").into());
            }
        }
        println!("{{\"touched\":\"{what}\"}}");
    }
    if has("--also-nonblocking") {
        let c: Vec<um::Context> = (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?;
        _nonblocking = um::nccl::Comm::init_all(&c, um::nccl::CommOptions::new())?;
        if let Some(times) = arg("--use-nonblocking") {
            // `times` grouped all-reduces of 1 KiB on the nonblocking communicators, through
            // um's Group, before the blocking ones are measured.
            let t0 = Instant::now();
            for _ in 0..times.parse::<usize>()? {
                um_streams_once(&c, &_nonblocking)?;
            }
            println!(
                "{{\"used_nonblocking\":{times},\"us\":{:.1}}}",
                t0.elapsed().as_secs_f64() * 1e6
            );
        }
    }
    println!(
        "{{\"setup\":\"ctx {} comm {}{}\",\"gpus\":{gpus}}}",
        if um_ctx { "um" } else { "raw" },
        if um_comm { "um" } else { "raw" },
        if has("--also-nonblocking") {
            " +nonblocking"
        } else {
            ""
        }
    );
    if let Some(mode) = arg("--um") {
        // um's streams (and um's buffers, and um's Group): what um_bench measures.
        let c: Vec<um::Context> = (0..gpus).map(um::Context::new).collect::<um::Result<_>>()?;
        for &bytes in &sizes {
            let us = um_streams(&c, &mode, &nccl, &raw_comms, &um_comms, bytes)?;
            let busbw = bytes as f64 / (us * 1e-6) / 1e9 * 2.0 * (gpus as f64 - 1.0) / gpus as f64;
            println!(
                "{{\"bytes\":{bytes},\"um\":\"{mode}\",\"time_us\":{us:.3},\"busbw\":{busbw:.3}}}"
            );
        }
        return Ok(());
    }
    for &bytes in &sizes {
        let n = (bytes / 4).max(1);
        let mut send = vec![0u64; gpus];
        let mut recv = vec![0u64; gpus];
        for g in 0..gpus {
            // SAFETY: driver calls with valid out-pointers on a live primary context, made current first.
            unsafe {
                check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[g]))?;
                check("cuMemAlloc", cu::cuMemAlloc_v2(&mut send[g], n * 4))?;
                check("cuMemAlloc", cu::cuMemAlloc_v2(&mut recv[g], n * 4))?;
                check(
                    "cuMemsetD32",
                    cu::cuMemsetD32_v2(send[g], 1.0f32.to_bits(), n),
                )?;
            }
        }
        let step = || -> Res<()> {
            // SAFETY: live communicators of this thread; `n` f32 per buffer, of each stream's
            // device; group start matched by group end.
            unsafe {
                nccl_ok("ncclGroupStart", (nccl.group_start)())?;
                for g in 0..gpus {
                    nccl_ok(
                        "ncclAllReduce",
                        (nccl.all_reduce)(
                            send[g] as *const c_void,
                            recv[g] as *mut c_void,
                            n,
                            7,
                            0,
                            raw_comms[g],
                            streams[g].cast(),
                        ),
                    )?;
                }
                nccl_ok("ncclGroupEnd", (nccl.group_end)())
            }
        };
        let drain = || -> Res<()> {
            for g in 0..gpus {
                // SAFETY: driver calls with valid out-pointers on a live primary context, made current first.
                unsafe {
                    check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[g]))?;
                    check("cuStreamSynchronize", cu::cuStreamSynchronize(streams[g]))?;
                }
            }
            Ok(())
        };
        let k = iters_for(n * 4);
        for _ in 0..(k / 10).max(3) {
            step()?;
        }
        drain()?;
        let t0 = Instant::now();
        for _ in 0..k {
            step()?;
        }
        drain()?;
        let us = t0.elapsed().as_secs_f64() * 1e6 / k as f64;
        let algbw = (n * 4) as f64 / (us * 1e-6) / 1e9;
        let busbw = algbw * 2.0 * (gpus as f64 - 1.0) / gpus as f64;
        let mut check_v = 0f32;
        // SAFETY: driver calls with valid out-pointers on a live primary context, made current first.
        unsafe {
            check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[0]))?;
            check(
                "cuMemcpyDtoH",
                cu::cuMemcpyDtoH_v2(
                    (&mut check_v as *mut f32).cast(),
                    recv[0] + (n as u64 - 1) * 4,
                    4,
                ),
            )?;
        }
        println!(
            "{{\"bytes\":{},\"iters\":{k},\"time_us\":{us:.3},\"busbw\":{busbw:.3},\"check\":{check_v}}}",
            n * 4
        );
        for g in 0..gpus {
            // SAFETY: driver calls with valid out-pointers on a live primary context, made current first.
            unsafe {
                check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[g]))?;
                check("cuMemFree", cu::cuMemFree_v2(send[g]))?;
                check("cuMemFree", cu::cuMemFree_v2(recv[g]))?;
            }
        }
    }
    drop(um_comms);
    Ok(())
}

/// µs per step on um's streams: `mode` "streams" (raw `cuMemAlloc` buffers, raw calls),
/// "mirrors" (um's mirrors attached, raw calls on their device halves) or "group" (um's `Group`
/// on the mirrors, which needs `--comm um`).
fn um_streams(
    ctxs: &[um::Context],
    mode: &str,
    nccl: &Nccl,
    raw_comms: &[*mut c_void],
    um_comms: &[um::nccl::Comm],
    bytes: usize,
) -> Res<f64> {
    use um::{Managed, StreamOptions};
    let n = (bytes / 4).max(1);
    let k = iters_for(n * 4);
    let mut raw_bufs = Vec::new();
    for ctx in ctxs {
        ctx.make_current()?;
        let (mut a, mut b) = (0u64, 0u64);
        // SAFETY: out-pointers; the context is current.
        unsafe {
            check("cuMemAlloc", cu::cuMemAlloc_v2(&mut a, n * 4))?;
            check("cuMemAlloc", cu::cuMemAlloc_v2(&mut b, n * 4))?;
        }
        raw_bufs.push((a, b));
    }
    let mut mirrors = Vec::new();
    for ctx in ctxs {
        mirrors.push((
            Managed::from_fn_mirrored(ctx, n, |_| 1.0f32)?,
            Managed::from_fn_mirrored(ctx, n, |_| 0.0f32)?,
        ));
    }
    let us = um::Context::with_stream_set_across(ctxs, StreamOptions::new(), |streams| {
        let mut on = Vec::new();
        for ((a, b), s) in mirrors.into_iter().zip(streams) {
            on.push((a.attach(s)?, b.attach(s)?));
        }
        let mut step = || -> Res<()> {
            if mode == "group" {
                mirror_group(&mut on, streams, um_comms)?.launch()?;
                return Ok(());
            }
            let calls = on
                .iter_mut()
                .zip(streams)
                .enumerate()
                .map(|(g, ((a, b), s))| {
                    let (p, q) = if mode == "mirrors" {
                        (a.as_device_ptr().address(), b.as_device_ptr_mut().address())
                    } else {
                        raw_bufs[g]
                    };
                    (p, q, s.as_raw())
                });
            // SAFETY: live blocking communicators of this thread; `n` f32 per buffer, of each
            // stream's device, owned by that stream.
            unsafe { raw_all_reduce(nccl, calls, raw_comms, n) }
        };
        let run = |step: &mut dyn FnMut() -> Res<()>, times: usize| -> Res<()> {
            for _ in 0..times {
                step()?;
            }
            for s in streams {
                s.wait_idle()?;
            }
            Ok(())
        };
        run(&mut step, (k / 10).max(3)).map_err(|e| um::Error::Bootstrap {
            reason: e.to_string(),
        })?;
        let t0 = Instant::now();
        run(&mut step, k).map_err(|e| um::Error::Bootstrap {
            reason: e.to_string(),
        })?;
        let us = t0.elapsed().as_secs_f64() * 1e6 / k as f64;
        for ((a, b), s) in on.into_iter().zip(streams) {
            s.sync_all((a, b))?;
        }
        Ok(us)
    })?;
    for (ctx, (a, b)) in ctxs.iter().zip(raw_bufs) {
        ctx.make_current()?;
        // SAFETY: buffers of this context, every stream drained.
        unsafe {
            check("cuMemFree", cu::cuMemFree_v2(a))?;
            check("cuMemFree", cu::cuMemFree_v2(b))?;
        }
    }
    Ok(us)
}

/// A mirror of f32 owned by a stream of a stream set.
type OnStream<'s> = um::Managed<[f32], um::StreamOwned<'s, um::Created>, um::Mirror>;

/// um's `Group` of one all-reduce (sum) per GPU: each pair of mirrors on its stream and the
/// communicator of the same index.
fn mirror_group<'b, 's>(
    on: &'b mut [(OnStream<'s>, OnStream<'s>)],
    streams: &'b [um::Stream<'s, um::Created>],
    comms: &'b [um::nccl::Comm],
) -> um::Result<um::nccl::Group<'b>> {
    let mut g = um::nccl::Group::new();
    for (((a, b), s), c) in on.iter_mut().zip(streams).zip(comms) {
        g.all_reduce(c, s, a, b, um::nccl::ReduceOp::Sum)?;
    }
    Ok(g)
}

/// The C++ baseline's step made raw: group start, one all-reduce (f32, sum) of `n` elements
/// per `(send, recv, stream)` of `calls` on the communicator of the same index, group end.
///
/// # Safety
/// Live blocking communicators used by this thread only; each address is device memory of at
/// least `n` f32 of its stream's device (the communicator's), used by nothing else meanwhile.
unsafe fn raw_all_reduce(
    nccl: &Nccl,
    calls: impl Iterator<Item = (u64, u64, *mut c_void)>,
    comms: &[*mut c_void],
    n: usize,
) -> Res<()> {
    // SAFETY: the caller's guarantees; group start matched by group end.
    unsafe {
        nccl_ok("ncclGroupStart", (nccl.group_start)())?;
        for ((p, q, st), &c) in calls.zip(comms) {
            nccl_ok(
                "ncclAllReduce",
                (nccl.all_reduce)(p as *const c_void, q as *mut c_void, n, 7, 0, c, st),
            )?;
        }
        nccl_ok("ncclGroupEnd", (nccl.group_end)())
    }
}

/// One grouped all-reduce of 1 KiB per GPU on `comms`, um's mirrors and streams.
fn um_streams_once(ctxs: &[um::Context], comms: &[um::nccl::Comm]) -> Res<()> {
    once_on(ctxs, comms, |c| {
        um::MirroredManaged::<[f32]>::zeroed_slice_mirrored(c, 256)
    })
}

type Alloc<M> = fn(&um::Context) -> um::Result<um::Managed<[f32], um::HostOwned, M>>;

/// One grouped all-reduce of 1 KiB per GPU on `comms`, buffers from `alloc`, um's streams.
fn once_on<M: um::Storage>(
    ctxs: &[um::Context],
    comms: &[um::nccl::Comm],
    alloc: Alloc<M>,
) -> Res<()> {
    use um::StreamOptions;
    let mut bufs = Vec::new();
    for ctx in ctxs {
        bufs.push((alloc(ctx)?, alloc(ctx)?));
    }
    um::Context::with_stream_set_across(ctxs, StreamOptions::new(), |streams| {
        let mut on = Vec::new();
        for ((a, b), s) in bufs.into_iter().zip(streams) {
            on.push((a.attach(s)?, b.attach(s)?));
        }
        let mut g = um::nccl::Group::new();
        for (((a, b), s), c) in on.iter_mut().zip(streams).zip(comms) {
            g.all_reduce(c, s, a, b, um::nccl::ReduceOp::Sum)?;
        }
        g.launch()?;
        for ((a, b), s) in on.into_iter().zip(streams) {
            s.sync_all((a, b))?;
        }
        Ok(())
    })?;
    Ok(())
}
