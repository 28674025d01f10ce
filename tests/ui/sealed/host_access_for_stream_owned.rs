// Rule: only host-owned memory dereferences on the CPU. No other crate may claim `HostAccess`
// (the bound of `Deref`, `Index` and `iter`) for a stream-owned state:
// both the trait and the state are um's (the orphan rule).
use um::{HostAccess, StreamOwned};

impl HostAccess for StreamOwned<'static> {}

fn main() {}
