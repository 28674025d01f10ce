// An NCCL collective cannot be recorded into a graph. A captured collective
// would keep the communicator and its peers' buffer addresses in the graph, past an abort or a
// drop of the `Comm`; `CollectiveStream: Eager` keeps the capture stream out.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn record(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let grad = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let grad = grad.attach(s)?;
        let (graph, ()) = s.capture((grad,), |cap, (mut grad,)| {
            comm.all_reduce_in_place(cap, &mut grad, ReduceOp::Sum)?;
            Ok(((grad,), ()))
        })?;
        graph.launch(s)?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = record;
}
