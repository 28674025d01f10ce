// Mark a mirror's device half "not written" (so that `sync` skips the copy back), or free an
// allocation, through the hidden `HasParts` methods reachable via the public `Storage` bound.
// Every such method takes `sealed::Private`; a value of it cannot be made (no Default, no
// Clone, private field, unnameable module).
use um::Storage;
fn f<M: Storage>(parts: &mut M::Parts) {
    M::host_written(parts, Default::default());
}
fn main() { let _ = f::<um::Mirror>; }
