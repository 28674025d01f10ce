// Twins of tests/ui/coherent: coherent memory in every state and transition, alone and mixed
// with unified and mirrored memory, in typed and unsafe launches, `sync_all`, handoffs, stream
// sets, the legacy stream and the per-thread stream.
use um_test_kernels::testing;
use um::{Coherent, CoherentManaged, Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn coherent(ctx: &Context, add_scalar: &Kernel) -> um::Result<()> {
    let mut x: CoherentManaged<[f32]> = Managed::from_slice_coherent(ctx, &[1.0f32; 256])?;
    x[0] = 3.0; // host-owned: the CPU writes
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?; // unified
    let z = Managed::zeroed_slice_mirrored(ctx, 256)?; // mirrored
    let (x, y, z) = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let (x, mut y, mut z) = (x.attach(&s[0])?, y.attach(&s[0])?, z.attach(&s[0])?);
        testing::axpy(&s[0], &x, &mut y, 2.0)?; // coherent read, unified written
        testing::axpy(&s[0], &x, &mut z, 2.0)?; // coherent read, mirrored written
        let mut x = x.hand_off(&s[1])?; // an event, no association call
        // SAFETY: add_scalar(float *data, float value, unsigned n) over 256 elements.
        unsafe { s[1].launch(add_scalar, LaunchConfig::grid_1d(1, 256), (&mut x, 1.0f32, 256u32)) }?;
        let x = x.sync()?;
        let (y, z) = s[0].sync_all((y, z))?;
        Ok((x, y, z))
    })?;
    println!("{} {} {}", x[0], y[0], z[0]);
    // The legacy stream, through attach_global; the per-thread stream, through attach.
    let x = ctx.with_legacy_stream(|legacy| {
        let mut x = x.attach_global(legacy)?;
        testing::add_scalar(legacy, &mut x, 1.0)?;
        x.sync()
    })?;
    let x = ctx.with_per_thread_stream(|pts| {
        let mut x = x.attach(pts)?;
        testing::add_scalar(pts, &mut x, 1.0)?;
        x.sync()
    })?;
    let one = Managed::new_coherent(ctx, 5u64)?;
    let _zero = Managed::<u64, um::HostOwned, Coherent>::zeroed_coherent(ctx)?;
    let _from_fn = Managed::from_fn_coherent(ctx, 4, |i| i as u32)?;
    // Host-owned coherent memory moves between threads.
    std::thread::scope(|s| {
        s.spawn(move || drop(one));
    });
    println!("{}", x[0]);
    Ok(())
}

fn main() {
    let _ = coherent;
}
