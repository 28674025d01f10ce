//! A crate with its own CUDA kernels (`kernels/*.cu`), launched through the safe launchers
//! that `um-build` generated in `build.rs`: saxpy, a sum reduction into a one-element buffer,
//! and a histogram over buffers of different lengths with a struct passed by value. Each
//! result is checked against the CPU. Exit status: 0 when every check passes, 1 when one
//! fails, 2 without a GPU.

use std::process::ExitCode;

use um::{Context, Linear, Managed, StreamOptions};

um::include_kernels!();

use histogram::Binning;

fn main() -> ExitCode {
    let ctx = match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) if e.is_no_device() => {
            println!("own_kernels: skipped: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("own_kernels: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("device: {}", ctx.info().name);
    match run(&ctx) {
        Ok(0) => {
            println!("own_kernels: every result matches the CPU");
            ExitCode::SUCCESS
        }
        Ok(failures) => {
            eprintln!("own_kernels: {failures} check(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("own_kernels: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(name: &str, ok: bool, detail: String) -> usize {
    println!("{} {name}: {detail}", if ok { "ok  " } else { "FAIL" });
    usize::from(!ok)
}

fn run(ctx: &Context) -> um::Result<usize> {
    let n = 1_000_003; // not a multiple of any block size
    let x_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let y_host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let ints: Vec<u32> = (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) >> 20)
        .collect();
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 1200) as f32 / 10.0 - 10.0)
        .collect();
    let binning = Binning {
        lo: 0.0,
        width: 10.0,
        bins: 10,
    };
    let bins = 12; // two more bins than the binning uses: they must stay zero

    let x = Managed::from_slice(ctx, &x_host)?;
    let y = Managed::from_slice(ctx, &y_host)?;
    let xi = Managed::from_slice(ctx, &ints)?;
    let total = Managed::<[u64]>::zeroed_slice(ctx, 1)?;
    let v = Managed::from_slice(ctx, &values)?;
    let counts = Managed::<[u32]>::zeroed_slice(ctx, bins)?;

    let (x, y, xi, total, v, counts, small_total) = ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        let (xi, mut total) = (xi.attach(s)?, total.attach(s)?);
        let (v, mut counts) = (v.attach(s)?, counts.attach(s)?);
        saxpy::saxpy(s, &x, &mut y, 2.0)?;
        reduce::sum(s, &xi, &mut total)?;
        histogram::histogram(s, &v, &mut counts, binning)?;
        // The same sum under a tiny grid: one block of one thread covers every index.
        let mut small = Managed::<[u64]>::zeroed_slice(ctx, 1)?.attach(s)?;
        reduce::sum_with(s, Linear::new(1, 1)?, &xi, &mut small)?;
        let (x, y, xi, total, v, counts) = s.sync_all((x, y, xi, total, v, counts))?;
        Ok((x, y, xi, total, v, counts, small.sync()?))
    })?;

    let mut failures = 0;
    let bad = (0..n).filter(|&i| y[i] != 2.0 * x[i] + y_host[i]).count();
    failures += check("saxpy", bad == 0, format!("{n} elements, {bad} wrong"));

    let want: u64 = xi.iter().map(|&v| u64::from(v)).sum();
    failures += check(
        "sum (one-element output)",
        total[0] == want && small_total[0] == want,
        format!(
            "GPU {} (1x1 grid: {}), CPU {want}",
            total[0], small_total[0]
        ),
    );

    let mut cpu = vec![0u32; bins];
    for &value in v.iter() {
        let t = (value - binning.lo) / binning.width;
        if t >= 0.0 && t < binning.bins.min(bins as u32) as f32 {
            cpu[t as usize] += 1;
        }
    }
    failures += check(
        "histogram (struct by value, buffers of different lengths)",
        counts[..] == cpu[..],
        format!("GPU {:?}, CPU {cpu:?}", &counts[..]),
    );
    Ok(failures)
}
