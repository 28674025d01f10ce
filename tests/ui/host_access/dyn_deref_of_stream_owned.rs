// A trait object cannot smuggle host access out of a stream-owned buffer:
// coercing to `&dyn Deref<Target = [f32]>` or `&dyn Index<usize>` needs the impl, which exists
// only under `S: HostAccess` (host-owned). Rule 1.
use std::ops::{Deref, Index};

use um::{Context, Managed, StreamOptions};

fn objects(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let data = data.attach(stream)?;
        let d: &dyn Deref<Target = [f32]> = &data;
        let i: &dyn Index<usize, Output = f32> = &data;
        println!("{} {}", d.len(), i[0]);
        data.sync().map(drop)
    })
}

fn main() {
    let _ = objects;
}
