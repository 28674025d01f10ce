// Rule: a storage's part of the transitions (its allocation, its free, what `attach` and `sync`
// enqueue, what a launch marks) is `um`'s own. A `Storage` bound reaches those methods, but each
// takes a token that no other crate can name or make.
use um::{Context, Storage};

fn allocate<M: Storage>(ctx: &Context) {
    let _ = M::alloc(ctx, 1024);
}

fn main() {
    let _ = allocate::<um::Unified>;
}
