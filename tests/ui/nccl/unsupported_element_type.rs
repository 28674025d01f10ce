// Rule: an element type maps to one of NCCL's: `u16` has no ncclDataType_t, so a
// buffer of it is no collective's.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn reduce(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let counts = Managed::from_slice(ctx, &[1u16; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut counts = counts.attach(s)?;
        comm.all_reduce_in_place(s, &mut counts, ReduceOp::Sum)?;
        counts.sync().map(drop)
    })
}

fn main() {
    let _ = reduce;
}
