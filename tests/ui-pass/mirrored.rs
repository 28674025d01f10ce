// Twins of tests/ui/mirrored: mirrored memory in every state and transition, alone and mixed
// with unified memory, in typed and unsafe launches, `sync_all`, stream sets and the legacy
// stream.
use um_test_kernels::testing;
use um::{Context, Kernel, LaunchConfig, Managed, Mirror, MirroredManaged, StreamOptions, Unified};

fn mirrored(ctx: &Context, add_scalar: &Kernel) -> um::Result<()> {
    let mut x: MirroredManaged<[f32]> = Managed::from_slice_mirrored(ctx, &[1.0f32; 256])?;
    x[0] = 3.0; // host-owned: the CPU writes (the next attach copies to the device)
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?; // unified
    let z: Managed<[f32], um::HostOwned, Mirror> = Managed::zeroed_slice_mirrored(ctx, 256)?;
    let (x, y, z) = ctx.with_stream(StreamOptions::new(), |a| {
        let (x, mut y, mut z) = (x.attach(a)?, y.attach(a)?, z.attach(a)?);
        testing::axpy(a, &x, &mut y, 2.0)?; // mirrored read, unified written
        testing::axpy(a, &x, &mut z, 2.0)?; // both mirrored
        // SAFETY: add_scalar(float *data, float value, unsigned n) over 256 elements.
        unsafe { a.launch(add_scalar, LaunchConfig::grid_1d(1, 256), (&mut z, 1.0f32, 256u32)) }?;
        a.sync_all((x, y, z))
    })?;
    println!("{} {} {}", x[0], y[0], z[0]);
    // One at a time, and to another stream.
    let x = ctx.with_stream(StreamOptions::new(), |b| {
        let mut x = x.attach(b)?;
        testing::add_scalar(b, &mut x, 1.0)?;
        x.sync()
    })?;
    // Stream sets, Vec groups.
    let parts: Vec<MirroredManaged<[f32]>> = vec![x, Managed::from_fn_mirrored(ctx, 256, |i| i as f32)?];
    let parts = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut owned = Vec::new();
        for (m, st) in parts.into_iter().zip(s) {
            let mut m = m.attach(st)?;
            testing::add_scalar(st, &mut m, 1.0)?;
            owned.push(m);
        }
        let mut back = Vec::new();
        for (m, st) in owned.into_iter().zip(s) {
            back.extend(st.sync_all(vec![m])?);
        }
        Ok(back)
    })?;
    // The legacy stream, through attach_global; the per-thread stream, through attach.
    let mut parts = parts.into_iter();
    if let (Some(p), Some(q)) = (parts.next(), parts.next()) {
        let p = ctx.with_legacy_stream(|legacy| {
            let mut p = p.attach_global(legacy)?;
            testing::add_scalar(legacy, &mut p, 1.0)?;
            p.sync()
        })?;
        let q = ctx.with_per_thread_stream(|pts| {
            let mut q = q.attach(pts)?;
            testing::add_scalar(pts, &mut q, 1.0)?;
            q.sync()
        })?;
        println!("{} {} {}", p[0], q[0], p.footprint_in_bytes());
    }
    let one = Managed::new_mirrored(ctx, 5u64)?;
    let _zero = Managed::<u64, um::HostOwned, Mirror>::zeroed_mirrored(ctx)?;
    let _unified: Managed<u64, um::HostOwned, Unified> = Managed::new(ctx, *one)?;
    // Host-owned mirrored memory moves between threads.
    std::thread::scope(|s| {
        s.spawn(move || drop(one));
    });
    Ok(())
}

fn main() {
    let _ = mirrored;
}
