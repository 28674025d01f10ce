// The orphan rule lets another crate implement `Index<Mine>` for a stream-owned
// `Managed` (its index type is local), and coherence accepts it beside um's generic `Index<I>`
// (which needs `[f32]: Index<Mine>` and `S: HostAccess`). But the impl's body has no way to the
// memory: `Deref`, `Index` and `iter` need `HostAccess`, and so does um's own `Index`. The impl
// compiles only as long as it does not touch the contents.
use std::ops::Index;

use um::{Managed, StreamOwned};

struct Mine;

impl<'s> Index<Mine> for Managed<[f32], StreamOwned<'s>> {
    type Output = f32;
    fn index(&self, _: Mine) -> &f32 {
        &self[0usize]
    }
}

struct Deref0;

impl<'s> Index<Deref0> for Managed<[f32], StreamOwned<'s>> {
    type Output = [f32];
    fn index(&self, _: Deref0) -> &[f32] {
        &**self
    }
}

fn main() {}
