//! Where section 12b's gap comes from: the pipeline with fresh scratch per batch, as um_bench's
//! `scratch` child runs it, beside the same driver calls made raw from Rust (the loop of
//! `bench/baseline.cpp scratch`), in one process, taking turns.
//!
//!   scratch_probe [--reps N] [--batches N] [--stages NS,NS,..]
//!
//! Per batch, on stream A a scratch buffer from a pool (threshold `u64::MAX`) is zeroed,
//! `spin_then_add` works on it (stage A), `transform` adds twice it to the batch, and it is
//! freed; the batch goes to stream B (an event), where `spin_then_add` is stage B. The variants:
//!
//! * `raw`: the driver calls from Rust, as the C++ loop makes them;
//! * `raw+bind`: the same with `cuCtxGetCurrent` wherever um checks the current context (before
//!   the allocation, each launch, the free and the handoff: six a batch);
//! * `um`: um's loop (`attach`, `alloc_zeroed`, the typed launches, the drop, `hand_off`);
//! * `raw timed` and `um timed`: the same loops with the host time of each step taken apart
//!   (a clock read between steps, in both).
//!
//! Each variant runs `--reps` times (default 15) in a rotating order; per variant and stage
//! length one JSON line: the median over repetitions of the µs per batch from the first enqueue
//! to the last batch back (`us`), of the µs per batch spent enqueueing (`enqueue_us`), and for
//! the timed variants the median µs of each step.

use std::ffi::c_void;
use std::time::Instant;

use cust::sys as cu;
use um::kernels::run_task as rt;
use um::{Context, DeviceManaged, Managed, MemPool, StreamOptions};
use um_test_kernels::testing;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const LEN: usize = 1024;

fn check(what: &str, rc: cu::CUresult) -> Res<()> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {rc:?}").into())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per-step host time, where a loop is timed: `None` where it is not.
struct Steps {
    sums: Vec<f64>,
    last: Instant,
}

impl Steps {
    fn new(n: usize) -> Self {
        Steps {
            sums: vec![0.0; n],
            last: Instant::now(),
        }
    }
    #[inline(always)]
    fn start(s: &mut Option<Steps>) {
        if let Some(s) = s {
            s.last = Instant::now();
        }
    }
    #[inline(always)]
    fn mark(s: &mut Option<Steps>, i: usize) {
        if let Some(s) = s {
            let now = Instant::now();
            s.sums[i] += (now - s.last).as_secs_f64() * 1e6;
            s.last = now;
        }
    }
}

/// The raw loop's state: modules, functions, a pool, and its two streams and event.
struct Raw {
    spin: cu::CUfunction,
    transform: cu::CUfunction,
    pool: cu::CUmemoryPool,
    a: cu::CUstream,
    b: cu::CUstream,
    ev: cu::CUevent,
    grid: u32,
}

impl Raw {
    fn new(grid: u32) -> Res<Raw> {
        let load = |ptx: &str| -> Res<cu::CUmodule> {
            let text = std::ffi::CString::new(ptx)?;
            let mut m = std::ptr::null_mut();
            // SAFETY: a NUL-terminated PTX text and a valid out-pointer.
            check("cuModuleLoadData", unsafe {
                cu::cuModuleLoadData(&mut m, text.as_ptr().cast())
            })?;
            Ok(m)
        };
        let run_task = um::kernels::ALL_PTX
            .iter()
            .find(|(n, _)| *n == "run_task")
            .ok_or("no run_task PTX")?
            .1;
        let (mt, mr) = (load(testing::PTX)?, load(run_task)?);
        let func = |m: cu::CUmodule, name: &str| -> Res<cu::CUfunction> {
            let name = std::ffi::CString::new(name)?;
            let mut f = std::ptr::null_mut();
            // SAFETY: a loaded module, a NUL-terminated name, a valid out-pointer.
            check("cuModuleGetFunction", unsafe {
                cu::cuModuleGetFunction(&mut f, m, name.as_ptr())
            })?;
            Ok(f)
        };
        let (spin, transform) = (func(mt, "spin_then_add")?, func(mr, "transform")?);
        let mut a = std::ptr::null_mut();
        let mut b = std::ptr::null_mut();
        // SAFETY: valid out-pointers; a context is current.
        unsafe {
            check("cuStreamCreate", cu::cuStreamCreate(&mut a, 1))?;
            check("cuStreamCreate", cu::cuStreamCreate(&mut b, 1))?;
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check("cuEventCreate", unsafe { cu::cuEventCreate(&mut ev, 2) })?;
        // SAFETY: zeroed props are a valid start; the fields set are those the C++ sets.
        let mut props: cu::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        let mut pool = std::ptr::null_mut();
        // SAFETY: valid props and out-pointer.
        check("cuMemPoolCreate", unsafe {
            cu::cuMemPoolCreate(&mut pool, &props)
        })?;
        let mut threshold = u64::MAX;
        // SAFETY: a live pool; the threshold is a u64.
        check("cuMemPoolSetAttribute", unsafe {
            cu::cuMemPoolSetAttribute(
                pool,
                cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&raw mut threshold).cast(),
            )
        })?;
        Ok(Raw {
            spin,
            transform,
            pool,
            a,
            b,
            ev,
            grid,
        })
    }

    /// Launches `f` on `stream` with the grid of the C++ loop (`grid` blocks of 256 threads).
    ///
    /// # Safety
    /// `params` point to values that match `f`'s declaration, live for the call; `f` and
    /// `stream` are live handles of the current context.
    #[inline(always)]
    unsafe fn launch(
        &self,
        f: cu::CUfunction,
        stream: cu::CUstream,
        params: &mut [*mut c_void],
    ) -> Res<()> {
        // SAFETY: the caller's guarantees; no extra parameters.
        let rc = unsafe {
            cu::cuLaunchKernel(
                f,
                self.grid,
                1,
                1,
                256,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check("cuLaunchKernel", rc)
    }

    /// One pipeline: (µs per batch, enqueue µs per batch).
    fn run(
        &self,
        batches: usize,
        stage_ns: u64,
        bind: bool,
        steps: &mut Option<Steps>,
    ) -> Res<(f64, f64)> {
        let bytes = LEN * 4;
        let mut x: Vec<cu::CUdeviceptr> = vec![0; batches];
        let mut host: Vec<f32> = vec![0.0; batches * LEN];
        for (k, xk) in x.iter_mut().enumerate() {
            for j in 0..LEN {
                host[k * LEN + j] = (k + j) as f32;
            }
            // SAFETY: valid out-pointer; the copy reads `bytes` from a live slice.
            unsafe {
                check("cuMemAlloc", cu::cuMemAlloc_v2(xk, bytes))?;
                check(
                    "cuMemcpyHtoD",
                    cu::cuMemcpyHtoD_v2(*xk, host[k * LEN..].as_ptr().cast(), bytes),
                )?;
            }
        }
        let (one, two) = (1.0f32, 2.0f32);
        let mut stage = stage_ns;
        let mut n = LEN as u32;
        let mut cur: cu::CUcontext = std::ptr::null_mut();
        let t0 = Instant::now();
        for xk in x.iter_mut() {
            Steps::start(steps);
            if bind {
                // SAFETY: a valid out-pointer.
                unsafe { cu::cuCtxGetCurrent(&mut cur) };
            }
            let mut scr: cu::CUdeviceptr = 0;
            // SAFETY: the calls of bench/baseline.cpp's scratch loop, on live handles, with
            // parameters that match the kernels' declarations.
            unsafe {
                check(
                    "cuMemAllocFromPoolAsync",
                    cu::cuMemAllocFromPoolAsync(&mut scr, bytes, self.pool, self.a),
                )?;
                check(
                    "cuMemsetD8Async",
                    cu::cuMemsetD8Async(scr, 0, bytes, self.a),
                )?;
                Steps::mark(steps, 0);
                if bind {
                    cu::cuCtxGetCurrent(&mut cur);
                }
                let mut v = one;
                let mut sa: [*mut c_void; 4] = [
                    (&raw mut scr).cast(),
                    (&raw mut v).cast(),
                    (&raw mut stage).cast(),
                    (&raw mut n).cast(),
                ];
                self.launch(self.spin, self.a, &mut sa)?;
                Steps::mark(steps, 1);
                if bind {
                    cu::cuCtxGetCurrent(&mut cur);
                }
                let mut ta: [*mut c_void; 3] = [
                    (&raw mut scr).cast(),
                    (xk as *mut cu::CUdeviceptr).cast(),
                    (&raw mut n).cast(),
                ];
                self.launch(self.transform, self.a, &mut ta)?;
                Steps::mark(steps, 2);
                if bind {
                    cu::cuCtxGetCurrent(&mut cur);
                }
                check("cuMemFreeAsync", cu::cuMemFreeAsync(scr, self.a))?;
                Steps::mark(steps, 3);
                if bind {
                    cu::cuCtxGetCurrent(&mut cur);
                }
                check("cuEventRecord", cu::cuEventRecord(self.ev, self.a))?;
                check(
                    "cuStreamWaitEvent",
                    cu::cuStreamWaitEvent(self.b, self.ev, 0),
                )?;
                Steps::mark(steps, 4);
                if bind {
                    cu::cuCtxGetCurrent(&mut cur);
                }
                let mut w = two;
                let mut sb: [*mut c_void; 4] = [
                    (xk as *mut cu::CUdeviceptr).cast(),
                    (&raw mut w).cast(),
                    (&raw mut stage).cast(),
                    (&raw mut n).cast(),
                ];
                self.launch(self.spin, self.b, &mut sb)?;
                Steps::mark(steps, 5);
            }
        }
        let enqueue = t0.elapsed().as_secs_f64() * 1e6 / batches as f64;
        // SAFETY: a live stream.
        check("cuStreamSynchronize", unsafe {
            cu::cuStreamSynchronize(self.b)
        })?;
        let us = t0.elapsed().as_secs_f64() * 1e6 / batches as f64;
        for (k, xk) in x.iter().enumerate() {
            let out = &mut host[k * LEN..(k + 1) * LEN];
            // SAFETY: `bytes` into a live slice of that many; then freed once.
            unsafe {
                check(
                    "cuMemcpyDtoH",
                    cu::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), *xk, bytes),
                )?;
                check("cuMemFree", cu::cuMemFree_v2(*xk))?;
            }
            if out
                .iter()
                .enumerate()
                .any(|(j, v)| *v != (k + j) as f32 + 4.0)
            {
                return Err(format!("raw loop: batch {k} came back wrong").into());
            }
        }
        Ok((us, enqueue))
    }
}

/// um's loop, as um_bench's `scratch` child runs it (without timing the drop unless `steps`).
fn um_run(
    ctx: &Context,
    pool: &MemPool,
    batches: usize,
    stage_ns: u64,
    steps: &mut Option<Steps>,
) -> Res<(f64, f64)> {
    let inputs: Vec<DeviceManaged<[f32]>> = (0..batches)
        .map(|k| {
            let host: Vec<f32> = (0..LEN).map(|j| (k + j) as f32).collect();
            Managed::from_slice_device(ctx, &host)
        })
        .collect::<um::Result<_>>()?;
    let options = StreamOptions::new().non_blocking();
    let (outputs, us, enqueue) = ctx.with_stream(options, |a| {
        ctx.with_stream(options, |b| {
            let mut done = Vec::with_capacity(batches);
            let start = Instant::now();
            for x in inputs {
                Steps::start(steps);
                let mut x = x.attach(a)?;
                let mut scratch = a.alloc_zeroed::<f32>(pool, LEN)?;
                Steps::mark(steps, 0);
                testing::spin_then_add(a, &mut scratch, 1.0, stage_ns)?;
                Steps::mark(steps, 1);
                rt::transform(a, &scratch, &mut x)?;
                Steps::mark(steps, 2);
                drop(scratch);
                Steps::mark(steps, 3);
                let mut x = x.hand_off(b)?;
                Steps::mark(steps, 4);
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                done.push(x);
                Steps::mark(steps, 5);
            }
            let enqueue = start.elapsed().as_secs_f64() * 1e6 / batches as f64;
            let home = b.sync_all(done)?;
            let us = start.elapsed().as_secs_f64() * 1e6 / batches as f64;
            Ok((home, us, enqueue))
        })
    })?;
    for (k, x) in outputs.iter().enumerate() {
        let v = x.to_vec()?;
        if v.iter()
            .enumerate()
            .any(|(j, v)| *v != (k + j) as f32 + 4.0)
        {
            return Err(format!("um loop: batch {k} came back wrong").into());
        }
    }
    Ok((us, enqueue))
}

const STEP_NAMES: [&str; 6] = [
    "alloc+fill",
    "launch A",
    "transform",
    "free",
    "handoff",
    "launch B",
];

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 15usize;
    let mut batches = 400usize;
    let mut stages = vec![10_000u64, 0];
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).ok_or("a flag without its value")?;
        match args[i].as_str() {
            "--reps" => reps = value.parse()?,
            "--batches" => batches = value.parse()?,
            "--stages" => stages = value.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--bench" => {
                i += 1;
                continue;
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
        i += 2;
    }
    // The clock the timings read: a clock source without a fast path makes every clock read
    // a system call.
    let clock =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_else(|_| "unknown".into());
    let t = Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(Instant::now());
    }
    println!(
        "{{\"clocksource\":\"{}\",\"clock_read_ns\":{:.1}}}",
        clock.trim(),
        t.elapsed().as_secs_f64() * 1e6
    );
    let ctx = Context::new(0)?;
    ctx.make_current()?;
    let sms = ctx.info().multiprocessors.max(1);
    let grid = (LEN as u32).div_ceil(256).clamp(1, sms * 32);
    let raw = Raw::new(grid)?;
    let pool = MemPool::new(&ctx)?;
    pool.set_release_threshold(u64::MAX)?;
    const VARIANTS: [&str; 5] = ["raw", "raw+bind", "um", "raw timed", "um timed"];
    for stage_ns in stages {
        // Warm-up: every variant once.
        for v in 0..VARIANTS.len() {
            one(&ctx, &raw, &pool, v, 4, stage_ns)?;
        }
        let mut us: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
        let mut enq: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
        let mut step: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 6]; VARIANTS.len()];
        for r in 0..reps {
            for k in 0..VARIANTS.len() {
                let v = (r + k) % VARIANTS.len();
                let (u, e, s) = one(&ctx, &raw, &pool, v, batches, stage_ns)?;
                us[v].push(u);
                enq[v].push(e);
                if let Some(s) = s {
                    for (i, t) in s.sums.iter().enumerate() {
                        step[v][i].push(t / batches as f64);
                    }
                }
            }
        }
        for v in 0..VARIANTS.len() {
            let mut line = format!(
                "{{\"stage_ns\":{stage_ns},\"variant\":\"{}\",\"us\":{:.3},\"enqueue_us\":{:.3},\"us_min\":{:.3}",
                VARIANTS[v],
                median(&mut us[v].clone()),
                median(&mut enq[v]),
                us[v].iter().copied().fold(f64::INFINITY, f64::min),
            );
            if !step[v][0].is_empty() {
                for (i, name) in STEP_NAMES.iter().enumerate() {
                    line += &format!(",\"{name}\":{:.3}", median(&mut step[v][i]));
                }
            }
            println!("{line}}}");
        }
        let mut ratios: Vec<f64> = us[2].iter().zip(&us[0]).map(|(u, r)| u / r).collect();
        println!(
            "{{\"stage_ns\":{stage_ns},\"um_over_raw_median_of_pairs\":{:.4}}}",
            median(&mut ratios)
        );
    }
    Ok(())
}

type Outcome = (f64, f64, Option<Steps>);

fn one(
    ctx: &Context,
    raw: &Raw,
    pool: &MemPool,
    variant: usize,
    batches: usize,
    stage_ns: u64,
) -> Res<Outcome> {
    let mut steps = (variant >= 3).then(|| Steps::new(6));
    let (u, e) = match variant {
        0 | 1 | 3 => {
            ctx.make_current()?;
            raw.run(batches, stage_ns, variant == 1, &mut steps)?
        }
        _ => um_run(ctx, pool, batches, stage_ns, &mut steps)?,
    };
    Ok((u, e, steps))
}
