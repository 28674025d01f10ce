// Twins of tests/ui/api: host-owned buffers of every storage index, slice and iterate on the
// CPU, attached ones go to a typed launcher, and after `sync` the CPU has them back.
use um_test_kernels::testing;
use um::{Context, Managed, MirroredManaged, StreamOptions};

fn api(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let mut y: MirroredManaged<[f32]> = Managed::from_slice_mirrored(ctx, &[2.0f32; 256])?;
    y[0] = 3.0;
    for v in y.iter_mut() {
        *v += 1.0;
    }
    let total: f32 = x.iter().sum::<f32>() + y[1..].iter().sum::<f32>();
    let all: &[f32] = &*y;
    println!("{total} {}", all.len());
    let (x, y) = ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        testing::axpy(s, &x, &mut y, 2.0)?;
        s.sync_all((x, y))
    })?;
    for (a, b) in x.iter().zip(y.iter()) {
        println!("{a} {b}");
    }
    Ok(())
}

fn main() {
    let _ = api;
}
