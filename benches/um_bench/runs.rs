//! The scenarios. Each variant returns its samples for one round; `Rounds` folds the rounds
//! into a median of medians and a minimum of minima.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use cust::sys as cs;
use um::kernels::{run_task as rt, streams};
use um::{
    Context, DeviceManaged, HostOwned, HostVisible, LaunchConfig, Managed, MirroredManaged,
    Storage, StreamOptions, Transfer,
};
use um_test_kernels::testing;

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

/// Medians and minima of several rounds of one variant.
#[derive(Default)]
struct Rounds {
    medians: Vec<f64>,
    min: f64,
}

impl Rounds {
    fn add(&mut self, median: f64, min: f64) {
        if self.medians.is_empty() {
            self.min = min;
        }
        self.medians.push(median);
        self.min = self.min.min(min);
    }
    fn add_samples(&mut self, samples: &[f64]) {
        self.add(median(samples), min(samples));
    }
    fn record(
        &self,
        scenario: &'static str,
        imp: &str,
        variant: &str,
        mib: usize,
        threads: usize,
        unit: &'static str,
    ) -> Record {
        Record {
            scenario,
            imp: imp.to_owned(),
            variant: variant.to_owned(),
            mib,
            bytes: 0,
            threads,
            median: median(&self.medians),
            min: self.min,
            unit,
            paired: None,
        }
    }
}

// ------------------------------------------------------------------ 1. host cost per launch

const BATCHES: usize = 200;
const PER_BATCH: usize = 256;

/// Per-launch host time of `launch`, in µs, over batches of launches (the stream is drained
/// between batches, untimed, so the queue never fills).
fn time_batches<E>(
    mut launch: impl FnMut() -> Result<(), E>,
    mut drain: impl FnMut() -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    let mut samples = Vec::with_capacity(BATCHES);
    for b in 0..BATCHES {
        let t0 = Instant::now();
        for _ in 0..PER_BATCH {
            launch()?;
        }
        let dt = t0.elapsed().as_secs_f64() * 1e6 / PER_BATCH as f64;
        drain()?;
        if b > 0 {
            samples.push(dt);
        }
    }
    Ok(samples)
}

fn launch_um_typed(ctx: &Context) -> Res<Vec<f64>> {
    let buf = Managed::from_slice(ctx, &[0.0f32])?;
    Ok(ctx.with_stream(StreamOptions::new(), |s| {
        let mut b = buf.attach(s)?;
        let samples = time_batches(|| testing::add_scalar(s, &mut b, 1.0), || s.wait_idle())?;
        b.sync()?;
        Ok(samples)
    })?)
}

fn launch_um_raw(ctx: &Context) -> Res<Vec<f64>> {
    let buf = Managed::from_slice(ctx, &[0.0f32])?;
    let kernel = ctx.kernel(testing::PTX, "add_scalar")?;
    Ok(ctx.with_stream(StreamOptions::new(), |s| {
        let mut b = buf.attach(s)?;
        let cfg = LaunchConfig::grid_1d(1, 256);
        let samples = time_batches(
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 1 element.
            || unsafe { s.launch(&kernel, cfg, (&mut b, 1.0f32, 1u32)) },
            || s.wait_idle(),
        )?;
        b.sync()?;
        Ok(samples)
    })?)
}

fn cust_ok(r: cs::CUresult, what: &str) -> Res<()> {
    if r == cs::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}").into())
    }
}

/// The raw driver calls of the cust baseline, through cust's own bindings.
fn cust_alloc_host(bytes: usize) -> Res<cs::CUdeviceptr> {
    let mut p: cs::CUdeviceptr = 0;
    let flag = cs::CUmemAttach_flags::CU_MEM_ATTACH_HOST as u32;
    // SAFETY: `p` is a valid out-pointer.
    let r = unsafe { cs::cuMemAllocManaged(&mut p, bytes, flag) };
    cust_ok(r, "cuMemAllocManaged")?;
    Ok(p)
}

fn cust_attach_single(stream: &cust::stream::Stream, p: cs::CUdeviceptr) -> Res<()> {
    let flag = cs::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE as u32;
    // SAFETY: `p` is a live managed allocation and `stream` a live stream.
    let r = unsafe { cs::cuStreamAttachMemAsync(stream.as_inner(), p, 0, flag) };
    cust_ok(r, "cuStreamAttachMemAsync")
}

/// # Safety
/// `p` came from [`cust_alloc_host`], is freed once, and no kernel uses it any more.
unsafe fn cust_free(p: cs::CUdeviceptr) -> Res<()> {
    // SAFETY: guaranteed by the caller.
    cust_ok(unsafe { cs::cuMemFree_v2(p) }, "cuMemFree")
}

/// Raw cust: its Module, Function, Stream and launch! macro, memory from cuMemAllocManaged.
fn launch_cust(_ctx: &Context) -> Res<Vec<f64>> {
    let module = cust::module::Module::from_ptx(testing::PTX, &[])?;
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::DEFAULT, None)?;
    let f = module.get_function("add_scalar")?;
    let p = cust_alloc_host(4)?;
    cust_attach_single(&stream, p)?;
    let samples = time_batches::<Box<dyn std::error::Error>>(
        || {
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 1 element.
            unsafe { cust::launch!(f<<<1, 256, 0, stream>>>(p, 1.0f32, 1u32)) }?;
            Ok(())
        },
        || Ok(stream.synchronize()?),
    )?;
    // SAFETY: the stream was drained; `p` is freed once.
    unsafe { cust_free(p) }?;
    Ok(samples)
}

fn launch_cudarc() -> Res<Vec<f64>> {
    use cudarc::driver::{CudaContext, PushKernelArg, sys};
    let cctx = CudaContext::new(0)?;
    let stream = cctx.new_stream()?;
    let module = cctx.load_module(cudarc::nvrtc::Ptx::from_src(testing::PTX))?;
    let f = module.load_function("add_scalar")?;
    // SAFETY: f32 is valid for any bit pattern; the buffer is written by the kernel only.
    let mut buf = unsafe { cctx.alloc_unified::<f32>(1, false) }?;
    buf.attach(&stream, sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE)?;
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (v, n) = (1.0f32, 1u32);
    time_batches::<Box<dyn std::error::Error>>(
        || {
            let mut b = stream.launch_builder(&f);
            b.arg(&mut buf).arg(&v).arg(&n);
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 1 element.
            unsafe { b.launch(cfg) }?;
            Ok(())
        },
        || Ok(stream.synchronize()?),
    )
}

pub(crate) fn launch(cpp: Option<&Baseline>, rounds: usize) -> Res<Vec<Record>> {
    println!("launch: host cost per launch, {BATCHES} batches of {PER_BATCH}, {rounds} rounds");
    // Each variant runs in a fresh process, as the C++ baseline does.
    let variants = [
        ("typed", "um", "typed launcher"),
        ("raw", "um", "Stream::launch (unsafe)"),
        ("cust", "cust", "launch! macro"),
        ("cudarc", "cudarc", "launch_builder + UnifiedSlice"),
    ];
    let mut c = Rounds::default();
    let mut rust: Vec<Rounds> = variants.iter().map(|_| Rounds::default()).collect();
    // Rotate the order each round (see `run_task`).
    for round in 0..rounds {
        for k in 0..=variants.len() {
            match (round + k) % (variants.len() + 1) {
                0 => {
                    if let Some(cpp) = cpp {
                        let args = [BATCHES.to_string(), PER_BATCH.to_string()];
                        let line = cpp.run("launch", &args)?.join("\n");
                        c.add(
                            cpp::number(&line, "median_us")?,
                            cpp::number(&line, "min_us")?,
                        );
                    }
                }
                i => {
                    let (median, min) = in_child(&["launch", variants[i - 1].0])?;
                    rust[i - 1].add(median, min);
                }
            }
        }
    }
    let mut out = Vec::new();
    if cpp.is_some() {
        out.push(c.record("launch", "cpp", "cuLaunchKernel", 0, 1, "us"));
    }
    for ((_, imp, how), r) in variants.iter().zip(&rust) {
        out.push(r.record("launch", imp, how, 0, 1, "us"));
    }
    Ok(out)
}

// ------------------------------------------------------------------ 2. the run_task loop

const WARMUP: usize = 2;

pub(crate) fn iters_for(mib: usize) -> usize {
    match mib {
        0..=4 => 400,
        5..=64 => 40,
        _ => 10,
    }
}

fn input_value(i: usize) -> f32 {
    (i % 1000) as f32 * 0.25
}

fn host_process(data: &mut [f32]) {
    data.iter_mut().for_each(|v| *v -= 1.0);
}

/// Per-iteration times (ms) from the starts of consecutive iterations: iteration k's sample
/// ends where k+1 begins; the last iteration only closes the last sample.
fn per_iteration(starts: &[Instant]) -> Vec<f64> {
    starts
        .windows(2)
        .skip(WARMUP)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect()
}

/// A host-owned buffer of `f32` of storage `M`.
type Host<M> = Managed<[f32], HostOwned, M>;

/// Section 2's loop on buffers of any storages, `data`'s with a host side: `transform` on the
/// stream, `data` back to the host (`sync`) for the host's pass and to the stream again
/// (`attach`), `convert`; the per-iteration starts, and `out` given back to the host.
fn run_task_loop<MI: Storage, MD: HostVisible, MO: Storage>(
    ctx: &Context,
    options: StreamOptions,
    buffers: (Host<MI>, Host<MD>, Host<MO>),
    iters: usize,
) -> Res<(Host<MO>, Vec<Instant>)> {
    let (input, data, out) = buffers;
    Ok(ctx.with_stream(options, |s| {
        let input = input.attach(s)?;
        let mut out = out.attach(s)?;
        let mut data = data.attach(s)?;
        s.wait_idle()?;
        let mut starts = Vec::new();
        for _ in 0..iters + WARMUP + 1 {
            starts.push(Instant::now());
            rt::transform(s, &input, &mut data)?;
            let mut host = data.sync()?;
            host_process(&mut host);
            data = host.attach(s)?;
            rt::convert(s, &mut out, &data)?;
        }
        let (_, out, _) = s.sync_all((data, out, input))?;
        Ok((out, starts))
    })?)
}

fn run_task_um(ctx: &Context, n: usize, iters: usize, transfer: Transfer) -> Res<Vec<f64>> {
    let input = Managed::from_fn(ctx, n, input_value)?;
    let data = Managed::<[f32]>::zeroed_slice(ctx, n)?;
    let out = Managed::<[f32]>::zeroed_slice(ctx, n)?;
    let options = StreamOptions::new().transfer(transfer);
    let (_, starts) = run_task_loop(ctx, options, (input, data, out), iters)?;
    Ok(per_iteration(&starts))
}

/// The loop of `run_task_um` on mirrored memory: `sync` copies `data` back (the kernel wrote
/// it), `attach` copies it to the device (the host wrote it); `input` and `out` stay on the
/// device. The same copies as the C++ `explicit` policy.
fn run_task_mirror(ctx: &Context, n: usize, iters: usize) -> Res<Vec<f64>> {
    let input = Managed::from_fn_mirrored(ctx, n, input_value)?;
    let data = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, n)?;
    let out = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, n)?;
    let (_, starts) = run_task_loop(ctx, StreamOptions::new(), (input, data, out), iters)?;
    Ok(per_iteration(&starts))
}

/// The loop on device-only memory (`Device` storage): `sync`, then `copy_to_host` of `data` into
/// a host `Vec` (pageable, not pinned), the host pass, `copy_from_host` back and `attach`;
/// `input` and `out` stay on the device. The copies of the C++ `explicit` policy, with no
/// pinned host memory (each copy waits for itself).
fn run_task_device(ctx: &Context, n: usize, iters: usize) -> Res<Vec<f64>> {
    let host_input: Vec<f32> = (0..n).map(input_value).collect();
    let input = Managed::from_slice_device(ctx, &host_input)?;
    let data = DeviceManaged::<[f32]>::zeroed_slice_device(ctx, n)?;
    let out = DeviceManaged::<[f32]>::zeroed_slice_device(ctx, n)?;
    let mut host = vec![0.0f32; n];
    let (out, starts) = ctx.with_stream(StreamOptions::new(), |s| {
        let input = input.attach(s)?;
        let mut out = out.attach(s)?;
        let mut data = data.attach(s)?;
        s.wait_idle()?;
        let mut starts = Vec::new();
        for _ in 0..iters + WARMUP + 1 {
            starts.push(Instant::now());
            rt::transform(s, &input, &mut data)?;
            let mut back = data.sync()?;
            back.copy_to_host(&mut host)?;
            host_process(&mut host);
            back.copy_from_host(&host)?;
            data = back.attach(s)?;
            rt::convert(s, &mut out, &data)?;
        }
        let (_, out, _) = s.sync_all((data, out, input))?;
        Ok((out, starts))
    })?;
    // The result read back, so that a broken loop cannot pass for a fast one.
    let out = out.to_vec()?;
    if out.iter().any(|v| !v.is_finite()) {
        return Err("run_task on device storage: a result is not finite".into());
    }
    Ok(per_iteration(&starts))
}

/// The loop with each buffer in the storage its use needs: `input` and `out`, which only
/// kernels touch, in `Device` storage (no host side at all); `data`, which the host works on
/// every iteration, mirrored (`sync` copies it to its pinned host half, `attach` back). A third
/// of the mirror's pinned host memory, the same copies as the C++ `explicit` policy.
fn run_task_device_and_mirror(ctx: &Context, n: usize, iters: usize) -> Res<Vec<f64>> {
    let host_input: Vec<f32> = (0..n).map(input_value).collect();
    let input = Managed::from_slice_device(ctx, &host_input)?;
    let data = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, n)?;
    let out = DeviceManaged::<[f32]>::zeroed_slice_device(ctx, n)?;
    let (out, starts) = run_task_loop(ctx, StreamOptions::new(), (input, data, out), iters)?;
    // The result read back, so that a broken loop cannot pass for a fast one.
    if out.to_vec()?.iter().any(|v| !v.is_finite()) {
        return Err("run_task on device and mirrored storage: a result is not finite".into());
    }
    Ok(per_iteration(&starts))
}

/// Pinned host bytes per byte of buffer that a storage holds (footprint less the device
/// allocation, from a real 1 MiB buffer of each): 0 for `Device`, 1 for a mirror.
pub(crate) fn pinned_per_byte(ctx: &Context) -> Res<(f64, f64)> {
    let len = (1 << 20) / 4;
    let device = DeviceManaged::<[f32]>::zeroed_slice_device(ctx, len)?;
    let mirrored = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, len)?;
    let extra = |footprint: usize, size: usize| (footprint - size) as f64 / size as f64;
    Ok((
        extra(device.footprint_in_bytes(), device.size_in_bytes()),
        extra(mirrored.footprint_in_bytes(), mirrored.size_in_bytes()),
    ))
}

fn grid_for(ctx: &Context, n: usize) -> u32 {
    let cap = ctx.info().multiprocessors * 32;
    (n.div_ceil(256) as u32).clamp(1, cap)
}

fn run_task_cust(ctx: &Context, n: usize, iters: usize) -> Res<Vec<f64>> {
    let module = cust::module::Module::from_ptx(rt::PTX, &[])?;
    let (transform, convert) = (
        module.get_function("transform")?,
        module.get_function("convert")?,
    );
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::DEFAULT, None)?;
    let bytes = n * 4;
    let ptrs = [
        cust_alloc_host(bytes)?,
        cust_alloc_host(bytes)?,
        cust_alloc_host(bytes)?,
    ];
    let [input, data, out] = ptrs;
    // SAFETY: fresh host-attached allocations of n floats, no kernel running.
    let (h_in, h_data) = unsafe {
        (
            std::slice::from_raw_parts_mut(input as usize as *mut f32, n),
            std::slice::from_raw_parts_mut(data as usize as *mut f32, n),
        )
    };
    h_in.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = input_value(i));
    h_data.fill(0.0);
    for p in ptrs {
        cust_attach_single(&stream, p)?;
    }
    stream.synchronize()?;
    let (grid, nn) = (grid_for(ctx, n), n as u32);
    let mut starts = Vec::new();
    for _ in 0..iters + WARMUP + 1 {
        starts.push(Instant::now());
        // SAFETY: transform(const float*, float*, unsigned) over n floats.
        unsafe { cust::launch!(transform<<<grid, 256, 0, stream>>>(input, data, nn)) }?;
        stream.synchronize()?;
        // SAFETY: the stream is idle; data holds n floats.
        host_process(unsafe { std::slice::from_raw_parts_mut(data as usize as *mut f32, n) });
        // SAFETY: convert(float*, const float*, unsigned) over n floats.
        unsafe { cust::launch!(convert<<<grid, 256, 0, stream>>>(out, data, nn)) }?;
    }
    stream.synchronize()?;
    for p in ptrs {
        // SAFETY: the stream is idle; each pointer is freed once.
        unsafe { cust_free(p) }?;
    }
    Ok(per_iteration(&starts))
}

fn run_task_cudarc(ctx: &Context, n: usize, iters: usize) -> Res<Vec<f64>> {
    use cudarc::driver::{CudaContext, PushKernelArg, sys};
    let cctx = CudaContext::new(0)?;
    let stream = cctx.new_stream()?;
    let module = cctx.load_module(cudarc::nvrtc::Ptx::from_src(rt::PTX))?;
    let (transform, convert) = (
        module.load_function("transform")?,
        module.load_function("convert")?,
    );
    // SAFETY: f32 is valid for any bit pattern.
    let (mut input, mut data, mut out) = unsafe {
        (
            cctx.alloc_unified::<f32>(n, false)?,
            cctx.alloc_unified::<f32>(n, false)?,
            cctx.alloc_unified::<f32>(n, false)?,
        )
    };
    input
        .as_mut_slice()?
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = input_value(i));
    data.as_mut_slice()?.fill(0.0);
    let single = sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE;
    input.attach(&stream, single)?;
    data.attach(&stream, single)?;
    out.attach(&stream, single)?;
    stream.synchronize()?;
    let grid = grid_for(ctx, n);
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let nn = n as u32;
    let mut starts = Vec::new();
    for _ in 0..iters + WARMUP + 1 {
        starts.push(Instant::now());
        let mut b = stream.launch_builder(&transform);
        b.arg(&input).arg(&mut data).arg(&nn);
        // SAFETY: transform(const float*, float*, unsigned) over n floats.
        unsafe { b.launch(cfg) }?;
        stream.synchronize()?;
        host_process(data.as_mut_slice()?);
        let mut b = stream.launch_builder(&convert);
        b.arg(&mut out).arg(&data).arg(&nn);
        // SAFETY: convert(float*, const float*, unsigned) over n floats.
        unsafe { b.launch(cfg) }?;
    }
    stream.synchronize()?;
    Ok(per_iteration(&starts))
}

/// One Rust variant of the loop, in this process: per-iteration samples (ms).
pub(crate) fn run_task_variant(
    ctx: &Context,
    imp: &str,
    variant: &str,
    mib: usize,
    iters: usize,
) -> Res<Vec<f64>> {
    let n = mib * (1 << 20) / 4;
    match (imp, variant) {
        ("um", "attach") => run_task_um(ctx, n, iters, Transfer::OnDemand),
        ("um", "prefetch") => run_task_um(ctx, n, iters, Transfer::Prefetch),
        ("um", "host_resident") => run_task_um(ctx, n, iters, Transfer::HostResident),
        ("um", "mirror") => run_task_mirror(ctx, n, iters),
        ("um", "device") => run_task_device(ctx, n, iters),
        ("um", "device_mirror") => run_task_device_and_mirror(ctx, n, iters),
        ("cust", "attach") => run_task_cust(ctx, n, iters),
        ("cudarc", "attach") => run_task_cudarc(ctx, n, iters),
        _ => Err(format!("no run_task variant {imp} {variant}").into()),
    }
}

/// One measurement in a fresh process (this binary, `--child ARGS`), as the C++ baseline
/// runs: `(median, min)` of its samples.
fn in_child(args: &[&str]) -> Res<(f64, f64)> {
    let text = child_output(args)?;
    Ok((cpp::number(&text, "median")?, cpp::number(&text, "min")?))
}

/// What `um_bench --child ARGS` printed, or an error with its output if it failed.
pub(crate) fn child_output(args: &[&str]) -> Res<String> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--child")
        .args(args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "child {args:?} failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(text)
}

/// One launch variant in this process: per-launch host time samples (µs).
pub(crate) fn launch_variant(ctx: &Context, variant: &str) -> Res<Vec<f64>> {
    match variant {
        "typed" => launch_um_typed(ctx),
        "raw" => launch_um_raw(ctx),
        "cust" => launch_cust(ctx),
        "cudarc" => launch_cudarc(),
        _ => Err(format!("no launch variant {variant}").into()),
    }
}

pub(crate) fn run_task(
    ctx: &Context,
    cpp: Option<&Baseline>,
    mib: usize,
    rounds: usize,
) -> Res<Vec<Record>> {
    let iters = iters_for(mib);
    println!("run_task: {mib} MiB, {iters} iterations, {rounds} rounds");
    let cpp_modes = ["naive", "attach", "prefetch", "host_resident", "explicit"];
    let mut c: Vec<Rounds> = cpp_modes.iter().map(|_| Rounds::default()).collect();
    // Rust variants, each measured in a fresh process like the C++ ones; um's also in this
    // long-lived process, to show what process state costs.
    let rust: [(&str, &str); 6] = [
        ("um", "attach"),
        ("um", "prefetch"),
        ("um", "host_resident"),
        ("cust", "attach"),
        ("cudarc", "attach"),
        ("um", "mirror"),
    ];
    let mut fresh: Vec<Rounds> = rust.iter().map(|_| Rounds::default()).collect();
    let mut in_process: Vec<Rounds> = rust[..3].iter().map(|_| Rounds::default()).collect();
    // Every round measures each group once, starting one place later than the round before,
    // so that no group always runs first or last.
    const GROUPS: usize = 3;
    for round in 0..rounds {
        for k in 0..GROUPS {
            match (round + k) % GROUPS {
                0 => {
                    if let Some(cpp) = cpp {
                        for (mode, r) in cpp_modes.iter().zip(&mut c) {
                            let args = [(*mode).to_owned(), mib.to_string(), iters.to_string()];
                            let line = cpp.run("run_task", &args)?.join("\n");
                            r.add(
                                cpp::number(&line, "median_ms")?,
                                cpp::number(&line, "min_ms")?,
                            );
                        }
                    }
                }
                1 => {
                    for ((imp, variant), r) in rust.iter().zip(&mut fresh) {
                        let (mib, iters) = (mib.to_string(), iters.to_string());
                        let (median, min) = in_child(&["run_task", imp, variant, &mib, &iters])?;
                        r.add(median, min);
                    }
                }
                _ => {
                    for ((imp, variant), r) in rust.iter().zip(&mut in_process) {
                        r.add_samples(&run_task_variant(ctx, imp, variant, mib, iters)?);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    if cpp.is_some() {
        for (mode, r) in cpp_modes.iter().zip(&c) {
            out.push(r.record("run_task", "cpp", mode, mib, 1, "ms"));
        }
    }
    for ((imp, variant), r) in rust.iter().zip(&fresh) {
        out.push(r.record("run_task", imp, variant, mib, 1, "ms"));
    }
    for ((_, variant), r) in rust.iter().zip(&in_process) {
        out.push(r.record("run_task", "um, in-process", variant, mib, 1, "ms"));
    }
    Ok(out)
}

// ------------------------------------------------------------------ 3. threads

const THREAD_ITERS: usize = 20;

/// Wall time (ms) per iteration of `threads` threads, each running the loop on its own stream;
/// `device_wide` waits with cuCtxSynchronize (every stream) before taking the memory back.
fn threads_once(ctx: &Context, threads: usize, mib: usize, device_wide: bool) -> Res<f64> {
    let n = mib * (1 << 20) / 4;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let wall = std::thread::scope(|scope| -> Res<f64> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                scope.spawn(move || -> um::Result<()> {
                    let input = Managed::from_fn(ctx, n, input_value)?;
                    let data = Managed::<[f32]>::zeroed_slice(ctx, n)?;
                    let out = Managed::<[f32]>::zeroed_slice(ctx, n)?;
                    ctx.with_stream(StreamOptions::new(), |s| {
                        let input = input.attach(s)?;
                        let mut out = out.attach(s)?;
                        let mut data = data.attach(s)?;
                        s.wait_idle()?;
                        barrier.wait();
                        for _ in 0..THREAD_ITERS {
                            rt::transform(s, &input, &mut data)?;
                            if device_wide {
                                ctx.wait_idle()?;
                            }
                            let mut host = data.sync()?;
                            host_process(&mut host);
                            data = host.attach(s)?;
                            rt::convert(s, &mut out, &data)?;
                        }
                        s.sync_all((data, out, input)).map(drop)
                    })
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join().map_err(|_| "a benchmark thread panicked")??;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e3 / THREAD_ITERS as f64)
    })?;
    Ok(wall)
}

pub(crate) fn threads(
    ctx: &Context,
    counts: &[usize],
    mib: usize,
    rounds: usize,
) -> Res<Vec<Record>> {
    println!(
        "threads: {counts:?} threads x {THREAD_ITERS} iterations at {mib} MiB each, {rounds} rounds"
    );
    let mut out = Vec::new();
    for &t in counts {
        let (mut per_stream, mut device) = (Rounds::default(), Rounds::default());
        for _ in 0..rounds {
            let w = threads_once(ctx, t, mib, false)?;
            per_stream.add(w, w);
            let w = threads_once(ctx, t, mib, true)?;
            device.add(w, w);
        }
        out.push(per_stream.record("threads", "um", "per-stream sync", mib, t, "ms"));
        out.push(device.record("threads", "um", "device-wide sync", mib, t, "ms"));
    }
    Ok(out)
}

// ------------------------------------------------------------------ 4. eight-stream overlap

pub(crate) fn overlap(ctx: &Context, rounds: usize) -> Res<Vec<Record>> {
    const STREAMS: usize = 8;
    const N: usize = 1 << 20;
    println!("overlap: {STREAMS} streams x kernel<<<1, 64>>> over {N} floats, {rounds} rounds");
    let mut r = Rounds::default();
    for round in 0..=rounds {
        let data: Vec<Managed<[f32]>> = (0..STREAMS)
            .map(|_| Managed::<[f32]>::zeroed_slice(ctx, N))
            .collect::<um::Result<_>>()?;
        let stamps: Vec<Managed<[u64]>> = (0..STREAMS)
            .map(|_| Managed::<[u64]>::zeroed_slice(ctx, 2))
            .collect::<um::Result<_>>()?;
        let intervals = ctx.with_stream_set(STREAMS, StreamOptions::new(), |s| {
            let mut d: Vec<_> = data
                .into_iter()
                .zip(s)
                .map(|(m, s)| m.attach(s))
                .collect::<um::Result<_>>()?;
            let mut t: Vec<_> = stamps
                .into_iter()
                .zip(s)
                .map(|(m, s)| m.attach(s))
                .collect::<um::Result<_>>()?;
            // The first launch on a new stream sets it up in the driver; do that before timing.
            for st in s {
                streams::empty(st)?;
                st.wait_idle()?;
            }
            for i in 0..STREAMS {
                streams::stamp(&s[i], &mut t[i], 0)?;
                streams::kernel_with(&s[i], um::Linear::new(1, 64)?, &mut d[i])?;
                streams::stamp(&s[i], &mut t[i], 1)?;
            }
            let mut iv = Vec::new();
            for (i, (d, t)) in d.into_iter().zip(t).enumerate() {
                let (_d, t) = s[i].sync_all((d, t))?;
                iv.push((t[0], t[1]));
            }
            Ok(iv)
        })?;
        let busy: u64 = intervals.iter().map(|(a, b)| b - a).sum();
        let span = intervals.iter().map(|i| i.1).max().unwrap_or(0)
            - intervals.iter().map(|i| i.0).min().unwrap_or(0);
        let factor = busy as f64 / span.max(1) as f64;
        if round > 0 {
            // round 0 warms up the module and the streams
            r.add(factor, factor);
        }
    }
    // For an overlap factor, "min" is the worst round.
    Ok(vec![r.record(
        "overlap",
        "um",
        "8 streams, kernel<<<1, 64>>>",
        4,
        1,
        "x",
    )])
}

// ------------------------------------------------------------------ bandwidth (the "why")

pub(crate) fn bandwidth(cpp: Option<&Baseline>, mib: usize) -> Res<Vec<Record>> {
    let Some(cpp) = cpp else {
        return Ok(Vec::new());
    };
    println!("bandwidth: {mib} MiB, each mechanism");
    let mut out = Vec::new();
    for line in cpp.run("bandwidth", &[mib.to_string()])? {
        let what = cpp::field(&line, "what").unwrap_or("?").to_owned();
        out.push(Record {
            scenario: "bandwidth",
            imp: "cpp".to_owned(),
            variant: what,
            mib,
            bytes: 0,
            threads: 1,
            median: cpp::number(&line, "median_gbps")?,
            min: cpp::number(&line, "max_gbps")?,
            unit: "GB/s",
            paired: None,
        });
    }
    Ok(out)
}

// ------------------------------------------------------------------ 5. transitions

const REPS: usize = 2000;

pub(crate) fn transitions(
    ctx: &Context,
    cpp: Option<&Baseline>,
    rounds: usize,
) -> Res<Vec<Record>> {
    println!("transitions: {REPS} repetitions, {rounds} rounds");
    let (mut attach, mut reattach, mut sync_idle, mut c_attach, mut c_sync) = Default::default();
    let (attach, reattach, sync_idle, c_attach, c_sync): (
        &mut Rounds,
        &mut Rounds,
        &mut Rounds,
        &mut Rounds,
        &mut Rounds,
    ) = (
        &mut attach,
        &mut reattach,
        &mut sync_idle,
        &mut c_attach,
        &mut c_sync,
    );
    for _ in 0..rounds {
        if let Some(cpp) = cpp {
            for line in cpp.run("transitions", &[REPS.to_string()])? {
                let target = if cpp::field(&line, "what") == Some("attach") {
                    &mut *c_attach
                } else {
                    &mut *c_sync
                };
                target.add(
                    cpp::number(&line, "median_us")?,
                    cpp::number(&line, "min_us")?,
                );
            }
        }
        let (a_s, r_s, s_s) = ctx.with_stream_set(2, StreamOptions::new(), |s| {
            let (mut a_s, mut r_s, mut s_s) = (Vec::new(), Vec::new(), Vec::new());
            let mut m = Managed::<[f32]>::zeroed_slice(ctx, 1 << 18)?;
            for i in 0..REPS {
                // Alternate streams, so that every first attach changes the association.
                let st = &s[i % 2];
                let t0 = Instant::now();
                let x = m.attach(st)?;
                let t1 = Instant::now();
                st.wait_idle()?;
                let t2 = Instant::now();
                let h = x.sync()?; // the stream is idle: the cost of the transition itself
                let t3 = Instant::now();
                let y = h.attach(st)?; // same stream again: no driver call
                let t4 = Instant::now();
                m = y.sync()?;
                if i >= 4 {
                    a_s.push((t1 - t0).as_secs_f64() * 1e6);
                    s_s.push((t3 - t2).as_secs_f64() * 1e6);
                    r_s.push((t4 - t3).as_secs_f64() * 1e6);
                }
            }
            Ok((a_s, r_s, s_s))
        })?;
        attach.add_samples(&a_s);
        reattach.add_samples(&r_s);
        sync_idle.add_samples(&s_s);
    }
    let mut out = vec![
        attach.record("transition", "um", "attach", 1, 1, "us"),
        reattach.record("transition", "um", "re-attach, same stream", 1, 1, "us"),
        sync_idle.record("transition", "um", "sync, idle stream", 1, 1, "us"),
    ];
    if cpp.is_some() {
        out.push(c_attach.record("transition", "cpp", "attach", 1, 1, "us"));
        out.push(c_sync.record("transition", "cpp", "sync, idle stream", 1, 1, "us"));
    }
    Ok(out)
}

// ------------------------------------------------------------------ 6. mirrored memory

/// Iterations of the threaded loop per measurement, by size: enough for a stable wall time,
/// few enough that 16 threads at 256 MiB stay around a second.
fn mirror_thread_iters(mib: usize) -> usize {
    match mib {
        0..=4 => 100,
        5..=64 => 20,
        _ => 4,
    }
}

/// Wall time (ms) per iteration of `threads` threads, each running the run_task loop on
/// mirrored memory on its own stream (what the C++ `threads` mode does with explicit copies).
/// Allocation and the first copies happen before the clock starts; the clock stops when the
/// last thread has its buffers back on the host, and the buffers are freed after it, as the
/// C++ program frees its own. Returns that time and, measured apart, how long freeing every
/// thread's buffers took (pinned host memory and device memory), in ms.
pub(crate) fn mirror_threads_once(
    ctx: &Context,
    threads: usize,
    mib: usize,
    iters: usize,
) -> Res<(f64, f64)> {
    type Back = (
        MirroredManaged<[f32]>,
        MirroredManaged<[f32]>,
        MirroredManaged<[f32]>,
    );
    let n = mib * (1 << 20) / 4;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let (ms, buffers) = std::thread::scope(|scope| -> Res<(f64, Vec<Back>)> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                scope.spawn(move || -> um::Result<(Instant, Back)> {
                    let input = Managed::from_fn_mirrored(ctx, n, input_value);
                    let data = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, n);
                    let out = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, n);
                    let (input, data, out) = match (input, data, out) {
                        (Ok(i), Ok(d), Ok(o)) => (i, d, o),
                        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                            barrier.wait(); // never leave the others waiting
                            return Err(e);
                        }
                    };
                    ctx.with_stream(StreamOptions::new(), |s| {
                        let input = input.attach(s)?;
                        let mut out = out.attach(s)?;
                        let mut data = data.attach(s)?;
                        s.wait_idle()?;
                        barrier.wait();
                        for _ in 0..iters {
                            rt::transform(s, &input, &mut data)?;
                            let mut host = data.sync()?;
                            host_process(&mut host);
                            data = host.attach(s)?;
                            rt::convert(s, &mut out, &data)?;
                        }
                        let back = s.sync_all((data, out, input))?;
                        Ok((Instant::now(), back))
                    })
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let mut end = t0;
        let mut buffers = Vec::with_capacity(threads);
        for h in handles {
            let (done, back) = h.join().map_err(|_| "a benchmark thread panicked")??;
            end = end.max(done);
            buffers.push(back);
        }
        Ok((
            end.duration_since(t0).as_secs_f64() * 1e3 / iters as f64,
            buffers,
        ))
    })?;
    let t0 = Instant::now();
    drop(buffers);
    Ok((ms, t0.elapsed().as_secs_f64() * 1e3))
}

/// Mirrored memory against C++ explicit copies, run_task on several threads at each size;
/// each measurement in a fresh process.
pub(crate) fn mirror_threads(
    cpp: Option<&Baseline>,
    sizes_mib: &[usize],
    counts: &[usize],
    rounds: usize,
    free: usize,
) -> Res<Vec<Record>> {
    println!("mirror threads: {sizes_mib:?} MiB x {counts:?} threads, {rounds} rounds");
    let mut out = Vec::new();
    for &mib in sizes_mib {
        let iters = mirror_thread_iters(mib);
        for &t in counts {
            // Three buffers per thread, each on the device (and as much pinned on the host).
            if 3 * mib * (1 << 20) * t > free / 2 {
                println!("skipping {t} threads at {mib} MiB: more than half the free memory");
                continue;
            }
            let (mut um_r, mut cpp_r) = (Rounds::default(), Rounds::default());
            let (mut um_free, mut cpp_free) = (Rounds::default(), Rounds::default());
            let args = [mib.to_string(), t.to_string(), iters.to_string()];
            for round in 0..rounds {
                for k in 0..2 {
                    if (round + k) % 2 == 0 {
                        let text =
                            child_output(&["threads", "mirror", &args[0], &args[1], &args[2]])?;
                        let ms = cpp::number(&text, "median")?;
                        um_r.add(ms, ms);
                        let free = cpp::number(&text, "free_ms")?;
                        um_free.add(free, free);
                    } else if let Some(cpp) = cpp {
                        let line = cpp.run("threads", &args)?.join("\n");
                        let ms = cpp::number(&line, "ms")?;
                        cpp_r.add(ms, ms);
                        let free = cpp::number(&line, "free_ms")?;
                        cpp_free.add(free, free);
                    }
                }
            }
            out.push(um_r.record("mirror_threads", "um", "mirror", mib, t, "ms"));
            out.push(um_free.record("mirror_free", "um", "mirror", mib, t, "ms"));
            if cpp.is_some() {
                out.push(cpp_r.record("mirror_threads", "cpp", "explicit", mib, t, "ms"));
                out.push(cpp_free.record("mirror_free", "cpp", "explicit", mib, t, "ms"));
            }
        }
    }
    Ok(out)
}

/// The loops where mirrored memory skips copies, in this process: per-iteration samples (ms).
/// `host_reads`: data += 2 * input, the host sums data. `kernel_reads`: out = 0.5 * input over
/// an input the host set once, the host sums out. Both buffers go through attach and sync
/// every iteration, as they would in a program that hands them back and forth.
pub(crate) fn skip_variant(ctx: &Context, lp: &str, mib: usize, iters: usize) -> Res<Vec<f64>> {
    let n = mib * (1 << 20) / 4;
    let host_reads = match lp {
        "host_reads" => true,
        "kernel_reads" => false,
        _ => return Err(format!("no skip loop {lp}").into()),
    };
    let input: MirroredManaged<[f32]> = Managed::from_fn_mirrored(ctx, n, input_value)?;
    let x: MirroredManaged<[f32]> = Managed::zeroed_slice_mirrored(ctx, n)?;
    let (starts, sum) = ctx.with_stream(StreamOptions::new(), |s| {
        let (mut input, mut x) = (input, x);
        let mut starts = Vec::new();
        let mut sum = 0.0f64;
        for _ in 0..iters + WARMUP + 1 {
            starts.push(Instant::now());
            let (i, mut d) = (input.attach(s)?, x.attach(s)?);
            if host_reads {
                rt::transform(s, &i, &mut d)?;
            } else {
                rt::convert(s, &mut d, &i)?;
            }
            let (i, d) = s.sync_all((i, d))?;
            sum += d.iter().map(|v| f64::from(*v)).sum::<f64>();
            (input, x) = (i, d);
        }
        Ok((starts, sum))
    })?;
    std::hint::black_box(sum);
    Ok(per_iteration(&starts))
}

const SKIP_ITERS: usize = 20;

/// Mirrored memory against C++ explicit copies made both ways every iteration, in the two
/// loops where copies can be skipped; each measurement in a fresh process.
pub(crate) fn skip(cpp: Option<&Baseline>, mib: usize, rounds: usize) -> Res<Vec<Record>> {
    println!("skip loops: {mib} MiB, {SKIP_ITERS} iterations, {rounds} rounds");
    let mut out = Vec::new();
    for lp in ["host_reads", "kernel_reads"] {
        let (mut um_r, mut cpp_r) = (Rounds::default(), Rounds::default());
        let args = [lp.to_owned(), mib.to_string(), SKIP_ITERS.to_string()];
        for round in 0..rounds {
            for k in 0..2 {
                if (round + k) % 2 == 0 {
                    let (median, min) = in_child(&["skip", lp, &args[1], &args[2]])?;
                    um_r.add(median, min);
                } else if let Some(cpp) = cpp {
                    let line = cpp.run("skip", &args)?.join("\n");
                    cpp_r.add(
                        cpp::number(&line, "median_ms")?,
                        cpp::number(&line, "min_ms")?,
                    );
                }
            }
        }
        out.push(um_r.record("skip", "um", lp, mib, 1, "ms"));
        if cpp.is_some() {
            out.push(cpp_r.record("skip", "cpp", lp, mib, 1, "ms"));
        }
    }
    Ok(out)
}

/// Bytes of memory one buffer of 1 MiB holds, by storage, as `footprint_in_bytes` reports it
/// for real allocations.
pub(crate) fn footprint(ctx: &Context) -> Res<Vec<Record>> {
    let len = (1 << 20) / 4;
    let unified = Managed::<[f32]>::zeroed_slice(ctx, len)?;
    let mirrored = MirroredManaged::<[f32]>::zeroed_slice_mirrored(ctx, len)?;
    let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
    let record = |variant: &str, bytes: usize| Record {
        scenario: "footprint",
        imp: "um".to_owned(),
        variant: variant.to_owned(),
        mib: 1,
        bytes: 0,
        threads: 1,
        median: mib(bytes),
        min: mib(bytes),
        unit: "MiB",
        paired: None,
    };
    Ok(vec![
        record("unified", unified.footprint_in_bytes()),
        record("mirror", mirrored.footprint_in_bytes()),
    ])
}
