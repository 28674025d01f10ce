// Twins of tests/ui/device_storage: device memory in every state and transition, its contents
// crossing only through copies that wait, alone and mixed with the other storages in typed
// launches, `sync_all`, handoffs, graphs and libraries' calls; and memory born on a stream from a
// pool.
use um_test_kernels::testing;
use um::{Context, Device, DeviceManaged, HostOwned, Managed, StreamOptions};

fn device(ctx: &Context) -> um::Result<()> {
    let x: DeviceManaged<[f32]> = Managed::from_slice_device(ctx, &[1.0f32; 256])?;
    let mut y = Managed::<[f32], HostOwned, Device>::zeroed_slice_device(ctx, 256)?;
    y.copy_from_host(&[2.0f32; 256])?; // the host's write: a copy that waits
    let u = Managed::from_slice(ctx, &[3.0f32; 256])?; // unified
    let (x, y, u) = ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let (x, mut y, mut u) = (x.attach(a)?, y.attach(a)?, u.attach(a)?);
            testing::axpy(a, &x, &mut y, 2.0)?; // both device memory
            testing::axpy(a, &y, &mut u, 1.0)?; // device read, unified written
            let mut y = y.hand_off(b)?; // no host wait, no association
            testing::add_scalar(b, &mut y, 1.0)?;
            let (x, u) = a.sync_all((x, u))?;
            Ok((x, y.sync()?, u))
        })
    })?;
    let mut out = vec![0.0f32; 256];
    y.copy_to_host(&mut out)?; // the host's read: a copy that waits
    println!("{} {} {} {}", x.to_vec()?[0], out[0], u[0], y.footprint_in_bytes());
    println!("{y:?}"); // the size, never the contents
    // A graph holds device memory like any other; its buffers come back by `sync`.
    let (z,) = ctx.with_stream(StreamOptions::new(), |s| {
        let z = y.attach(s)?;
        let (graph, ()) = s.capture((z,), |cap, (mut z,)| {
            testing::add_scalar(cap, &mut z, 1.0)?;
            Ok(((z,), ()))
        })?;
        graph.launch(s)?;
        graph.sync()
    })?;
    let _ = z.to_vec()?;
    // Host-owned device memory moves between threads.
    std::thread::scope(|s| {
        s.spawn(move || drop(z));
    });
    Ok(())
}

// Memory born on a stream from a pool: no host wait at its allocation or its stream-owned
// drop; back on the host by `sync`, where it may outlive the stream.
fn pooled(ctx: &Context) -> um::Result<()> {
    let pool = um::MemPool::new(ctx)?;
    pool.set_release_threshold(u64::MAX)?;
    let kept: um::PooledManaged<[f32]> = ctx.with_stream(StreamOptions::new(), |s| {
        let mut scratch = s.alloc_zeroed::<f32>(&pool, 256)?;
        testing::add_scalar(s, &mut scratch, 1.0)?;
        let mut out = s.alloc_zeroed::<f32>(&pool, 256)?;
        testing::axpy(s, &scratch, &mut out, 2.0)?;
        drop(scratch); // freed in the stream's order
        out.sync()
    })?;
    println!("{:?} {} {}", kept.to_vec()?, pool.used_bytes()?, pool.reserved_bytes()?);
    Ok(())
}

fn main() {
    let _ = device;
    let _ = pooled;
}
