// Rule: a collective runs on the stream that owns its buffers: a buffer of stream
// `a` cannot go to a collective on stream `b`.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn reduce(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let grad = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut grad = grad.attach(a)?;
            comm.all_reduce_in_place(b, &mut grad, ReduceOp::Sum)?;
            grad.sync().map(drop)
        })
    })
}

fn main() {
    let _ = reduce;
}
