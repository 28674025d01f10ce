//! What user code may do with a `Group`'s and a `Launched`'s lifetime, checked by compiling it
//! (inline storage in `Group` through a `SmallVec` breaks both; the inline list of
//! `src/list.rs` keeps both): a group declared before its buffers, with an early return (`?`) between a call and
//! `launch` (the group has no `Drop` impl and its calls no drop glue, so the buffers may die
//! first), and `Group<'b>` and `Launched<'b>` covariant in `'b`. A regression is a compile error here.

use um_core::{Context, Managed, StreamOptions};
use um_nccl::{Comm, Group, Launched, ReduceOp};

/// A group made before the buffers it borrows, which the closure declares after it.
fn group_before_its_buffers(ctx: &Context, comm: &Comm) -> um_core::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 8])?;
    let b = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut group = Group::new();
        let mut a = a.attach(s)?;
        group.all_reduce_in_place(comm, s, &mut a, ReduceOp::Sum)?;
        let mut b = b.attach(s)?;
        group.all_reduce_in_place(comm, s, &mut b, ReduceOp::Sum)?;
        group.launch()?.wait(std::time::Duration::from_secs(10))?;
        s.sync_all((a, b)).map(drop)
    })
}

fn shorten_group<'a: 'b, 'b>(g: Group<'a>) -> Group<'b> {
    g
}

fn shorten_launched<'a: 'b, 'b>(l: Launched<'a>) -> Launched<'b> {
    l
}

#[test]
fn a_group_may_be_declared_before_its_buffers_and_both_types_are_covariant() {
    // Compiling this file is the test; the functions need a GPU and NCCL to run.
    let _ = (group_before_its_buffers, shorten_group, shorten_launched);
}
