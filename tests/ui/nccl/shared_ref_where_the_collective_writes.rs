// Rule: a buffer a collective writes is passed as `&mut`: a receive through `&`
// would let NCCL write a buffer other code may be reading.
use um::nccl::Comm;
use um::{Context, Managed, StreamOptions};

fn receive(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let buf = Managed::from_slice(ctx, &[0.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let buf = buf.attach(s)?;
        comm.recv(s, &buf, 1)?;
        buf.sync().map(drop)
    })
}

fn main() {
    let _ = receive;
}
