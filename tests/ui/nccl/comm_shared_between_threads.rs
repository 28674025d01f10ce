// Rule: a communicator is used by one thread at a time (NCCL: a ncclComm_t must not be used
// concurrently by two threads): `Comm` is `Send` but not `Sync`, so `&Comm` cannot reach a
// second thread.
use um::nccl::{Comm, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn two_threads(ctx: &Context, comm: &Comm) {
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let grad = Managed::from_slice(ctx, &[1.0f32; 8])?;
                ctx.with_stream(StreamOptions::new(), |s| {
                    let mut grad = grad.attach(s)?;
                    comm.all_reduce_in_place(s, &mut grad, ReduceOp::Sum)?;
                    grad.sync().map(drop)
                })
            });
        }
    });
}

fn main() {
    let _ = two_threads;
}
