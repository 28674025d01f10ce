// Rule: a state is reached only through the transition that makes it true; its marker type
// cannot be built by hand, so no value can claim to be host-owned without a sync.
use std::marker::PhantomData;
use um::{HostOwned, StreamOwned};

fn main() {
    let _host = HostOwned { _private: () };
    let _owned: StreamOwned<'static> = StreamOwned { _brand: PhantomData, _kind: PhantomData };
}
