// Rule: a storage's part of the transitions (its allocation, its free, what `attach` and `sync`
// enqueue, what a launch marks) is `um`'s own. A `Storage` bound reaches the hidden methods of
// the transitions, but each takes a token that no other crate can name or make; the allocation
// of the storages allocated at once is not reachable through the bound at all.
use std::ptr::NonNull;
use um::{Context, Storage};

fn allocate<M: Storage>(ctx: &Context) {
    let _ = M::alloc(ctx, 1024);
}

fn free<M: Storage>(parts: &M::Parts) {
    unsafe { M::free(NonNull::dangling(), parts) };
}

fn main() {
    let _ = allocate::<um::Unified>;
    let _ = free::<um::Unified>;
}
