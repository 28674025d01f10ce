//! `nccl_probe --ctx um --comm um --ab ROUNDS [--sizes ..]`: um's pieces added one at a time,
//! measured side by side in one process. The bus bandwidth at 1 MiB is bimodal from one
//! process to the next (about 75 or about 50 GB/s on 2x H200, for the C++ baseline as for um,
//! whatever CPU the process is pinned to, with the same NCCL setup in its log), so a comparison
//! across processes draws from that lottery; within one process every variant runs in the same
//! mode. Each round runs every variant once, in an order that rotates by round:
//!
//! * `raw`: NCCL's calls on `cuStreamCreate` streams and `cuMemAlloc` buffers (the C++ loop);
//! * `raw on um streams`: the same calls and buffers on um's streams;
//! * `raw on um mirrors`: the same calls on um's streams, on the device halves of um's mirrors;
//! * `um Group`: `Group::all_reduce` on those streams and mirrors;
//! * then the raw calls on um's mirrors after um's `Group` was built (every check) and dropped
//!   unlaunched, once, and twice in a row: what the checks cost as NCCL's last step left the
//!   thread's caches, and once they are warm.
//!
//! One JSON line per round and variant: `{"ab":V,"round":R,"bytes":B,"time_us":T,"busbw":X}`.

use std::ffi::c_void;
use std::time::Instant;

use cust::sys as cu;

use super::{Nccl, Res, check, iters_for, mirror_group, raw_all_reduce};

const VARIANTS: [&str; 6] = [
    "raw",
    "raw on um streams",
    "raw on um mirrors",
    "um Group",
    "um Group built and dropped, then raw on um mirrors",
    "um Group built and dropped twice, then raw on um mirrors",
];

/// The study (see the module's documentation): `raw_ctx` and `raw_streams` per GPU, um's
/// contexts and blocking communicators of the same GPUs.
pub(crate) fn study(
    nccl: &Nccl,
    raw_ctx: &[cu::CUcontext],
    raw_streams: &[cu::CUstream],
    ctxs: &[um::Context],
    comms: &[um::nccl::Comm],
    sizes: &[usize],
    rounds: usize,
) -> Res<()> {
    let gpus = ctxs.len();
    for &bytes in sizes {
        let n = (bytes / 4).max(1);
        let k = iters_for(n * 4);
        let mut raw_bufs = Vec::new();
        for ctx in raw_ctx {
            let (mut a, mut b) = (0u64, 0u64);
            // SAFETY: driver calls with valid out-pointers on a live primary context, made
            // current first.
            unsafe {
                check("cuCtxSetCurrent", cu::cuCtxSetCurrent(*ctx))?;
                check("cuMemAlloc", cu::cuMemAlloc_v2(&mut a, n * 4))?;
                check("cuMemAlloc", cu::cuMemAlloc_v2(&mut b, n * 4))?;
                check("cuMemsetD32", cu::cuMemsetD32_v2(a, 1.0f32.to_bits(), n))?;
                check("cuCtxSynchronize", cu::cuCtxSynchronize())?;
            }
            raw_bufs.push((a, b));
        }
        let mut mirrors = Vec::new();
        for ctx in ctxs {
            mirrors.push((
                um::Managed::from_fn_mirrored(ctx, n, |_| 1.0f32)?,
                um::Managed::from_fn_mirrored(ctx, n, |_| 0.0f32)?,
            ));
        }
        let raw_comms: Vec<*mut c_void> = comms.iter().map(um::nccl::Comm::as_raw).collect();
        let lines = um::Context::with_stream_set_across(
            ctxs,
            um::StreamOptions::new(),
            |streams| -> um::Result<Vec<String>> {
                let mut on = Vec::new();
                for ((a, b), s) in mirrors.into_iter().zip(streams) {
                    on.push((a.attach(s)?, b.attach(s)?));
                }
                let fail = |e: Box<dyn std::error::Error>| um::Error::Bootstrap {
                    reason: e.to_string(),
                };
                let mut lines = Vec::new();
                for round in 0..rounds {
                    for j in 0..VARIANTS.len() {
                        let v = (round + j) % VARIANTS.len();
                        let mut step = || -> Res<()> {
                            // Variants 4 and 5: the checks' cost, with the thread's caches as
                            // NCCL's last step left them, and (5) once more right after.
                            for _ in 0..v.saturating_sub(3) {
                                drop(std::hint::black_box(mirror_group(&mut on, streams, comms)?));
                            }
                            if v == 3 {
                                mirror_group(&mut on, streams, comms)?.launch()?;
                                return Ok(());
                            }
                            let calls =
                                on.iter_mut()
                                    .zip(streams)
                                    .enumerate()
                                    .map(|(g, ((a, b), s))| {
                                        let (p, q) = if v >= 2 {
                                            (
                                                a.as_device_ptr().address(),
                                                b.as_device_ptr_mut().address(),
                                            )
                                        } else {
                                            raw_bufs[g]
                                        };
                                        let st = if v == 0 {
                                            raw_streams[g].cast()
                                        } else {
                                            s.as_raw()
                                        };
                                        (p, q, st)
                                    });
                            // SAFETY: live blocking communicators of this thread; `n` f32 per
                            // buffer, of each stream's device (raw buffers used by no um
                            // stream but these steps, mirrors owned by the stream they are
                            // enqueued on).
                            unsafe { raw_all_reduce(nccl, calls, &raw_comms, n) }
                        };
                        let drain = || -> Res<()> {
                            for (g, s) in streams.iter().enumerate() {
                                s.wait_idle()?;
                                // SAFETY: a live primary context made current, its live stream.
                                unsafe {
                                    check("cuCtxSetCurrent", cu::cuCtxSetCurrent(raw_ctx[g]))?;
                                    check(
                                        "cuStreamSynchronize",
                                        cu::cuStreamSynchronize(raw_streams[g]),
                                    )?;
                                }
                            }
                            Ok(())
                        };
                        for _ in 0..(k / 10).max(3) {
                            step().map_err(fail)?;
                        }
                        drain().map_err(fail)?;
                        let t0 = Instant::now();
                        for _ in 0..k {
                            step().map_err(fail)?;
                        }
                        drain().map_err(fail)?;
                        let us = t0.elapsed().as_secs_f64() * 1e6 / k as f64;
                        let busbw = (n * 4) as f64 / (us * 1e-6) / 1e9 * 2.0 * (gpus as f64 - 1.0)
                            / gpus as f64;
                        lines.push(format!(
                            "{{\"ab\":\"{}\",\"round\":{round},\"bytes\":{},\"time_us\":{us:.3},\"busbw\":{busbw:.3}}}",
                            VARIANTS[v],
                            n * 4
                        ));
                    }
                }
                for ((a, b), s) in on.into_iter().zip(streams) {
                    s.sync_all((a, b))?;
                }
                Ok(lines)
            },
        )?;
        for l in lines {
            println!("{l}");
        }
        for (ctx, (a, b)) in raw_ctx.iter().zip(raw_bufs) {
            // SAFETY: buffers of this context, every stream drained.
            unsafe {
                check("cuCtxSetCurrent", cu::cuCtxSetCurrent(*ctx))?;
                check("cuMemFree", cu::cuMemFree_v2(a))?;
                check("cuMemFree", cu::cuMemFree_v2(b))?;
            }
        }
    }
    Ok(())
}
