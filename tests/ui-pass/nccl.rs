// The correct twins of tests/ui/nccl: buffers attached to the collective's stream, `&mut` where
// NCCL writes, an NCCL element type, one thread per communicator (moved, not shared), a group
// launched where it was built.
use std::time::Duration;

use um::nccl::{Comm, CommOptions, Group, ReduceOp};
use um::{Context, Managed, StreamOptions};

fn step(ctx: &Context, comm: &Comm) -> um::Result<()> {
    let grad = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    let counts = Managed::from_slice(ctx, &[1u32; 8])?;
    let inbox = Managed::from_slice(ctx, &[0.0f64; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (mut grad, mut counts, mut inbox) = (grad.attach(s)?, counts.attach(s)?, inbox.attach(s)?);
        comm.all_reduce_in_place(s, &mut grad, ReduceOp::Sum)?;
        comm.all_reduce_in_place(s, &mut counts, ReduceOp::Max)?;
        comm.recv(s, &mut inbox, 1)?;
        let mut group = Group::new();
        group.all_reduce_in_place(comm, s, &mut grad, ReduceOp::Avg)?;
        group.launch()?.wait(Duration::from_secs(10))?;
        comm.wait(s, Duration::from_secs(10))?;
        s.sync_all((grad, counts, inbox)).map(drop)
    })
}

fn one_thread_each(contexts: Vec<Context>) -> um::Result<()> {
    let comms = Comm::init_all(&contexts, CommOptions::new())?;
    std::thread::scope(|scope| {
        for (comm, ctx) in comms.into_iter().zip(&contexts) {
            scope.spawn(move || step(ctx, &comm));
        }
    });
    Ok(())
}

fn main() {
    let _ = one_thread_each;
}
