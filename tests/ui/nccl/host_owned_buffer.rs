// Rule: a collective takes only buffers its stream owns: a host-owned buffer is the
// CPU's, and NCCL must not touch it.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn reduce(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let mut grad = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        comm.all_reduce_in_place(s, &mut grad, ReduceOp::Sum)
    })
}

fn main() {
    let _ = reduce;
}
