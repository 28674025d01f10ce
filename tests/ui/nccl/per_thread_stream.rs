// Rule: a collective is enqueued on a stream that names one stream on every thread:
// the per-thread default stream names another on NCCL's own launch thread.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed};

fn reduce(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let grad = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_per_thread_stream(|s| {
        let mut grad = grad.attach(s)?;
        comm.all_reduce_in_place(s, &mut grad, ReduceOp::Sum)?;
        grad.sync().map(drop)
    })
}

fn main() {
    let _ = reduce;
}
